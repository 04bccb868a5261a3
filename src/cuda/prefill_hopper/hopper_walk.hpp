// The Hopper prefill kernel's persistent walk: which work tile each block takes at each step.
// Plain C++ for host and device: the kernel walks it (hopper_prefill.cuh), the planner models
// its blocks' loads with it (plan/cuda_prefill_rules.cpp, the tail's size), the host tests check it.
//
// A work tile is a (sequence, head) pair's query tile (and key split). Units of one or two tiles go
// out in rounds of `grid` units, odd rounds in reverse block order (boustrophedon).
// - Single tiles (non-causal, tiles that fit one wave, key splits): groups of heads_per_group
//   pairs, whose K/V the blocks in flight share in L2; inside a group the last query tiles of
//   every pair first, so a round holds tiles of similar length; with key splits a group's tiles
//   of one split (one key range) are consecutive.
// - Causal pairs (tiles_per_unit 2): the i-th shortest and i-th longest query tile of one pair, so
//   every unit holds the same work; a pair's units are consecutive (they run in the same round
//   and share its K/V reads in L2), each walks its shorter tile first, so the longer one starts on
//   keys just read (docs/perf-notes.md, Hopper prefill round 16). An odd m_tiles' middle tiles
//   (units of half the work) come after every pair's units: after each group's they fell on the
//   same blocks in every round (round 27). Then the tail: the last tail_pairs pairs as single
//   tiles, longest first, dealt on in the same rounds, so the blocks that the last rounds of
//   pairs leave idle take the longest of them and the short ones even out the rest (round 28).
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/common/fast_divider.hpp"

#if defined(__CUDACC__)
#define ATTNKIT_WALK_FN __host__ __device__ inline
#else
#define ATTNKIT_WALK_FN inline
#endif

namespace attnkit::cuda_prefill_hopper {

// A work tile: the (sequence, head) pair bh = b * num_heads + h, its query tile counted from the
// last (m_rev = 0: the last query tile, the most keys under a causal mask), and its key split
// (key tiles [split * tiles_per_split, + tiles_per_split)); bh < 0: none.
struct TileCoord {
  int bh, m_rev, split;
};

struct HopperWalk {
  int m_tiles = 0;          // query tiles of the longest sequence
  int heads_per_group = 1;  // the plan's heads_per_tile_group
  int tiles_per_unit = 1;   // 2: causal pairs (then middle tiles and the tail); 1: single tiles
  int total_units = 0;
  int paired_units = 0;  // causal pairs: the two-tile units, before the middle tiles
  int tail_units = 0;    // causal pairs: the first tail unit (total_units: no tail)
  int tail_first_pair = 0;
  int grid = 1;             // blocks launched
  int two_step_rounds = 0;  // rounds that hold a two-tile unit: two steps each, later rounds one
  int steps = 0;            // steps of every block
  // Divisions fixed at launch (every block decodes every step, and a 32-bit division is a long
  // dependent chain): units per group, pairs of a full group and of the last (possibly smaller)
  // one, query tiles per pair (a unit index over them gives the key split), units of two tiles per
  // pair, pairs in the tail.
  cuda_common::FastDivider group_units, group_pairs, last_group_pairs, m_tiles_div, pair_units, tail_pairs;
  int last_group = 0;
};

// Unit u's k-th tile (none: k = 1 of a unit that holds one tile).
ATTNKIT_WALK_FN TileCoord unit_tile(const HopperWalk& w, int u, int k) {
  constexpr TileCoord kNone{-1, 0, 0};
  if (w.tiles_per_unit == 2) {
    if (u >= w.tail_units) {  // the tail: longest first, every tail pair's tile before the next length
      if (k != 0) return kNone;
      const int t = u - w.tail_units, m_rev = w.tail_pairs.quotient(t);
      return {w.tail_first_pair + t - m_rev * w.tail_pairs.divisor, m_rev, 0};
    }
    if (u >= w.paired_units) return k == 0 ? TileCoord{u - w.paired_units, w.m_tiles / 2, 0} : kNone;
    const int group = w.group_units.quotient(u), r = u - group * w.group_units.divisor;
    const int pair = w.pair_units.quotient(r), m = r - pair * w.pair_units.divisor;
    return {group * w.heads_per_group + pair, k == 0 ? w.m_tiles - 1 - m : m, 0};
  }
  const int group = w.group_units.quotient(u), r = u - group * w.group_units.divisor;
  const cuda_common::FastDivider& pairs = group == w.last_group ? w.last_group_pairs : w.group_pairs;
  const int i = pairs.quotient(r), bh_local = r - i * pairs.divisor;
  const int split = w.m_tiles_div.quotient(i);  // 0 unless the plan splits keys
  return {group * w.heads_per_group + bh_local, i - split * w.m_tiles, split};
}

// The slot of `round` that block `block` takes: odd rounds in reverse block order. Its own inverse,
// so it also gives the block that unit round * grid + slot goes to.
ATTNKIT_WALK_FN int round_slot(const HopperWalk& w, int round, int block) {
  return (round & 1) ? w.grid - 1 - block : block;
}

// The tile block `block` takes at step `step` of its walk (bh < 0: none, the block skips it).
ATTNKIT_WALK_FN TileCoord step_tile(const HopperWalk& w, int block, int step) {
  const bool two = step < 2 * w.two_step_rounds;
  const int round = two ? step >> 1 : step - w.two_step_rounds;
  const int u = round * w.grid + round_slot(w, round, block);
  return u < w.total_units ? unit_tile(w, u, two ? step & 1 : 0) : TileCoord{-1, 0, 0};
}

// Host: units per (sequence, head) pair of a walk over m_tiles query tiles (two-tile causal pairs
// and a middle tile, or single tiles, one per key split), without a tail.
inline std::int64_t walk_units_per_pair(int m_tiles, int tiles_per_unit, int splits) {
  return tiles_per_unit == 2 ? (m_tiles + 1) / 2 : static_cast<std::int64_t>(m_tiles) * splits;
}

// The most units a walk may have: its int arithmetic (a round's first unit plus the grid, a
// causal tail's single tiles, up to two grids more than the pairs) stays in 31 bits with room.
inline constexpr std::int64_t kMaxWalkUnits = std::int64_t{1} << 30;

// Host: the walk over `pairs` (sequence, head) pairs of m_tiles query tiles in groups of
// heads_per_group, tiles_per_unit 1 or 2, keys split `splits` ways, the last tail_pairs pairs as
// the tail (causal pairs only; clamped to the pairs), on at most grid_blocks blocks. The caller
// has checked that the units are at most kMaxWalkUnits.
inline HopperWalk make_walk(int m_tiles, int pairs, std::int64_t heads_per_group, int tiles_per_unit, int splits,
                            int tail_pairs, std::int64_t grid_blocks) {
  using cuda_common::FastDivider;
  const auto divider = [](std::int64_t d) {
    return FastDivider(static_cast<std::uint32_t>(std::max<std::int64_t>(d, 1)));
  };
  HopperWalk w;
  w.m_tiles = m_tiles;
  w.tiles_per_unit = tiles_per_unit;
  w.heads_per_group = static_cast<int>(std::clamp<std::int64_t>(heads_per_group, 1, std::max(pairs, 1)));
  const int tail = tiles_per_unit == 2 ? std::clamp(tail_pairs, 0, pairs) : 0;
  const int head = pairs - tail;  // the pairs walked as pairs (or single tiles)
  if (tiles_per_unit == 2) {
    w.paired_units = m_tiles / 2 * head;
    w.tail_units = w.paired_units + (m_tiles % 2) * head;
    w.total_units = w.tail_units + m_tiles * tail;
    w.group_units = divider(static_cast<std::int64_t>(w.heads_per_group) * (m_tiles / 2));
  } else {
    w.total_units = static_cast<int>(walk_units_per_pair(m_tiles, tiles_per_unit, splits) * pairs);
    w.paired_units = w.tail_units = w.total_units;
    w.group_units = divider(static_cast<std::int64_t>(w.heads_per_group) * walk_units_per_pair(m_tiles, 1, splits));
  }
  // Every divisor at least 1: an empty problem (no pairs or no query tiles) walks nothing.
  w.group_pairs = divider(w.heads_per_group);
  w.last_group = (std::max(pairs, 1) - 1) / w.heads_per_group;
  w.last_group_pairs = divider(pairs - w.last_group * w.heads_per_group);
  w.m_tiles_div = divider(m_tiles);
  w.pair_units = divider(m_tiles / 2);
  w.tail_first_pair = head;
  w.tail_pairs = divider(tail);
  w.grid = static_cast<int>(std::clamp<std::int64_t>(grid_blocks, 1, std::max(w.total_units, 1)));
  const int rounds = (w.total_units + w.grid - 1) / w.grid;
  w.two_step_rounds = tiles_per_unit == 2 ? (w.tail_units + w.grid - 1) / w.grid : 0;
  w.steps = rounds + w.two_step_rounds;
  return w;
}

}  // namespace attnkit::cuda_prefill_hopper

#undef ATTNKIT_WALK_FN
