// The golden checked against answers derived independently: a brute-force softmax written here,
// and identities that hold for any q (uniform V, a single key, an empty row, rotations).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "cpu_case.hpp"

namespace attnkit::testing {
namespace {

// Brute force for one decode row: every key scored, masked ones excluded by index arithmetic
// written from the problem.hpp convention (keys j with len - window <= j < len).
void brute_force_decode_row(const DecodeCase& c, std::int64_t b, std::int64_t h, std::vector<double>& out,
                            double& lse) {
  const DecodeProblem& p = c.problem;
  const std::int64_t D = p.head_dim, S = p.max_seq, G = p.kv_heads;
  const std::int64_t kvh = h / (p.num_heads / p.kv_heads);
  const std::int64_t len = c.lengths.view.as<std::int32_t>()[b];
  const std::int64_t first = p.options.window > 0 ? std::max<std::int64_t>(0, len - p.options.window) : 0;
  // The problem's scale is an f32 (1/sqrt(head_dim) rounded when left 0); the golden uses it as given.
  const double scale = p.options.scale > 0 ? p.options.scale : static_cast<double>(1.0f / std::sqrt(static_cast<float>(D)));
  std::vector<double> w;
  for (std::int64_t j = first; j < len; ++j) {
    double s = 0;
    for (std::int64_t d = 0; d < D; ++d) {
      s += static_cast<double>(c.q.get(static_cast<std::size_t>((b * p.num_heads + h) * D + d))) *
           c.k_cache.get(static_cast<std::size_t>(((b * G + kvh) * S + j) * D + d));
    }
    s *= scale;
    if (p.options.softcap > 0) s = p.options.softcap * std::tanh(s / p.options.softcap);
    w.push_back(s);
  }
  out.assign(static_cast<std::size_t>(D), 0.0);
  if (w.empty()) {
    lse = -std::numeric_limits<double>::infinity();
    return;
  }
  double sum = 0;
  for (double s : w) sum += std::exp(s);  // small magnitudes: no max shift needed
  lse = std::log(sum);
  for (std::int64_t j = first; j < len; ++j) {
    const double prob = std::exp(w[static_cast<std::size_t>(j - first)]) / sum;
    for (std::int64_t d = 0; d < D; ++d) {
      out[static_cast<std::size_t>(d)] += prob * c.v_cache.get(static_cast<std::size_t>(((b * G + kvh) * S + j) * D + d));
    }
  }
}

TEST(Reference, DecodeMatchesBruteForceSoftmax) {
  for (std::int64_t window : {0, 3}) {
    for (float softcap : {0.0f, 2.5f}) {
      DecodeProblem p = decode_problem(3, 4, 2, 8, 9);
      p.options.window = window;
      p.options.softcap = softcap;
      p.options.scale = softcap > 0 ? 0.9f : 0.0f;
      DecodeCase c(p, {9, 5, 0}, 0.7f);
      const reference::Result r = reference::decode(p, c.tensors());
      for (std::int64_t b = 0; b < p.batch; ++b) {
        for (std::int64_t h = 0; h < p.num_heads; ++h) {
          std::vector<double> out;
          double lse;
          brute_force_decode_row(c, b, h, out, lse);
          const std::size_t row = static_cast<std::size_t>(b * p.num_heads + h);
          if (std::isinf(lse)) {
            EXPECT_TRUE(std::isinf(r.lse[row]) && r.lse[row] < 0);
          } else {
            EXPECT_NEAR(r.lse[row], lse, 1e-12) << seed_note(c.seed);
          }
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            EXPECT_NEAR(r.out[row * p.head_dim + d], out[static_cast<std::size_t>(d)], 1e-12)
                << "window=" << window << " softcap=" << softcap << seed_note(c.seed);
          }
        }
      }
    }
  }
}

TEST(Reference, UniformValuesGiveThatValue) {
  DecodeProblem p = decode_problem(2, 8, 2, 16, 40);
  DecodeCase c(p, {40, 17}, 3.0f);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t g = 0; g < 2; ++g) {
      for (std::int64_t j = 0; j < 40; ++j) {
        for (std::int64_t d = 0; d < 16; ++d) {
          c.v_cache.set(static_cast<std::size_t>(((b * 2 + g) * 40 + j) * 16 + d), static_cast<float>(g * 100 + d));
        }
      }
    }
  }
  const reference::Result r = reference::decode(p, c.tensors());
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 8; ++h) {
      for (std::int64_t d = 0; d < 16; ++d) {
        EXPECT_NEAR(r.out[static_cast<std::size_t>((b * 8 + h) * 16 + d)], (h / 4) * 100 + d, 1e-9);
      }
    }
  }
}

TEST(Reference, OneKeyGivesItsValueAndItsScore) {
  DecodeProblem p = decode_problem(1, 4, 4, 32, 6);
  DecodeCase c(p, {1});
  const reference::Result r = reference::decode(p, c.tensors());
  for (std::int64_t h = 0; h < 4; ++h) {
    double dot = 0;
    for (std::int64_t d = 0; d < 32; ++d) {
      dot += static_cast<double>(c.q.get(static_cast<std::size_t>(h * 32 + d))) *
             c.k_cache.get(static_cast<std::size_t>(h * 6 * 32 + d));
      EXPECT_DOUBLE_EQ(r.out[static_cast<std::size_t>(h * 32 + d)], c.v_cache.get(static_cast<std::size_t>(h * 6 * 32 + d)));
    }
    EXPECT_NEAR(r.lse[static_cast<std::size_t>(h)], dot * static_cast<double>(1.0f / std::sqrt(32.0f)), 1e-12);
  }
}

TEST(Reference, EmptyRowIsZeroWithMinusInfinityLse) {
  DecodeProblem p = decode_problem(2, 2, 1, 8, 4);
  DecodeCase c(p, {0, 4});
  const reference::Result r = reference::decode(p, c.tensors());
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(r.out[i], 0.0);
  EXPECT_TRUE(std::isinf(r.lse[0]) && r.lse[0] < 0);
  EXPECT_TRUE(std::isinf(r.lse[1]) && r.lse[1] < 0);
  EXPECT_TRUE(std::isfinite(r.lse[2]));
}

// The last row of a causal prefill over n keys is the decode of a sequence of length n.
TEST(Reference, CausalPrefillLastRowEqualsDecode) {
  const std::int64_t n = 23, D = 16;
  for (std::int64_t window : {0, 5}) {
    DecodeProblem dp = decode_problem(1, 4, 2, D, n);
    dp.options.window = window;
    DecodeCase c(dp, {static_cast<std::int32_t>(n)});
    PrefillProblem pp = prefill_problem(1, 4, 2, D, 7, n, true);
    pp.options.window = window;
    HostTensor q(DType::kF32, {1, 4, 7, D});
    std::mt19937_64 rng(c.seed);
    fill_normal(q, rng);
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t d = 0; d < D; ++d) {
        q.set(static_cast<std::size_t>((h * 7 + 6) * D + d), c.q.get(static_cast<std::size_t>(h * D + d)));
      }
    }
    PrefillTensors t;
    t.q = q.view;
    t.k = c.k_cache.view;
    t.v = c.v_cache.view;
    const reference::Result rp = reference::prefill(pp, t);
    const reference::Result rd = reference::decode(dp, c.tensors());
    for (std::int64_t h = 0; h < 4; ++h) {
      EXPECT_NEAR(rp.lse[static_cast<std::size_t>(h * 7 + 6)], rd.lse[static_cast<std::size_t>(h)], 1e-12);
      for (std::int64_t d = 0; d < D; ++d) {
        EXPECT_NEAR(rp.out[static_cast<std::size_t>((h * 7 + 6) * D + d)], rd.out[static_cast<std::size_t>(h * D + d)],
                    1e-12);
      }
    }
  }
}

TEST(Reference, RopeFormulaAndIdentities) {
  const std::int64_t D = 16;
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<double> dist;
  std::vector<double> x(D);
  for (double& v : x) v = dist(rng);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    RopeSpec spec;
    spec.style = style;
    spec.theta = 500.0f;
    std::vector<double> y = x;
    reference::rope(y.data(), D, 0, spec);
    for (std::int64_t d = 0; d < D; ++d) EXPECT_DOUBLE_EQ(y[d], x[d]);  // position 0 is the identity
    const std::int64_t pos = 37;
    y = x;
    reference::rope(y.data(), D, pos, spec);
    for (std::int64_t i = 0; i < D / 2; ++i) {
      const std::int64_t a = style == RopeStyle::kHalf ? i : 2 * i;
      const std::int64_t b = style == RopeStyle::kHalf ? i + D / 2 : 2 * i + 1;
      const double angle = pos / std::pow(500.0, 2.0 * i / D);
      EXPECT_NEAR(y[a], x[a] * std::cos(angle) - x[b] * std::sin(angle), 1e-12);
      EXPECT_NEAR(y[b], x[a] * std::sin(angle) + x[b] * std::cos(angle), 1e-12);
    }
  }
}

}  // namespace
}  // namespace attnkit::testing
