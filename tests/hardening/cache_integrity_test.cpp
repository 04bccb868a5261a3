// Randomized KV-cache integrity: thousands of random appends (accepted and rejected), fused
// RoPE + append + decode steps and plain decode calls against a model of the cache the test keeps
// byte for byte. After every call the caches equal the model; a call is accepted exactly when the
// model says it is valid; accepted attention calls match the float64 golden.
#include <random>

#include "hardening_support.hpp"

namespace attnkit::testing {
namespace {

constexpr std::int64_t kBatch = 3, kHeads = 4, kKvHeads = 2, kDim = 16, kMaxSeq = 24;

struct Model {
  std::vector<std::uint8_t> k, v;
  // Writes one new row (bytes of [batch, kv_heads, head_dim]) at positions[b] of every (b, g).
  static void write(std::vector<std::uint8_t>& cache, const HostTensor& rows, const std::vector<std::int32_t>& pos,
                    std::size_t esize) {
    const std::size_t row = static_cast<std::size_t>(kDim) * esize;
    for (std::int64_t b = 0; b < kBatch; ++b) {
      for (std::int64_t g = 0; g < kKvHeads; ++g) {
        const std::size_t src = static_cast<std::size_t>(b * kKvHeads + g) * row;
        const std::size_t dst = (static_cast<std::size_t>((b * kKvHeads + g) * kMaxSeq + pos[static_cast<std::size_t>(b)])) * row;
        std::memcpy(cache.data() + dst, rows.bytes.data() + src, row);
      }
    }
  }
};

TEST(CacheIntegrity, RandomAppendsAndAttentionCallsKeepTheCacheEqualToItsModel) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::string note = seed_note(seed);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const std::size_t esize = dtype_size(dtype);
    DecodeProblem p = decode_problem(kBatch, kHeads, kKvHeads, kDim, kMaxSeq, dtype);
    const DecodePlan scalar_plan = plan_decode(p, cpu_target(1), KernelFamily::kScalarOnline);
    const DecodePlan fast_plan = plan_decode(p, cpu_target(2));
    std::vector<std::uint8_t> workspace(std::max(scalar_plan.evidence.workspace_bytes, fast_plan.evidence.workspace_bytes));
    const Workspace ws{workspace.data(), workspace.size()};

    HostTensor kc(dtype, {kBatch, kKvHeads, kMaxSeq, kDim}), vc(dtype, {kBatch, kKvHeads, kMaxSeq, kDim});
    fill_normal(kc, rng);
    fill_normal(vc, rng);
    Model model{kc.bytes, vc.bytes};
    HostTensor kn(dtype, {kBatch, kKvHeads, kDim}), vn(dtype, {kBatch, kKvHeads, kDim});
    HostTensor kn_wrong_dtype(dtype == DType::kF32 ? DType::kF16 : DType::kF32, {kBatch, kKvHeads, kDim});
    HostTensor kn_wrong_shape(dtype, {kBatch, kKvHeads + 1, kDim});
    HostTensor pos(DType::kI32, {kBatch}), q(dtype, {kBatch, kHeads, kDim});
    HostTensor out(dtype, {kBatch, kHeads, kDim}), lse(DType::kF32, {kBatch, kHeads}), lengths(DType::kI32, {kBatch});

    int accepted = 0, rejected = 0, attention = 0;
    std::uniform_int_distribution<int> op_dist(0, 9), pos_dist(0, kMaxSeq - 1);
    for (int step = 0; step < 2000; ++step) {
      const int op = op_dist(rng);
      // Positions: usually valid, sometimes one bad entry (negative, == max_seq, huge).
      std::vector<std::int32_t> positions(kBatch);
      for (auto& x : positions) x = pos_dist(rng);
      bool valid = true;
      if (rng() % 4 == 0) {
        static constexpr std::int32_t kBad[] = {-1, kMaxSeq, kMaxSeq + 7, std::numeric_limits<std::int32_t>::min(),
                                                std::numeric_limits<std::int32_t>::max()};
        positions[rng() % kBatch] = kBad[rng() % 5];
        valid = false;
      }
      for (std::int64_t b = 0; b < kBatch; ++b) pos.i32()[b] = positions[static_cast<std::size_t>(b)];
      fill_normal(kn, rng);
      fill_normal(vn, rng);
      const std::string what = "step " + std::to_string(step) + " op " + std::to_string(op) + " " +
                               std::string(dtype_name(dtype)) + note;
      bool threw = false;
      std::string message;
      try {
        if (op <= 2) {  // append K, V or both
          AppendTensors t;
          if (op != 1) t.k_new = kn.view, t.k_cache = kc.view;
          if (op != 0) t.v_new = vn.view, t.v_cache = vc.view;
          t.positions = pos.view;
          cpu::append_kv(t);
          if (op != 1) Model::write(model.k, kn, positions, esize);
          if (op != 0) Model::write(model.v, vn, positions, esize);
        } else if (op == 3) {  // a malformed append: wrong dtype or shape of k_new, otherwise valid
          valid = false;
          const HostTensor& bad = rng() % 2 ? kn_wrong_dtype : kn_wrong_shape;
          cpu::append_kv({bad.view, vn.view, kc.view, vc.view, pos.view});
        } else if (op <= 6) {  // fused RoPE + append + decode; the model rotates k_new with apply_rope
          fill_normal(q, rng);
          const DecodePlan& plan = op == 4 ? scalar_plan : fast_plan;
          HostTensor rotated(dtype, {kBatch, kKvHeads, kDim});
          rotated.bytes = kn.bytes;
          cpu::fused_rope_append_decode(plan, {q.view, kn.view, vn.view, kc.view, vc.view, pos.view, out.view, lse.view},
                                        RopeSpec{}, ws);
          // Accepted, so the positions were valid: the model applies the same RoPE then writes.
          cpu::apply_rope(rotated.view, pos.view, RopeSpec{});
          Model::write(model.k, rotated, positions, esize);
          Model::write(model.v, vn, positions, esize);
          ++attention;
        } else {  // decode over random lengths (sometimes out of range): never writes the cache
          fill_normal(q, rng);
          for (std::int64_t b = 0; b < kBatch; ++b) lengths.i32()[b] = static_cast<std::int32_t>(rng() % (kMaxSeq + 1));
          if (rng() % 5 == 0) {
            lengths.i32()[rng() % kBatch] = rng() % 2 ? -1 : kMaxSeq + 1;
            valid = false;
          } else {
            valid = true;  // positions play no part
          }
          poison(out);
          poison(lse);
          const DecodeTensors t{q.view, kc.view, vc.view, lengths.view, out.view, lse.view};
          cpu::decode(op == 7 ? scalar_plan : fast_plan, t, ws);
          if (step % 10 == 0) {  // the golden is slow: check a tenth of them
            const reference::Result golden = reference::decode(p, t);
            expect_matches_golden(out, golden.out, dtype, what);
            expect_lse_matches(lse, golden.lse, what);
          }
          ++attention;
        }
      } catch (const Error& e) {
        threw = true;
        message = e.what();
      }
      ASSERT_EQ(threw, !valid) << what << (threw ? ": rejected a valid call: " + message : ": accepted an invalid call");
      if (threw) {
        ASSERT_NE(message.find("Fix:"), std::string::npos) << what << ": " << message;
        ++rejected;
      } else {
        ++accepted;
      }
      ASSERT_TRUE(kc.bytes == model.k) << what << ": k_cache differs from the model";
      ASSERT_TRUE(vc.bytes == model.v) << what << ": v_cache differs from the model";
    }
    EXPECT_GT(accepted, 500) << note;
    EXPECT_GT(rejected, 200) << note;
    EXPECT_GT(attention, 500) << note;
  }
}

}  // namespace
}  // namespace attnkit::testing
