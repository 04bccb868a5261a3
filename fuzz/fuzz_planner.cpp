// libFuzzer target: the planner on arbitrary problem descriptors and targets (huge, zero,
// negative and overflowing sizes, non-finite options, out-of-range dtypes and families): decode,
// prefill, the seed planners, and the serving plans (paged decode with its lengths hint, extend,
// context-parallel decode over 0..9 targets).
// Every call either returns a plan the kernels can run (checked below) or throws an Error with a
// Fix; anything else (another exception, a crash, a sanitizer report) is a finding.
#include <algorithm>
#include <cmath>
#include <string>

#include "attnkit/context_parallel.hpp"
#include "attnkit/paged.hpp"
#include "fuzz_support.hpp"

namespace attnkit::fuzz {
namespace {

Target target_value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return cpu_target(in.ConsumeIntegralInRange<int>(-4, 300));
    case 1: return known_target("h200");
    case 2: return known_target("h100");
    default: break;
  }
  // A hand-built target, as a test or a caller might fill one: zero, negative and oversized
  // counts (strict mode: any value at all).
  const bool strict = strict_mode();
  auto count = [&](int plausible_max) {
    return strict ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(-2, plausible_max);
  };
  auto bytes = [&](std::int64_t plausible_max) {
    return strict ? size_value(in, plausible_max) : in.ConsumeIntegralInRange<std::int64_t>(-1, plausible_max);
  };
  Target t = known_target(in.ConsumeBool() ? "h200" : "cpu");
  t.backend = in.ConsumeBool() ? Backend::kCpu : Backend::kCuda;
  t.threads = count(4096);
  t.cache_bytes = bytes(std::int64_t{1} << 34);
  t.sm_count = count(4096);
  t.cc_major = in.ConsumeIntegralInRange<int>(-1, 12);
  t.cc_minor = in.ConsumeIntegralInRange<int>(-1, 9);
  t.shared_bytes_per_block = bytes(std::int64_t{1} << 24);
  t.shared_bytes_per_sm = bytes(std::int64_t{1} << 24);
  t.max_threads_per_sm = count(1 << 16);
  t.peak_read_bytes_per_s = strict ? in.ConsumeFloatingPoint<double>() : in.ConsumeFloatingPointInRange<double>(0, 1e14);
  t.peak_matmul_flops_per_s = strict ? in.ConsumeFloatingPoint<double>() : in.ConsumeFloatingPointInRange<double>(0, 1e17);
  return t;
}

// A plan that leaves the planner must be one a kernel can run.
void check_partition(const WorkPartition& p, const char* what) {
  if (p.tile_size < 1 || p.sequence_splits < 1 || p.rows_per_block < 1) {
    finding(std::string(what) + ": a plan with tile_size, sequence_splits or rows_per_block 0");
  }
}

void check_evidence(const Evidence& e, const char* what) {
  if (!(e.output_tolerance_abs > 0) || !(e.rel_l2_tolerance > 0) || !std::isfinite(e.predicted_seconds) ||
      e.predicted_seconds < 0) {
    finding(std::string(what) + ": evidence with a non-positive tolerance or a bad predicted time");
  }
}

void fuzz_decode(FuzzedDataProvider& in) {
  DecodeProblem p;
  p.batch = size_value(in, 8);
  p.num_heads = size_value(in, 64);
  p.kv_heads = size_value(in, 16);
  p.head_dim = size_value(in, 300);
  p.max_seq = size_value(in, 1 << 20);
  p.kv_len = in.ConsumeBool() ? p.max_seq : size_value(in, 1 << 20);
  p.kv_dtype = dtype_value(in);
  p.q_dtype = dtype_value(in);
  p.out_dtype = dtype_value(in);
  p.options = options_value(in);
  const Target target = target_value(in);
  const bool request = in.ConsumeBool();
  const auto family = static_cast<KernelFamily>(in.ConsumeIntegralInRange<int>(0, 4));
  const DecodePlan plan = request ? plan_decode(p, target, family) : plan_decode(p, target);
  check_partition(plan.partition, "plan_decode");
  check_evidence(plan.evidence, "plan_decode");
  // The splits must cover every key a query can see: the window, or the whole planned length.
  const std::int64_t visible = p.options.window > 0 ? std::min(p.kv_len, p.options.window) : p.kv_len;
  if (plan.partition.family == KernelFamily::kSplitKvDecode &&
      std::uint64_t{plan.partition.sequence_splits} * plan.partition.keys_per_split <
          static_cast<std::uint64_t>(visible)) {
    finding("plan_decode: splits * keys_per_split does not cover the visible keys: " + to_json(plan));
  }
  (void)to_table(plan);
  (void)to_json(plan);
}

void fuzz_prefill(FuzzedDataProvider& in) {
  PrefillProblem p;
  p.batch = size_value(in, 8);
  p.num_heads = size_value(in, 64);
  p.kv_heads = size_value(in, 16);
  p.head_dim = size_value(in, 300);
  p.q_len = size_value(in, 1 << 20);
  p.kv_len = in.ConsumeBool() ? p.q_len : size_value(in, 1 << 20);
  p.causal = in.ConsumeBool();
  p.dtype = dtype_value(in);
  p.out_dtype = dtype_value(in);
  p.options = options_value(in);
  const Target target = target_value(in);
  const bool request = in.ConsumeBool();
  const auto family = static_cast<KernelFamily>(in.ConsumeIntegralInRange<int>(0, 4));
  const PrefillPlan plan = request ? plan_prefill(p, target, family) : plan_prefill(p, target);
  check_partition(plan.partition, "plan_prefill");
  check_evidence(plan.evidence, "plan_prefill");
  (void)to_table(plan);
  (void)to_json(plan);
}

void fuzz_seed_planners(FuzzedDataProvider& in) {
  const auto seq_len = in.ConsumeBool() ? in.ConsumeIntegral<std::uint32_t>() : in.ConsumeIntegralInRange<std::uint32_t>(0, 5000);
  const auto head_dim = in.ConsumeBool() ? in.ConsumeIntegral<std::uint32_t>() : in.ConsumeIntegralInRange<std::uint32_t>(0, 300);
  const auto tile = in.ConsumeBool() ? in.ConsumeIntegral<std::uint32_t>() : in.ConsumeIntegralInRange<std::uint32_t>(0, 300);
  const FlashAttentionWorkPlan plan =
      in.ConsumeBool() ? plan_flash_attention_scalar(seq_len, head_dim) : plan_flash_attention_tiled(seq_len, head_dim, tile);
  check_partition(plan.partition, "plan_flash_attention");
  (void)to_table(plan);
  (void)to_json(plan);
}

PagedCacheSpec cache_value(FuzzedDataProvider& in) {
  PagedCacheSpec c;
  c.num_pages = size_value(in, 4096);
  c.page_size = size_value(in, 128);
  c.max_pages_per_seq = size_value(in, 4096);
  c.layout = in.ConsumeBool() ? PageLayout::kHND : PageLayout::kNHD;
  return c;
}

// A paged plan must state the workspace it uses and cover at least the lengths it was asked for.
template <class Plan>
void check_bounds(const Plan& plan, const char* what) {
  if (plan.bounds.workspace_bytes != plan.evidence.workspace_bytes || plan.bounds.max_kv_len < plan.problem.kv_len ||
      plan.bounds.batch != plan.problem.batch) {
    finding(std::string(what) + ": bounds disagree with the problem or the evidence: " + to_json(plan));
  }
}

void fuzz_serving(FuzzedDataProvider& in) {
  const int which = in.ConsumeIntegralInRange<int>(0, 2);
  const std::int64_t batch = size_value(in, 8), heads = size_value(in, 64), kv_heads = size_value(in, 16);
  const std::int64_t head_dim = size_value(in, 300), kv_len = size_value(in, 1 << 20);
  const DType kv = dtype_value(in), q = dtype_value(in), out = dtype_value(in);
  const AttentionOptions options = options_value(in);
  if (which == 0) {
    PagedDecodeProblem p;
    p.batch = batch, p.num_heads = heads, p.kv_heads = kv_heads, p.head_dim = head_dim, p.kv_len = kv_len;
    p.cache = cache_value(in);
    p.kv_dtype = kv, p.q_dtype = q, p.out_dtype = out, p.options = options;
    if (in.ConsumeBool()) p.expected_total_keys = size_value(in, 1 << 24);
    const PagedDecodePlan plan = plan_paged_decode(p, target_value(in));
    check_partition(plan.partition, "plan_paged_decode");
    check_evidence(plan.evidence, "plan_paged_decode");
    check_bounds(plan, "plan_paged_decode");
    (void)to_table(plan);
    (void)to_json(plan);
  } else if (which == 1) {
    ExtendProblem e;
    e.batch = batch, e.num_heads = heads, e.kv_heads = kv_heads, e.head_dim = head_dim, e.kv_len = kv_len;
    e.cache = cache_value(in);
    e.max_q_len = size_value(in, in.ConsumeBool() ? 64 : 4096);  // short (decode kernel) and long (Hopper) chunks
    if (in.ConsumeBool()) e.max_total_q = size_value(in, 8192);
    e.kv_dtype = kv, e.q_dtype = q, e.out_dtype = out, e.options = options;
    const bool request = in.ConsumeBool();
    const auto family = static_cast<KernelFamily>(in.ConsumeIntegralInRange<int>(0, 4));
    const Target target = target_value(in);
    const ExtendPlan plan = request ? plan_extend(e, target, family) : plan_extend(e, target);
    check_partition(plan.partition, "plan_extend");
    check_evidence(plan.evidence, "plan_extend");
    check_bounds(plan, "plan_extend");
    (void)to_table(plan);
    (void)to_json(plan);
  } else {
    ShardedDecodeProblem sp;
    DecodeProblem& d = sp.decode;
    d.batch = batch, d.num_heads = heads, d.kv_heads = kv_heads, d.head_dim = head_dim, d.kv_len = kv_len;
    d.max_seq = in.ConsumeBool() ? kv_len : size_value(in, 1 << 21);
    d.kv_dtype = kv, d.q_dtype = q, d.out_dtype = out, d.options = options;
    std::vector<Target> targets(static_cast<std::size_t>(in.ConsumeIntegralInRange<int>(0, 9)));
    for (Target& t : targets) t = target_value(in);
    const ShardedDecodePlan plan = plan_sharded_decode(sp, targets);
    // The shards tile [0, max_seq) in order, one per target.
    std::int64_t next = 0;
    for (const ShardSpec& s : plan.shards) {
      if (s.begin != next || s.capacity < 1) finding("plan_sharded_decode: shards do not tile the cache: " + to_json(plan));
      next = s.end();
    }
    if (next != d.max_seq || plan.shard_count() != static_cast<int>(targets.size())) {
      finding("plan_sharded_decode: shards do not cover max_seq with one per target: " + to_json(plan));
    }
    (void)to_table(plan);
  }
}

}  // namespace
}  // namespace attnkit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnkit::fuzz;
  FuzzedDataProvider in(data, size);
  try {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: fuzz_decode(in); break;
      case 1: fuzz_prefill(in); break;
      case 2: fuzz_serving(in); break;
      default: fuzz_seed_planners(in); break;
    }
  } catch (const attnkit::Error& e) {
    expect_fix(e);
  }
  return 0;
}
