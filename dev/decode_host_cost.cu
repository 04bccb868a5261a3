// Where the host time of one cuda::decode call goes (docs/perf-notes.md, "Python per-call host
// time"): the whole call, and its parts timed alone in the same process: the shape validation, the
// device-memory checks (cudaPointerGetAttributes and cudaGetDevice per tensor), the two TMA
// descriptors, and an empty kernel's launch. b1 x 256 keys, 32 / 8 heads, d128, bf16: a call whose
// GPU part is shorter than its host part, so host time is what a loop of calls measures.
//   nvcc -O2 -std=c++20 -arch=sm_90a -Iinclude -Isrc dev/decode_host_cost.cu build/release/libattnkit.a \
//     -lcuda -lnccl -fopenmp -o decode_host_cost   (or ccbin g++ with -Xcompiler -fopenmp)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/decode/kv_box_map.hpp"

using namespace attnkit;

__global__ void empty_kernel() {}

// Median over 9 rounds of 400 calls each, us per call of host time: the stream is drained before
// each round and after it, outside the timed loop (400 launches stay under the launch queue's
// depth, so the loop never waits for the GPU).
double per_call_us(const std::function<void()>& fn) {
  std::vector<double> rounds;
  for (int r = 0; r < 10; ++r) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 400; ++i) fn();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    cudaDeviceSynchronize();
    if (r > 0) rounds.push_back(us / 400);  // round 0 warms up
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

int main() {
  DecodeProblem p;
  p.batch = 1, p.num_heads = 32, p.kv_heads = 8, p.head_dim = 128, p.max_seq = 256, p.kv_len = 256;
  p.kv_dtype = p.q_dtype = p.out_dtype = DType::kBF16;
  const DecodePlan plan = plan_decode(p, cuda::target());
  void *q, *k, *v, *lengths, *out, *ws = nullptr;
  cudaMalloc(&q, 32 * 128 * 2);
  cudaMalloc(&k, 8 * 256 * 128 * 2);
  cudaMalloc(&v, 8 * 256 * 128 * 2);
  cudaMalloc(&out, 32 * 128 * 2);
  cudaMalloc(&lengths, 4);
  const int len = 256;
  cudaMemcpy(lengths, &len, 4, cudaMemcpyHostToDevice);
  cudaMemset(k, 0, 8 * 256 * 128 * 2);
  cudaMemset(v, 0, 8 * 256 * 128 * 2);
  cudaMemset(q, 0, 32 * 128 * 2);
  if (plan.evidence.workspace_bytes > 0) cudaMalloc(&ws, plan.evidence.workspace_bytes);
  DecodeTensors t;
  t.q = TensorView::contiguous(q, DType::kBF16, {1, 32, 128}, DeviceKind::kCuda);
  t.k_cache = TensorView::contiguous(k, DType::kBF16, {1, 8, 256, 128}, DeviceKind::kCuda);
  t.v_cache = TensorView::contiguous(v, DType::kBF16, {1, 8, 256, 128}, DeviceKind::kCuda);
  t.lengths = TensorView::contiguous(lengths, DType::kI32, {1}, DeviceKind::kCuda);
  t.out = TensorView::contiguous(out, DType::kBF16, {1, 32, 128}, DeviceKind::kCuda);
  const Workspace workspace{ws, plan.evidence.workspace_bytes, DeviceKind::kCuda};
  const void* pointers[] = {q, k, v, lengths, out, ws == nullptr ? q : ws};
  cuda_decode::KvBoxTensor box;
  box.data = k, box.dtype = DType::kBF16, box.head_dim = 128, box.rows = 256, box.kv_heads = 8, box.outer = 1;
  box.row_stride = 128, box.head_stride = 256 * 128, box.outer_stride = 8 * 256 * 128;
  unsigned char map[128];

  std::printf("plan: %s, splits %u, workspace %llu bytes\n", to_string(plan.partition.family).c_str(),
              plan.partition.sequence_splits, static_cast<unsigned long long>(plan.evidence.workspace_bytes));
  std::printf("%-44s %8s\n", "part (us per call)", "median");
  std::printf("%-44s %8.2f\n", "cuda::decode (the whole call)", per_call_us([&] { cuda::decode(plan, t, workspace); }));
  std::printf("%-44s %8.2f\n", "validate_decode", per_call_us([&] { validate_decode(plan.problem, t, DeviceKind::kCuda); }));
  std::printf("%-44s %8.2f\n", "require_device_memory x 6",
              per_call_us([&] { for (const void* ptr : pointers) cuda_common::require_device_memory(ptr, "x", "x"); }));
  std::printf("%-44s %8.2f\n", "cudaPointerGetAttributes x 6", per_call_us([&] {
                for (const void* ptr : pointers) {
                  cudaPointerAttributes a{};
                  cudaPointerGetAttributes(&a, ptr);
                }
              }));
  std::printf("%-44s %8.2f\n", "cudaGetDevice x 6", per_call_us([&] {
                int d = 0;
                for (int i = 0; i < 6; ++i) cudaGetDevice(&d);
              }));
  std::printf("%-44s %8.2f\n", "make_kv_box_map x 2", per_call_us([&] {
                cuda_decode::make_kv_box_map(map, box, static_cast<int>(plan.partition.tile_size), "x", "k");
                cuda_decode::make_kv_box_map(map, box, static_cast<int>(plan.partition.tile_size), "x", "v");
              }));
  std::printf("%-44s %8.2f\n", "empty kernel launch", per_call_us([&] { empty_kernel<<<1, 32>>>(); }));
  // The launch API the decode uses, with and without a cluster of 2 blocks.
  for (unsigned cluster : {1u, 2u}) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(2), config.blockDim = dim3(32);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster, attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
    config.attrs = &attribute, config.numAttrs = cluster > 1 ? 1 : 0;
    std::printf("empty kernel, cudaLaunchKernelEx, cluster %u %*s %8.2f\n", cluster, 9, "",
                per_call_us([&] { cudaLaunchKernelEx(&config, empty_kernel); }));
  }
  // The same decode with its splits merged by the merge kernel instead of the cluster (two
  // launches; the partition's merge_cluster = 0 is a shape the backend accepts).
  if (plan.partition.merge_cluster > 1) {
    DecodePlan merged = plan;
    merged.partition.merge_cluster = 0;
    const std::uint64_t states = static_cast<std::uint64_t>(merged.partition.sequence_splits) * 32 * (128 + 1) * 4;
    merged.evidence.workspace_bytes = states;
    void* merge_ws = nullptr;
    cudaMalloc(&merge_ws, states);
    const Workspace w{merge_ws, states, DeviceKind::kCuda};
    std::printf("%-44s %8.2f\n", "cuda::decode, splits merged by a kernel",
                per_call_us([&] { cuda::decode(merged, t, w); }));
  }
  // One split: b1 with 64 keys plans unsplit.
  DecodeProblem short_problem = p;
  short_problem.max_seq = short_problem.kv_len = 64;
  const DecodePlan unsplit = plan_decode(short_problem, cuda::target());
  DecodeTensors short_t = t;
  short_t.k_cache.shape[2] = short_t.v_cache.shape[2] = 64;
  short_t.k_cache.strides[1] = short_t.v_cache.strides[1] = 64 * 128;
  short_t.k_cache.strides[0] = short_t.v_cache.strides[0] = 8 * 64 * 128;
  const int short_len = 64;
  cudaMemcpy(lengths, &short_len, 4, cudaMemcpyHostToDevice);
  std::printf("cuda::decode, b1 x 64 keys (splits %u) %*s %8.2f\n", unsplit.partition.sequence_splits, 13, "",
              per_call_us([&] { cuda::decode(unsplit, short_t, Workspace{nullptr, 0, DeviceKind::kCuda}); }));
  return 0;
}
