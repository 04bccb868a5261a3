// The closed-form visible-pair and tile-visit sums against brute force over every row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "attnkit/error.hpp"
#include "attnkit/problem.hpp"
#include "plan/evidence.hpp"

using namespace attnkit;

namespace {

detail::VisibleRows brute_force(std::int64_t q_len, std::int64_t kv_len, bool causal, std::int64_t window,
                                std::uint32_t tile) {
  detail::VisibleRows r;
  std::int64_t lo = kv_len, hi = 0;
  for (std::int64_t row = 0; row < q_len; ++row) {
    const KeyRange keys = visible_keys(row + kv_len - q_len, kv_len, causal, window);
    // Count key by key, not by the range's size, so the brute force shares nothing with the formula.
    std::uint64_t seen = 0;
    for (std::int64_t k = 0; k < kv_len; ++k) {
      const std::int64_t pos = row + kv_len - q_len;
      const bool visible = (!causal || k <= pos) && (window == 0 || k > pos - window);
      if (visible) {
        ++seen;
        lo = std::min(lo, k);
        hi = std::max(hi, k + 1);
      }
    }
    EXPECT_EQ(seen, static_cast<std::uint64_t>(keys.size()));
    r.pairs += seen;
    r.tile_visits += (seen + tile - 1) / tile;
  }
  r.keys_seen = hi > lo ? static_cast<std::uint64_t>(hi - lo) : 0;
  return r;
}

}  // namespace

TEST(VisibleRows, MatchesBruteForceOnSmallShapes) {
  int checked = 0;
  for (bool causal : {false, true}) {
    for (std::int64_t kv_len : {1, 2, 3, 7, 16, 33}) {
      for (std::int64_t q_len : {1, 2, 5, 16, 33, 40}) {
        if (causal && q_len > kv_len) continue;  // invalid: validate() rejects it
        for (std::int64_t window : {0, 1, 2, 3, 8, 31, 64}) {
          for (std::uint32_t tile : {1u, 3u, 4u, 16u}) {
            const auto want = brute_force(q_len, kv_len, causal, window, tile);
            const auto got = detail::sum_visible_rows(q_len, kv_len, causal, window, tile);
            ASSERT_EQ(got.pairs, want.pairs) << q_len << "x" << kv_len << " causal " << causal << " w " << window;
            ASSERT_EQ(got.tile_visits, want.tile_visits)
                << q_len << "x" << kv_len << " causal " << causal << " w " << window << " tile " << tile;
            ASSERT_EQ(got.keys_seen, want.keys_seen) << q_len << "x" << kv_len << " causal " << causal << " w " << window;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(VisibleRows, ClosedFormsOfTheCommonCases) {
  // Square causal: n (n + 1) / 2 pairs; full: q * kv.
  EXPECT_EQ(detail::sum_visible_rows(1000, 1000, true, 0, 1).pairs, 1000ull * 1001 / 2);
  EXPECT_EQ(detail::sum_visible_rows(300, 1000, false, 0, 1).pairs, 300ull * 1000);
  // Decode (one row) with a window sees min(kv_len, window) keys.
  EXPECT_EQ(detail::sum_visible_rows(1, 4096, true, 1024, 1).pairs, 1024u);
  EXPECT_EQ(detail::sum_visible_rows(1, 4096, true, 8192, 1).keys_seen, 4096u);
}

TEST(VisibleRows, ExactAndFastForMillionRowPrefill) {
  // Causal 1e6 x 1e6: n (n + 1) / 2 exactly; with a window w: the first w rows ramp, the rest see w.
  const std::int64_t n = 1'000'000, w = 4096;
  EXPECT_EQ(detail::sum_visible_rows(n, n, true, 0, 128).pairs, static_cast<std::uint64_t>(n) * (n + 1) / 2);
  const std::uint64_t ramp = static_cast<std::uint64_t>(w) * (w + 1) / 2;
  EXPECT_EQ(detail::sum_visible_rows(n, n, true, w, 128).pairs, ramp + static_cast<std::uint64_t>(n - w) * w);
  // Tiles: rows past the ramp touch exactly w / 128 = 32 tiles each.
  std::uint64_t ramp_tiles = 0;
  for (std::int64_t v = 1; v <= w; ++v) ramp_tiles += (v + 127) / 128;
  EXPECT_EQ(detail::sum_visible_rows(n, n, true, w, 128).tile_visits, ramp_tiles + static_cast<std::uint64_t>(n - w) * 32);
}
