// The Hopper prefill kernel's persistent walk (hopper_prefill.cuh: set_walk, unit_tile), on the
// host: no GPU needed, so it runs in CI too. Every (sequence-head pair, query tile, key split) is
// walked exactly once; causal pairs hold equal work, shorter tile first, and a pair's units are
// consecutive (docs/perf-notes.md, Hopper prefill round 16); an odd m_tiles' middle tiles come after
// their group's pairs, or after every pair (round 27).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "cuda/prefill_hopper/hopper_prefill.cuh"

namespace {

using attnkit::cuda_prefill_hopper::HopperParams;
using attnkit::cuda_prefill_hopper::set_walk;
using attnkit::cuda_prefill_hopper::TileCoord;
using attnkit::cuda_prefill_hopper::unit_tile;

struct Walked {
  std::map<std::tuple<int, int, int>, int> visits;  // (pair, m_rev, split) -> times walked
  int units = 0;
};

template <bool MiddlesLast = false>
Walked walk(int m_tiles, int pairs, int heads_per_group, int tiles_per_unit, int splits) {
  HopperParams hp{};
  hp.m_tiles = m_tiles;
  set_walk<MiddlesLast>(hp, pairs, heads_per_group, tiles_per_unit, splits);
  Walked w;
  w.units = hp.total_units;
  for (int u = 0; u < hp.total_units; ++u) {
    for (int k = 0; k < tiles_per_unit; ++k) {
      const TileCoord t = unit_tile<MiddlesLast>(hp, u, k);
      if (t.bh >= 0) ++w.visits[{t.bh, t.m_rev, t.split}];
    }
  }
  return w;
}

void expect_every_tile_once(const Walked& w, int m_tiles, int pairs, int splits, const std::string& what) {
  ASSERT_EQ(static_cast<int>(w.visits.size()), m_tiles * pairs * splits) << what;
  for (const auto& [tile, times] : w.visits) {
    const auto [bh, m_rev, split] = tile;
    EXPECT_TRUE(bh >= 0 && bh < pairs && m_rev >= 0 && m_rev < m_tiles && split >= 0 && split < splits) << what;
    EXPECT_EQ(times, 1) << what << ": pair " << bh << " tile " << m_rev << " split " << split;
  }
}

TEST(HopperWalk, SingleTilesAndSplitsVisitEveryTileOnce) {
  for (int m_tiles : {1, 2, 3, 7, 16})
    for (int pairs : {1, 5, 48, 97})
      for (int group : {1, 4, 48, 200})
        for (int splits : {1, 3}) {
          const std::string what = "m_tiles " + std::to_string(m_tiles) + " pairs " + std::to_string(pairs) +
                                   " group " + std::to_string(group) + " splits " + std::to_string(splits);
          expect_every_tile_once(walk(m_tiles, pairs, group, 1, splits), m_tiles, pairs, splits, what);
        }
}

// Both layouts of an odd m_tiles' middle tiles: after their group's pairs (MiddlesLast false), or
// after every pair (hopper_config.hpp's kMiddleTilesLast, round 27).
template <bool MiddlesLast>
void expect_causal_pairs_walk() {
  for (int m_tiles = 1; m_tiles <= 12; ++m_tiles)
    for (int pairs : {1, 2, 7, 48, 100})
      for (int group : {1, 3, 48}) {
        const std::string what = "m_tiles " + std::to_string(m_tiles) + " pairs " + std::to_string(pairs) + " group " +
                                 std::to_string(group) + (MiddlesLast ? ", middle tiles last" : "");
        expect_every_tile_once(walk<MiddlesLast>(m_tiles, pairs, group, 2, 1), m_tiles, pairs, 1, what);
        HopperParams hp{};
        hp.m_tiles = m_tiles;
        set_walk<MiddlesLast>(hp, pairs, group, 2, 1);
        int previous_pair = -1, singles = 0;
        for (int u = 0; u < hp.total_units; ++u) {
          const TileCoord a = unit_tile<MiddlesLast>(hp, u, 0), b = unit_tile<MiddlesLast>(hp, u, 1);
          ASSERT_GE(a.bh, 0) << what;
          if (b.bh < 0) {  // the middle tile of an odd m_tiles, after its group's pairs (or all pairs)
            EXPECT_EQ(a.m_rev, m_tiles / 2) << what;
            EXPECT_EQ(m_tiles % 2, 1) << what;
            const int pairs_before = MiddlesLast ? pairs : std::min(pairs, (a.bh / group + 1) * group);
            EXPECT_GE(u, (m_tiles / 2) * pairs_before) << what;
            ++singles;
            continue;
          }
          EXPECT_EQ(a.bh, b.bh) << what;
          // Shorter tile first (m_rev counts from the last query tile, the one with most keys),
          // and the two tiles' query rows add up to a constant: equal causal work.
          EXPECT_GT(a.m_rev, b.m_rev) << what;
          EXPECT_EQ(a.m_rev + b.m_rev, m_tiles - 1) << what;
          // A pair's two-tile units are consecutive: the pair index never goes back within a group.
          if (u % hp.group_units.divisor != 0 && previous_pair >= 0) EXPECT_GE(a.bh, previous_pair) << what;
          previous_pair = a.bh;
        }
        EXPECT_EQ(singles, m_tiles % 2 ? pairs : 0) << what;
      }
}

TEST(HopperWalk, CausalPairsVisitEveryTileOnceWithEqualWork) { expect_causal_pairs_walk<false>(); }

TEST(HopperWalk, CausalPairsWithTheMiddleTilesLast) { expect_causal_pairs_walk<true>(); }

TEST(HopperWalk, EmptyProblemWalksNothing) {
  EXPECT_EQ(walk(0, 5, 4, 1, 1).units, 0);
  EXPECT_EQ(walk(3, 0, 4, 2, 1).units, 0);
}

}  // namespace
