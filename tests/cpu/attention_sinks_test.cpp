// Attention sinks (gpt-oss) on the CPU against the float64 golden, which scores the sink as one
// more logit inside the softmax: decode (scalar and fast families, split and unsplit plans, empty
// sequences), prefill (causal, bottom-right, windowed, ragged), paged decode and extend; a head
// with sink -inf is a head without one. Each case also checks that its sinks matter (the golden
// without them is far outside the tolerance), so a kernel that dropped them would fail. Bad sinks
// are rejected before anything is written.
#include <gtest/gtest.h>

#include "paged_case.hpp"

namespace attnkit::testing {
namespace {

// The run matches the golden with sinks, and the golden without them is not a match.
void expect_sink_result(const HostTensor& out, const HostTensor& lse, const reference::Result& with,
                        const reference::Result& without, DType dtype, const std::string& what) {
  expect_matches_golden(out, with.out, dtype, what);
  expect_lse_matches(lse, with.lse, what);
  EXPECT_GT(compare(out, without.out).rel_l2, 0.05) << what << ": the sinks made no difference";
}

TEST(AttentionSinks, DecodeMatchesGoldenOnEveryFamilySplitOrNot) {
  struct Shape {
    std::int64_t batch, heads, kv_heads, head_dim, max_seq;
    std::vector<std::int32_t> lengths;
  };
  const Shape shapes[] = {
      {4, 8, 2, 64, 700, {1, 0, 37, 700}},  // an empty sequence: zeros and LSE = its head's sink
      {1, 4, 1, 128, 9000, {9000}},         // one (sequence, KV head): the plan splits the keys
      {3, 6, 6, 40, 90, {90, 5, 64}},       // multi-head, an odd head_dim
  };
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      DecodeProblem p = decode_problem(s.batch, s.heads, s.kv_heads, s.head_dim, s.max_seq, dtype);
      for (bool scalar : {false, true}) {
        DecodeCase c(p, s.lengths);
        std::mt19937_64 rng(c.seed);
        const HostTensor sinks = random_sinks(s.heads, rng);
        const DecodePlan plan = scalar ? scalar_decode_plan(p) : plan_decode(p, cpu_target(2));
        DecodeTensors t = c.tensors();
        t.sinks = sinks.view;
        OwnedWorkspace ws(plan.evidence.workspace_bytes);
        cpu::decode(plan, t, ws.get());
        const std::string what = std::string(scalar ? "scalar" : to_string(plan.partition.family)) + " " +
                                 std::string(dtype_name(dtype)) + " D=" + std::to_string(s.head_dim) + " splits=" +
                                 std::to_string(plan.partition.sequence_splits) + seed_note(c.seed);
        DecodeTensors no_sinks = t;
        no_sinks.sinks = {};
        expect_sink_result(c.out, c.lse, reference::decode(p, t), reference::decode(p, no_sinks), dtype, what);
        if (s.lengths.size() > 1 && s.lengths[1] == 0) {  // sequence 1 saw no key
          for (std::int64_t h = 0; h < s.heads; ++h) {
            EXPECT_EQ(c.lse.get(static_cast<std::size_t>(s.heads + h)), sinks.get(static_cast<std::size_t>(h))) << what;
          }
        }
      }
    }
  }
}

TEST(AttentionSinks, PrefillMatchesGoldenCausalWindowedAndRagged) {
  struct Shape {
    std::int64_t q_len, kv_len;
    bool causal;
    std::int64_t window;
  };
  for (const Shape& s : {Shape{37, 37, true, 0}, Shape{5, 100, true, 0}, Shape{70, 70, true, 16},
                         Shape{9, 23, false, 0}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool scalar : {false, true}) {
        PrefillProblem p = prefill_problem(2, 8, 2, 64, s.q_len, s.kv_len, s.causal, dtype);
        p.options.window = s.window;
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        HostTensor q(dtype, {2, 8, s.q_len, 64}), k(dtype, {2, 2, s.kv_len, 64}), v(dtype, {2, 2, s.kv_len, 64});
        HostTensor out(dtype, {2, 8, s.q_len, 64}), lse(DType::kF32, {2, 8, s.q_len});
        fill_normal(q, rng);
        fill_normal(k, rng);
        fill_normal(v, rng);
        poison(out);
        poison(lse);
        const HostTensor sinks = random_sinks(8, rng);
        PrefillTensors t{q.view, k.view, v.view, out.view, lse.view};
        t.sinks = sinks.view;
        const PrefillPlan plan = scalar ? scalar_prefill_plan(p) : plan_prefill(p, cpu_target(2));
        cpu::prefill(plan, t, {});
        PrefillTensors no_sinks = t;
        no_sinks.sinks = {};
        expect_sink_result(out, lse, reference::prefill(p, t), reference::prefill(p, no_sinks), dtype,
                           std::string(scalar ? "scalar " : "fast ") + std::string(dtype_name(dtype)) + " q=" +
                               std::to_string(s.q_len) + " kv=" + std::to_string(s.kv_len) + seed_note(seed));
      }
    }
  }
  // Ragged: three sequences (one empty) packed along the rows.
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PrefillProblem p = prefill_problem(3, 4, 1, 32, 20, 20, true, DType::kF32);
  HostTensor cu_q(DType::kI32, {4}), cu_k(DType::kI32, {4});
  const std::int32_t q_off[] = {0, 20, 20, 27}, k_off[] = {0, 20, 20, 33};
  for (int i = 0; i < 4; ++i) cu_q.i32()[i] = q_off[i], cu_k.i32()[i] = k_off[i];
  HostTensor q(DType::kF32, {1, 4, 27, 32}), k(DType::kF32, {1, 1, 33, 32}), v(DType::kF32, {1, 1, 33, 32});
  HostTensor out(DType::kF32, {1, 4, 27, 32}), lse(DType::kF32, {1, 4, 27});
  fill_normal(q, rng);
  fill_normal(k, rng);
  fill_normal(v, rng);
  poison(out);
  poison(lse);
  const HostTensor sinks = random_sinks(4, rng);
  PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, cu_q.view, cu_k.view};
  t.sinks = sinks.view;
  cpu::prefill(plan_prefill(p, cpu_target(2)), t, {});
  PrefillTensors no_sinks = t;
  no_sinks.sinks = {};
  expect_sink_result(out, lse, reference::prefill(p, t), reference::prefill(p, no_sinks), DType::kF32,
                     "ragged" + seed_note(seed));
}

TEST(AttentionSinks, PagedDecodeAndExtendMatchGolden) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.batch = 4;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.lengths = {1, 0, 300, 5000};  // 5000 keys: split across the threads
  s.dtype = DType::kBF16;
  PagedCase c(s, rng);
  const HostTensor sinks = random_sinks(8, rng);

  const PagedDecodePlan plan = plan_paged_decode(paged_decode_problem(c, c.spec.capacity()), cpu_target(2));
  HostTensor q(s.dtype, {4, 8, 64}), out(s.dtype, {4, 8, 64}), lse(DType::kF32, {4, 8});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  PagedDecodeTensors t{q.view, c.cache(), out.view, lse.view};
  t.sinks = sinks.view;
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  cpu::paged_decode(plan, t, ws.get());
  PagedDecodeTensors no_sinks = t;
  no_sinks.sinks = {};
  expect_sink_result(out, lse, reference::paged_decode(plan.problem, t), reference::paged_decode(plan.problem, no_sinks),
                     s.dtype, "paged decode splits=" + std::to_string(plan.partition.sequence_splits) + seed_note(seed));

  const std::int32_t q_lens[] = {1, 0, 17, 6};
  HostTensor cu(DType::kI32, {5});
  cu.i32()[0] = 0;
  for (int b = 0; b < 4; ++b) cu.i32()[b + 1] = cu.i32()[b] + q_lens[b];
  const std::int64_t rows = cu.i32()[4];
  HostTensor eq(s.dtype, {rows, 8, 64}), eout(s.dtype, {rows, 8, 64}), ext_lse(DType::kF32, {rows, 8});
  fill_normal(eq, rng);
  poison(eout);
  poison(ext_lse);
  const ExtendPlan eplan = plan_extend(extend_problem(c, 17, c.spec.capacity()), cpu_target(2));
  ExtendTensors et{eq.view, cu.view, c.cache(), eout.view, ext_lse.view};
  et.sinks = sinks.view;
  OwnedWorkspace ews(eplan.bounds.workspace_bytes);
  cpu::extend(eplan, et, ews.get());
  ExtendTensors eno = et;
  eno.sinks = {};
  expect_sink_result(eout, ext_lse, reference::extend(eplan.problem, et), reference::extend(eplan.problem, eno), s.dtype,
                     "extend splits=" + std::to_string(eplan.partition.sequence_splits) + seed_note(seed));
}

TEST(AttentionSinks, BadSinksAreRejectedBeforeAnyWrite) {
  DecodeProblem p = decode_problem(2, 4, 2, 32, 16, DType::kF32);
  DecodeCase c(p, {16, 3});
  const DecodePlan plan = plan_decode(p, cpu_target(1));
  const auto before = snapshot(c.out);
  auto expect_rejected = [&](const TensorView& sinks, const std::string& what) {
    DecodeTensors t = c.tensors();
    t.sinks = sinks;
    EXPECT_THROW(cpu::decode(plan, t, {}), Error) << what;
    EXPECT_EQ(snapshot(c.out), before) << what << ": out was written";
  };
  HostTensor wrong_shape(DType::kF32, {5}), wrong_dtype(DType::kBF16, {4}), nan(DType::kF32, {4}),
      plus_inf(DType::kF32, {4});
  for (HostTensor* t : {&wrong_shape, &wrong_dtype, &nan, &plus_inf}) std::fill(t->bytes.begin(), t->bytes.end(), 0);
  nan.set(3, std::numeric_limits<float>::quiet_NaN());
  plus_inf.set(1, std::numeric_limits<float>::infinity());
  expect_rejected(wrong_shape.view, "shape [5] for 4 heads");
  expect_rejected(wrong_dtype.view, "bf16 sinks");
  expect_rejected(nan.view, "a NaN sink");
  expect_rejected(plus_inf.view, "a +inf sink");
  try {
    DecodeTensors t = c.tensors();
    t.sinks = nan.view;
    cpu::decode(plan, t, {});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sinks[3]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit::testing
