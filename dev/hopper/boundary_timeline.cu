// Where a Hopper prefill work tile's time goes, from clock64() stamps the kernel records when built
// with -DATTNKIT_HOPPER_STAMPS (development tool, not built by CMake; the hooks are
// ATTNKIT_HOPPER_STAMP in src/cuda/prefill_hopper/hopper_prefill.cuh). Thread 0 of each warpgroup
// stamps landmarks of its block's first 32 walk steps:
//   consumers: 0 step start, 1 tile decoded, 2 Q landed, 3 first turn (K landed), 4 first softmax
//   done, 5 key loop done, 6 last P V done, 7 epilogue done;
//   producer:  0 step start, 1 Q issued (q_empty passed), 2 first K issued, 3 the step's loads issued.
// Build: dev/hopper/build_stamps.sh build/lead OUT (recompiles hopper_prefill.cu with the define
// into a copy of the library and links this file against it). Run on the device:
//   OUT/boundary_timeline --head-dim D --seq S [--causal]   (bf16, the sweep's shape: 2048 / D heads,
//   16384 / S sequences; eight flushed calls, each after an unrecorded warm-up)
// Prints, in cycles (medians over blocks and over steps 1 .. steps - 2 of each block), each span
// between landmarks, the gap from one warpgroup's last P V to the other's next first turn, and
// block 0's stamped cycles over the call's event time (a lower bound of the SM clock: the call
// also holds the launch and the blocks' start).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/device_support.cuh"

extern "C" void attnkit_hopper_set_stamps(long long* device_buffer);

using namespace attnkit;
namespace dev = attnkit::bench::device;

namespace {
constexpr int kSteps = 32, kEvents = 8, kGroups = 4;

double median(std::vector<double> x) {
  if (x.empty()) return 0.0;
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  long head_dim = 128, seq = 512;
  bool causal = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--head-dim") == 0 && i + 1 < argc) head_dim = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--seq") == 0 && i + 1 < argc) seq = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--causal") == 0) causal = true;
  }
  PrefillProblem p;
  p.batch = 16384 / seq, p.num_heads = p.kv_heads = 2048 / head_dim, p.head_dim = head_dim;
  p.q_len = p.kv_len = seq, p.causal = causal;
  p.dtype = p.out_dtype = DType::kBF16;
  const PrefillPlan plan = plan_prefill(p, cuda::target());
  const std::int64_t q_elems = p.batch * p.num_heads * p.q_len * p.head_dim;
  const std::int64_t kv_elems = p.batch * p.kv_heads * p.kv_len * p.head_dim;
  dev::Buffer q(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2), out(q_elems * 2), flush(dev::kFlushBytes);
  dev::Buffer ws(plan.evidence.workspace_bytes);
  dev::fill_random(q.data, p.dtype, q_elems, 11);
  dev::fill_random(k.data, p.dtype, kv_elems, 12);
  dev::fill_random(v.data, p.dtype, kv_elems, 13);
  auto view = [&](void* data, std::int64_t heads) {
    return TensorView::contiguous(data, p.dtype, {p.batch, heads, seq, p.head_dim}, DeviceKind::kCuda);
  };
  const PrefillTensors t{view(q.data, p.num_heads), view(k.data, p.kv_heads), view(v.data, p.kv_heads),
                         view(out.data, p.num_heads), {}, {}, {}};
  const Workspace workspace{ws.data, plan.evidence.workspace_bytes, DeviceKind::kCuda};

  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const std::size_t n = static_cast<std::size_t>(sms) * kGroups * kSteps * kEvents;
  dev::Buffer stamps(n * sizeof(long long));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<long long> h(n);
  std::vector<double> call_us;
  // Span name -> values over (round, block, warpgroup, step).
  std::vector<std::pair<std::string, std::vector<double>>> spans;
  auto add = [&](const std::string& name, double v) {
    for (auto& s : spans) {
      if (s.first == name) return s.second.push_back(v);
    }
    spans.push_back({name, {v}});
  };
  std::vector<double> mhz;
  for (int round = 0; round < 8; ++round) {
    attnkit_hopper_set_stamps(nullptr);
    cuda::prefill(plan, t, workspace);  // warm-up, unrecorded
    cudaMemset(stamps.data, 0, n * sizeof(long long));
    attnkit_hopper_set_stamps(static_cast<long long*>(stamps.data));
    cudaMemset(flush.data, round, dev::kFlushBytes);
    cudaEventRecord(e0);
    cuda::prefill(plan, t, workspace);
    cudaEventRecord(e1);
    dev::check(cudaDeviceSynchronize(), "boundary_timeline", "the recorded call");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    call_us.push_back(ms * 1e3);
    cudaMemcpy(h.data(), stamps.data, n * sizeof(long long), cudaMemcpyDeviceToHost);
    auto at = [&](int b, int g, int s, int e) { return h[((static_cast<std::size_t>(b) * kGroups + g) * kSteps + s) * kEvents + e]; };
    long long b0_lo = at(0, 0, 0, 0), b0_hi = 0;
    for (int g = 0; g < kGroups; ++g) {
      for (int s = 0; s < kSteps; ++s) {
        for (int e = 0; e < kEvents; ++e) b0_hi = std::max(b0_hi, at(0, g, s, e));
      }
    }
    mhz.push_back(static_cast<double>(b0_hi - b0_lo) / (ms * 1e3));
    for (int b = 0; b < sms; ++b) {
      int last = 0;  // the block's last recorded consumer step
      while (last + 1 < kSteps && at(b, 1, last + 1, 7) != 0) ++last;
      for (int s = 1; s + 1 <= last; ++s) {
        for (int g = 1; g <= 2; ++g) {
          if (at(b, g, s, 7) == 0 || at(b, g, s, 2) == 0) continue;  // not a full step
          const char* names[] = {"decode", "Q wait", "K wait + turn", "first S + softmax", "key loop", "last P V",
                                 "epilogue"};
          for (int e = 0; e < 7; ++e) add(std::string("wg") + std::to_string(g - 1) + " " + names[e], at(b, g, s, e + 1) - at(b, g, s, e));
          add(std::string("wg") + std::to_string(g - 1) + " to next step", at(b, g, s + 1, 0) - at(b, g, s, 7));
          add(std::string("wg") + std::to_string(g - 1) + " step", at(b, g, s + 1, 0) - at(b, g, s, 0));
        }
        // The tensor pipe's boundary: warpgroup 1's last P V done to warpgroup 0's next first turn.
        add("wg1 last PV done -> wg0 next first turn", at(b, 1, s + 1, 3) - at(b, 2, s, 6));
        add("wg0 last PV done -> wg0 next first turn", at(b, 1, s + 1, 3) - at(b, 1, s, 6));
        add("producer Q issued -> wg0 Q landed", at(b, 1, s, 2) - at(b, 0, s, 1));
        add("wg1 key loop done -> producer Q issued (next)", at(b, 0, s + 1, 1) - at(b, 2, s, 5));
      }
    }
  }
  std::printf("head_dim %ld seq %ld %s: %u-row blocks, %u-key tiles, %llu blocks; call %.1f us (median of %zu), block 0 "
              "cycles / call time %.0f MHz\n",
              head_dim, seq, causal ? "causal" : "non-causal", plan.partition.rows_per_block, plan.partition.tile_size,
              static_cast<unsigned long long>(plan.partition.grid_blocks), median(call_us), call_us.size(), median(mhz));
  for (const auto& [name, values] : spans) std::printf("  %-48s %8.0f cycles (n=%zu)\n", name.c_str(), median(values), values.size());
  return 0;
}
