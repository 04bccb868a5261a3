// Where a short CUDA decode call spends its time (development tool, not built by CMake): the
// split-KV decode kernel (bf16 K/V) compiled with phase stamps (ATTNKIT_DECODE_STAMP hooks in
// split_kv_decode.cuh) under the bench protocol (256 MiB L2 flush before each call), then the
// merge as the library launches it. Prints, per phase, the median and max over blocks of the time
// since the first block started (globaltimer), the median over blocks of the block's own SM clock
// since its entry, and the event time of the whole call.
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
//     dev/decode_timeline.cu build/<cuda build>/libattnkit.a -Xcompiler=-fopenmp -lcuda -o decode_timeline
//   ./decode_timeline [batch] [kv_len] [splits] [warm] [stages] [resident]  (32 query / 8 KV heads,
//   head_dim 128; splits / stages: 0 = the plan's; warm: 1 = no flush; resident: blocks per SM the
//   launch allows, -1 = the plan's, 0 = as many as fit). Also times, under the same protocol, the decode kernel without the
//   merge and an empty kernel (the floor of an event-timed call), and prints the stamped kernel's
//   registers and blocks per SM (the stamps cost registers: check it matches the library's).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace timeline {
constexpr int kPhases = 11;
constexpr int kMaxBlocks = 8192;
// Per block and phase: the global timer (ns, aligns blocks) and the SM clock (cycles, precise
// within a block).
__device__ unsigned long long stamps[kMaxBlocks][kPhases];
__device__ long long clocks[kMaxBlocks][kPhases];
__device__ __forceinline__ void stamp(int phase) {
  // Phase 2 is the producer lane's (after its first TMA issues); the others are thread 0's.
  if ((threadIdx.x == 0) == (phase != 2) && blockIdx.x < kMaxBlocks) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    stamps[blockIdx.x][phase] = t;
    clocks[blockIdx.x][phase] = clock64();
  }
}
}  // namespace timeline
#define ATTNKIT_DECODE_STAMP(phase) timeline::stamp(phase)

#include "attnkit/attnkit.hpp"
#include "cuda/decode/kv_box_map.hpp"
#include "cuda/decode/split_kv_decode.cuh"

namespace {

using namespace attnkit;

__global__ void empty_kernel() {}

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

const char* kPhaseNames[timeline::kPhases] = {
    "entry",         "length known",       "producer: first tiles issued", "q staged (barrier)",
    "first tile landed", "tiles consumed (barrier)", "state written",
    "epilogue: warp stats and slices (barrier)", "cluster merge: state staged", "cluster merge: barrier passed",
    "cluster merge: pieces stored"};

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t batch = argc > 1 ? std::atoll(argv[1]) : 1, kv_len = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int splits_override = argc > 3 ? std::atoi(argv[3]) : 0;
  const bool warm = argc > 4 && std::atoi(argv[4]) != 0;
  const int stages_override = argc > 5 ? std::atoi(argv[5]) : 0;
  const int resident_override = argc > 6 ? std::atoi(argv[6]) : -1;
  DecodeProblem pr;
  pr.batch = batch;
  pr.num_heads = 32;
  pr.kv_heads = 8;
  pr.head_dim = 128;
  pr.max_seq = pr.kv_len = kv_len;
  pr.kv_dtype = pr.q_dtype = pr.out_dtype = DType::kBF16;
  const DecodePlan plan = plan_decode(pr, cuda::target());
  const WorkPartition& w = plan.partition;
  const std::int64_t kv_elems = batch * 8 * kv_len * 128, q_elems = batch * 32 * 128;
  void *q, *k, *v, *out, *lengths, *ws, *flush;
  ok(cudaMalloc(&q, q_elems * 2), "q");
  ok(cudaMalloc(&k, kv_elems * 2), "k");
  ok(cudaMalloc(&v, kv_elems * 2), "v");
  ok(cudaMalloc(&out, q_elems * 2), "out");
  ok(cudaMalloc(&lengths, batch * 4), "lengths");
  // Room for the states of up to 64 splits (the split-count variants).
  ok(cudaMalloc(&ws, std::max<std::uint64_t>(plan.evidence.workspace_bytes, 64ull * batch * 32 * 129 * 4)), "ws");
  ok(cudaMalloc(&flush, 256u << 20), "flush");
  ok(cudaMemset(q, 0x3c, q_elems * 2), "q");
  ok(cudaMemset(k, 0x3c, kv_elems * 2), "k");
  ok(cudaMemset(v, 0x3c, kv_elems * 2), "v");
  std::vector<std::int32_t> lens(batch, static_cast<std::int32_t>(kv_len));
  ok(cudaMemcpy(lengths, lens.data(), batch * 4, cudaMemcpyHostToDevice), "lengths");

  // The launch arguments, as src/cuda/backend.cpp fills them for this plan.
  cuda_decode::DecodeParams p;
  p.batch = static_cast<int>(batch), p.num_heads = 32, p.kv_heads = 8, p.group = 4, p.head_dim = 128;
  p.kv_len = p.max_seq = static_cast<int>(kv_len);
  p.q_scale = pr.effective_scale() * 1.44269504088896340736f;
  p.rows_per_block = static_cast<int>(w.rows_per_block);
  p.head_chunks = cuda_decode::head_chunks(w.rows_per_block, 2);
  p.key_warps = cuda_decode::key_warps_of(w.warps_per_block, p.head_chunks);
  p.tile = static_cast<int>(w.tile_size), p.stages = static_cast<int>(w.pipeline_stages);
  p.splits = static_cast<int>(w.sequence_splits), p.keys_per_split = static_cast<int>(w.keys_per_split);
  p.passes = 1;
  p.cluster_merge = w.merge_cluster > 1;
  if (splits_override > 0) {  // the same tiles in this many splits
    p.splits = splits_override;
    const int tiles = static_cast<int>((kv_len + p.tile - 1) / p.tile);
    p.keys_per_split = (tiles + p.splits - 1) / p.splits * p.tile;
    p.cluster_merge = p.splits > 1 && p.splits <= cuda_decode::kMaxClusterSplits;
  }
  if (stages_override > 0) p.stages = stages_override;  // a deeper (or shallower) ring, same tiles
  p.resident_blocks = resident_override >= 0 ? resident_override : static_cast<int>(w.resident_blocks);
  p.shared_bytes = static_cast<int>(cuda_decode::shared_bytes(128, p.tile, p.stages, 2, p.rows_per_block, p.key_warps));
  p.q = q, p.q_dtype = DType::kBF16, p.q_stride_b = 32 * 128, p.q_stride_h = 128;
  p.k = k, p.v = v;
  p.k_stride_b = p.v_stride_b = 8 * kv_len * 128, p.k_stride_h = p.v_stride_h = kv_len * 128, p.k_stride_s = p.v_stride_s = 128;
  p.lengths = static_cast<const std::int32_t*>(lengths);
  p.out = out, p.out_dtype = DType::kBF16, p.out_stride_b = 32 * 128, p.out_stride_h = 128;
  if (p.splits > 1) {
    p.partial_out = static_cast<float*>(ws);
    p.partial_lse = p.partial_out + static_cast<std::int64_t>(p.splits) * batch * 32 * 128;
  }
  for (auto [dst, data] : {std::pair{&p.k_map, k}, {&p.v_map, v}}) {
    cuda_decode::KvBoxTensor t{data, DType::kBF16, 128, kv_len, 8, batch, 128, kv_len * 128, 8 * kv_len * 128};
    cuda_decode::make_kv_box_map(*dst, t, p.tile, "timeline", "kv");
  }
  const long blocks = batch * 8 * p.splits;
  std::printf("b%lld kv%lld: %ld blocks x %d threads, %d splits of %d keys, tile %d, %d stages\n",
              static_cast<long long>(batch), static_cast<long long>(kv_len), blocks, 32 * (int)w.warps_per_block,
              p.splits, p.keys_per_split, p.tile, p.stages);

  {
    auto kernel = cuda_decode::split_kv_decode_kernel<__nv_bfloat16, 128, cuda_decode::KeyRowsMmaEngine<__nv_bfloat16, 128>>;  // group 4: the key-rows engine
    cudaFuncAttributes attributes{};
    ok(cudaFuncGetAttributes(&attributes, kernel), "attributes");
    int shared_per_sm = 0;
    ok(cudaDeviceGetAttribute(&shared_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0), "shared per SM");
    const int launch_bytes =
        static_cast<int>(cuda_decode::shared_bytes_for_residency(p.shared_bytes, p.resident_blocks, shared_per_sm));
    ok(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, launch_bytes), "shared memory");
    int per_sm = 0;
    ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * (int)w.warps_per_block, launch_bytes),
       "occupancy");
    std::printf("stamped kernel: %d registers, %d blocks per SM\n", attributes.numRegs, per_sm);
    if (p.cluster_merge) {  // how many clusters of the plan's size the device holds at once
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(static_cast<unsigned>(blocks));
      config.blockDim = dim3(32 * static_cast<unsigned>(w.warps_per_block));
      config.dynamicSmemBytes = static_cast<std::size_t>(p.shared_bytes);
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = static_cast<unsigned>(p.splits);
      attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      ok(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config), "active clusters");
      std::printf("clusters of %d blocks: at most %d active at once\n", p.splits, clusters);
    }
  }
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  constexpr int kReps = 30;
  std::vector<std::vector<double>> phase_med(timeline::kPhases), phase_max(timeline::kPhases),
      phase_clk(timeline::kPhases);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  std::vector<long long> clk(static_cast<std::size_t>(std::min<long>(blocks, timeline::kMaxBlocks)) * timeline::kPhases);
  std::vector<double> call_us;
  std::vector<unsigned long long> host(static_cast<std::size_t>(std::min<long>(blocks, timeline::kMaxBlocks)) * timeline::kPhases);
  for (int rep = 0; rep < kReps + 5; ++rep) {
    if (!warm) ok(cudaMemsetAsync(flush, rep & 0xff, 256u << 20, s), "flush");
    cudaEventRecord(e0, s);
    cuda_decode::launch_decode_typed<__nv_bfloat16>(p, s);
    if (p.splits > 1 && !p.cluster_merge) cuda_decode::launch_merge_splits(p, s);
    cudaEventRecord(e1, s);
    ok(cudaEventSynchronize(e1), "run");
    if (rep < 5) continue;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    call_us.push_back(ms * 1e3);
    ok(cudaMemcpyFromSymbol(host.data(), timeline::stamps, host.size() * 8), "stamps");
    ok(cudaMemcpyFromSymbol(clk.data(), timeline::clocks, clk.size() * 8), "clocks");
    unsigned long long t0 = ~0ull;
    for (std::size_t b = 0; b < host.size() / timeline::kPhases; ++b) t0 = std::min(t0, host[b * timeline::kPhases]);
    for (int ph = 0; ph < timeline::kPhases; ++ph) {
      std::vector<double> x;
      for (std::size_t b = 0; b < host.size() / timeline::kPhases; ++b) x.push_back((host[b * timeline::kPhases + ph] - t0) * 1e-3);
      std::sort(x.begin(), x.end());
      phase_med[ph].push_back(x[x.size() / 2]);
      phase_max[ph].push_back(x.back());
      std::vector<double> c;  // the block's own clock since its entry
      for (std::size_t b = 0; b < clk.size() / timeline::kPhases; ++b) {
        c.push_back((clk[b * timeline::kPhases + ph] - clk[b * timeline::kPhases]) / (clock_khz * 1e-3));
      }
      std::sort(c.begin(), c.end());
      phase_clk[ph].push_back(c[c.size() / 2]);
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  // The same protocol without the merge, and with an empty kernel in place of the call.
  auto time_calls = [&](auto&& call) {
    std::vector<double> t;
    for (int rep = 0; rep < kReps + 5; ++rep) {
      if (!warm) ok(cudaMemsetAsync(flush, rep & 0xff, 256u << 20, s), "flush");
      cudaEventRecord(e0, s);
      call();
      cudaEventRecord(e1, s);
      ok(cudaEventSynchronize(e1), "run");
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (rep >= 5) t.push_back(ms * 1e3);
    }
    return median(t);
  };
  const double decode_only = time_calls([&] { cuda_decode::launch_decode_typed<__nv_bfloat16>(p, s); });
  const double empty = time_calls([&] { empty_kernel<<<1, 32, 0, s>>>(); });
  std::printf("call (events, %s): median %.2f us over %d calls; decode kernel alone %.2f us; empty kernel %.2f us\n",
              warm ? "no flush" : "flush before each", median(call_us), kReps, decode_only, empty);
  std::printf("%-32s %12s %12s %14s  (us; medians over calls; clock at %d MHz)\n", "phase", "block median",
              "last block", "block clock", clock_khz / 1000);
  for (int ph : {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 6}) {
    if (ph >= 8 && !p.cluster_merge) continue;  // the merge phases exist only in a cluster
    std::printf("%-32s %12.2f %12.2f %14.2f\n", kPhaseNames[ph], median(phase_med[ph]), median(phase_max[ph]),
                median(phase_clk[ph]));
  }
  return 0;
}
