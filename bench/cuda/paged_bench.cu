// Paged decode benchmark (issue 6), one command: attnkit_paged_bench [--reps N] [--quick] > out.json
// (flags narrow or reshape it: --heads / --kv-heads, --batch / --kv-len / --dtype lists,
// --split-variants N,... to time each point's plan re-cut into those split counts, --no-mixed).
//
// 1. Paged decode at the decode sweep's points (32 query / 8 KV heads, head_dim 128, bf16 and f32
//    K/V, or --dtype e4m3: an e4m3 pool with bf16 q and out and scales != 1, as decode_bench.cu's
//    e4m3 cache; batch 1/16/64/256, kv_len 1k/4k/16k/64k; points whose cache exceeds 40 GB skipped), page
//    size 16, HND pool with randomly permuted pages, measured beside OUR contiguous cuda::decode on
//    the same problem in the same run (ratio = contiguous time / paged time, 1.0 = same speed).
// 2. A mixed batch: 64 sequences with lengths drawn uniformly from 100..32768 (fixed seed; the
//    lengths are in the output so bench/peers/torch_paged.py times PyTorch SDPA flash and cuDNN on
//    the equivalent padded problem, every sequence padded to the longest).
// Protocol (DESIGN.md, bench/cuda/device_support.cuh): random device data, warm-up, 256 MiB L2
// flush before every repetition, CUDA events, median of >= 50 repetitions. The read ceiling (16-byte
// loads) is measured in the same run; bytes are the plan's predicted bytes (K/V + q + out + table).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

namespace attnkit::bench {
namespace {

constexpr const char* kContext = "paged bench";
constexpr double kMaxCaseBytes = 40e9;
constexpr std::int64_t kPageSize = 16;
using device::Buffer;
using device::time_events;
using device::Timing;
using json = nlohmann::json;

void check(cudaError_t err, const char* what) { device::check(err, kContext, what); }

// Query and KV heads of every case (llama3-8b's by default; --heads / --kv-heads).
struct Heads {
  std::int64_t query = 32, kv = 8;
};

DecodeProblem contiguous_problem(std::int64_t batch, std::int64_t kv_len, DType dtype, const Heads& heads) {
  DecodeProblem p;
  p.batch = batch;
  p.num_heads = heads.query;
  p.kv_heads = heads.kv;
  p.head_dim = 128;
  p.max_seq = p.kv_len = kv_len;
  p.kv_dtype = dtype;
  p.q_dtype = p.out_dtype = decode_query_dtype(dtype);
  return p;
}

json timing_json(const Timing& t, double bytes, double ceiling) {
  return {{"median_s", t.median_s}, {"min_s", t.min_s}, {"max_s", t.max_s}, {"repetitions", t.repetitions},
          {"bytes", bytes}, {"achieved_bytes_per_s", bytes / t.median_s},
          {"pct_of_read_ceiling", 100.0 * bytes / t.median_s / ceiling}};
}

// Times paged decode over `lengths` (and contiguous decode on the same lengths when asked).
// split_variants: also time the paged plan re-cut into each of these key split counts.
json run_point(const std::string& name, std::int64_t batch, std::int64_t kv_len, DType dtype,
               const std::vector<std::int32_t>& lengths, double contiguous_limit, const Options& options,
               double ceiling, void* flush, cudaStream_t stream, const Heads& heads,
               const std::vector<std::uint32_t>& split_variants = {}) {
  const Target target = cuda::target();
  const std::size_t es = dtype_size(dtype);
  // q and out: the pool's dtype, bf16 for an e4m3 pool (bench.hpp's decode_query_dtype).
  const DType io_dtype = decode_query_dtype(dtype);
  const std::size_t io_es = dtype_size(io_dtype);
  // An e4m3 pool's scales: not 1, so the timed path is a quantized pool's (speed does not depend on them).
  const KvScales kv_scales = is_fp8(dtype) ? KvScales{0.5f, 0.25f} : KvScales{};
  const std::int64_t H = heads.query, G = heads.kv, D = 128;
  json row = {{"case", name}, {"batch", batch}, {"kv_len", kv_len}, {"dtype", dtype_name(dtype)},
              {"num_heads", H}, {"kv_heads", G}, {"head_dim", D}, {"page_size", kPageSize}};
  std::int64_t pages = 0;
  for (std::int32_t len : lengths) pages += (len + kPageSize - 1) / kPageSize;
  const double pool_bytes = 2.0 * static_cast<double>(pages) * G * kPageSize * D * es;
  const double contiguous_bytes = 2.0 * static_cast<double>(batch) * G * kv_len * D * es;
  if (pool_bytes > kMaxCaseBytes || contiguous_bytes > std::max(contiguous_limit, kMaxCaseBytes)) {
    row["skipped"] = "K/V cache over 40 GB";
    return row;
  }
  const bool with_contiguous = contiguous_bytes <= contiguous_limit;
  // The paged problem and plan: a table wide enough for kv_len, the pool exactly the pages used.
  PagedDecodeProblem pp;
  pp.batch = batch;
  pp.num_heads = H;
  pp.kv_heads = G;
  pp.head_dim = D;
  pp.cache = {std::max<std::int64_t>(pages, 1), kPageSize, (kv_len + kPageSize - 1) / kPageSize, PageLayout::kHND};
  pp.kv_len = kv_len;
  pp.kv_dtype = dtype;
  pp.q_dtype = pp.out_dtype = io_dtype;
  // The host knows the batch's lengths (as an engine does when it plans): the planner keeps the
  // contiguous partition for uniform batches and splits finely for mixed ones.
  for (std::int32_t len : lengths) pp.expected_total_keys += len;
  const PagedDecodePlan plan = plan_paged_decode(pp, target);
  std::vector<std::int32_t> order(static_cast<std::size_t>(pp.cache.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(1234);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::int32_t> table(static_cast<std::size_t>(batch * pp.cache.max_pages_per_seq), -1);
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < (lengths[b] + kPageSize - 1) / kPageSize; ++i) {
      table[static_cast<std::size_t>(b * pp.cache.max_pages_per_seq + i)] = order[next++];
    }
  }
  const std::int64_t pool_elems = pp.cache.num_pages * G * kPageSize * D, q_elems = batch * H * D;
  Buffer k(pool_elems * es), v(pool_elems * es), q(q_elems * io_es), out(q_elems * io_es), d_table(table.size() * 4),
      d_lengths(lengths.size() * 4), ws(plan.bounds.workspace_bytes);
  device::fill_random(k.data, dtype, pool_elems, 31);
  device::fill_random(v.data, dtype, pool_elems, 32);
  device::fill_random(q.data, io_dtype, q_elems, 33);
  check(cudaMemcpy(d_table.data, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "table");
  check(cudaMemcpy(d_lengths.data, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice), "lengths");
  check(cudaDeviceSynchronize(), "fill");
  const auto dev = DeviceKind::kCuda;
  PagedDecodeTensors t{
      TensorView::contiguous(q.data, io_dtype, {batch, H, D}, dev),
      {TensorView::contiguous(k.data, dtype, {pp.cache.num_pages, G, kPageSize, D}, dev),
       TensorView::contiguous(v.data, dtype, {pp.cache.num_pages, G, kPageSize, D}, dev),
       TensorView::contiguous(d_table.data, DType::kI32, {batch, pp.cache.max_pages_per_seq}, dev),
       TensorView::contiguous(d_lengths.data, DType::kI32, {batch}, dev)},
      TensorView::contiguous(out.data, io_dtype, {batch, H, D}, dev),
      {}};
  t.kv_scales = kv_scales;
  const Workspace workspace{ws.data, plan.bounds.workspace_bytes, dev};
  // The split states a re-cut plan needs (the planner's rule: splits x rows x (head_dim + 1) f32,
  // 256-byte rounded; none unsplit).
  auto state_bytes = [&](std::uint32_t splits) -> std::uint64_t {
    return splits > 1 ? (std::uint64_t{splits} * batch * H * (D + 1) * 4 + 255) / 256 * 256 : 0;
  };
  // Bytes actually needed: the K/V rows of the lengths, q, out and the table entries used.
  double kv_bytes = 0;
  for (std::int32_t len : lengths) kv_bytes += 2.0 * len * G * D * es;
  const double bytes = kv_bytes + 2.0 * q_elems * io_es + 4.0 * static_cast<double>(next);
  const Timing paged = time_events(options, stream, flush, [&] { cuda::paged_decode(plan, t, workspace, stream); });
  row["paged"] = timing_json(paged, bytes, ceiling);
  row["page_boxes"] = plan.page_boxes;
  if (plan.page_boxes) {
    // The same plan on the copy ring (every thread copies rows): what the page boxes gain.
    PagedDecodePlan ring = plan;
    ring.page_boxes = false;
    const Timing rt = time_events(options, stream, flush, [&] { cuda::paged_decode(ring, t, workspace, stream); });
    row["paged_copy_ring"] = timing_json(rt, bytes, ceiling);
  }
  for (std::uint32_t splits : split_variants) {
    PagedDecodePlan v = plan;
    const std::uint32_t tile = v.partition.tile_size;
    v.partition.keys_per_split = static_cast<std::uint32_t>((kv_len + splits - 1) / splits + tile - 1) / tile * tile;
    v.partition.sequence_splits = static_cast<std::uint32_t>((kv_len + v.partition.keys_per_split - 1) / v.partition.keys_per_split);
    v.partition.tiles_per_split = v.partition.keys_per_split / tile;
    v.bounds.workspace_bytes = state_bytes(v.partition.sequence_splits);
    Buffer v_ws(v.bounds.workspace_bytes);
    const Workspace vw{v_ws.data, v.bounds.workspace_bytes, DeviceKind::kCuda};
    const Timing vt = time_events(options, stream, flush, [&] { cuda::paged_decode(v, t, vw, stream); });
    row["paged_splits_" + std::to_string(v.partition.sequence_splits)] = timing_json(vt, bytes, ceiling);
  }
  // The same pool with each sequence's pages consecutive: the addressing cost without scattered
  // pages (measured: within a few % of the permuted table, so not a TLB or DRAM-locality effect).
  {
    std::vector<std::int32_t> in_order(table.size(), -1);
    std::int32_t page = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t i = 0; i < (lengths[b] + kPageSize - 1) / kPageSize; ++i) {
        in_order[static_cast<std::size_t>(b * pp.cache.max_pages_per_seq + i)] = page++;
      }
    }
    check(cudaMemcpy(d_table.data, in_order.data(), in_order.size() * 4, cudaMemcpyHostToDevice), "table");
    const Timing seq = time_events(options, stream, flush, [&] { cuda::paged_decode(plan, t, workspace, stream); });
    row["paged_sequential_pages"] = timing_json(seq, bytes, ceiling);
  }
  row["plan"] = {{"splits", plan.partition.sequence_splits}, {"keys_per_split", plan.partition.keys_per_split},
                 {"grid_blocks", plan.partition.grid_blocks}, {"predicted_bytes",
                  static_cast<double>(plan.evidence.traffic.global_read_bytes + plan.evidence.traffic.global_write_bytes)}};
  if (with_contiguous) {
    // Ours, contiguous: [batch, kv_heads, kv_len, head_dim], the same lengths, same protocol.
    const DecodeProblem cp = contiguous_problem(batch, kv_len, dtype, heads);
    const DecodePlan cplan = plan_decode(cp, target);
    const std::int64_t c_elems = batch * G * kv_len * D;
    Buffer ck(c_elems * es), cv(c_elems * es), cws(cplan.evidence.workspace_bytes);
    device::fill_random(ck.data, dtype, c_elems, 41);
    device::fill_random(cv.data, dtype, c_elems, 42);
    check(cudaDeviceSynchronize(), "fill");
    DecodeTensors ct{t.q,
                     TensorView::contiguous(ck.data, dtype, {batch, G, kv_len, D}, dev),
                     TensorView::contiguous(cv.data, dtype, {batch, G, kv_len, D}, dev),
                     t.cache.lengths,
                     t.out,
                     {}};
    ct.kv_scales = kv_scales;
    const Workspace cworkspace{cws.data, cplan.evidence.workspace_bytes, dev};
    const Timing flat = time_events(options, stream, flush, [&] { cuda::decode(cplan, ct, cworkspace, stream); });
    row["contiguous"] = timing_json(flat, bytes, ceiling);
    row["contiguous_splits"] = cplan.partition.sequence_splits;
    row["paged_vs_contiguous"] = flat.median_s / paged.median_s;  // throughput ratio: >= 0.95 is the target
    // The paged kernel on the contiguous plan's partition: the addressing cost alone.
    PagedDecodePlan same = plan;
    same.partition = cplan.partition;
    same.bounds.workspace_bytes = state_bytes(same.partition.sequence_splits);
    Buffer same_ws(same.bounds.workspace_bytes);
    const Workspace w2{same_ws.data, same.bounds.workspace_bytes, dev};
    check(cudaMemcpy(d_table.data, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "table");
    const Timing st = time_events(options, stream, flush, [&] { cuda::paged_decode(same, t, w2, stream); });
    row["paged_contiguous_partition"] = timing_json(st, bytes, ceiling);
  }
  if (!split_variants.empty()) {
    // The first measurement again, last: what the order of measurement costs (protocol check).
    check(cudaMemcpy(d_table.data, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "table");
    const Timing again = time_events(options, stream, flush, [&] { cuda::paged_decode(plan, t, workspace, stream); });
    row["paged_repeat"] = timing_json(again, bytes, ceiling);
  }
  return row;
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) {
  using namespace attnkit;
  using namespace attnkit::bench;
  Options options;
  bool mixed_batch = true;
  Heads heads;
  std::vector<std::int64_t> batches = {1, 16, 64, 256}, lens = {1024, 4096, 16384, 65536};
  std::vector<DType> dtypes = {DType::kBF16, DType::kF32};
  std::vector<std::uint32_t> split_variants;
  std::string command = "attnkit_paged_bench";
  // Comma-separated positive integers.
  auto numbers = [](const char* text) {
    std::vector<std::int64_t> out;
    for (const char* p = text; *p != '\0';) {
      char* end = nullptr;
      const long long v = std::strtoll(p, &end, 10);
      if (!(end != p && v > 0))
        fail(kContext, std::string("bad list '") + text + "'", "pass positive integers like 1,16,64");
      out.push_back(v);
      p = *end == ',' ? end + 1 : end;
      if (!(*end == ',' || *end == '\0'))
        fail(kContext, std::string("bad list '") + text + "'", "separate numbers with commas");
    }
    return out;
  };
  const char* usage =
      "usage: attnkit_paged_bench [--reps N] [--quick] [--heads N] [--kv-heads N] [--batch N,...] [--kv-len N,...]\n"
      "         [--dtype bf16|f32|e4m3|both] [--split-variants N,...] [--no-mixed] > paged.json  (JSON on stdout)";
  try {
    for (int i = 1; i < argc; ++i) {
      command += std::string(" ") + argv[i];
      const bool value = i + 1 < argc;
      auto next = [&] {
        command += std::string(" ") + argv[i + 1];
        return argv[++i];
      };
      if (std::strcmp(argv[i], "--reps") == 0 && value) {
        options.repetitions = std::atoi(next());
      } else if (std::strcmp(argv[i], "--quick") == 0) {
        batches = {1, 64};
        lens = {4096};
      } else if (std::strcmp(argv[i], "--heads") == 0 && value) {
        heads.query = numbers(next()).at(0);
      } else if (std::strcmp(argv[i], "--kv-heads") == 0 && value) {
        heads.kv = numbers(next()).at(0);
      } else if (std::strcmp(argv[i], "--batch") == 0 && value) {
        batches = numbers(next());
      } else if (std::strcmp(argv[i], "--kv-len") == 0 && value) {
        lens = numbers(next());
      } else if (std::strcmp(argv[i], "--dtype") == 0 && value) {
        const std::string d = next();
        if (!(d == "bf16" || d == "f32" || d == "e4m3" || d == "both"))
          fail(kContext, "--dtype " + d, "pass bf16, f32, e4m3 (an e4m3 pool, bf16 q and out) or both (bf16 and f32)");
        dtypes = d == "both" ? dtypes : std::vector<DType>{parse_dtype(d)};
      } else if (std::strcmp(argv[i], "--split-variants") == 0 && value) {
        for (std::int64_t n : numbers(next())) split_variants.push_back(static_cast<std::uint32_t>(n));
      } else if (std::strcmp(argv[i], "--no-mixed") == 0) {
        mixed_batch = false;
      } else {
        std::cerr << usage << std::endl;
        return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
      }
    }
    if (heads.query % heads.kv != 0)
      fail(kContext, "--heads must be a multiple of --kv-heads", "pass e.g. --heads 64 --kv-heads 8");
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl << usage << std::endl;
    return 2;
  }
  try {
    if (!(cuda::built() && cuda::device_count() > 0)) fail(kContext, "no CUDA device", "run on a GPU machine");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const double ceiling = cuda_read_ceiling(options);
    Buffer flush(device::kFlushBytes);
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    json rows = json::array();
    for (DType dtype : dtypes) {
      for (std::int64_t batch : batches) {
        for (std::int64_t kv_len : lens) {
          std::cerr << "paged decode " << dtype_name(dtype) << " b" << batch << " kv" << kv_len << std::endl;
          const std::vector<std::int32_t> full(static_cast<std::size_t>(batch), static_cast<std::int32_t>(kv_len));
          rows.push_back(
              run_point("sweep", batch, kv_len, dtype, full, kMaxCaseBytes, options, ceiling, flush.data, stream, heads, split_variants));
        }
      }
    }
    if (mixed_batch) {
      // The mixed batch: 64 sequences, lengths uniform in [100, 32768].
      std::mt19937 rng(2026);
      std::uniform_int_distribution<std::int32_t> draw(100, 32768);
      std::vector<std::int32_t> mixed(64);
      for (auto& len : mixed) len = draw(rng);
      std::cerr << "paged decode mixed batch" << std::endl;
      // Ours contiguous on the same lengths needs the padded [64, 8, 32768, 128] cache (69 GB) beside
      // the pool: allowed here (the H200 holds 141 GB), not in the sweep.
      json m = run_point("mixed", 64, 32768, DType::kBF16, mixed, 80e9, options, ceiling, flush.data, stream, heads,
                         {1, 2, 4, 8, 16});
      m["lengths"] = mixed;
      rows.push_back(m);
    }
    cudaStreamDestroy(stream);
    json doc = {{"device", prop.name}, {"command", command}, {"read_ceiling_bytes_per_s", ceiling},
                {"protocol", "events, warm-up of at least " + std::to_string(options.warmup) + " runs and " +
                                 std::to_string(device::kWarmupSeconds).substr(0, 4) + " s, median of " +
                                 std::to_string(options.repetitions) + ", 256 MiB L2 flush before each repetition"},
                {"rows", rows}};
    std::cout << doc.dump(1) << std::endl;
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
  return 0;
}
