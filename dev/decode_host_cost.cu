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

// Median over 9 rounds of 400 calls each, us per call; the stream is drained between rounds.
double per_call_us(const std::function<void()>& fn) {
  std::vector<double> rounds;
  for (int r = 0; r < 10; ++r) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 400; ++i) fn();
    cudaDeviceSynchronize();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
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
  return 0;
}
