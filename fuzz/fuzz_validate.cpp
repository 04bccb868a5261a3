// libFuzzer target: argument validation at every CPU entry point on arbitrary tensor views
// (ranks, shapes, strides, dtypes, devices, null and offset pointers, index tensor contents,
// workspace sizes, RoPE tables). The rule: validation rejects with an Error carrying a Fix and
// leaves every buffer byte-for-byte unchanged, or it accepts and the kernel then runs inside the
// memory the views describe (AddressSanitizer watches every buffer's exact extent).
//
// Views the harness can back with memory (span up to kMaxBytes) get a buffer of exactly their
// span; others get a non-null pointer to nothing and only the validator sees them.
// ATTNKIT_FUZZ_STRICT=1 also generates sub-element misaligned pointers and dtype values outside
// the enum; see docs/errors.md ("Fuzzing") for why they are off by default.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attnkit/paged.hpp"
#include "fuzz_support.hpp"

namespace attnkit::fuzz {
namespace {

constexpr std::int64_t kMaxBytes = std::int64_t{1} << 20;

// Owns every buffer of one input; remembers their bytes to prove a rejection wrote nothing.
class Arena {
 public:
  std::uint8_t* allocate(std::size_t bytes) {
    // Exactly `bytes` (plus nothing), so ASan flags the first byte past a view's span.
    buffers_.push_back(std::make_unique<std::vector<std::uint8_t>>(bytes));
    return buffers_.back()->data();
  }
  void snapshot() {
    saved_.clear();
    for (const auto& b : buffers_) saved_.push_back(*b);
  }
  bool unchanged() const {
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      if (*buffers_[i] != saved_[i]) return false;
    }
    return true;
  }
  bool all_backed = true;

 private:
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> buffers_;
  std::vector<std::vector<std::uint8_t>> saved_;
};

// Span in elements of a view whose shape and strides are sane; -1 when the harness cannot back it.
std::int64_t backable_span(const TensorView& t) {
  if (t.rank < 0 || t.rank > TensorView::kMaxRank) return -1;
  std::int64_t span = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0) return t.shape[i] == 0 ? 0 : -1;
    if (t.strides[i] < 0 || t.strides[i] > kMaxBytes || t.shape[i] > kMaxBytes) return -1;
    span += t.strides[i] * (t.shape[i] - 1);
    if (span > kMaxBytes) return -1;
  }
  return span;
}

struct Want {
  std::vector<std::int64_t> shape;
  DType dtype;
  bool index = false;  // i32 contents chosen by the fuzzer (lengths, positions, offsets)
  std::int64_t index_max = 0;  // typical upper value of an index element
};

// One tensor argument: usually what the call expects, sometimes each property perturbed.
TensorView make_view(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng, const Want& want) {
  TensorView t;
  t.rank = static_cast<int>(want.shape.size());
  if (in.ConsumeProbability<float>() < 0.05f) t.rank = in.ConsumeIntegralInRange<int>(-1, TensorView::kMaxRank);
  for (int i = 0; i < TensorView::kMaxRank; ++i) {
    t.shape[i] = i < static_cast<int>(want.shape.size()) ? want.shape[i] : 1;
    if (in.ConsumeProbability<float>() < 0.03f) t.shape[i] = size_value(in, 8);
  }
  t.dtype = want.dtype;
  if (in.ConsumeProbability<float>() < 0.05f) {
    t.dtype = dtype_value(in);
  }
  if (in.ConsumeProbability<float>() < 0.03f) t.device = DeviceKind::kCuda;
  // Strides: contiguous, padded rows, or arbitrary.
  const int layout = in.ConsumeIntegralInRange<int>(0, 9);
  std::int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    if (i >= TensorView::kMaxRank) continue;
    t.strides[i] = stride;
    const std::int64_t pad = layout == 8 && i < t.rank - 1 ? in.ConsumeIntegralInRange<std::int64_t>(0, 5) : 0;
    t.strides[i] += pad;
    if (layout == 9 && in.ConsumeBool()) {
      t.strides[i] = size_value(in, 100);
      if (in.ConsumeBool() && t.strides[i] != std::numeric_limits<std::int64_t>::min()) t.strides[i] = -t.strides[i];
    }
    if (__builtin_mul_overflow(t.strides[i], std::max<std::int64_t>(t.shape[i], 1), &stride) || stride > kMaxBytes ||
        stride <= 0) {
      stride = 1;
    }
  }
  // Data: null, a buffer of exactly the span (offset by whole or, strict, partial elements), or
  // a non-null pointer the harness cannot back.
  const int where = in.ConsumeIntegralInRange<int>(0, 19);
  if (where == 0) return t;  // null
  const std::int64_t span = backable_span(t);
  const std::size_t esize = dtype_size(t.dtype);
  // Index tensors are read by the validator itself (host lengths, positions, offsets), so one the
  // harness cannot back is passed as null rather than as a pointer to nothing.
  if (want.index && span < 0) return t;
  if (span < 0 || (where == 1 && !want.index)) {
    static std::uint64_t nowhere[1];
    t.data = nowhere;  // non-null, never dereferenced: the kernel is not run
    arena.all_backed = false;
    return t;
  }
  // (A partial-element offset needs elements of 2+ bytes: e4m3 pools have 1.)
  const std::size_t offset = where == 2 && strict_mode() && esize > 1 ? in.ConsumeIntegralInRange<std::size_t>(1, esize - 1)
                                                         : esize * in.ConsumeIntegralInRange<std::size_t>(0, 3);
  std::uint8_t* base = arena.allocate(offset + static_cast<std::size_t>(span) * esize);
  t.data = base + offset;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < span; ++i) {
    if (want.index) {
      const std::int32_t v = in.ConsumeProbability<float>() < 0.1f
                                 ? in.ConsumeIntegral<std::int32_t>()
                                 : in.ConsumeIntegralInRange<std::int32_t>(
                                       0, static_cast<std::int32_t>(std::clamp<std::int64_t>(want.index_max, 0, INT32_MAX)));
      std::memcpy(t.as<std::uint8_t>() + i * esize, &v, std::min<std::size_t>(esize, 4));
    } else if (is_storage_dtype(t.dtype) && static_cast<int>(t.dtype) < 4) {
      // Byte copies: the pointer may be misaligned for the element type (strict mode).
      const float x = normal(rng);
      std::uint8_t* dst = t.as<std::uint8_t>() + i * static_cast<std::int64_t>(esize);
      if (t.dtype == DType::kF32) {
        std::memcpy(dst, &x, 4);
      } else {
        const std::uint16_t bits = t.dtype == DType::kF16 ? float_to_f16_bits(x) : float_to_bf16_bits(x);
        std::memcpy(dst, &bits, 2);
      }
    }
  }
  return t;
}

TensorView maybe_absent(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng, const Want& want) {
  if (in.ConsumeProbability<float>() < 0.2f) return {};
  return make_view(in, arena, rng, want);
}

std::int64_t small(FuzzedDataProvider& in, std::int64_t lo, std::int64_t hi) {
  return in.ConsumeProbability<float>() < 0.05f ? size_value(in) : in.ConsumeIntegralInRange<std::int64_t>(lo, hi);
}
// num_heads as a multiple of kv_heads (or, when that overflows, the fuzzer's raw value).
std::int64_t heads_for(FuzzedDataProvider& in, std::int64_t kv_heads) {
  std::int64_t heads = 0;
  const std::int64_t group = small(in, 1, 3);
  return __builtin_mul_overflow(kv_heads, group, &heads) ? group : heads;
}
std::int64_t head_dim(FuzzedDataProvider& in) {
  return in.ConsumeProbability<float>() < 0.05f ? size_value(in, 300) : 8 * in.ConsumeIntegralInRange<std::int64_t>(1, 8);
}
DType storage(FuzzedDataProvider& in) {
  static constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  return in.PickValueInArray(kTypes);
}

// Workspace: exact, short, absent, on the wrong device, or generous.
Workspace workspace_for(FuzzedDataProvider& in, Arena& arena, std::uint64_t needed) {
  const int kind = in.ConsumeIntegralInRange<int>(0, 5);
  if (kind == 0 || needed > static_cast<std::uint64_t>(kMaxBytes)) return {};
  std::size_t bytes = static_cast<std::size_t>(needed);
  if (kind == 1 && bytes > 0) bytes -= in.ConsumeIntegralInRange<std::size_t>(1, bytes);
  if (kind == 2) bytes += in.ConsumeIntegralInRange<std::size_t>(0, 4096);
  Workspace ws{arena.allocate(bytes), bytes, DeviceKind::kCpu};
  if (kind == 3) ws.device = DeviceKind::kCuda;
  return ws;
}

Target cpu_threads(FuzzedDataProvider& in) { return cpu_target(in.ConsumeIntegralInRange<int>(1, 2)); }

// Outcome counts, printed at exit with ATTNKIT_FUZZ_STATS=1 (to see that kernels are reached).
struct Stats {
  long rejected = 0, accepted_unbacked = 0, ran = 0, rejected_at_run = 0;
  ~Stats() {
    if (const char* s = std::getenv("ATTNKIT_FUZZ_STATS"); s != nullptr && *s == '1') {
      std::fprintf(stderr, "fuzz_validate: rejected %ld, accepted but not backed %ld, kernels run %ld, rejected by the entry point %ld\n",
                   rejected, accepted_unbacked, ran, rejected_at_run);
    }
  }
};
Stats stats;

// Runs validation, then (when it accepts and every view is backed) the entry point itself.
template <class Validate, class Run>
void check_call(Arena& arena, Validate validate, Run run) {
  arena.snapshot();
  try {
    validate();
  } catch (const Error& e) {
    expect_fix(e);
    if (!arena.unchanged()) finding("validation wrote to a buffer");
    ++stats.rejected;
    return;
  }
  if (!arena.all_backed) {
    ++stats.accepted_unbacked;
    return;
  }
  try {
    run();
    ++stats.ran;
  } catch (const Error& e) {
    // The entry point checks more than the validator (plan backend, workspace): still no writes.
    expect_fix(e);
    ++stats.rejected_at_run;
    if (!arena.unchanged()) finding(std::string("a rejected call wrote to a buffer: ") + e.what());
  }
}

void fuzz_decode(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  DecodeProblem p;
  p.batch = small(in, 1, 3);
  p.kv_heads = small(in, 1, 3);
  p.num_heads = heads_for(in, p.kv_heads);
  p.head_dim = head_dim(in);
  p.max_seq = small(in, 1, 40);
  p.kv_len = in.ConsumeBool() ? p.max_seq : small(in, 1, 40);
  p.kv_dtype = storage(in);
  p.q_dtype = in.ConsumeBool() ? p.kv_dtype : storage(in);
  p.out_dtype = in.ConsumeBool() ? p.kv_dtype : storage(in);
  p.options = options_value(in);
  const bool scalar = in.ConsumeBool();
  DecodePlan plan;
  try {
    plan = scalar ? plan_decode(p, cpu_threads(in), KernelFamily::kScalarOnline) : plan_decode(p, cpu_threads(in));
  } catch (const Error& e) {
    expect_fix(e);
    return;
  }
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  DecodeTensors t;
  t.q = make_view(in, arena, rng, {{B, H, D}, p.q_dtype});
  t.k_cache = make_view(in, arena, rng, {{B, G, S, D}, p.kv_dtype});
  t.v_cache = make_view(in, arena, rng, {{B, G, S, D}, p.kv_dtype});
  t.lengths = make_view(in, arena, rng, {{B}, DType::kI32, true, p.kv_len});
  t.out = make_view(in, arena, rng, {{B, H, D}, p.out_dtype});
  t.lse = maybe_absent(in, arena, rng, {{B, H}, DType::kF32});
  const Workspace ws = workspace_for(in, arena, plan.evidence.workspace_bytes);
  t.key_starts = maybe_absent(in, arena, rng, {{B}, DType::kI32, true, p.kv_len});  // left padding
  check_call(arena, [&] { validate_decode(plan.problem, t, DeviceKind::kCpu); }, [&] { cpu::decode(plan, t, ws); });
}

void fuzz_prefill(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  PrefillProblem p;
  p.batch = small(in, 1, 3);
  p.kv_heads = small(in, 1, 3);
  p.num_heads = heads_for(in, p.kv_heads);
  p.head_dim = head_dim(in);
  p.q_len = small(in, 1, 24);
  p.kv_len = in.ConsumeBool() ? p.q_len : small(in, 1, 40);
  p.causal = in.ConsumeBool();
  p.dtype = storage(in);
  p.out_dtype = in.ConsumeBool() ? p.dtype : storage(in);
  p.options = options_value(in);
  const bool scalar = in.ConsumeBool();
  PrefillPlan plan;
  try {
    plan = scalar ? plan_prefill(p, cpu_threads(in), KernelFamily::kScalarOnline) : plan_prefill(p, cpu_threads(in));
  } catch (const Error& e) {
    expect_fix(e);
    return;
  }
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim;
  PrefillTensors t;
  if (in.ConsumeBool()) {
    t.q = make_view(in, arena, rng, {{B, H, p.q_len, D}, p.dtype});
    t.k = make_view(in, arena, rng, {{B, G, p.kv_len, D}, p.dtype});
    t.v = make_view(in, arena, rng, {{B, G, p.kv_len, D}, p.dtype});
    t.out = make_view(in, arena, rng, {{B, H, p.q_len, D}, p.out_dtype});
    t.lse = maybe_absent(in, arena, rng, {{B, H, p.q_len}, DType::kF32});
  } else {
    // Ragged: packed rows whose totals the fuzzer picks, offsets the fuzzer fills.
    const std::int64_t total_q = small(in, 0, B * p.q_len), total_k = small(in, 0, B * p.kv_len);
    t.q = make_view(in, arena, rng, {{1, H, total_q, D}, p.dtype});
    t.k = make_view(in, arena, rng, {{1, G, total_k, D}, p.dtype});
    t.v = make_view(in, arena, rng, {{1, G, total_k, D}, p.dtype});
    t.out = make_view(in, arena, rng, {{1, H, total_q, D}, p.out_dtype});
    t.lse = maybe_absent(in, arena, rng, {{1, H, total_q}, DType::kF32});
    t.cu_seqlens_q = maybe_absent(in, arena, rng, {{B + 1}, DType::kI32, true, total_q});
    t.cu_seqlens_k = maybe_absent(in, arena, rng, {{B + 1}, DType::kI32, true, total_k});
  }
  // e4m3 scales: 1 unless e4m3 (the CPU plans no e4m3, so anything else must be rejected).
  if (in.ConsumeBool()) t.scales = {float_value(in), float_value(in), float_value(in)};
  const Workspace ws = workspace_for(in, arena, plan.evidence.workspace_bytes);
  check_call(arena, [&] { validate_prefill(plan.problem, t, DeviceKind::kCpu); }, [&] { cpu::prefill(plan, t, ws); });
}

void fuzz_append(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  const std::int64_t B = small(in, 1, 3), G = small(in, 1, 3), S = small(in, 1, 40), D = head_dim(in);
  const DType dtype = storage(in);
  AppendTensors t;
  t.k_new = maybe_absent(in, arena, rng, {{B, G, D}, dtype});
  t.v_new = maybe_absent(in, arena, rng, {{B, G, D}, dtype});
  t.k_cache = maybe_absent(in, arena, rng, {{B, G, S, D}, dtype});
  t.v_cache = maybe_absent(in, arena, rng, {{B, G, S, D}, dtype});
  t.positions = make_view(in, arena, rng, {{B}, DType::kI32, true, S});
  check_call(arena, [&] { validate_append(t, DeviceKind::kCpu); }, [&] { cpu::append_kv(t); });
}

// Caller tables honest about their size (a table shorter than table_positions is a caller's lie
// no validator can see); the fuzzer picks the size and the values.
RopeSpec rope_value(FuzzedDataProvider& in, Arena& arena, std::int64_t head_dim, std::vector<float>& cos_sin) {
  RopeSpec r;
  r.style = in.ConsumeBool() ? RopeStyle::kHalf : RopeStyle::kInterleaved;
  r.theta = in.ConsumeBool() ? 10000.0f : float_value(in);
  const int tables = in.ConsumeIntegralInRange<int>(0, 3);
  if (tables > 0 && head_dim > 0 && head_dim <= 512) {
    r.table_positions = in.ConsumeIntegralInRange<std::int64_t>(0, 48);
    cos_sin.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, r.table_positions * head_dim)), 0.5f);
    r.cos_table = cos_sin.data();
    r.sin_table = cos_sin.data() + cos_sin.size() / 2;
    if (tables == 2) r.sin_table = nullptr;
    if (tables == 3) r.table_positions = in.ConsumeBool() ? 0 : -1;  // tables with a bad count
  }
  (void)arena;
  return r;
}

void fuzz_rope(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  const std::int64_t B = small(in, 1, 3), H = small(in, 1, 4), D = in.ConsumeBool() ? head_dim(in) : small(in, 1, 20);
  const TensorView x = make_view(in, arena, rng, {{B, H, D}, storage(in)});
  // The tables' rows are half of the head_dim x has, which the fuzzer may have changed from D.
  std::vector<float> tables;
  const RopeSpec rope = rope_value(in, arena, x.rank == 3 ? x.shape[2] : D, tables);
  const TensorView positions = make_view(in, arena, rng, {{B}, DType::kI32, true, 50});
  check_call(arena, [&] { validate_rope(x, positions, rope, DeviceKind::kCpu); },
             [&] { cpu::apply_rope(x, positions, rope); });
}

void fuzz_merge(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  const std::int64_t S = small(in, 1, 4), R = small(in, 1, 6), D = head_dim(in);
  MergeTensors t;
  t.out_partial = make_view(in, arena, rng, {{S, R, D}, storage(in)});  // any storage dtype
  t.lse_partial = make_view(in, arena, rng, {{S, R}, DType::kF32});
  t.out = make_view(in, arena, rng, {{R, D}, storage(in)});
  t.lse = maybe_absent(in, arena, rng, {{R}, DType::kF32});
  check_call(arena, [&] { validate_merge(t, DeviceKind::kCpu); }, [&] { cpu::merge_states(t); });
}

void fuzz_fused(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  DecodeProblem p;
  p.batch = small(in, 1, 3);
  p.kv_heads = small(in, 1, 3);
  p.num_heads = heads_for(in, p.kv_heads);
  p.head_dim = head_dim(in);
  p.max_seq = small(in, 1, 40);
  p.kv_len = in.ConsumeBool() ? p.max_seq : small(in, 1, 40);
  p.kv_dtype = storage(in);
  p.q_dtype = in.ConsumeBool() ? p.kv_dtype : storage(in);
  p.out_dtype = in.ConsumeBool() ? p.kv_dtype : storage(in);
  p.options = options_value(in);
  DecodePlan plan;
  try {
    plan = in.ConsumeBool() ? plan_decode(p, cpu_threads(in), KernelFamily::kScalarOnline)
                            : plan_decode(p, cpu_threads(in));
  } catch (const Error& e) {
    expect_fix(e);
    return;
  }
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  std::vector<float> tables;
  const RopeSpec rope = rope_value(in, arena, D, tables);
  FusedDecodeTensors t;
  t.q = make_view(in, arena, rng, {{B, H, D}, p.q_dtype});
  t.k_new = make_view(in, arena, rng, {{B, G, D}, p.kv_dtype});
  t.v_new = make_view(in, arena, rng, {{B, G, D}, p.kv_dtype});
  t.k_cache = make_view(in, arena, rng, {{B, G, S, D}, p.kv_dtype});
  t.v_cache = make_view(in, arena, rng, {{B, G, S, D}, p.kv_dtype});
  t.positions = make_view(in, arena, rng, {{B}, DType::kI32, true, p.kv_len});
  t.out = make_view(in, arena, rng, {{B, H, D}, p.out_dtype});
  t.lse = maybe_absent(in, arena, rng, {{B, H}, DType::kF32});
  const Workspace ws = workspace_for(in, arena, plan.evidence.workspace_bytes);
  check_call(arena, [&] { validate_fused(plan.problem, t, rope, DeviceKind::kCpu); },
             [&] { cpu::fused_rope_append_decode(plan, t, rope, ws); });
}

// The serving layouts (paged.hpp): paged decode, extend and paged append on arbitrary pools, page
// tables, lengths, offsets and start positions (index contents mostly in range, sometimes not).
void fuzz_paged(FuzzedDataProvider& in, Arena& arena, std::mt19937& rng) {
  PagedCacheSpec c;
  c.page_size = small(in, 1, 8);
  c.max_pages_per_seq = small(in, 1, 6);
  c.num_pages = small(in, 1, 12);
  c.layout = in.ConsumeBool() ? PageLayout::kHND : PageLayout::kNHD;
  const std::int64_t B = small(in, 1, 3), G = small(in, 1, 3), H = heads_for(in, G), D = head_dim(in);
  const DType kv = storage(in), q = in.ConsumeBool() ? kv : storage(in), out = in.ConsumeBool() ? kv : storage(in);
  const std::int64_t P = c.num_pages, S = c.page_size, W = c.max_pages_per_seq;
  const std::vector<std::int64_t> pool = c.layout == PageLayout::kHND ? std::vector<std::int64_t>{P, G, S, D}
                                                                      : std::vector<std::int64_t>{P, S, G, D};
  auto index = [&](std::vector<std::int64_t> shape, std::int64_t max) {
    return make_view(in, arena, rng, {std::move(shape), DType::kI32, true, max});
  };
  // Ranges for the fuzzer's choices stay valid whatever the sizes are (small() may return 0,
  // negative or huge values, which the planner and the validation must reject).
  const std::int64_t capacity = S >= 1 && S <= 1024 && W >= 1 && W <= 1024 ? S * W : 64;
  const std::int64_t B1 = B < std::numeric_limits<std::int64_t>::max() ? B + 1 : B;  // cu_seqlens length
  const int which = in.ConsumeIntegralInRange<int>(0, 2);
  if (which == 2) {  // append
    const std::int64_t rows = small(in, 0, 6);
    PagedAppendTensors t;
    t.k_new = maybe_absent(in, arena, rng, {{rows, G, D}, kv});
    t.v_new = maybe_absent(in, arena, rng, {{rows, G, D}, kv});
    t.cu_seqlens_new = index({B1}, rows);
    t.start_positions = index({B}, capacity);
    t.k_pages = maybe_absent(in, arena, rng, {pool, kv});
    t.v_pages = maybe_absent(in, arena, rng, {pool, kv});
    t.page_table = index({B, W}, P);
    check_call(arena, [&] { validate_paged_append(c, t, DeviceKind::kCpu); }, [&] { cpu::paged_append_kv(c, t); });
    return;
  }
  const std::int64_t kv_len = small(in, 1, capacity);
  const AttentionOptions options = options_value(in);
  PagedKvCache cache;
  auto fill_cache = [&](std::int64_t max_len) {
    cache.k_pages = make_view(in, arena, rng, {pool, kv});
    cache.v_pages = make_view(in, arena, rng, {pool, kv});
    cache.page_table = index({B, W}, P);
    cache.lengths = index({B}, max_len);
  };
  if (which == 0) {
    PagedDecodeProblem p;
    p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.cache = c, p.kv_len = kv_len;
    p.kv_dtype = kv, p.q_dtype = q, p.out_dtype = out, p.options = options;
    if (in.ConsumeBool()) p.expected_total_keys = small(in, 0, std::clamp<std::int64_t>(B, 1, 8) * std::clamp<std::int64_t>(kv_len, 1, 1 << 20));
    PagedDecodePlan plan;
    try {
      plan = plan_paged_decode(p, cpu_threads(in));
    } catch (const Error& e) {
      expect_fix(e);
      return;
    }
    fill_cache(kv_len);
    const PagedDecodeTensors t{make_view(in, arena, rng, {{B, H, D}, q}), cache, make_view(in, arena, rng, {{B, H, D}, out}),
                               maybe_absent(in, arena, rng, {{B, H}, DType::kF32})};
    const Workspace ws = workspace_for(in, arena, plan.bounds.workspace_bytes);
    check_call(arena, [&] { validate_paged_decode(plan.problem, t, DeviceKind::kCpu); },
               [&] { cpu::paged_decode(plan, t, ws); });
    return;
  }
  ExtendProblem e;
  e.batch = B, e.num_heads = H, e.kv_heads = G, e.head_dim = D, e.cache = c, e.kv_len = kv_len;
  e.max_q_len = small(in, 1, 4);
  if (in.ConsumeBool()) e.max_total_q = small(in, 1, 8);
  e.kv_dtype = kv, e.q_dtype = q, e.out_dtype = out, e.options = options;
  ExtendPlan plan;
  try {
    plan = plan_extend(e, cpu_threads(in));
  } catch (const Error& err) {
    expect_fix(err);
    return;
  }
  fill_cache(kv_len);
  const std::int64_t rows = plan.bounds.max_total_q;
  ExtendTensors t;
  t.q = make_view(in, arena, rng, {{rows, H, D}, q});
  t.cu_seqlens_q = index({B1}, rows);
  t.cache = cache;
  t.out = make_view(in, arena, rng, {{rows, H, D}, out});
  t.lse = maybe_absent(in, arena, rng, {{rows, H}, DType::kF32});
  const Workspace ws = workspace_for(in, arena, plan.bounds.workspace_bytes);
  check_call(arena, [&] { validate_extend(plan.problem, t, DeviceKind::kCpu); }, [&] { cpu::extend(plan, t, ws); });
}

}  // namespace
}  // namespace attnkit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnkit::fuzz;
  FuzzedDataProvider in(data, size);
  Arena arena;
  std::mt19937 rng(in.ConsumeIntegral<std::uint32_t>());
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 6: fuzz_paged(in, arena, rng); break;
    case 0: fuzz_decode(in, arena, rng); break;
    case 1: fuzz_prefill(in, arena, rng); break;
    case 2: fuzz_append(in, arena, rng); break;
    case 3: fuzz_rope(in, arena, rng); break;
    case 4: fuzz_merge(in, arena, rng); break;
    default: fuzz_fused(in, arena, rng); break;
  }
  return 0;
}
