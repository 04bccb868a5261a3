// The CPU benchmark driver. Per case: plan with cpu_target, build random inputs, time the plan's
// kernel with std::chrono::steady_clock around each repetition (warm-up first; the median over
// Options::repetitions is the result), and relate it to ceilings measured in this run.
//
// Caches: inputs are rotated, not flushed. Enough copies of q/k/v (and out) are made that the
// copies together exceed twice the last-level cache, and repetition r uses copy r % copies, so
// each repetition reads its inputs from DRAM as a real decode step would (the KV cache of a
// previous step is long evicted). Cases whose inputs alone exceed 2x LLC use a single copy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"
#include "bench.hpp"
#include "host_bytes.hpp"
#include "read_probe.hpp"

namespace attnkit::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxCopies = 64;
constexpr std::chrono::milliseconds kSettleAfterProbe{3000};

// An owned buffer viewed as one contiguous tensor, its pages faulted in at once (after the
// huge-page advice), so no timed repetition pays for the first touch of a buffer only the kernel
// writes (the outputs).
struct Buffer {
  HostBytes bytes;
  TensorView view;
  Buffer(DType dtype, std::initializer_list<std::int64_t> shape, bool huge_pages = false)
      : bytes(static_cast<std::size_t>(TensorView::contiguous(nullptr, dtype, shape).numel()) * dtype_size(dtype),
              huge_pages) {
    std::memset(bytes.data(), 0, bytes.size());
    view = TensorView::contiguous(bytes.data(), dtype, shape);
  }
};

// Values in [-2, 2): cheap to draw for hundreds of MiB; the kernels' speed does not depend on them.
void fill_random(Buffer& b, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  const std::size_t n = static_cast<std::size_t>(b.view.numel());
  for (std::size_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float x = static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
    store_from_float(b.bytes.data(), b.view.dtype, i, x);
  }
}

int copies_for(std::int64_t bytes_per_copy, std::int64_t cache_bytes) {
  const std::int64_t wanted = (2 * cache_bytes + bytes_per_copy - 1) / std::max<std::int64_t>(bytes_per_copy, 1);
  return static_cast<int>(std::clamp<std::int64_t>(wanted, 1, kMaxCopies));
}

std::string describe(const Case& c) {
  std::string text = c.op + " b" + std::to_string(c.batch) + " h" + std::to_string(c.num_heads) + "/" +
                     std::to_string(c.kv_heads) + " d" + std::to_string(c.head_dim);
  if (c.op == "prefill") text += " q" + std::to_string(c.q_len);
  text += " kv" + std::to_string(c.kv_len) + " " + std::string(dtype_name(c.dtype));
  if (c.op == "paged-decode") text += " page" + std::to_string(c.page_size) + " " + to_string(c.page_layout);
  if (c.op == "prefill" && c.causal) text += " causal";
  if (c.window > 0) text += " w" + std::to_string(c.window);
  if (c.left_pad > 0) text += " pad" + std::to_string(c.left_pad);
  return text;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The read ceiling's probe, run again right after each timed repetition of a decode (which reads
// its cache from DRAM): the row's "read probe beside" is the median of those passes and its share
// of them the median, over repetitions, of (the repetition's bytes/s) / (the pass after it).
struct ProbeBeside {
  ReadProbe* probe = nullptr;  // null: not measured (prefill rows)
  int pattern = 0;
};

// Times `run(copy)`: warm-up, then one steady_clock interval per repetition.
template <class Run>
void time_repetitions(Row& row, const Options& options, int copies, Run run, ProbeBeside beside = {}) {
  for (int i = 0; i < options.warmup; ++i) run(i % copies);
  std::vector<double> seconds, probe_rates;
  seconds.reserve(static_cast<std::size_t>(options.repetitions));
  for (int i = 0; i < options.repetitions; ++i) {
    const int copy = (options.warmup + i) % copies;
    const auto start = Clock::now();
    run(copy);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (beside.probe != nullptr) probe_rates.push_back(beside.probe->pass(beside.pattern));
  }
  if (!probe_rates.empty()) {
    std::vector<double> shares;
    for (std::size_t i = 0; i < seconds.size(); ++i) shares.push_back(row.bytes / seconds[i] / probe_rates[i]);
    row.read_probe_beside = median(probe_rates);
    row.pct_of_probe_beside = 100.0 * median(shares);
  }
  row.median_s = median(seconds);
  row.min_s = *std::min_element(seconds.begin(), seconds.end());
  row.max_s = *std::max_element(seconds.begin(), seconds.end());
  row.repetitions = static_cast<int>(seconds.size());
}

template <class Plan>
void fill_from_plan(Row& row, const Plan& plan) {
  row.family = to_string(plan.partition.family);
  row.bytes = static_cast<double>(plan.evidence.traffic.global_read_bytes + plan.evidence.traffic.global_write_bytes);
  row.flops = static_cast<double>(plan.evidence.matmul_flops);
  row.plan_json = to_json(plan);
}

// Attention-sink logits for --sinks (one per query head, all 1), else an empty view.
TensorView sinks_view(const Options& options, Buffer& sinks) {
  if (!options.sinks) return {};
  std::fill_n(reinterpret_cast<float*>(sinks.bytes.data()), sinks.view.numel(), 1.0f);
  return sinks.view;
}

void run_decode(Row& row, const Case& c, const Target& target, const Options& options, ProbeBeside beside) {
  const DecodeProblem p = decode_problem(c);
  const DecodePlan plan = options.family ? plan_decode(p, target, *options.family) : plan_decode(p, target);
  fill_from_plan(row, plan);
  if (c.left_pad > 0) {  // a left-padded case reads only its real keys: the bytes a plan of those would move
    const DecodePlan read = plan_decode(real_keys_problem(c), target);
    row.bytes = static_cast<double>(read.evidence.traffic.global_read_bytes + read.evidence.traffic.global_write_bytes);
  }

  const std::int64_t cache_bytes = 2 * c.batch * c.kv_heads * c.kv_len * c.head_dim * static_cast<std::int64_t>(dtype_size(c.dtype));
  const int copies = copies_for(cache_bytes, target.cache_bytes);
  std::vector<Buffer> q, k, v, out;
  for (int i = 0; i < copies; ++i) {
    q.emplace_back(p.q_dtype, std::initializer_list<std::int64_t>{c.batch, c.num_heads, c.head_dim},
                   options.huge_pages);
    k.emplace_back(c.dtype, std::initializer_list<std::int64_t>{c.batch, c.kv_heads, c.kv_len, c.head_dim}, options.huge_pages);
    v.emplace_back(c.dtype, std::initializer_list<std::int64_t>{c.batch, c.kv_heads, c.kv_len, c.head_dim}, options.huge_pages);
    out.emplace_back(p.out_dtype, std::initializer_list<std::int64_t>{c.batch, c.num_heads, c.head_dim},
                     options.huge_pages);
    if (i == 0) {
      fill_random(q[0], 1);
      fill_random(k[0], 2);
      fill_random(v[0], 3);
    } else {
      std::memcpy(q[i].bytes.data(), q[0].bytes.data(), q[0].bytes.size());
      std::memcpy(k[i].bytes.data(), k[0].bytes.data(), k[0].bytes.size());
      std::memcpy(v[i].bytes.data(), v[0].bytes.data(), v[0].bytes.size());
    }
  }
  Buffer lengths(DType::kI32, {c.batch}), starts(DType::kI32, {c.batch});
  for (std::int64_t b = 0; b < c.batch; ++b) {
    reinterpret_cast<std::int32_t*>(lengths.bytes.data())[b] = static_cast<std::int32_t>(c.kv_len);
    reinterpret_cast<std::int32_t*>(starts.bytes.data())[b] = static_cast<std::int32_t>(c.left_pad);
  }
  std::vector<std::uint8_t> scratch(plan.evidence.workspace_bytes);
  const Workspace ws{scratch.empty() ? nullptr : scratch.data(), scratch.size(), DeviceKind::kCpu};
  Buffer sinks(DType::kF32, {c.num_heads});
  const TensorView sink_logits = sinks_view(options, sinks);
  // An e4m3 cache's scales (1 for other caches): not 1, so the timed path is the one a quantized
  // cache takes; the values do not change the kernel's speed.
  const KvScales scales = is_fp8(c.dtype) ? KvScales{0.5f, 0.25f} : KvScales{};
  time_repetitions(row, options, copies, [&](int i) {
    DecodeTensors t{q[i].view, k[i].view, v[i].view, lengths.view, out[i].view, {}, sink_logits};
    t.kv_scales = scales;
    if (c.left_pad > 0) t.key_starts = starts.view;
    cpu::decode(plan, t, ws);
  }, beside);
}

// The inputs of a paged case: `copies` of q / K pool / V pool / out (enough to spill the cache
// between repetitions, all filled alike), each sequence's kv_len keys in pages of c.page_size, the
// pages of all sequences dealt in one random order (a serving engine's pool after many admissions
// and evictions), so the kernels gather rows from scattered pages as they would in production.
struct PagedInputs {
  int copies = 1;
  std::vector<Buffer> q, k, v, out;
  Buffer table, lengths;
};

PagedInputs paged_inputs(const Case& c, const PagedCacheSpec& cache, std::int64_t q_rows, DType q_dtype, DType out_dtype,
                         const Target& target, const Options& options) {
  const std::int64_t pages = cache.num_pages;
  auto pool = [&] {
    return c.page_layout == PageLayout::kHND ? Buffer(c.dtype, {pages, c.kv_heads, c.page_size, c.head_dim}, options.huge_pages)
                                             : Buffer(c.dtype, {pages, c.page_size, c.kv_heads, c.head_dim}, options.huge_pages);
  };
  const std::int64_t pool_bytes = 2 * pages * c.page_size * c.kv_heads * c.head_dim * static_cast<std::int64_t>(dtype_size(c.dtype));
  PagedInputs in{copies_for(pool_bytes, target.cache_bytes), {}, {}, {}, {}, Buffer(DType::kI32, {c.batch, cache.max_pages_per_seq}),
                 Buffer(DType::kI32, {c.batch})};
  for (int i = 0; i < in.copies; ++i) {
    in.q.emplace_back(q_dtype, std::initializer_list<std::int64_t>{q_rows, c.num_heads, c.head_dim}, options.huge_pages);
    in.k.push_back(pool());
    in.v.push_back(pool());
    in.out.emplace_back(out_dtype, std::initializer_list<std::int64_t>{q_rows, c.num_heads, c.head_dim}, options.huge_pages);
    if (i == 0) {
      fill_random(in.q[0], 7);
      fill_random(in.k[0], 8);
      fill_random(in.v[0], 9);
    } else {
      std::memcpy(in.q[i].bytes.data(), in.q[0].bytes.data(), in.q[0].bytes.size());
      std::memcpy(in.k[i].bytes.data(), in.k[0].bytes.data(), in.k[0].bytes.size());
      std::memcpy(in.v[i].bytes.data(), in.v[0].bytes.data(), in.v[0].bytes.size());
    }
  }
  std::vector<std::int32_t> order(static_cast<std::size_t>(pages));
  for (std::int64_t i = 0; i < pages; ++i) order[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(10));
  std::memcpy(in.table.bytes.data(), order.data(), order.size() * sizeof(std::int32_t));
  for (std::int64_t b = 0; b < c.batch; ++b) reinterpret_cast<std::int32_t*>(in.lengths.bytes.data())[b] = static_cast<std::int32_t>(c.kv_len);
  return in;
}

void run_paged_decode(Row& row, const Case& c, const Target& target, const Options& options, ProbeBeside beside) {
  const PagedDecodeProblem p = paged_decode_problem(c);
  const PagedDecodePlan plan = plan_paged_decode(p, target);
  fill_from_plan(row, plan);
  PagedInputs in = paged_inputs(c, p.cache, c.batch, p.q_dtype, p.out_dtype, target, options);
  std::vector<std::uint8_t> scratch(plan.evidence.workspace_bytes);
  const Workspace ws{scratch.empty() ? nullptr : scratch.data(), scratch.size(), DeviceKind::kCpu};
  // An e4m3 pool's scales, as run_decode's (1 for other pools).
  const KvScales scales = is_fp8(c.dtype) ? KvScales{0.5f, 0.25f} : KvScales{};
  time_repetitions(row, options, in.copies, [&](int i) {
    PagedDecodeTensors t{in.q[i].view, {in.k[i].view, in.v[i].view, in.table.view, in.lengths.view}, in.out[i].view, {}};
    t.kv_scales = scales;
    cpu::paged_decode(plan, t, ws);
  }, beside);
}

// Extend (a chunk of chunked prefill): every sequence's last q_len keys are new query rows against
// its whole cache, in a pool dealt as paged decode's. Compute-bound from chunks of a few dozen rows.
void run_extend(Row& row, const Case& c, const Target& target, const Options& options) {
  const ExtendProblem p = extend_problem(c);
  const ExtendPlan plan = plan_extend(p, target);
  fill_from_plan(row, plan);
  PagedInputs in = paged_inputs(c, p.cache, c.batch * c.q_len, p.q_dtype, p.out_dtype, target, options);
  Buffer offsets(DType::kI32, {c.batch + 1});
  auto* cu = reinterpret_cast<std::int32_t*>(offsets.bytes.data());
  for (std::int64_t b = 0; b <= c.batch; ++b) cu[b] = static_cast<std::int32_t>(b * c.q_len);
  std::vector<std::uint8_t> scratch(plan.evidence.workspace_bytes);
  const Workspace ws{scratch.empty() ? nullptr : scratch.data(), scratch.size(), DeviceKind::kCpu};
  Buffer sinks(DType::kF32, {c.num_heads});
  const TensorView sink_logits = sinks_view(options, sinks);
  const KvScales scales = is_fp8(c.dtype) ? KvScales{0.5f, 0.25f} : KvScales{};  // as run_decode's
  time_repetitions(row, options, in.copies, [&](int i) {
    ExtendTensors t{in.q[i].view, offsets.view, {in.k[i].view, in.v[i].view, in.table.view, in.lengths.view},
                    in.out[i].view, {}, sink_logits};
    t.kv_scales = scales;
    cpu::extend(plan, t, ws);
  });
}

void run_prefill(Row& row, const Case& c, const Target& target, const Options& options) {
  const PrefillProblem p = prefill_problem(c);
  const PrefillPlan plan = options.family ? plan_prefill(p, target, *options.family) : plan_prefill(p, target);
  fill_from_plan(row, plan);

  const std::int64_t element = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::int64_t copy_bytes = (2 * c.batch * c.num_heads * c.q_len + 2 * c.batch * c.kv_heads * c.kv_len) * c.head_dim * element;
  const int copies = copies_for(copy_bytes, target.cache_bytes);
  std::vector<Buffer> q, k, v, out;
  for (int i = 0; i < copies; ++i) {
    q.emplace_back(c.dtype, std::initializer_list<std::int64_t>{c.batch, c.num_heads, c.q_len, c.head_dim}, options.huge_pages);
    k.emplace_back(c.dtype, std::initializer_list<std::int64_t>{c.batch, c.kv_heads, c.kv_len, c.head_dim}, options.huge_pages);
    v.emplace_back(c.dtype, std::initializer_list<std::int64_t>{c.batch, c.kv_heads, c.kv_len, c.head_dim}, options.huge_pages);
    out.emplace_back(p.out_dtype, std::initializer_list<std::int64_t>{c.batch, c.num_heads, c.q_len, c.head_dim}, options.huge_pages);
    if (i == 0) {
      fill_random(q[0], 4);
      fill_random(k[0], 5);
      fill_random(v[0], 6);
    } else {
      std::memcpy(q[i].bytes.data(), q[0].bytes.data(), q[0].bytes.size());
      std::memcpy(k[i].bytes.data(), k[0].bytes.data(), k[0].bytes.size());
      std::memcpy(v[i].bytes.data(), v[0].bytes.data(), v[0].bytes.size());
    }
  }
  std::vector<std::uint8_t> scratch(plan.evidence.workspace_bytes);
  const Workspace ws{scratch.empty() ? nullptr : scratch.data(), scratch.size(), DeviceKind::kCpu};
  Buffer sinks(DType::kF32, {c.num_heads});
  const TensorView sink_logits = sinks_view(options, sinks);
  time_repetitions(row, options, copies, [&](int i) {
    PrefillTensors t;
    t.q = q[i].view;
    t.k = k[i].view;
    t.v = v[i].view;
    t.out = out[i].view;
    t.sinks = sink_logits;
    cpu::prefill(plan, t, ws);
  });
}

Row ceiling_row(const std::string& name, double value) {
  Row row;
  row.backend = "cpu";
  row.impl = name;
  row.timing = "wall";
  row.ceiling_name = name;
  row.ceiling_value = value;
  row.pct_of_ceiling = 100.0;
  return row;
}

}  // namespace

std::vector<Row> run_cpu(const std::vector<Case>& cases, const Options& options) {
  if (!(options.repetitions >= 1 && options.warmup >= 0))
    fail("bench::run_cpu", "repetitions must be >= 1 and warmup >= 0", "pass --reps N with N >= 1");
  const Target target = cpu_target(options.threads);
  if (options.progress) options.progress("measuring the read-bandwidth and FMA ceilings");
  const ReadCeiling read = cpu_read_ceiling(options);
  const double read_ceiling = read.value;
  const Ceiling fma = cpu_fma_ceiling(options);
  // The probe that gave the ceiling, kept for the decode rows (allocated and touched before the
  // pause below, and held to the end, so no free lands inside a timed call).
  std::optional<ReadProbe> probe;
  if (std::any_of(cases.begin(), cases.end(), [](const Case& c) { return c.op == "decode" || c.op == "paged-decode"; }))
    probe.emplace(read.slice, read.threads, read.huge_pages);
  const ProbeBeside beside{probe ? &*probe : nullptr, read.pattern};
  // The read probe has just freed gigabytes. Where a VM hands freed memory back to its host
  // (virtio-balloon free-page reporting, about 2 s after the free), the guest kernel's work to do so
  // took a vCPU from the first cases' timed calls (a bf16 2k prefill read 53-74 ms instead of 35 in
  // one or two of three repetitions, in most processes); a pause here removed it
  // (docs/perf-notes.md, CPU round 18).
  if (options.progress) options.progress("letting the OS settle after the probe's free");
  std::this_thread::sleep_for(kSettleAfterProbe);
  std::vector<Row> rows = {ceiling_row("read-bandwidth", read_ceiling), ceiling_row(fma.name, fma.value)};
  rows[0].achieved_bytes_per_s = read_ceiling;
  rows[1].achieved_flops_per_s = fma.value;

  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (options.progress) {
      options.progress("[" + std::to_string(i + 1) + "/" + std::to_string(cases.size()) + "] " + describe(c));
    }
    Row row;
    row.c = c;
    row.backend = "cpu";
    row.impl = "attnkit";
    row.timing = "wall";
    try {
      if (!(c.op == "decode" || c.op == "paged-decode" || c.op == "extend" || c.op == "prefill"))
        fail("bench::run_cpu", "unknown op '" + c.op + "'",
             "use op \"decode\", \"paged-decode\", \"extend\" or \"prefill\"");
      if (c.op == "decode") {
        run_decode(row, c, target, options, beside);
      } else if (c.op == "paged-decode") {
        run_paged_decode(row, c, target, options, beside);
      } else if (c.op == "extend") {
        run_extend(row, c, target, options);
      } else {
        run_prefill(row, c, target, options);
      }
    } catch (const Error& e) {
      // A case that cannot run (family not implemented, plan rejected) is reported, not timed.
      row.skipped = e.what();
      rows.push_back(row);
      continue;
    }
    row.achieved_bytes_per_s = row.bytes / row.median_s;
    row.achieved_flops_per_s = row.flops / row.median_s;
    // Decode is bound by reading the cache, prefill by arithmetic, extend by whichever the plan's
    // bytes and FLOPs say: each is judged by its own limit.
    const bool compute_bound =
        c.op == "prefill" || (c.op == "extend" && row.flops / fma.value > row.bytes / read_ceiling);
    if (!compute_bound) {
      row.ceiling_name = "read-bandwidth";
      row.ceiling_value = read_ceiling;
      row.pct_of_ceiling = 100.0 * row.achieved_bytes_per_s / read_ceiling;
    } else {
      row.ceiling_name = fma.name;
      row.ceiling_value = fma.value;
      row.pct_of_ceiling = 100.0 * row.achieved_flops_per_s / fma.value;
    }
    row.predicted_s = std::max(row.bytes / read_ceiling, row.flops / fma.value);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace attnkit::bench
