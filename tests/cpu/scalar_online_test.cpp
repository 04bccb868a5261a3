// Seed 004's scalar online-softmax kernel (through cpu::decode / cpu::prefill with a kScalarOnline
// plan) against the float64 golden, over every option at awkward sizes.
#include <gtest/gtest.h>

#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

void run_decode(const DecodeProblem& p, const std::vector<std::int32_t>& lengths, float stddev = 1.0f) {
  DecodeCase c(p, lengths, stddev);
  cpu::decode(scalar_decode_plan(p), c.tensors());
  const reference::Result golden = reference::decode(p, c.tensors());
  const std::string what = "decode H=" + std::to_string(p.num_heads) + " G=" + std::to_string(p.kv_heads) +
                           " D=" + std::to_string(p.head_dim) + " window=" + std::to_string(p.options.window) +
                           " dtype=" + std::string(dtype_name(p.kv_dtype)) + seed_note(c.seed);
  expect_matches_golden(c.out, golden.out, coarsest({p.q_dtype, p.kv_dtype, p.out_dtype}), what);
  expect_lse_matches(c.lse, golden.lse, what);
}

TEST(ScalarOnlineDecode, HeadDims) {
  for (std::int64_t d : {64, 80, 96, 128, 256}) run_decode(decode_problem(2, 4, 2, d, 67), {67, 30});
}

TEST(ScalarOnlineDecode, GroupedQueryRatiosAndMultiQuery) {
  for (std::int64_t group : {1, 4, 8}) run_decode(decode_problem(2, 8, 8 / group, 64, 45), {45, 11});
  run_decode(decode_problem(1, 12, 1, 64, 50), {50});  // multi-query: every head shares one KV head
}

TEST(ScalarOnlineDecode, SlidingWindows) {
  for (std::int64_t window : {1, 17, 1000}) {
    DecodeProblem p = decode_problem(3, 4, 2, 64, 90);
    p.options.window = window;
    run_decode(p, {90, 40, 1});
  }
}

TEST(ScalarOnlineDecode, LengthsOneOddAndThousands) {
  run_decode(decode_problem(1, 2, 1, 64, 1), {1});
  run_decode(decode_problem(1, 4, 2, 80, 37), {37});
  run_decode(decode_problem(1, 4, 1, 128, 4099), {4099});
}

TEST(ScalarOnlineDecode, MixedLengthsIncludingEmpty) {
  DecodeProblem p = decode_problem(5, 4, 2, 64, 130);
  p.kv_len = 120;  // the plan bound is below the cache capacity
  run_decode(p, {120, 0, 1, 77, 119});
}

TEST(ScalarOnlineDecode, SoftCapAndScale) {
  DecodeProblem p = decode_problem(2, 4, 2, 96, 70);
  p.options.softcap = 5.0f;
  p.options.scale = 0.3f;
  run_decode(p, {70, 33}, 3.0f);  // large scores, so the cap bites
}

TEST(ScalarOnlineDecode, StorageDtypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    run_decode(decode_problem(2, 8, 2, 128, 300, t), {300, 129});
    DecodeProblem mixed = decode_problem(1, 4, 4, 64, 40, t);
    mixed.q_dtype = DType::kF32;
    mixed.out_dtype = t == DType::kBF16 ? DType::kF16 : DType::kBF16;
    run_decode(mixed, {40});
  }
}

TEST(ScalarOnlineDecode, AdversarialScores) {
  run_decode(decode_problem(1, 4, 2, 64, 200), {200}, 8.0f);   // large magnitudes: a few keys dominate
  run_decode(decode_problem(1, 4, 2, 64, 200), {200}, 1e-3f);  // near-equal scores: a near-uniform mix
}

// Prefill buffers in either BHSD (contiguous) or BSHD (a strided view of [batch, seq, heads, dim]).
struct PrefillCase {
  PrefillProblem problem;
  HostTensor q, k, v, out, lse, cu_q, cu_k;
  std::uint64_t seed = fresh_seed();

  static TensorView bshd(HostTensor& t, DType dtype, std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) {
    t = HostTensor(dtype, {b, s, h, d});
    TensorView v = t.view;
    v.shape = {b, h, s, d, 0};
    v.strides = {s * h * d, d, h * d, 1, 0};
    return v;
  }

  PrefillTensors make(const PrefillProblem& p, bool strided, std::vector<std::int32_t> ragged_q = {},
                      std::vector<std::int32_t> ragged_k = {}) {
    problem = p;
    const std::int64_t H = p.num_heads, G = p.kv_heads, D = p.head_dim;
    PrefillTensors t;
    std::mt19937_64 rng(seed);
    if (ragged_q.empty()) {
      const std::int64_t B = p.batch;
      if (strided) {
        t.q = bshd(q, p.dtype, B, H, p.q_len, D);
        t.k = bshd(k, p.dtype, B, G, p.kv_len, D);
        t.v = bshd(v, p.dtype, B, G, p.kv_len, D);
        t.out = bshd(out, p.out_dtype, B, H, p.q_len, D);
      } else {
        q = HostTensor(p.dtype, {B, H, p.q_len, D});
        k = HostTensor(p.dtype, {B, G, p.kv_len, D});
        v = HostTensor(p.dtype, {B, G, p.kv_len, D});
        out = HostTensor(p.out_dtype, {B, H, p.q_len, D});
        t.q = q.view, t.k = k.view, t.v = v.view, t.out = out.view;
      }
      lse = HostTensor(DType::kF32, {B, H, p.q_len});
    } else {
      cu_q = HostTensor(DType::kI32, {p.batch + 1});
      cu_k = HostTensor(DType::kI32, {p.batch + 1});
      cu_q.i32()[0] = cu_k.i32()[0] = 0;
      for (std::int64_t b = 0; b < p.batch; ++b) {
        cu_q.i32()[b + 1] = cu_q.i32()[b] + ragged_q[static_cast<std::size_t>(b)];
        cu_k.i32()[b + 1] = cu_k.i32()[b] + ragged_k[static_cast<std::size_t>(b)];
      }
      const std::int64_t tq = cu_q.i32()[p.batch], tk = cu_k.i32()[p.batch];
      q = HostTensor(p.dtype, {1, H, tq, D});
      k = HostTensor(p.dtype, {1, G, tk, D});
      v = HostTensor(p.dtype, {1, G, tk, D});
      out = HostTensor(p.out_dtype, {1, H, tq, D});
      lse = HostTensor(DType::kF32, {1, H, tq});
      t.q = q.view, t.k = k.view, t.v = v.view, t.out = out.view;
      t.cu_seqlens_q = cu_q.view;
      t.cu_seqlens_k = cu_k.view;
    }
    t.lse = lse.view;
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
    poison(out);
    poison(lse);
    return t;
  }
};

// The kernel's output in logical [b, h, s, d] order as an f32 tensor (exact: widening only).
HostTensor logical_copy(const HostTensor& storage, const TensorView& view) {
  HostTensor r(DType::kF32, {view.shape[0], view.shape[1], view.shape[2], view.shape[3]});
  std::size_t i = 0;
  for (std::int64_t b = 0; b < view.shape[0]; ++b)
    for (std::int64_t h = 0; h < view.shape[1]; ++h)
      for (std::int64_t s = 0; s < view.shape[2]; ++s)
        for (std::int64_t d = 0; d < view.shape[3]; ++d)
          r.set(i++, storage.get(static_cast<std::size_t>(b * view.strides[0] + h * view.strides[1] +
                                                          s * view.strides[2] + d)));
  return r;
}

void run_prefill(const PrefillProblem& p, bool strided = false, std::vector<std::int32_t> rq = {},
                 std::vector<std::int32_t> rk = {}) {
  PrefillCase c;
  const PrefillTensors t = c.make(p, strided, rq, rk);
  cpu::prefill(scalar_prefill_plan(p), t);
  const reference::Result golden = reference::prefill(p, t);
  const std::string what = std::string("prefill q_len=") + std::to_string(p.q_len) + " kv_len=" +
                           std::to_string(p.kv_len) + (p.causal ? " causal" : "") + " window=" +
                           std::to_string(p.options.window) + (strided ? " bshd" : "") +
                           (rq.empty() ? "" : " ragged") + " dtype=" + std::string(dtype_name(p.dtype)) +
                           seed_note(c.seed);
  expect_matches_golden(logical_copy(c.out, t.out), golden.out, coarsest({p.dtype, p.out_dtype}), what);
  expect_lse_matches(c.lse, golden.lse, what);
}

TEST(ScalarOnlinePrefill, CausalSquareAndBottomRight) {
  run_prefill(prefill_problem(2, 4, 2, 64, 33, 33, true));
  run_prefill(prefill_problem(1, 4, 1, 80, 13, 61, true));  // bottom-right aligned
}

TEST(ScalarOnlinePrefill, NonCausalIncludingMoreQueriesThanKeys) {
  run_prefill(prefill_problem(1, 8, 2, 128, 29, 45, false));
  run_prefill(prefill_problem(1, 2, 2, 64, 40, 9, false));
}

TEST(ScalarOnlinePrefill, WindowsSoftCapAndHeadDims) {
  for (std::int64_t window : {1, 7, 500}) {
    PrefillProblem p = prefill_problem(1, 4, 2, 96, 31, 50, true);
    p.options.window = window;
    run_prefill(p);
  }
  PrefillProblem capped = prefill_problem(1, 4, 4, 256, 17, 17, true);
  capped.options.softcap = 4.0f;
  run_prefill(capped);
}

TEST(ScalarOnlinePrefill, StridedBshdViewsAndDtypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    run_prefill(prefill_problem(2, 4, 2, 64, 21, 34, true, t), true);
  }
}

TEST(ScalarOnlinePrefill, RaggedWithEmptyAndLengthOneSequences) {
  // Sequences: (q, k) = (5, 9), (0, 0), (1, 1), (0, 4), (12, 12), (1, 30).
  PrefillProblem p = prefill_problem(6, 4, 2, 64, 12, 30, true);
  run_prefill(p, false, {5, 0, 1, 0, 12, 1}, {9, 0, 1, 4, 12, 30});
  p.causal = false;
  p.options.window = 3;
  run_prefill(p, false, {5, 0, 1, 2, 12, 1}, {9, 0, 1, 4, 7, 30});
}

}  // namespace
}  // namespace attnkit::testing
