// The CPU decode body's cost per key and KV head, cache-resident or from DRAM, through the public
// API (the planner's plan for the given threads). A development probe, not a benchmark.
//
// hot:  one buffer, called again and again (K/V stay in L2 if they fit); the slope between two
//       kv_lens, min of the calls, in ns per key and KV head per thread.
// cold: K/V far larger than the LLC (the bench's decode point), median of the calls, GB/s.
//
//   g++ -O2 -std=c++20 -fopenmp -Iinclude -o /tmp/slope dev/cpu_decode_slope.cpp build/release/libattnkit.a
//   taskset -c 1 /tmp/slope hot bf16|f16|f32|e4m3 [heads kv_heads head_dim kv_lo kv_hi calls]
//   (e4m3: an e4m3 cache with bf16 q and output)
//   /tmp/slope cold bf16 [threads batch kv_len calls]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"

namespace {

using attnkit::DType;

struct Case {
  attnkit::DecodeProblem problem;
  attnkit::DecodePlan plan;
  std::vector<std::uint8_t> q, k, v, out, lengths, workspace;
  attnkit::DecodeTensors t;
};

DType parse_dtype(const std::string& s) {
  return s == "f32" ? DType::kF32 : s == "f16" ? DType::kF16 : s == "e4m3" ? DType::kE4M3 : DType::kBF16;
}

void make(Case& c, DType dt, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
          std::int64_t kv, int threads) {
  auto& p = c.problem;
  p.batch = batch;
  p.num_heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = d;
  p.max_seq = p.kv_len = kv;
  // An e4m3 cache takes bf16 q and output (an e4m3 KV cache's decode, as served).
  const DType io = dt == DType::kE4M3 ? DType::kBF16 : dt;
  p.kv_dtype = dt;
  p.q_dtype = p.out_dtype = io;
  c.plan = attnkit::plan_decode(p, attnkit::cpu_target(threads));
  auto fill = [&](std::vector<std::uint8_t>& b, DType t, std::size_t n) {
    b.resize(n * attnkit::dtype_size(t));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist;
    for (std::size_t i = 0; i < n; ++i) {
      if (t == DType::kE4M3) {
        const std::uint32_t r = rng();
        b[i] = static_cast<std::uint8_t>(std::min<std::uint32_t>(r & 0x7f, 0x7e) | (r & 0x80));  // finite
      } else {
        attnkit::store_from_float(b.data(), t, i, dist(rng));
      }
    }
  };
  fill(c.q, io, batch * heads * d);
  fill(c.k, dt, batch * kv_heads * kv * d);
  fill(c.v, dt, batch * kv_heads * kv * d);
  c.out.assign(batch * heads * d * attnkit::dtype_size(io), 0);
  c.lengths.resize(batch * 4);
  for (std::int64_t b = 0; b < batch; ++b) reinterpret_cast<std::int32_t*>(c.lengths.data())[b] = kv;
  c.workspace.assign(c.plan.evidence.workspace_bytes + 64, 0);
  using attnkit::TensorView;
  c.t.q = TensorView::contiguous(c.q.data(), io, {batch, heads, d});
  c.t.k_cache = TensorView::contiguous(c.k.data(), dt, {batch, kv_heads, kv, d});
  c.t.v_cache = TensorView::contiguous(c.v.data(), dt, {batch, kv_heads, kv, d});
  c.t.out = TensorView::contiguous(c.out.data(), io, {batch, heads, d});
  c.t.lengths = TensorView::contiguous(c.lengths.data(), DType::kI32, {batch});
}

double time_call(Case& c) {
  const attnkit::Workspace ws{c.workspace.data(), c.workspace.size(), attnkit::DeviceKind::kCpu};
  const auto t0 = std::chrono::steady_clock::now();
  attnkit::cpu::decode(c.plan, c.t, ws);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "hot";
  const DType dt = parse_dtype(argc > 2 ? argv[2] : "bf16");
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  if (mode == "hot") {
    const long heads = arg(3, 4), kvh = arg(4, 1), d = arg(5, 128), lo = arg(6, 64), hi = arg(7, 320),
               calls = arg(8, 2000);
    Case a, b;
    make(a, dt, 1, heads, kvh, d, lo, 1);
    make(b, dt, 1, heads, kvh, d, hi, 1);
    double ma = 1e30, mb = 1e30;
    for (long i = 0; i < calls; ++i) {
      ma = std::min(ma, time_call(a));
      mb = std::min(mb, time_call(b));
    }
    std::printf("hot %s g%ld d%ld: %.1f ns per key and KV head (min %.0f / %.0f ns at %ld / %ld keys)\n",
                argv[2], heads / kvh, d, (mb - ma) / double((hi - lo) * kvh), ma, mb, lo, hi);
  } else {
    const long threads = arg(3, 2), batch = arg(4, 1), kv = arg(5, 65536), calls = arg(6, 10);
    Case c;
    make(c, dt, batch, 32, 8, 128, kv, static_cast<int>(threads));
    std::vector<double> ts;
    time_call(c);
    for (long i = 0; i < calls; ++i) ts.push_back(time_call(c));
    std::sort(ts.begin(), ts.end());
    const double bytes = 2.0 * c.k.size();  // K and V as stored
    std::printf("cold %s t%ld b%ld kv%ld: median %.2f ms, %.2f GB/s, %.1f ns per key and KV head per thread\n",
                argv[2], threads, batch, kv, ts[ts.size() / 2] / 1e6, bytes / ts[ts.size() / 2],
                ts[ts.size() / 2] * threads / double(batch * 8 * kv));
  }
}
