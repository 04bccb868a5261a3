// Extend (chunked prefill over a paged cache) benchmark, one command:
//   attnkit_extend_bench [--reps N] [--quick] [--page N] [--point B,PREFIX,CHUNK] [--no-decode]
//       > out.json      (a table on stderr)
// Each point: `batch` sequences of `prefix` cached keys plus a chunk of `chunk` new rows (32 query /
// 8 KV heads, head_dim 128, bf16, pages of 16 (--page) dealt in a random order), timed in the same run as
// planned (the Hopper prefill kernel on page boxes for chunks of 128+ rows), on the kernel the plan
// did not pick (plan_extend with a family), and as our contiguous causal prefill of the same rows
// and keys (cuda::prefill, [batch, heads, keys, D]; the pages' cost is the planned time against
// it; --no-decode leaves the decode kernel out where the plan did not pick it). --point runs one
// point (for a profiler). A mixed point (one chunk beside decode rows) checks the planner's rule that keeps such
// batches on the decode kernel. The cuBLAS bf16 GEMM ceiling is measured in the same run; rates are
// the matrix FLOPs of the visible (row, key) pairs (4 x heads x pairs x head_dim) per second.
// Protocol (DESIGN.md, bench/cuda/device_support.cuh): warm-up, 256 MiB L2 flush before every
// repetition, CUDA events, medians.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/attnkit.hpp"
#include "attnkit/cuda_paged.hpp"
#include "bench.hpp"
#include "cuda/device_support.cuh"
#include "cuda/prefill_bench.hpp"

namespace attnkit::bench {
namespace {

constexpr const char* kContext = "extend bench";
using device::Buffer;
using device::time_events;
using device::Timing;
using json = nlohmann::json;

void check(cudaError_t err, const char* what) { device::check(err, kContext, what); }

// `batch` sequences of `prefix` cached keys and `chunk` new rows each, or (mixed) one such chunk and
// batch - 1 decode rows (1 new row each): a serving step that mixes them.
struct Point {
  std::int64_t batch, prefix, chunk;
  PageLayout layout = PageLayout::kHND;
  bool mixed = false;
};

constexpr std::int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128;

struct ExtendOptions {
  std::int64_t page = 16;
  bool decode_kernel = true;  // time the decode kernel where the plan did not pick it
};
constexpr DType kDtype = DType::kBF16;

json timing_json(const Timing& t, double flops, double gemm) {
  return {{"median_s", t.median_s}, {"min_s", t.min_s}, {"repetitions", t.repetitions},
          {"tflops", flops / t.median_s / 1e12}, {"pct_of_gemm", 100.0 * flops / t.median_s / gemm}};
}

json run_point(const Point& pt, const Options& options, const ExtendOptions& eo, double gemm, void* flush,
               cudaStream_t stream) {
  const Target target = cuda::target();
  const std::int64_t B = pt.batch, H = kHeads, G = kKvHeads, D = kHeadDim, P = eo.page;
  const std::int64_t len = pt.prefix + pt.chunk, pages_per_seq = (len + P - 1) / P, pages = B * pages_per_seq;
  std::vector<std::int32_t> q_lens(static_cast<std::size_t>(B)), lengths(q_lens.size()), cu(q_lens.size() + 1, 0);
  double pairs = 0;  // visible (row, key) pairs: the matrix work, exact for mixed batches too
  for (std::size_t b = 0; b < q_lens.size(); ++b) {
    const std::int64_t q = pt.mixed && b > 0 ? 1 : pt.chunk;
    q_lens[b] = static_cast<std::int32_t>(q);
    lengths[b] = static_cast<std::int32_t>(pt.prefix + q);
    cu[b + 1] = cu[b] + q_lens[b];
    pairs += static_cast<double>(q) * static_cast<double>(pt.prefix) + 0.5 * static_cast<double>(q) * static_cast<double>(q + 1);
  }
  const std::int64_t rows = cu.back();
  const auto dev = DeviceKind::kCuda;
  ExtendProblem ep;
  ep.batch = B;
  ep.num_heads = H;
  ep.kv_heads = G;
  ep.head_dim = D;
  ep.cache = {pages, P, pages_per_seq, pt.layout};
  ep.max_q_len = pt.chunk;
  ep.kv_len = len;
  ep.max_total_q = rows;
  ep.kv_dtype = ep.q_dtype = ep.out_dtype = kDtype;
  const ExtendPlan planned = plan_extend(ep, target);
  const ExtendPlan on_decode = plan_extend(ep, target, KernelFamily::kSplitKvDecode);
  const ExtendPlan on_hopper = plan_extend(ep, target, KernelFamily::kWarpSpecializedWgmma);
  json row = {{"batch", B}, {"prefix", pt.prefix}, {"chunk", pt.chunk}, {"mixed", pt.mixed}, {"layout", to_string(pt.layout)},
              {"num_heads", H}, {"kv_heads", G}, {"head_dim", D}, {"dtype", dtype_name(kDtype)}, {"page_size", P},
              {"family", to_string(planned.partition.family)}, {"splits", planned.partition.sequence_splits},
              {"grid_blocks", planned.partition.grid_blocks}};
  const double flops = 4.0 * H * D * pairs;
  row["matmul_flops"] = flops;

  // The pool with pages dealt at random, the table, lengths and the chunk's query offsets.
  std::vector<std::int32_t> order(static_cast<std::size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(1234);
  std::shuffle(order.begin(), order.end(), rng);
  const std::size_t es = dtype_size(kDtype);
  const std::int64_t pool_elems = pages * G * P * D, q_elems = rows * H * D;
  Buffer k(pool_elems * es), v(pool_elems * es), q(q_elems * es), out(q_elems * es), d_table(order.size() * 4),
      d_lengths(lengths.size() * 4), d_cu(cu.size() * 4);
  device::fill_random(k.data, kDtype, pool_elems, 31);
  device::fill_random(v.data, kDtype, pool_elems, 32);
  device::fill_random(q.data, kDtype, q_elems, 33);
  check(cudaMemcpy(d_table.data, order.data(), order.size() * 4, cudaMemcpyHostToDevice), "table");
  check(cudaMemcpy(d_lengths.data, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice), "lengths");
  check(cudaMemcpy(d_cu.data, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), "cu_seqlens_q");
  check(cudaDeviceSynchronize(), "fill");
  auto pool_view = [&](void* data) {
    return pt.layout == PageLayout::kHND ? TensorView::contiguous(data, kDtype, {pages, G, P, D}, dev)
                                         : TensorView::contiguous(data, kDtype, {pages, P, G, D}, dev);
  };
  const ExtendTensors t{TensorView::contiguous(q.data, kDtype, {rows, H, D}, dev),
                        TensorView::contiguous(d_cu.data, DType::kI32, {B + 1}, dev),
                        {pool_view(k.data), pool_view(v.data),
                         TensorView::contiguous(d_table.data, DType::kI32, {B, pages_per_seq}, dev),
                         TensorView::contiguous(d_lengths.data, DType::kI32, {B}, dev)},
                        TensorView::contiguous(out.data, kDtype, {rows, H, D}, dev),
                        {}};
  for (const auto& [name, plan] : {std::pair<std::string, const ExtendPlan*>{"extend", &planned},
                                   std::pair<std::string, const ExtendPlan*>{"extend_decode_kernel", &on_decode},
                                   std::pair<std::string, const ExtendPlan*>{"extend_hopper_kernel", &on_hopper}}) {
    if (name != "extend" && plan->partition.family == planned.partition.family) continue;  // timed as "extend"
    if (name == "extend_decode_kernel" && !eo.decode_kernel) continue;
    Buffer ws(plan->bounds.workspace_bytes);
    const Workspace w{ws.data, plan->bounds.workspace_bytes, dev};
    const Timing tm = time_events(options, stream, flush, [&] { cuda::extend(*plan, t, w, stream); });
    row[name] = timing_json(tm, flops, gemm);
  }

  if (pt.mixed) return row;  // no contiguous prefill does this work
  // Our contiguous causal prefill of the same rows and keys.
  PrefillProblem pp;
  pp.batch = B;
  pp.num_heads = H;
  pp.kv_heads = G;
  pp.head_dim = D;
  pp.q_len = pt.chunk;
  pp.kv_len = len;
  pp.causal = true;
  pp.dtype = pp.out_dtype = kDtype;
  const PrefillPlan pplan = plan_prefill(pp, target);
  const std::int64_t kv_elems = B * G * len * D;
  Buffer ck(kv_elems * es), cv(kv_elems * es), pws(pplan.evidence.workspace_bytes);
  device::fill_random(ck.data, kDtype, kv_elems, 41);
  device::fill_random(cv.data, kDtype, kv_elems, 42);
  check(cudaDeviceSynchronize(), "fill");
  const PrefillTensors pt_t{TensorView::contiguous(q.data, kDtype, {B, H, pt.chunk, D}, dev),
                            TensorView::contiguous(ck.data, kDtype, {B, G, len, D}, dev),
                            TensorView::contiguous(cv.data, kDtype, {B, G, len, D}, dev),
                            TensorView::contiguous(out.data, kDtype, {B, H, pt.chunk, D}, dev)};
  const Workspace pw{pws.data, pplan.evidence.workspace_bytes, dev};
  const Timing ct = time_events(options, stream, flush, [&] { cuda::prefill(pplan, pt_t, pw, stream); });
  row["contiguous_prefill"] = timing_json(ct, static_cast<double>(pplan.evidence.matmul_flops), gemm);
  row["contiguous_prefill"]["family"] = to_string(pplan.partition.family);
  return row;
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) {
  using namespace attnkit;
  using namespace attnkit::bench;
  Options options;
  ExtendOptions eo;
  bool quick = false;
  std::vector<Point> only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      options.repetitions = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--page") == 0 && i + 1 < argc) {
      eo.page = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-decode") == 0) {
      eo.decode_kernel = false;
    } else if (std::strcmp(argv[i], "--point") == 0 && i + 1 < argc) {
      long long b = 0, prefix = 0, chunk = 0;
      if (std::sscanf(argv[++i], "%lld,%lld,%lld", &b, &prefix, &chunk) != 3 || b < 1 || prefix < 0 || chunk < 1) {
        std::fprintf(stderr, "--point takes BATCH,PREFIX,CHUNK (e.g. 1,16384,2048)\n");
        return 2;
      }
      only.push_back({b, prefix, chunk});
    } else {
      std::fprintf(stderr,
                   "usage: attnkit_extend_bench [--reps N] [--quick] [--page N] [--point B,PREFIX,CHUNK] [--no-decode]\n");
      return 2;
    }
  }
  try {
    std::vector<Point> points = {{1, 0, 2048},  {1, 16384, 2048}, {4, 16384, 2048}, {1, 4096, 128},
                                 {8, 4096, 512}, {1, 16384, 2048, PageLayout::kNHD},
                                 {64, 4096, 512, PageLayout::kHND, true}};
    if (quick) points = {{1, 4096, 512}, {1, 4096, 128}};
    if (!only.empty()) points = only;
    if (eo.page < 1) {
      std::fprintf(stderr, "--page takes a positive page size\n");
      return 2;
    }
    void* flush = nullptr;
    device::check(cudaMalloc(&flush, device::kFlushBytes), "extend bench", "flush buffer");
    cudaStream_t stream;
    device::check(cudaStreamCreate(&stream), "extend bench", "stream");
    const double gemm = cuda_bf16_gemm_ceiling(options);
    json out = {{"device", cuda::target().name}, {"commit", std::getenv("ATTNKIT_COMMIT") ? std::getenv("ATTNKIT_COMMIT") : "unknown"}, {"command", "attnkit_extend_bench"},
                {"gemm_bf16_flops", gemm}, {"points", json::array()}};
    std::fprintf(stderr, "cuBLAS bf16 GEMM %.0f TFLOP/s\n%-40s %-28s %10s %10s %10s %10s %9s %9s\n", gemm / 1e12,
                 "point", "planned family (splits)", "planned_ms", "decode_ms", "hopper_ms", "prefill_ms", "TFLOP/s",
                 "vs_pref");
    for (const Point& p : points) {
      const json row = run_point(p, options, eo, gemm, flush, stream);
      out["points"].push_back(row);
      const std::string name = "b" + std::to_string(p.batch) + " prefix " + std::to_string(p.prefix) + " chunk " +
                               std::to_string(p.chunk) + (p.mixed ? " (+decode rows)" : "") + " " + to_string(p.layout) +
                               (eo.page != 16 ? " page " + std::to_string(eo.page) : "");
      auto ms = [&](const char* key) { return row.contains(key) ? row[key]["median_s"].get<double>() : 0.0; };
      const double e = ms("extend"), c = ms("contiguous_prefill");
      const bool on_hopper = row["family"] == to_string(KernelFamily::kWarpSpecializedWgmma);
      std::fprintf(stderr, "%-40s %-28s %10.3f %10.3f %10.3f %10.3f %9.1f %9.3f\n", name.c_str(),
                   (row["family"].get<std::string>() + " (" + std::to_string(row["splits"].get<int>()) + ")").c_str(),
                   e * 1e3, (on_hopper ? ms("extend_decode_kernel") : e) * 1e3, (on_hopper ? e : ms("extend_hopper_kernel")) * 1e3,
                   c * 1e3, row["extend"]["tflops"].get<double>(), c > 0 ? c / e : 0.0);
    }
    std::cout << out.dump(1) << "\n";
    cudaFree(flush);
    cudaStreamDestroy(stream);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
