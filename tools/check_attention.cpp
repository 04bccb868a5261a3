// `attnkit check` for attention: decode, prefill and the fused rope+append+decode step, on every
// family the planner accepts, against the float64 golden (e4m3 prefill inputs and e4m3 decode
// caches: quantized with a per-tensor scale, golden and backend reading the same bytes and scales;
// an e4m3 cache's decode takes bf16 q and writes bf16). Inputs are fresh normal draws; outputs
// are poisoned with NaN; KV-cache slots past each sequence's length are NaN too, because an
// unwritten cache slot holds anything and a kernel must skip, not read, what it may not see.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/reference.hpp"
#include "check_support.hpp"
#include "shape_flags.hpp"

namespace attnkit::cli {
namespace {

struct DecodeShape {
  std::int64_t batch, heads, kv_heads, head_dim, kv_len, max_seq, window;
  float softcap;
  bool empty_sequence;  // last sequence has length 0: zeros and LSE -inf, never NaN
  bool sinks = false;   // attention-sink logits (gpt-oss) per head
  bool left_padded = false;  // key_starts: each sequence's first real key, padding NaN before it
};

struct PrefillShape {
  std::int64_t batch, heads, kv_heads, head_dim, q_len, kv_len;
  bool causal;
  std::int64_t window;
  float softcap;
  bool sinks = false;
};

std::string describe(const DecodeShape& s) {
  std::string text = "b" + std::to_string(s.batch) + " h" + std::to_string(s.heads) + "/" +
                     std::to_string(s.kv_heads) + " d" + std::to_string(s.head_dim) + " kv" +
                     std::to_string(s.kv_len) + "/" + std::to_string(s.max_seq);
  if (s.window > 0) text += " w" + std::to_string(s.window);
  if (s.softcap > 0) text += " cap" + std::to_string(static_cast<int>(s.softcap));
  if (s.empty_sequence) text += " +empty";
  if (s.sinks) text += " +sinks";
  if (s.left_padded) text += " +leftpad";
  return text;
}

std::string describe(const PrefillShape& s) {
  std::string text = "b" + std::to_string(s.batch) + " h" + std::to_string(s.heads) + "/" +
                     std::to_string(s.kv_heads) + " d" + std::to_string(s.head_dim) + " q" +
                     std::to_string(s.q_len) + " kv" + std::to_string(s.kv_len) + (s.causal ? " causal" : "");
  if (s.window > 0) text += " w" + std::to_string(s.window);
  if (s.softcap > 0) text += " cap" + std::to_string(static_cast<int>(s.softcap));
  if (s.sinks) text += " +sinks";
  return text;
}

std::vector<DecodeShape> decode_shapes(bool quick) {
  std::vector<DecodeShape> shapes = {
      {3, 8, 2, 128, 333, 400, 0, 0.0f, false},
      {2, 12, 4, 64, 1000, 1024, 100, 30.0f, false},
      {3, 16, 4, 128, 900, 900, 0, 0.0f, true, true},
      {3, 8, 2, 128, 333, 400, 0, 0.0f, false, false, true},
  };
  if (!quick) {
    shapes.push_back({4, 16, 16, 72, 77, 80, 0, 0.0f, true});
    shapes.push_back({2, 8, 1, 256, 517, 600, 0, 50.0f, false});
    shapes.push_back({1, 32, 8, 128, 4096, 4096, 0, 0.0f, false});
  }
  return shapes;
}

std::vector<PrefillShape> prefill_shapes(bool quick) {
  std::vector<PrefillShape> shapes = {
      {2, 8, 2, 128, 77, 130, true, 0, 0.0f},
      {1, 4, 4, 64, 100, 100, false, 0, 0.0f},
      {2, 6, 3, 64, 65, 65, true, 17, 20.0f},
      {2, 8, 2, 128, 77, 130, true, 0, 0.0f, true},
  };
  if (!quick) {
    shapes.push_back({1, 16, 2, 128, 300, 300, true, 0, 0.0f});
    shapes.push_back({1, 8, 8, 256, 33, 200, true, 0, 0.0f});
    shapes.push_back({1, 4, 2, 64, 40, 20, false, 0, 0.0f});  // more query rows than keys
  }
  return shapes;
}

// e4m3 prefill (the Hopper family only): d128 and d256, each output dtype, scales != 1.
struct Fp8PrefillCase {
  PrefillShape shape;
  DType out_dtype;
};

std::vector<Fp8PrefillCase> e4m3_prefill_cases(bool quick) {
  std::vector<Fp8PrefillCase> cases = {
      {{2, 8, 2, 128, 77, 130, true, 0, 0.0f}, DType::kBF16},
      {{1, 4, 4, 256, 100, 100, false, 0, 0.0f}, DType::kF32},
  };
  if (!quick) {
    cases.push_back({{1, 16, 2, 128, 300, 300, true, 0, 0.0f}, DType::kF16});
    cases.push_back({{2, 8, 8, 256, 33, 200, true, 17, 0.0f}, DType::kBF16});
    cases.push_back({{1, 4, 1, 128, 129, 1, false, 0, 0.0f}, DType::kBF16});  // one key
  }
  return cases;
}

// Lengths: the first sequence is full, the others random in [1, kv_len] (last 0 if asked).
void fill_lengths(HostTensor& lengths, std::int64_t kv_len, bool empty_last, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> dist(1, kv_len);
  const auto batch = static_cast<std::int64_t>(lengths.numel());
  for (std::int64_t b = 0; b < batch; ++b) {
    lengths.i32()[b] = static_cast<std::int32_t>(b == 0 ? kv_len : dist(rng));
  }
  if (empty_last && batch > 1) lengths.i32()[batch - 1] = 0;
}

// NaN in every cache slot at or past lengths[b].
void poison_past_lengths(HostTensor& cache, const std::int32_t* lengths, std::int64_t batch,
                         std::int64_t kv_heads, std::int64_t max_seq, std::int64_t head_dim) {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      const std::size_t row0 = static_cast<std::size_t>((b * kv_heads + h) * max_seq);
      poison_range(cache, (row0 + lengths[b]) * head_dim, (row0 + max_seq) * head_dim);
    }
  }
}

// Left padding: sequence 0 starts a third of the way in, the others anywhere in [0, length]
// (a start at the length leaves no key); NaN in every slot before a start.
void fill_starts_and_poison(HostTensor& starts, const HostTensor& lengths, HostTensor& k, HostTensor& v,
                            std::int64_t kv_heads, std::int64_t max_seq, std::int64_t head_dim, std::mt19937_64& rng) {
  const auto batch = static_cast<std::int64_t>(starts.numel());
  const std::int32_t* len = reinterpret_cast<const std::int32_t*>(lengths.bytes.data());
  for (std::int64_t b = 0; b < batch; ++b) {
    starts.i32()[b] = b == 0 ? len[b] / 3 : std::uniform_int_distribution<std::int32_t>(0, len[b])(rng);
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      const std::size_t row0 = static_cast<std::size_t>((b * kv_heads + h) * max_seq);
      poison_range(k, row0 * head_dim, (row0 + starts.i32()[b]) * head_dim);
      poison_range(v, row0 * head_dim, (row0 + starts.i32()[b]) * head_dim);
    }
  }
}

// `dtype` is the cache's; q and out follow it, bf16 for an e4m3 cache.
void check_decode(CheckContext& ctx, const DecodeShape& s, DType dtype, KernelFamily family) {
  const DType io_dtype = is_fp8(dtype) ? DType::kBF16 : dtype;
  CheckRow row;
  row.kernel = "decode/" + family_flag_name(family);
  row.shape = describe(s);
  row.dtype = dtype_pair(dtype, io_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    DecodeProblem p;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.kv_len = s.kv_len;
    p.max_seq = s.max_seq;
    p.kv_dtype = dtype;
    p.q_dtype = p.out_dtype = io_dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    DecodePlan plan;
    if (!try_plan(r, [&] { return plan_decode(p, ctx.target, family); }, plan)) return;

    HostTensor q(io_dtype, {s.batch, s.heads, s.head_dim});
    HostTensor k(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    HostTensor v(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    HostTensor lengths(DType::kI32, {s.batch});
    HostTensor out(io_dtype, {s.batch, s.heads, s.head_dim});
    HostTensor lse(DType::kF32, {s.batch, s.heads});
    testing::fill_normal(q, ctx.rng);
    KvScales scales;  // e4m3: max|x| / 448 of each cache's draws, never 1 in practice
    if (is_fp8(dtype)) {
      scales = {testing::fill_normal_e4m3(k, ctx.rng), testing::fill_normal_e4m3(v, ctx.rng)};
    } else {
      testing::fill_normal(k, ctx.rng);
      testing::fill_normal(v, ctx.rng);
    }
    fill_lengths(lengths, s.kv_len, s.empty_sequence, ctx.rng);
    poison_past_lengths(k, lengths.i32(), s.batch, s.kv_heads, s.max_seq, s.head_dim);
    poison_past_lengths(v, lengths.i32(), s.batch, s.kv_heads, s.max_seq, s.head_dim);
    testing::poison(out);
    testing::poison(lse);
    HostTensor sinks = testing::random_sinks(s.sinks ? s.heads : 0, ctx.rng);
    HostTensor starts(DType::kI32, {s.left_padded ? s.batch : 0});
    if (s.left_padded) fill_starts_and_poison(starts, lengths, k, v, s.kv_heads, s.max_seq, s.head_dim, ctx.rng);
    DecodeTensors host{q.view, k.view, v.view, lengths.view, out.view, lse.view};
    if (s.sinks) host.sinks = sinks.view;
    if (s.left_padded) host.key_starts = starts.view;
    host.kv_scales = scales;
    const reference::Result golden = reference::decode(p, host);

    Staging stage(ctx.cuda);
    DecodeTensors t{stage.put(q), stage.put(k), stage.put(v), stage.put(lengths), stage.put(out), stage.put(lse)};
    if (s.sinks) t.sinks = stage.put(sinks);
    if (s.left_padded) t.key_starts = stage.put(starts);
    t.kv_scales = scales;
    const Workspace ws = stage.workspace(plan.evidence.workspace_bytes);
    if (ctx.cuda) {
      cuda::decode(plan, t, ws);
    } else {
      cpu::decode(plan, t, ws);
    }
    stage.take_back();
    judge_decode(r, out, lse, golden, dtype, plan.evidence.rel_l2_tolerance);
  });
}

// e4m3 inputs are quantized with a per-tensor scale (fill_normal_e4m3); the golden and the backend
// get the same bytes and scales.
void check_prefill(CheckContext& ctx, const PrefillShape& s, DType dtype, KernelFamily family, DType out_dtype) {
  CheckRow row;
  row.kernel = "prefill/" + family_flag_name(family);
  row.shape = describe(s);
  row.dtype = dtype_pair(dtype, out_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    PrefillProblem p;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.q_len = s.q_len;
    p.kv_len = s.kv_len;
    p.causal = s.causal;
    p.dtype = dtype;
    p.out_dtype = out_dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    PrefillPlan plan;
    // e4m3: the planner's own choice (only the Hopper family takes it), so a target that cannot run
    // it is skipped with the e4m3 reason rather than a family's.
    auto make = [&] { return is_fp8(p.dtype) ? plan_prefill(p, ctx.target) : plan_prefill(p, ctx.target, family); };
    if (!try_plan(r, make, plan)) return;
    if (plan.partition.family != family)
      fail("attnkit check", "the e4m3 plan names " + to_string(plan.partition.family) + ", not " + to_string(family),
           "plan e4m3 prefill with the Hopper family");

    HostTensor q(dtype, {s.batch, s.heads, s.q_len, s.head_dim});
    HostTensor k(dtype, {s.batch, s.kv_heads, s.kv_len, s.head_dim});
    HostTensor v(dtype, {s.batch, s.kv_heads, s.kv_len, s.head_dim});
    HostTensor out(out_dtype, {s.batch, s.heads, s.q_len, s.head_dim});
    HostTensor lse(DType::kF32, {s.batch, s.heads, s.q_len});
    Fp8Scales scales;
    if (is_fp8(dtype)) {
      scales = {testing::fill_normal_e4m3(q, ctx.rng), testing::fill_normal_e4m3(k, ctx.rng),
                testing::fill_normal_e4m3(v, ctx.rng)};
    } else {
      testing::fill_normal(q, ctx.rng);
      testing::fill_normal(k, ctx.rng);
      testing::fill_normal(v, ctx.rng);
    }
    testing::poison(out);
    testing::poison(lse);
    PrefillTensors host;
    host.q = q.view;
    host.k = k.view;
    host.v = v.view;
    host.out = out.view;
    host.lse = lse.view;
    host.scales = scales;
    HostTensor sinks = testing::random_sinks(s.sinks ? s.heads : 0, ctx.rng);
    if (s.sinks) host.sinks = sinks.view;
    const reference::Result golden = reference::prefill(p, host);

    Staging stage(ctx.cuda);
    PrefillTensors t;
    t.q = stage.put(q);
    t.k = stage.put(k);
    t.v = stage.put(v);
    t.out = stage.put(out);
    t.lse = stage.put(lse);
    t.scales = scales;
    if (s.sinks) t.sinks = stage.put(sinks);
    const Workspace ws = stage.workspace(plan.evidence.workspace_bytes);
    if (ctx.cuda) {
      cuda::prefill(plan, t, ws);
    } else {
      cpu::prefill(plan, t, ws);
    }
    stage.take_back();
    const Tolerance tol = tolerance_for(dtype, out_dtype);
    judge(r, testing::compare(out, golden.out), tol);
    // e4m3: the scores are exact e4m3 products summed by the tensor cores (only P is rounded), so
    // the LSE keeps the 1e-3 rule rather than the output's 5e-2.
    const std::string lse_problem = check_lse(lse, golden.lse, is_fp8(dtype) ? kLseToleranceAbs : tol.rel);
    if (!lse_problem.empty()) {
      r.status = Status::kFail;
      r.note += lse_problem;
    }
  });
}

// Seed 000's fused step. Golden: rotate q and k_new in float64, store k_new (rounded to the cache
// dtype, as the cache must hold it) and v_new at positions[b], then the float64 decode over
// positions[b] + 1 keys. The written cache rows are checked as well as the output.
void check_fused(CheckContext& ctx, const DecodeShape& s, DType dtype, RopeStyle style, KernelFamily family) {
  CheckRow row;
  row.kernel = "fused-rope-append-decode/" + to_string(style) + "/" + family_flag_name(family);
  row.shape = describe(s);
  row.dtype = dtype_pair(dtype, dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    HostTensor positions(DType::kI32, {s.batch});
    std::uniform_int_distribution<std::int64_t> pos_dist(0, s.kv_len - 1);
    std::int64_t longest = 0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      positions.i32()[b] = static_cast<std::int32_t>(b == 0 ? s.kv_len - 1 : pos_dist(ctx.rng));
      longest = std::max<std::int64_t>(longest, positions.i32()[b] + 1);
    }
    DecodeProblem p;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.kv_len = longest;
    p.max_seq = s.max_seq;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    DecodePlan plan;
    if (!try_plan(r, [&] { return plan_decode(p, ctx.target, family); }, plan)) return;
    RopeSpec rope;
    rope.style = style;

    HostTensor q(dtype, {s.batch, s.heads, s.head_dim});
    HostTensor k_new(dtype, {s.batch, s.kv_heads, s.head_dim});
    HostTensor v_new(dtype, {s.batch, s.kv_heads, s.head_dim});
    HostTensor k(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    HostTensor v(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    HostTensor out(dtype, {s.batch, s.heads, s.head_dim});
    HostTensor lse(DType::kF32, {s.batch, s.heads});
    for (HostTensor* t : {&q, &k_new, &v_new, &k, &v}) testing::fill_normal(*t, ctx.rng);
    // Slots past the new token are unwritten cache; the new token's slot is written by the call.
    HostTensor after(DType::kI32, {s.batch});
    for (std::int64_t b = 0; b < s.batch; ++b) after.i32()[b] = positions.i32()[b] + 1;
    poison_past_lengths(k, after.i32(), s.batch, s.kv_heads, s.max_seq, s.head_dim);
    poison_past_lengths(v, after.i32(), s.batch, s.kv_heads, s.max_seq, s.head_dim);
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        const std::size_t slot = static_cast<std::size_t>(((b * s.kv_heads + h) * s.max_seq + positions.i32()[b]) * s.head_dim);
        poison_range(k, slot, slot + s.head_dim);
        poison_range(v, slot, slot + s.head_dim);
      }
    }
    testing::poison(out);
    testing::poison(lse);

    // Golden inputs: copies of the caches with the rotated k and v written, and q rotated (f32).
    HostTensor k_gold(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    HostTensor v_gold(dtype, {s.batch, s.kv_heads, s.max_seq, s.head_dim});
    k_gold.bytes = k.bytes;
    v_gold.bytes = v.bytes;
    k_gold.view.data = k_gold.bytes.data();
    v_gold.view.data = v_gold.bytes.data();
    HostTensor q_gold(DType::kF32, {s.batch, s.heads, s.head_dim});
    std::vector<double> x(static_cast<std::size_t>(s.head_dim));
    std::vector<double> k_rows_golden;  // the rotated rows the cache must hold
    for (std::int64_t b = 0; b < s.batch; ++b) {
      const std::int64_t pos = positions.i32()[b];
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const std::size_t base = static_cast<std::size_t>((b * s.heads + h) * s.head_dim);
        for (std::int64_t d = 0; d < s.head_dim; ++d) x[d] = q.get(base + d);
        reference::rope(x.data(), s.head_dim, pos, rope);
        for (std::int64_t d = 0; d < s.head_dim; ++d) q_gold.set(base + d, static_cast<float>(x[d]));
      }
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        const std::size_t src = static_cast<std::size_t>((b * s.kv_heads + h) * s.head_dim);
        const std::size_t slot = static_cast<std::size_t>(((b * s.kv_heads + h) * s.max_seq + pos) * s.head_dim);
        for (std::int64_t d = 0; d < s.head_dim; ++d) x[d] = k_new.get(src + d);
        reference::rope(x.data(), s.head_dim, pos, rope);
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          k_gold.set(slot + d, static_cast<float>(x[d]));
          v_gold.set(slot + d, v_new.get(src + d));
          k_rows_golden.push_back(x[d]);
        }
      }
    }
    DecodeProblem gp = p;
    gp.q_dtype = DType::kF32;
    const DecodeTensors host{q_gold.view, k_gold.view, v_gold.view, after.view, out.view, lse.view};
    const reference::Result golden = reference::decode(gp, host);

    Staging stage(ctx.cuda);
    FusedDecodeTensors t;
    t.q = stage.put(q);
    t.k_new = stage.put(k_new);
    t.v_new = stage.put(v_new);
    t.k_cache = stage.put(k);
    t.v_cache = stage.put(v);
    t.positions = stage.put(positions);
    t.out = stage.put(out);
    t.lse = stage.put(lse);
    const Workspace ws = stage.workspace(plan.evidence.workspace_bytes);
    if (ctx.cuda) {
      cuda::fused_rope_append_decode(plan, t, rope, ws);
    } else {
      cpu::fused_rope_append_decode(plan, t, rope, ws);
    }
    stage.take_back();
    const Tolerance tol = tolerance_for(dtype, dtype);
    judge(r, testing::compare(out, golden.out), tol);
    const std::string lse_problem = check_lse(lse, golden.lse, tolerance_for(dtype, dtype).rel);
    if (!lse_problem.empty()) {
      r.status = Status::kFail;
      r.note += lse_problem;
    }
    // The cache rows written at positions[b]: k rotated, v copied.
    HostTensor k_rows(dtype, {static_cast<std::int64_t>(k_rows_golden.size())});
    std::vector<double> v_rows_golden;
    HostTensor v_rows(dtype, {static_cast<std::int64_t>(k_rows_golden.size())});
    std::size_t n = 0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        const std::size_t src = static_cast<std::size_t>((b * s.kv_heads + h) * s.head_dim);
        const std::size_t slot = static_cast<std::size_t>(((b * s.kv_heads + h) * s.max_seq + positions.i32()[b]) * s.head_dim);
        for (std::int64_t d = 0; d < s.head_dim; ++d, ++n) {
          k_rows.set(n, k.get(slot + d));
          v_rows.set(n, v.get(slot + d));
          v_rows_golden.push_back(v_new.get(src + d));
        }
      }
    }
    const testing::Comparison kc = testing::compare(k_rows, k_rows_golden);
    const testing::Comparison vc = testing::compare(v_rows, v_rows_golden);
    if (kc.nan_count > 0 || !(kc.rel_l2 <= tol.rel) || vc.nan_count > 0 || vc.max_abs != 0.0) {
      r.status = Status::kFail;
      r.note += "cache rows: k " + testing::describe(kc) + ", v " + testing::describe(vc) + "; ";
    }
  });
}

// Runs `body` with rows collected; when every row was skipped for one and the same reason (the
// backend has no such family), reports a single row for all of them instead of one per case.
void collapsed(CheckContext& ctx, const std::string& label, const std::function<void()>& body) {
  std::vector<CheckRow> rows;
  const std::function<void(CheckRow)> report = ctx.report;
  ctx.report = [&rows](CheckRow row) { rows.push_back(std::move(row)); };
  body();
  ctx.report = report;
  const bool same_skip = rows.size() > 1 && std::all_of(rows.begin(), rows.end(), [&](const CheckRow& r) {
    return r.status == Status::kSkipped && r.note == rows.front().note;
  });
  if (!same_skip) {
    for (CheckRow& r : rows) report(std::move(r));
    return;
  }
  CheckRow one = rows.front();
  one.kernel = label;
  one.shape = "all " + std::to_string(rows.size()) + " cases";
  one.dtype = "-";
  report(std::move(one));
}

}  // namespace

void check_attention(CheckContext& ctx) {
  const std::vector<KernelFamily> decode_families = {KernelFamily::kScalarOnline, KernelFamily::kSplitKvDecode};
  // The Hopper family plans only for an sm_90 target: elsewhere its rows say SKIPPED with the reason.
  const std::vector<KernelFamily> prefill_families = {KernelFamily::kScalarOnline, KernelFamily::kCooperativeTiled,
                                                      KernelFamily::kWarpSpecializedWgmma};
  const std::vector<DType> dtypes = storage_dtypes(ctx);
  std::vector<DType> cache_dtypes = dtypes;  // decode: an e4m3 cache too (bf16 q and out)
  if (wants_dtype(ctx, DType::kE4M3)) cache_dtypes.push_back(DType::kE4M3);
  for (KernelFamily family : decode_families) {
    if (!wants_op(ctx, "decode") || cache_dtypes.empty()) break;
    collapsed(ctx, "decode/" + family_flag_name(family), [&] {
      for (const DecodeShape& s : decode_shapes(ctx.quick)) {
        for (DType dtype : cache_dtypes) check_decode(ctx, s, dtype, family);
      }
    });
  }
  for (KernelFamily family : prefill_families) {
    if (!wants_op(ctx, "prefill") || dtypes.empty()) break;
    collapsed(ctx, "prefill/" + family_flag_name(family), [&] {
      for (const PrefillShape& s : prefill_shapes(ctx.quick)) {
        for (DType dtype : dtypes) check_prefill(ctx, s, dtype, family, dtype);
      }
    });
  }
  // e4m3 runs only on the Hopper family: elsewhere (the CPU, other GPUs) one SKIPPED row says why.
  if (wants_op(ctx, "prefill") && wants_dtype(ctx, DType::kE4M3)) {
    const KernelFamily hopper = KernelFamily::kWarpSpecializedWgmma;
    collapsed(ctx, "prefill/" + family_flag_name(hopper) + " (e4m3)", [&] {
      for (const Fp8PrefillCase& c : e4m3_prefill_cases(ctx.quick)) {
        check_prefill(ctx, c.shape, DType::kE4M3, hopper, c.out_dtype);
      }
    });
  }
  if (!wants_op(ctx, "fused") || dtypes.empty()) return;
  const std::vector<DecodeShape> fused_shapes = {
      {3, 8, 2, 128, 300, 320, 0, 0.0f, false},
      {2, 12, 4, 64, 2048, 2048, 256, 0.0f, false},
  };
  for (KernelFamily family : decode_families) {
    collapsed(ctx, "fused-rope-append-decode/*/" + family_flag_name(family), [&] {
      for (const DecodeShape& s : fused_shapes) {
        for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
          if (ctx.quick && ctx.dtypes.empty()) {
            check_fused(ctx, s, style == RopeStyle::kHalf ? DType::kF32 : DType::kBF16, style, family);
          } else {
            for (DType dtype : dtypes) check_fused(ctx, s, dtype, style, family);
          }
        }
        if (ctx.quick) break;  // one shape is enough for --quick
      }
    });
  }
}

}  // namespace attnkit::cli
