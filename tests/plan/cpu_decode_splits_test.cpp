// The CPU decode planner's key-split rule (cpu_rules.cpp): tasks x splits balance over the
// threads. The plans are replayed by a list scheduler (each task, in the driver's order, goes to the
// thread that frees first, as OpenMP's dynamic schedule does), so what is checked is the load of
// the busiest thread, not the formula the planner used to get there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"

using namespace attnkit;

namespace {

Target cpu(int threads) {
  Target t;  // built by hand: the rule must hold for machines other than this one
  t.backend = Backend::kCpu;
  t.threads = threads;
  return t;
}

DecodeProblem decode(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t kv_len,
                     std::int64_t window = 0) {
  DecodeProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = 128;
  p.max_seq = kv_len;
  p.kv_len = kv_len;
  p.options.window = window;
  return p;
}

struct Load {
  std::uint64_t busiest = 0;  // keys read by the thread that ends last
  double mean = 0;            // keys per thread if the work were spread evenly
};

// Replays the plan's tasks (unit-major, split-minor, as cpu::decode numbers them) on `threads`
// threads, each task costing its key count.
Load replay(const DecodePlan& plan, std::uint64_t keys) {
  const WorkPartition& w = plan.partition;
  const std::uint64_t units = static_cast<std::uint64_t>(plan.problem.batch * plan.problem.kv_heads);
  const auto threads = static_cast<std::size_t>(plan.target.threads);
  std::vector<std::uint64_t> finish(threads, 0);
  for (std::uint64_t unit = 0; unit < units; ++unit) {
    for (std::uint64_t s = 0; s < w.sequence_splits; ++s) {
      const std::uint64_t begin = std::min(keys, s * w.keys_per_split);
      const std::uint64_t cost = std::min(keys, begin + w.keys_per_split) - begin;
      *std::min_element(finish.begin(), finish.end()) += cost;
    }
  }
  return {*std::max_element(finish.begin(), finish.end()),
          static_cast<double>(units * keys) / static_cast<double>(threads)};
}

std::string describe(const DecodePlan& plan) {
  return "batch=" + std::to_string(plan.problem.batch) + " kv_heads=" + std::to_string(plan.problem.kv_heads) +
         " kv_len=" + std::to_string(plan.problem.kv_len) + " window=" + std::to_string(plan.problem.options.window) +
         " threads=" + std::to_string(plan.target.threads) + " -> splits=" +
         std::to_string(plan.partition.sequence_splits) + " keys_per_split=" +
         std::to_string(plan.partition.keys_per_split) + " tile=" + std::to_string(plan.partition.tile_size);
}

}  // namespace

// The benchmark point of issue 5: llama3-8b (32 / 8 heads, group 4) at batch 1 on this VM's 2
// threads. 8 tasks divide evenly, but one late task is a quarter of a thread's work: the rule cuts
// each (sequence, KV head) in two so a task is an eighth.
TEST(CpuDecodeSplits, Llama3BatchOneOnTwoThreadsSplitsInTwo) {
  const DecodePlan plan = plan_decode(decode(1, 32, 8, 65536), cpu(2));
  EXPECT_EQ(plan.partition.sequence_splits, 2u) << describe(plan);
  EXPECT_EQ(plan.partition.keys_per_split, 32768u) << describe(plan);
  EXPECT_EQ(plan.partition.grid_blocks, 16u) << describe(plan);
  EXPECT_GT(plan.evidence.workspace_bytes, 0u);
  // Batch 4 already has 32 tasks, 16 per thread: no split, no merge.
  EXPECT_EQ(plan_decode(decode(4, 32, 8, 65536), cpu(2)).partition.sequence_splits, 1u);
  // One thread: nothing to balance, so no merge either.
  EXPECT_EQ(plan_decode(decode(1, 32, 8, 65536), cpu(1)).partition.sequence_splits, 1u);
}

// Machines with 16, 24 and 64 threads: the same point splits further, never below 4 tiles a split.
TEST(CpuDecodeSplits, WiderMachinesSplitFurther) {
  for (int threads : {16, 24, 64}) {
    const DecodePlan plan = plan_decode(decode(1, 32, 8, 65536), cpu(threads));
    const Load load = replay(plan, 65536);
    EXPECT_LE(static_cast<double>(load.busiest), 1.125 * load.mean) << describe(plan);
    EXPECT_GE(plan.partition.keys_per_split, kTargetTilesPerSplit * plan.partition.tile_size) << describe(plan);
  }
}

// Every shape: splits cover the keys with no empty split, each split keeps >= kTargetTilesPerSplit
// tiles, the busiest thread ends within 1/8 of the mean wherever the keys allow it, and otherwise
// splitting never leaves the busiest thread more work than not splitting.
TEST(CpuDecodeSplits, BalanceOverThreadsTasksAndLengths) {
  int checked_balanced = 0;
  for (int threads : {1, 2, 3, 5, 7, 16, 24, 64}) {
    for (std::int64_t batch : {1, 2, 3, 5, 8, 33}) {
      for (std::int64_t kv_heads : {1, 2, 8}) {
        for (std::int64_t kv_len : {1, 300, 3001, 65536, 1 << 20}) {
          for (std::int64_t window : {std::int64_t{0}, std::int64_t{4000}}) {
            const DecodePlan plan = plan_decode(decode(batch, 8 * kv_heads, kv_heads, kv_len, window), cpu(threads));
            const WorkPartition& w = plan.partition;
            const std::uint64_t keys = static_cast<std::uint64_t>(window > 0 ? std::min(kv_len, window) : kv_len);
            const std::uint64_t units = static_cast<std::uint64_t>(batch * kv_heads);
            const std::string what = describe(plan);
            ASSERT_GE(w.sequence_splits, 1u) << what;
            EXPECT_GE(std::uint64_t{w.sequence_splits} * w.keys_per_split, keys) << what;
            EXPECT_LT(std::uint64_t{w.sequence_splits - 1} * w.keys_per_split, keys) << "an empty split: " << what;
            EXPECT_EQ(w.grid_blocks, units * w.sequence_splits) << what;
            EXPECT_EQ(plan.evidence.workspace_bytes == 0, w.sequence_splits == 1) << what;
            if (w.sequence_splits > 1) {
              EXPECT_GE(w.keys_per_split, kTargetTilesPerSplit * w.tile_size) << what;
              EXPECT_EQ(w.keys_per_split % w.tile_size, 0u) << what;
            }
            if (threads == 1 || units >= 8u * static_cast<std::uint64_t>(threads)) {
              EXPECT_EQ(w.sequence_splits, 1u) << "a split that balances nothing: " << what;
            }
            const Load load = replay(plan, keys);
            DecodePlan unsplit = plan;
            unsplit.partition.sequence_splits = 1;
            unsplit.partition.keys_per_split = static_cast<std::uint32_t>(keys);
            // Within the 1/8 bound, or (too few keys for it) no worse than not splitting at all.
            EXPECT_LE(static_cast<double>(load.busiest),
                      std::max(1.125 * load.mean, static_cast<double>(replay(unsplit, keys).busiest)))
                << what;
            // Enough keys for tasks of 1/8 of a share that are still >= 2 x kTargetTilesPerSplit tiles.
            const bool room = static_cast<double>(units * keys) / (8.0 * threads) >=
                              2.0 * kTargetTilesPerSplit * w.tile_size;
            if (threads > 1 && room) {
              EXPECT_LE(static_cast<double>(load.busiest), 1.125 * load.mean) << what;
              ++checked_balanced;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked_balanced, 100);  // the balance bound was exercised, not skipped everywhere
}

// Too few keys for the 1/8 bound: the split count that leaves the busiest thread the fewest keys.
// One unit of 3001 keys (tiles of 256) on 4 threads: 2 splits of 1536 (3 would be below 4 tiles).
TEST(CpuDecodeSplits, ShortSequencesSplitWithinTheTileFloor) {
  const DecodePlan plan = plan_decode(decode(1, 8, 1, 3001), cpu(4));
  ASSERT_EQ(plan.partition.tile_size, 256u) << describe(plan);
  EXPECT_EQ(plan.partition.sequence_splits, 2u) << describe(plan);
  EXPECT_EQ(plan.partition.keys_per_split, 1536u) << describe(plan);
  // A window of 700 keys is below 4 tiles: no split.
  EXPECT_EQ(plan_decode(decode(1, 8, 1, 3001, 700), cpu(4)).partition.sequence_splits, 1u);
}

TEST(CpuDecodeSplits, ReasonsSayWhy) {
  const DecodePlan plan = plan_decode(decode(1, 32, 8, 65536), cpu(2));
  bool found = false;
  for (const std::string& r : plan.reasons) {
    if (r.rfind("splits: 2", 0) == 0) {
      found = true;
      EXPECT_NE(r.find("16 tasks for 2 threads"), std::string::npos) << r;
      EXPECT_NE(r.find("1/8"), std::string::npos) << r;
    }
  }
  EXPECT_TRUE(found) << "no reason line for the split choice";
}

// On Intel cores decode takes short tiles (16 keys for 16-bit K/V; f32 8 or 16), whatever
// instruction set runs (the AMX level implies Intel cores); other CPUs keep the L1-sized tile.
TEST(CpuDecodeTile, IntelCoresTakeShortTiles) {
  Target amx = cpu(2);
  amx.cpu_matrix_tiles = true;
  Target intel = cpu(2);
  intel.cpu_intel_cores = true;
  DecodeProblem p = decode(1, 32, 8, 65536);  // bf16, group 4
  for (const Target& t : {amx, intel}) {
    const DecodePlan plan = plan_decode(p, t);
    EXPECT_EQ(plan.partition.tile_size, 16u) << describe(plan);
    bool said = false;
    for (const std::string& r : plan.reasons) said = said || (r.rfind("tile: 16", 0) == 0 && r.find("Intel") != std::string::npos);
    EXPECT_TRUE(said) << describe(plan);
    EXPECT_EQ(plan_decode(decode(1, 64, 8, 65536), t).partition.tile_size, 16u);   // group 8
    EXPECT_EQ(plan_decode(decode(1, 32, 32, 65536), t).partition.tile_size, 16u);  // group 1
  }
  EXPECT_EQ(plan_decode(p, cpu(2)).partition.tile_size, 256u);  // neither
  DecodeProblem f16 = p;
  f16.kv_dtype = f16.q_dtype = f16.out_dtype = DType::kF16;
  EXPECT_EQ(plan_decode(f16, intel).partition.tile_size, 16u);
  EXPECT_EQ(plan_decode(f16, cpu(2)).partition.tile_size, 256u);
  DecodeProblem f32 = p;  // f32: 8 keys for groups of 4k heads, 16 for group 1
  f32.kv_dtype = f32.q_dtype = f32.out_dtype = DType::kF32;
  EXPECT_EQ(plan_decode(f32, amx).partition.tile_size, 8u);
  EXPECT_EQ(plan_decode(f32, intel).partition.tile_size, 8u);
  f32.num_heads = f32.kv_heads;
  EXPECT_EQ(plan_decode(f32, intel).partition.tile_size, 16u);
  // (elsewhere multi-head f32 streams K beside V in one 16-lane vector of keys: the test below)
  EXPECT_EQ(plan_decode(f32, cpu(2)).partition.tile_size, 16u);
  // 16-bit rows wider than 128 columns in groups of 4k heads: 8 keys on the AMX level only.
  DecodeProblem wide = p;
  wide.head_dim = 256;
  EXPECT_EQ(plan_decode(wide, amx).partition.tile_size, 8u);
  EXPECT_EQ(plan_decode(wide, intel).partition.tile_size, 16u);
  wide.kv_dtype = wide.q_dtype = wide.out_dtype = DType::kF16;
  EXPECT_EQ(plan_decode(wide, amx).partition.tile_size, 8u);
  wide.num_heads = wide.kv_heads;  // multi-head: 16
  EXPECT_EQ(plan_decode(wide, amx).partition.tile_size, 16u);
}

// Other cores without AVX-512 (the AVX2 level: Zen 2 / 3) take 16-key tiles for 16-bit K/V and
// for f32 in groups of 4k heads; multi-head f32 and every plan with AVX-512 keep the L1-sized tile.
TEST(CpuDecodeTile, CoresWithoutAvx512TakeShortTiles) {
  Target avx2 = cpu(2);
  avx2.cpu_vector_lanes = 8;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (std::int64_t heads : {32, 8, 64}) {  // groups 4, 1, 8
      DecodeProblem p = decode(1, heads, 8, 65536);
      p.kv_dtype = p.q_dtype = p.out_dtype = dt;
      const DecodePlan plan = plan_decode(p, avx2);
      if (heads == 8) {  // multi-head: the two-stage pipeline (below)
        EXPECT_EQ(plan.partition.tile_size, 8u) << describe(plan);
        EXPECT_EQ(plan.partition.pipeline_stages, 2u) << describe(plan);
        continue;
      }
      EXPECT_EQ(plan.partition.tile_size, 16u) << describe(plan);
      bool said = false;
      for (const std::string& r : plan.reasons) said = said || (r.rfind("tile: 16", 0) == 0 && r.find("AVX-512") != std::string::npos);
      EXPECT_TRUE(said) << describe(plan);
      EXPECT_EQ(plan_decode(p, cpu(2)).partition.tile_size, 256u);
    }
  }
}

// Multi-head decode (and f32 pairs of heads) streams K beside V (tiles of one vector of scores,
// two stages) on the cores where that was measured faster: contiguous caches, neither Intel cores
// nor AMX, 8 lanes, or 16 lanes for f32 and f16 rows. Everything else keeps the tiled body (one
// stage): 16-bit pairs, groups above 2, Intel cores, bf16 rows at 16 lanes, paged caches.
TEST(CpuDecodeTile, MultiHeadAndF32PairsStreamKBesideVOnlyWhereMeasured) {
  Target amd = cpu(2);
  amd.cpu_vector_lanes = 8;
  Target intel = amd;
  intel.cpu_intel_cores = true;
  Target wide = cpu(2);  // 16 lanes
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    DecodeProblem p = decode(2, 8, 8, 4096);
    p.kv_dtype = p.q_dtype = p.out_dtype = dt;
    const DecodePlan pipelined = plan_decode(p, amd);
    EXPECT_EQ(pipelined.partition.pipeline_stages, 2u) << describe(pipelined);
    EXPECT_EQ(pipelined.partition.tile_size, 8u);
    EXPECT_EQ(pipelined.partition.keys_per_split % 8, 0u);
    bool said = false;
    for (const std::string& r : pipelined.reasons) said = said || r.find("two stages") != std::string::npos;
    EXPECT_TRUE(said) << describe(pipelined);
    EXPECT_EQ(plan_decode(p, intel).partition.pipeline_stages, 1u);
    const DecodePlan on_wide = plan_decode(p, wide);
    EXPECT_EQ(on_wide.partition.pipeline_stages, dt == DType::kBF16 ? 1u : 2u) << describe(on_wide);
    if (dt != DType::kBF16) EXPECT_EQ(on_wide.partition.tile_size, 16u);
    Target wide_intel = wide;
    wide_intel.cpu_intel_cores = true;
    EXPECT_EQ(plan_decode(p, wide_intel).partition.pipeline_stages, 1u);
    DecodeProblem pair = p;
    pair.num_heads = 16;  // group 2
    const DecodePlan pairs = plan_decode(pair, amd);
    EXPECT_EQ(pairs.partition.pipeline_stages, dt == DType::kF32 ? 2u : 1u) << describe(pairs);
    if (dt == DType::kF32) EXPECT_EQ(pairs.partition.tile_size, 4u);
    const DecodePlan wide_pairs = plan_decode(pair, wide);
    EXPECT_EQ(wide_pairs.partition.pipeline_stages, dt == DType::kF32 ? 2u : 1u) << describe(wide_pairs);
    if (dt == DType::kF32) EXPECT_EQ(wide_pairs.partition.tile_size, 8u);
    DecodeProblem gqa = p;
    gqa.num_heads = 24;  // group 3
    EXPECT_EQ(plan_decode(gqa, amd).partition.pipeline_stages, 1u);

    PagedDecodeProblem paged;
    paged.batch = 2;
    paged.num_heads = paged.kv_heads = 8;
    paged.head_dim = 128;
    paged.cache = {2 * 256 + 1, 16, 256, PageLayout::kHND};
    paged.kv_len = 4096;
    paged.kv_dtype = paged.q_dtype = paged.out_dtype = dt;
    const PagedDecodePlan from_pages = plan_paged_decode(paged, amd);
    EXPECT_EQ(from_pages.partition.pipeline_stages, 1u);
    EXPECT_NE(from_pages.partition.tile_size, 8u);
  }
}

// The row-block bodies' L1 prefetch (CPU round 35) is off only where it was measured slower:
// contiguous caches, groups of 4k heads, 16-lane cores that are neither Intel nor AMX. Multi-head
// plans, paged caches, Intel and AMX cores and AVX2 keep it, and the plan says when it is off.
TEST(CpuDecodePrefetch, L1PrefetchOffOnlyWhereMeasured) {
  Target amd = cpu(2);  // 16 lanes
  Target intel = amd;
  intel.cpu_intel_cores = true;
  Target amx = intel;
  amx.cpu_matrix_tiles = true;
  Target avx2 = amd;
  avx2.cpu_vector_lanes = 8;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3}) {
    for (std::int64_t heads : {32, 64}) {  // groups 4 and 8
      DecodeProblem p = decode(1, heads, 8, 65536);
      p.kv_dtype = dt;
      p.q_dtype = p.out_dtype = dt == DType::kE4M3 ? DType::kBF16 : dt;
      const DecodePlan off = plan_decode(p, amd);
      EXPECT_FALSE(off.partition.cpu_l1_prefetch) << describe(off);
      bool said = false;
      for (const std::string& r : off.reasons) said = said || r.find("no L1 prefetch") != std::string::npos;
      EXPECT_TRUE(said) << describe(off);
      EXPECT_NE(to_table(off).find("L1 prefetch"), std::string::npos) << to_table(off);
      for (const Target& t : {intel, amx, avx2}) {
        const DecodePlan on = plan_decode(p, t);
        EXPECT_TRUE(on.partition.cpu_l1_prefetch) << describe(on);
      }

      PagedDecodeProblem paged;
      paged.num_heads = heads;
      paged.kv_heads = 8;
      paged.head_dim = 128;
      paged.cache = {4096, 16, 4096, PageLayout::kHND};
      paged.kv_len = 65536;
      paged.kv_dtype = p.kv_dtype;
      paged.q_dtype = paged.out_dtype = p.q_dtype;
      EXPECT_TRUE(plan_paged_decode(paged, amd).partition.cpu_l1_prefetch);
    }
    DecodeProblem mha = decode(1, 8, 8, 65536);
    mha.kv_dtype = dt;
    mha.q_dtype = mha.out_dtype = dt == DType::kE4M3 ? DType::kBF16 : dt;
    EXPECT_TRUE(plan_decode(mha, amd).partition.cpu_l1_prefetch);
  }
}
