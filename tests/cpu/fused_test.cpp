// The fused step (RoPE q and k_new, append k and v, decode over position + 1 keys) equals the
// separate calls bit for bit, matches a golden built from reference::rope, and leaves the
// caller's q and k_new untouched.
#include <gtest/gtest.h>

#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

struct FusedCase {
  DecodeProblem p;
  HostTensor q, k_new, v_new, k_cache, v_cache, positions, out, lse;
  std::uint64_t seed = fresh_seed();

  FusedCase(const DecodeProblem& problem, const std::vector<std::int32_t>& pos) : p(problem) {
    const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
    q = HostTensor(p.q_dtype, {B, H, D});
    k_new = HostTensor(p.kv_dtype, {B, G, D});
    v_new = HostTensor(p.kv_dtype, {B, G, D});
    k_cache = HostTensor(p.kv_dtype, {B, G, S, D});
    v_cache = HostTensor(p.kv_dtype, {B, G, S, D});
    positions = HostTensor(DType::kI32, {B});
    out = HostTensor(p.out_dtype, {B, H, D});
    lse = HostTensor(DType::kF32, {B, H});
    std::mt19937_64 rng(seed);
    fill_normal(q, rng), fill_normal(k_new, rng), fill_normal(v_new, rng);
    fill_normal(k_cache, rng), fill_normal(v_cache, rng);
    for (std::int64_t b = 0; b < B; ++b) positions.i32()[b] = pos[static_cast<std::size_t>(b)];
    poison(out), poison(lse);
  }
  FusedDecodeTensors tensors() const {
    return {q.view, k_new.view, v_new.view, k_cache.view, v_cache.view, positions.view, out.view, lse.view};
  }
};

HostTensor copy_of(const HostTensor& t) {
  HostTensor c;
  c.bytes = t.bytes;
  c.view = t.view;
  c.view.data = c.bytes.data();
  return c;
}

// sinks (optional): attention-sink logits for every call, the golden's included.
void check_fused(const DecodeProblem& p, const std::vector<std::int32_t>& pos, const RopeSpec& rope,
                 const HostTensor* sinks = nullptr) {
  FusedCase f(p, pos);
  const TensorView sink_view = sinks != nullptr ? sinks->view : TensorView{};
  const std::string what = "fused dtype=" + std::string(dtype_name(p.kv_dtype)) + " window=" +
                           std::to_string(p.options.window) + seed_note(f.seed);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  const DecodePlan plan = scalar_decode_plan(p);

  // The separate path, on copies: RoPE in place, append, decode over position + 1 keys.
  HostTensor q2 = copy_of(f.q), k2 = copy_of(f.k_new), kc2 = copy_of(f.k_cache), vc2 = copy_of(f.v_cache);
  HostTensor out2 = copy_of(f.out), lse2 = copy_of(f.lse), lengths(DType::kI32, {B});
  const auto q_before = snapshot(f.q), k_before = snapshot(f.k_new), kc_before = snapshot(f.k_cache),
             vc_before = snapshot(f.v_cache);
  cpu::apply_rope(q2.view, f.positions.view, rope);
  cpu::apply_rope(k2.view, f.positions.view, rope);
  cpu::append_kv({k2.view, f.v_new.view, kc2.view, vc2.view, f.positions.view});
  for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = f.positions.i32()[b] + 1;
  cpu::decode(plan, {q2.view, kc2.view, vc2.view, lengths.view, out2.view, lse2.view, sink_view});

  FusedDecodeTensors fused = f.tensors();
  fused.sinks = sink_view;
  cpu::fused_rope_append_decode(plan, fused, rope);

  EXPECT_EQ(f.q.bytes, q_before) << "fused modified q: " << what;
  EXPECT_EQ(f.k_new.bytes, k_before) << "fused modified k_new: " << what;
  EXPECT_EQ(f.k_cache.bytes, kc2.bytes) << what;
  EXPECT_EQ(f.v_cache.bytes, vc2.bytes) << what;
  EXPECT_EQ(f.out.bytes, out2.bytes) << what;
  EXPECT_EQ(f.lse.bytes, lse2.bytes) << what;

  // Golden: caches rebuilt independently from reference::rope, q rotated in double.
  HostTensor kc_gold = copy_of(f.k_cache), vc_gold = copy_of(f.v_cache), q_gold(DType::kF32, {B, H, D});
  kc_gold.bytes = kc_before, vc_gold.bytes = vc_before;
  std::vector<double> row(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t at = f.positions.i32()[b];
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) row[d] = f.q.get(static_cast<std::size_t>((b * H + h) * D + d));
      reference::rope(row.data(), D, at, rope);
      for (std::int64_t d = 0; d < D; ++d) q_gold.set(static_cast<std::size_t>((b * H + h) * D + d), static_cast<float>(row[d]));
    }
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t d = 0; d < D; ++d) row[d] = f.k_new.get(static_cast<std::size_t>((b * G + g) * D + d));
      reference::rope(row.data(), D, at, rope);
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t i = static_cast<std::size_t>(((b * G + g) * S + at) * D + d);
        kc_gold.set(i, static_cast<float>(row[d]));
        vc_gold.set(i, f.v_new.get(static_cast<std::size_t>((b * G + g) * D + d)));
        EXPECT_NEAR(f.k_cache.get(i), row[d], p.kv_dtype == DType::kF32 ? 1e-5 : 2e-2 * (1 + std::abs(row[d]))) << what;
      }
    }
  }
  DecodeProblem gp = p;
  gp.q_dtype = DType::kF32;
  const reference::Result golden =
      reference::decode(gp, {q_gold.view, kc_gold.view, vc_gold.view, lengths.view, {}, {}, sink_view});
  expect_matches_golden(f.out, golden.out, coarsest({p.q_dtype, p.kv_dtype, p.out_dtype}), what);
  expect_lse_matches(f.lse, golden.lse, what);
}

TEST(FusedRopeAppendDecode, EqualsSeparateCallsAndGolden) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    check_fused(decode_problem(3, 8, 2, 64, 50, t), {0, 20, 49}, RopeSpec{});
  }
}

TEST(FusedRopeAppendDecode, WindowInterleavedMultiQueryAndShorterPlan) {
  DecodeProblem p = decode_problem(2, 4, 1, 128, 300);
  p.kv_len = 200;  // positions must stay below the plan's kv_len
  p.options.window = 9;
  RopeSpec rope;
  rope.style = RopeStyle::kInterleaved;
  rope.theta = 500000.0f;
  check_fused(p, {199, 3}, rope);
}

TEST(FusedRopeAppendDecode, AttentionSinks) {
  std::mt19937_64 rng(fresh_seed());
  DecodeProblem p = decode_problem(3, 8, 2, 64, 40, DType::kBF16);
  const HostTensor sinks = random_sinks(8, rng);
  check_fused(p, {0, 17, 39}, RopeSpec{}, &sinks);
}

TEST(FusedRopeAppendDecode, CallerTables) {
  const std::int64_t D = 96, positions = 64;
  std::vector<float> cos_t, sin_t;
  for (std::int64_t p = 0; p < positions; ++p) {
    for (std::int64_t i = 0; i < D / 2; ++i) {
      cos_t.push_back(static_cast<float>(std::cos(0.05 * p * (i + 1))));
      sin_t.push_back(static_cast<float>(std::sin(0.05 * p * (i + 1))));
    }
  }
  RopeSpec rope;
  rope.cos_table = cos_t.data();
  rope.sin_table = sin_t.data();
  rope.table_positions = positions;
  check_fused(decode_problem(2, 6, 3, D, 80), {63, 10}, rope);
}

}  // namespace
}  // namespace attnkit::testing
