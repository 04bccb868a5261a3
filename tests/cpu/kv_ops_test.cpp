// KV append (exact copies at positions[b], nothing else touched), RoPE (half and interleaved,
// theta or tables) against reference::rope, and merging split states against the unsplit golden.
#include <gtest/gtest.h>

#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

std::size_t row_offset(std::int64_t b, std::int64_t g, std::int64_t pos, std::int64_t G, std::int64_t S,
                       std::int64_t D) {
  return static_cast<std::size_t>(((b * G + g) * S + pos) * D);
}

TEST(AppendKv, KOnlyVOnlyAndBothAreExactAndTouchNothingElse) {
  const std::int64_t B = 3, G = 2, S = 11, D = 24;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int mode = 0; mode < 3; ++mode) {  // 0: K only, 1: V only, 2: both
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      HostTensor kc(dtype, {B, G, S, D}), vc(dtype, {B, G, S, D}), kn(dtype, {B, G, D}), vn(dtype, {B, G, D});
      HostTensor pos(DType::kI32, {B});
      fill_normal(kc, rng), fill_normal(vc, rng), fill_normal(kn, rng), fill_normal(vn, rng);
      const std::int32_t positions[B] = {0, 10, 5};
      for (int b = 0; b < B; ++b) pos.i32()[b] = positions[b];
      const auto k_before = snapshot(kc), v_before = snapshot(vc);
      AppendTensors t;
      if (mode != 1) t.k_new = kn.view, t.k_cache = kc.view;
      if (mode != 0) t.v_new = vn.view, t.v_cache = vc.view;
      t.positions = pos.view;
      cpu::append_kv(t);
      const std::size_t elem = dtype_size(dtype);
      for (int which = 0; which < 2; ++which) {
        const bool written = which == 0 ? mode != 1 : mode != 0;
        const HostTensor& cache = which == 0 ? kc : vc;
        const HostTensor& src = which == 0 ? kn : vn;
        std::vector<std::uint8_t> expected = which == 0 ? k_before : v_before;
        if (written) {
          for (std::int64_t b = 0; b < B; ++b) {
            for (std::int64_t g = 0; g < G; ++g) {
              std::memcpy(expected.data() + row_offset(b, g, positions[b], G, S, D) * elem,
                          src.bytes.data() + static_cast<std::size_t>((b * G + g) * D) * elem,
                          static_cast<std::size_t>(D) * elem);
            }
          }
        }
        EXPECT_EQ(cache.bytes, expected) << "mode=" << mode << " cache=" << which << " dtype=" << dtype_name(dtype)
                                         << seed_note(seed);
      }
    }
  }
}

TEST(ApplyRope, HalfAndInterleavedMatchReferenceWithThetaAndTables) {
  const std::int64_t B = 3, H = 5, D = 80;
  const std::int32_t positions[B] = {0, 7, 4095};
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    for (bool tables : {false, true}) {
      RopeSpec spec;
      spec.style = style;
      spec.theta = 10000.0f;
      std::vector<float> cos_t, sin_t;
      if (tables) {
        // Tables of a different frequency law than theta, so using theta by mistake fails.
        spec.table_positions = 4096;
        for (std::int64_t p = 0; p < spec.table_positions; ++p) {
          for (std::int64_t i = 0; i < D / 2; ++i) {
            const double angle = 0.001 * static_cast<double>(p) * static_cast<double>(i + 1);
            cos_t.push_back(static_cast<float>(std::cos(angle)));
            sin_t.push_back(static_cast<float>(std::sin(angle)));
          }
        }
        spec.cos_table = cos_t.data();
        spec.sin_table = sin_t.data();
      }
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      HostTensor x(DType::kF32, {B, H, D}), pos(DType::kI32, {B});
      fill_normal(x, rng);
      for (int b = 0; b < B; ++b) pos.i32()[b] = positions[b];
      std::vector<double> expected(x.numel());
      for (std::size_t i = 0; i < x.numel(); ++i) expected[i] = x.get(i);
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t h = 0; h < H; ++h) {
          reference::rope(&expected[static_cast<std::size_t>((b * H + h) * D)], D, positions[b], spec);
        }
      }
      cpu::apply_rope(x.view, pos.view, spec);
      const Comparison c = compare(x, expected);
      EXPECT_LE(c.max_abs, 1e-5) << "style=" << to_string(style) << " tables=" << tables << " " << describe(c)
                                 << seed_note(seed);
      EXPECT_EQ(c.nan_count, 0u);
    }
  }
}

TEST(ApplyRope, HalfAndInterleavedAreThePairPermutationOfEachOther) {
  // Interleaved rotation of x equals half rotation of x with pairs (2i, 2i+1) moved to (i, i+D/2).
  const std::int64_t D = 64;
  HostTensor a(DType::kF32, {1, 1, D}), b(DType::kF32, {1, 1, D}), pos(DType::kI32, {1});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(a, rng);
  for (std::int64_t i = 0; i < D / 2; ++i) {
    b.set(static_cast<std::size_t>(i), a.get(static_cast<std::size_t>(2 * i)));
    b.set(static_cast<std::size_t>(i + D / 2), a.get(static_cast<std::size_t>(2 * i + 1)));
  }
  pos.i32()[0] = 123;
  RopeSpec inter, half;
  inter.style = RopeStyle::kInterleaved;
  cpu::apply_rope(a.view, pos.view, inter);
  cpu::apply_rope(b.view, pos.view, half);
  for (std::int64_t i = 0; i < D / 2; ++i) {
    EXPECT_EQ(a.get(static_cast<std::size_t>(2 * i)), b.get(static_cast<std::size_t>(i)));
    EXPECT_EQ(a.get(static_cast<std::size_t>(2 * i + 1)), b.get(static_cast<std::size_t>(i + D / 2)));
  }
}

TEST(ApplyRope, StorageDtypesRoundOnce) {
  const std::int64_t B = 2, H = 3, D = 128;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    HostTensor x(dtype, {B, H, D}), pos(DType::kI32, {B});
    std::mt19937_64 rng(fresh_seed());
    fill_normal(x, rng);
    pos.i32()[0] = 3, pos.i32()[1] = 999;
    std::vector<double> expected(x.numel());
    for (std::size_t i = 0; i < x.numel(); ++i) expected[i] = x.get(i);
    RopeSpec spec;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        reference::rope(&expected[static_cast<std::size_t>((b * H + h) * D)], D, pos.i32()[b], spec);
    cpu::apply_rope(x.view, pos.view, spec);
    expect_matches_golden(x, expected, dtype, std::string("rope ") + std::string(dtype_name(dtype)));
  }
}

// Split states computed by the golden over key ranges (a non-causal one-row prefill per range),
// merged, and compared with the golden over all keys.
TEST(MergeStates, SplitsEqualTheUnsplitGolden) {
  const std::int64_t H = 6, D = 64, N = 157;
  const std::vector<std::int64_t> bounds = {0, 40, 40, 101, 157};  // split 1 is empty
  const std::int64_t splits = static_cast<std::int64_t>(bounds.size()) - 1;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  HostTensor q(DType::kF32, {1, H, 1, D}), k(DType::kF32, {1, H, N, D}), v(DType::kF32, {1, H, N, D});
  fill_normal(q, rng), fill_normal(k, rng, 2.0f), fill_normal(v, rng);
  std::vector<reference::Result> parts(static_cast<std::size_t>(splits));
  HostTensor lse_partial(DType::kF32, {splits, H});
  for (std::int64_t s = 0; s < splits; ++s) {
    const std::int64_t n = bounds[s + 1] - bounds[s];
    for (std::int64_t h = 0; h < H; ++h) lse_partial.set(static_cast<std::size_t>(s * H + h), -INFINITY);
    if (n == 0) continue;
    PrefillTensors t;
    t.q = q.view;
    t.k = k.view;
    t.v = v.view;
    t.k.data = k.bytes.data() + bounds[s] * D * 4;
    t.v.data = v.bytes.data() + bounds[s] * D * 4;
    t.k.shape[2] = t.v.shape[2] = n;
    parts[static_cast<std::size_t>(s)] = reference::prefill(prefill_problem(1, H, H, D, 1, n, false), t);
    for (std::int64_t h = 0; h < H; ++h) {
      lse_partial.set(static_cast<std::size_t>(s * H + h),
                      static_cast<float>(parts[static_cast<std::size_t>(s)].lse[static_cast<std::size_t>(h)]));
    }
  }
  PrefillTensors whole;
  whole.q = q.view, whole.k = k.view, whole.v = v.view;
  const reference::Result golden = reference::prefill(prefill_problem(1, H, H, D, 1, N, false), whole);
  // Partial outputs in every storage dtype (a cascade's partials are its attention calls' outputs).
  for (DType partial_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    HostTensor out_partial(partial_dtype, {splits, H, D});
    poison(out_partial);  // the empty split's out stays NaN: it must not leak into the merge
    for (std::int64_t s = 0; s < splits; ++s) {
      if (bounds[s + 1] == bounds[s]) continue;
      for (std::size_t i = 0; i < static_cast<std::size_t>(H * D); ++i) {
        out_partial.set(static_cast<std::size_t>(s * H * D) + i, static_cast<float>(parts[static_cast<std::size_t>(s)].out[i]));
      }
    }
    for (DType out_dtype : {DType::kF32, DType::kBF16}) {
      HostTensor out(out_dtype, {H, D}), lse(DType::kF32, {H});
      poison(out), poison(lse);
      cpu::merge_states({out_partial.view, lse_partial.view, out.view, lse.view});
      const DType loosest = out_dtype == DType::kBF16 ? DType::kBF16 : partial_dtype;
      const std::string note = "merge of " + std::string(dtype_name(partial_dtype)) + " partials" + seed_note(seed);
      expect_matches_golden(out, golden.out, loosest, note);
      expect_lse_matches(lse, golden.lse, note + " lse");
    }
  }
}

TEST(MergeStates, AllSplitsEmptyGiveZerosAndMinusInfinity) {
  HostTensor out_partial(DType::kF32, {3, 2, 8}), lse_partial(DType::kF32, {3, 2});
  HostTensor out(DType::kF32, {2, 8}), lse(DType::kF32, {2});
  poison(out_partial), poison(out), poison(lse);
  for (std::size_t i = 0; i < 6; ++i) lse_partial.set(i, -INFINITY);
  cpu::merge_states({out_partial.view, lse_partial.view, out.view, lse.view});
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(out.get(i), 0.0f);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(std::isinf(lse.get(i)) && lse.get(i) < 0);
}

}  // namespace
}  // namespace attnkit::testing
