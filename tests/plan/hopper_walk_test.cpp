// The Hopper prefill kernel's persistent walk (src/cuda/prefill_hopper/hopper_walk.hpp), on the
// host: plain C++, so it runs without a GPU. Every (sequence-head pair, query tile, key split) is
// walked exactly once, through the blocks' steps as the kernel takes them; causal pairs hold equal
// work, shorter tile first, a pair's units consecutive (docs/perf-notes.md, Hopper prefill round
// 16), an odd m_tiles' middle tiles after every pair (round 27), then the tail's single tiles,
// longest first (round 28).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/prefill_hopper/hopper_walk.hpp"

namespace {

using attnkit::cuda_prefill_hopper::HopperWalk;
using attnkit::cuda_prefill_hopper::make_walk;
using attnkit::cuda_prefill_hopper::round_slot;
using attnkit::cuda_prefill_hopper::step_tile;
using attnkit::cuda_prefill_hopper::TileCoord;
using attnkit::cuda_prefill_hopper::unit_tile;

using Visits = std::map<std::tuple<int, int, int>, int>;  // (pair, m_rev, split) -> times walked

// What every block's steps take (the kernel's order), and that the units, one by one, hold the same
// tiles and go to the same blocks by round_slot (the planner's model deals them so).
Visits walk_steps(const HopperWalk& w, const std::string& what) {
  Visits visits;
  std::map<std::pair<int, std::tuple<int, int, int>>, int> by_step, by_unit;  // (block, tile) -> times
  for (int block = 0; block < w.grid; ++block) {
    for (int step = 0; step < w.steps; ++step) {
      const TileCoord t = step_tile(w, block, step);
      if (t.bh < 0) continue;
      ++visits[{t.bh, t.m_rev, t.split}];
      ++by_step[{block, {t.bh, t.m_rev, t.split}}];
    }
  }
  for (int u = 0; u < w.total_units; ++u) {
    const int round = u / w.grid, block = round_slot(w, round, u - round * w.grid);
    for (int k = 0; k < w.tiles_per_unit; ++k) {
      const TileCoord t = unit_tile(w, u, k);
      if (t.bh >= 0) ++by_unit[{block, {t.bh, t.m_rev, t.split}}];
    }
  }
  EXPECT_EQ(by_step, by_unit) << what;
  return visits;
}

void expect_every_tile_once(const Visits& visits, int m_tiles, int pairs, int splits, const std::string& what) {
  ASSERT_EQ(static_cast<int>(visits.size()), m_tiles * pairs * splits) << what;
  for (const auto& [tile, times] : visits) {
    const auto [bh, m_rev, split] = tile;
    EXPECT_TRUE(bh >= 0 && bh < pairs && m_rev >= 0 && m_rev < m_tiles && split >= 0 && split < splits) << what;
    EXPECT_EQ(times, 1) << what << ": pair " << bh << " tile " << m_rev << " split " << split;
  }
}

TEST(HopperWalk, SingleTilesAndSplitsVisitEveryTileOnce) {
  for (int m_tiles : {1, 2, 3, 7, 16})
    for (int pairs : {1, 5, 48, 97})
      for (int group : {1, 4, 48, 200})
        for (int splits : {1, 3})
          for (int grid : {1, 5, 132}) {
            const std::string what = "m_tiles " + std::to_string(m_tiles) + " pairs " + std::to_string(pairs) +
                                     " group " + std::to_string(group) + " splits " + std::to_string(splits) +
                                     " grid " + std::to_string(grid);
            const HopperWalk w = make_walk(m_tiles, pairs, group, 1, splits, /*tail_pairs=*/3, grid);
            EXPECT_EQ(w.tail_units, w.total_units) << what << ": single tiles have no tail";
            expect_every_tile_once(walk_steps(w, what), m_tiles, pairs, splits, what);
          }
}

TEST(HopperWalk, CausalPairsThenMiddleTilesThenTheTailLongestFirst) {
  for (int m_tiles = 1; m_tiles <= 12; ++m_tiles)
    for (int pairs : {1, 2, 7, 48, 100})
      for (int group : {1, 3, 48})
        for (int tail : {0, 1, pairs / 2, pairs})
          for (int grid : {1, 7, 132}) {
            const std::string what = "m_tiles " + std::to_string(m_tiles) + " pairs " + std::to_string(pairs) +
                                     " group " + std::to_string(group) + " tail " + std::to_string(tail) + " grid " +
                                     std::to_string(grid);
            const HopperWalk w = make_walk(m_tiles, pairs, group, 2, 1, tail, grid);
            expect_every_tile_once(walk_steps(w, what), m_tiles, pairs, 1, what);
            const int head = pairs - tail;
            int previous_pair = -1, middles = 0, previous_tail_m_rev = 0;
            for (int u = 0; u < w.total_units; ++u) {
              const TileCoord a = unit_tile(w, u, 0), b = unit_tile(w, u, 1);
              ASSERT_GE(a.bh, 0) << what;
              if (u >= w.tail_units) {  // the tail: its pairs' single tiles, never shorter than the next
                EXPECT_LT(b.bh, 0) << what;
                EXPECT_GE(a.bh, head) << what;
                EXPECT_GE(a.m_rev, previous_tail_m_rev) << what << " unit " << u;
                previous_tail_m_rev = a.m_rev;
                continue;
              }
              EXPECT_LT(a.bh, head) << what;
              if (b.bh < 0) {  // the middle tile of an odd m_tiles, after every pair's units
                EXPECT_EQ(a.m_rev, m_tiles / 2) << what;
                EXPECT_EQ(m_tiles % 2, 1) << what;
                EXPECT_GE(u, (m_tiles / 2) * head) << what;
                ++middles;
                continue;
              }
              EXPECT_EQ(a.bh, b.bh) << what;
              // Shorter tile first (m_rev counts from the last query tile, the one with most keys),
              // and the two tiles' query rows add up to a constant: equal causal work.
              EXPECT_GT(a.m_rev, b.m_rev) << what;
              EXPECT_EQ(a.m_rev + b.m_rev, m_tiles - 1) << what;
              // A pair's two-tile units are consecutive: the pair index never goes back.
              EXPECT_GE(a.bh, previous_pair) << what;
              previous_pair = a.bh;
            }
            EXPECT_EQ(middles, m_tiles % 2 ? head : 0) << what;
          }
}

// The rounds that hold a two-tile unit take two steps of every block, the tail's later rounds
// one: a block's steps are as few as its units' tiles allow.
TEST(HopperWalk, TailRoundsTakeOneStep) {
  const HopperWalk w = make_walk(/*m_tiles=*/128, /*pairs=*/16, 3, 2, 1, /*tail_pairs=*/2, /*grid=*/132);
  EXPECT_EQ(w.total_units, 64 * 14 + 2 * 128);
  EXPECT_EQ(w.two_step_rounds, (64 * 14 + 131) / 132);
  EXPECT_EQ(w.steps, (w.total_units + 131) / 132 + w.two_step_rounds);
  const HopperWalk all_tail = make_walk(128, 16, 3, 2, 1, 16, 132);
  EXPECT_EQ(all_tail.two_step_rounds, 0);
  EXPECT_EQ(all_tail.steps, (16 * 128 + 131) / 132);
}

TEST(HopperWalk, EmptyProblemWalksNothing) {
  EXPECT_EQ(make_walk(0, 5, 4, 1, 1, 0, 132).total_units, 0);
  EXPECT_EQ(make_walk(3, 0, 4, 2, 1, 0, 132).total_units, 0);
  EXPECT_EQ(make_walk(3, 0, 4, 2, 1, 0, 132).steps, 0);
}

}  // namespace
