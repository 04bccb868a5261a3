// Does a short prefill call's speed depend on where its buffers lie? (development tool, not built
// by CMake; docs/perf-notes.md, "Short shapes: two speeds between processes"). Allocates `sets`
// copies of one sweep problem's q / k / v / out, all alive at once so that each lies elsewhere in
// physical memory, and times each twice (two passes over the sets) under the bench protocol
// (warm-up, 256 MiB memset before every repetition, CUDA events, median of 50). If the two speeds
// follow the sets, placement decides; if every set reads alike within a process, the process does.
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Ibench \
//     -I.deps/devprefix/include dev/hopper/placement_probe.cu build/<cuda build>/libattnkit.a -Xcompiler=-fopenmp \
//     -o placement_probe
//   ./placement_probe [head_dim 256] [seq_len 512] [causal 0] [sets 6]   (16k tokens, hidden 2048, bf16)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/device_support.cuh"

using namespace attnkit;
namespace dev = attnkit::bench::device;

int main(int argc, char** argv) {
  const std::int64_t d = argc > 1 ? std::atoll(argv[1]) : 256, s = argc > 2 ? std::atoll(argv[2]) : 512;
  const bool causal = argc > 3 && std::atoi(argv[3]) != 0;
  const int sets = argc > 4 ? std::atoi(argv[4]) : 6;
  PrefillProblem p;
  p.batch = 16384 / s;
  p.num_heads = p.kv_heads = 2048 / d;
  p.head_dim = d;
  p.q_len = p.kv_len = s;
  p.causal = causal;
  p.dtype = p.out_dtype = DType::kBF16;
  const PrefillPlan plan = plan_prefill(p, cuda::target());
  const std::int64_t elems = p.batch * p.num_heads * s * d;
  const std::size_t bytes = static_cast<std::size_t>(elems) * 2;

  struct Set {
    std::unique_ptr<dev::Buffer> q, k, v, out;
  };
  std::vector<Set> all;
  for (int i = 0; i < sets; ++i) {
    Set set{std::make_unique<dev::Buffer>(bytes), std::make_unique<dev::Buffer>(bytes), std::make_unique<dev::Buffer>(bytes),
            std::make_unique<dev::Buffer>(bytes)};
    dev::fill_random(set.q->data, p.dtype, elems, 11);  // the same values in every set
    dev::fill_random(set.k->data, p.dtype, elems, 12);
    dev::fill_random(set.v->data, p.dtype, elems, 13);
    all.push_back(std::move(set));
  }
  dev::Buffer flush(dev::kFlushBytes), ws(plan.evidence.workspace_bytes);
  const Workspace workspace{ws.data, plan.evidence.workspace_bytes, DeviceKind::kCuda};
  bench::Options options;
  const double flops = static_cast<double>(plan.evidence.matmul_flops);
  std::printf("bf16 d%lld %s %lld: %lld x %lld heads, %d sets of 4 x %.1f MiB\n", static_cast<long long>(d),
              causal ? "causal" : "non-causal", static_cast<long long>(s), static_cast<long long>(p.batch),
              static_cast<long long>(p.num_heads), sets, bytes / 1048576.0);
  std::vector<std::vector<double>> tflops(sets);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < sets; ++i) {
      auto view = [&](void* data) {
        return TensorView::contiguous(data, p.dtype, {p.batch, p.num_heads, s, d}, DeviceKind::kCuda);
      };
      const PrefillTensors t{view(all[i].q->data), view(all[i].k->data), view(all[i].v->data), view(all[i].out->data),
                             {}, {}, {}};
      const dev::Timing tm = dev::time_events(options, nullptr, flush.data, [&] { cuda::prefill(plan, t, workspace); });
      tflops[i].push_back(flops / tm.median_s / 1e12);
    }
  }
  for (int i = 0; i < sets; ++i) {
    std::printf("set %d: %6.1f %6.1f TFLOP/s  q %p k %p v %p out %p\n", i, tflops[i][0], tflops[i][1], all[i].q->data,
                all[i].k->data, all[i].v->data, all[i].out->data);
  }
  return 0;
}
