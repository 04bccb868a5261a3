// The CUDA rules for paged decode and extend (src/plan/paged_plan.cpp), from a known target with
// no device: paged decode keeps the contiguous decode blocks and splits keys at least as finely; extend packs (query row, head)
// pairs into the decode kernel's rows, except chunks of 128+ rows over f16 / bf16 pools, which run on
// the Hopper prefill kernel with page boxes; all state the exact split-state workspace they use.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>

#include "attnkit/attnkit.hpp"

namespace attnkit {
namespace {

std::uint64_t states(std::uint64_t splits, std::uint64_t rows, std::uint64_t heads, std::uint64_t head_dim) {
  if (splits <= 1) return 0;
  return (splits * rows * heads * (head_dim + 1) * 4 + 255) / 256 * 256;
}

TEST(PagedCudaPlan, PagedDecodeSplitsAtLeastAsFinelyAsContiguousAndStatesItsExactWorkspace) {
  for (std::int64_t batch : {1, 16, 64, 256}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      PagedDecodeProblem p;
      p.batch = batch;
      p.num_heads = 32;
      p.kv_heads = 8;
      p.head_dim = 128;
      p.cache = {batch * 256 + 1, 16, 256, PageLayout::kHND};
      p.kv_len = 4096;
      p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
      const auto paged = plan_paged_decode(p, known_target("h200"));
      const auto flat = plan_decode(p.as_decode(), known_target("h200"));
      EXPECT_EQ(paged.partition.family, KernelFamily::kSplitKvDecode);
      // Same blocks, a ring at least as deep (long full-wave streams take two tiles, and the paged
      // plan splits mixed lengths into shorter ones); keys split at least as finely (further for
      // batches of mixed lengths).
      EXPECT_EQ(paged.partition.tile_size, flat.partition.tile_size);
      EXPECT_EQ(paged.partition.rows_per_block, flat.partition.rows_per_block);
      EXPECT_GE(paged.partition.pipeline_stages, flat.partition.pipeline_stages);
      EXPECT_GE(paged.partition.sequence_splits, flat.partition.sequence_splits) << batch;
      EXPECT_EQ(paged.partition.keys_per_split % paged.partition.tile_size, 0u);
      EXPECT_GE(static_cast<std::uint64_t>(paged.partition.keys_per_split) * paged.partition.sequence_splits, 4096u);
      EXPECT_EQ(paged.partition.grid_blocks, 8u * batch * paged.partition.sequence_splits);
      if (batch == 1) EXPECT_EQ(paged.partition.sequence_splits, flat.partition.sequence_splits);
      if (paged.partition.sequence_splits > flat.partition.sequence_splits) {
        EXPECT_GE(paged.partition.keys_per_split, 2048u) << batch;  // never very short blocks
      }
      EXPECT_EQ(paged.bounds.workspace_bytes, paged.evidence.workspace_bytes);
      EXPECT_EQ(paged.bounds.workspace_bytes, states(paged.partition.sequence_splits, batch, 32, 128)) << batch;
      if (batch == 1) EXPECT_GT(paged.partition.sequence_splits, 1u) << "one sequence must be split to fill the GPU";
    }
  }
}

// The expected_total_keys hint: near-uniform lengths keep the contiguous partition (the ragged
// splits cost uniform batches 7-11% on the H200), except that pages shorter than a tile fill the
// resident blocks when the contiguous partition leaves them empty; mixed or unknown lengths split
// further.
// The paged and extend kernels merge their splits through the workspace, never in clusters.
TEST(PagedCudaPlan, PagedPlansMergeThroughTheWorkspace) {
  PagedDecodeProblem p;
  p.batch = 1;
  p.kv_len = 1024;  // contiguous: 8 splits merged in clusters of 8
  p.cache = {1024 / 16, 16, 1024 / 16, PageLayout::kHND};
  const PagedDecodePlan plan = plan_paged_decode(p, known_target("h200"));
  EXPECT_GT(plan.partition.sequence_splits, 1u);
  EXPECT_EQ(plan.partition.merge_cluster, 0u);
  EXPECT_GT(plan.bounds.workspace_bytes, 0u);
  // ...and load without a cache hint, where the contiguous plan of the same call loads evict-first.
  EXPECT_FALSE(plan.partition.kv_evict_first) << to_table(plan);
}

TEST(PagedCudaPlan, ExpectedLengthsHintKeepsTheContiguousPartitionForUniformBatches) {
  for (std::int64_t batch : {16, 64, 256}) {
    for (std::int64_t kv_len : {1024, 16384, 65536}) {
      PagedDecodeProblem p;
      p.batch = batch;
      p.num_heads = 32;
      p.kv_heads = 8;
      p.head_dim = 128;
      p.cache = {batch * (kv_len / 16) + 1, 16, kv_len / 16, PageLayout::kHND};
      p.kv_len = kv_len;
      const auto flat = plan_decode(p.as_decode(), known_target("h200"));
      const auto unknown = plan_paged_decode(p, known_target("h200"));
      p.expected_total_keys = batch * kv_len;  // every sequence full
      const auto uniform = plan_paged_decode(p, known_target("h200"));
      // Pages of 16 keys, tiles of 64: a batch of 16 (128 blocks, one per SM) splits in two when each
      // split keeps 16 tiles; 64 and 256 sequences already fill the resident blocks.
      const std::uint32_t want = batch == 16 && kv_len >= 2048 ? 2u : flat.partition.sequence_splits;
      EXPECT_EQ(uniform.partition.sequence_splits, want) << batch << " " << kv_len;
      if (want == flat.partition.sequence_splits) {
        EXPECT_EQ(uniform.partition.keys_per_split, flat.partition.keys_per_split) << batch << " " << kv_len;
      }
      EXPECT_EQ(uniform.bounds.workspace_bytes, states(want, batch, 32, 128));
      p.expected_total_keys = (batch * kv_len * 9 + 9) / 10;  // a mean of 90% (rounded up) still counts as uniform
      EXPECT_EQ(plan_paged_decode(p, known_target("h200")).partition.sequence_splits, want);
      p.expected_total_keys = batch * kv_len / 2;  // mixed: as without a hint
      const auto mixed = plan_paged_decode(p, known_target("h200"));
      EXPECT_EQ(mixed.partition.sequence_splits, unknown.partition.sequence_splits) << batch << " " << kv_len;
      EXPECT_EQ(mixed.partition.keys_per_split, unknown.partition.keys_per_split);
    }
  }
  // The 64-sequence mixed batch of the benchmark (lengths 100..32k) is split beyond the contiguous rule.
  PagedDecodeProblem m;
  m.batch = 64, m.num_heads = 32, m.kv_heads = 8, m.head_dim = 128, m.kv_len = 32768;
  m.cache = {64 * 2048 + 1, 16, 2048, PageLayout::kHND};
  m.expected_total_keys = 64 * 17000;
  EXPECT_GT(plan_paged_decode(m, known_target("h200")).partition.sequence_splits,
            plan_decode(m.as_decode(), known_target("h200")).partition.sequence_splits);
  // Out of range: refused with a Fix.
  for (std::int64_t bad : {std::int64_t{-1}, std::int64_t{64} * 32768 + 1}) {
    m.expected_total_keys = bad;
    try {
      (void)plan_paged_decode(m, known_target("h200"));
      ADD_FAILURE() << "expected_total_keys=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected_total_keys"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Fix"), std::string::npos) << e.what();
    }
  }
}

TEST(PagedCudaPlan, ExtendPacksQueryRowsAndHeadsIntoTheDecodeRows) {
  struct Case {
    std::int64_t heads, kv_heads, max_q_len, max_total_q, kv_len, window;
    DType dtype;
  };
  for (const Case& c : {Case{32, 8, 1, 0, 4096, 0, DType::kBF16}, Case{32, 8, 4, 0, 4096, 0, DType::kBF16},
                        Case{32, 8, 17, 40, 4096, 0, DType::kBF16}, Case{8, 8, 127, 0, 8192, 0, DType::kF16},
                        Case{16, 2, 6, 0, 2048, 128, DType::kF32}}) {
    ExtendProblem e;
    e.batch = 8;
    e.num_heads = c.heads;
    e.kv_heads = c.kv_heads;
    e.head_dim = 128;
    e.cache = {4096, 16, 1024, PageLayout::kNHD};
    e.max_q_len = c.max_q_len;
    e.max_total_q = c.max_total_q;
    e.kv_len = c.kv_len;
    e.options.window = c.window;
    e.kv_dtype = e.q_dtype = e.out_dtype = c.dtype;
    const auto plan = plan_extend(e, known_target("h200"));
    const std::int64_t packed = e.group_size() * c.max_q_len;
    const std::string note = "q_len " + std::to_string(c.max_q_len) + " group " + std::to_string(e.group_size());
    EXPECT_EQ(plan.partition.family, KernelFamily::kSplitKvDecode) << note;
    EXPECT_EQ(plan.partition.rows_per_block, static_cast<std::uint32_t>(std::min<std::int64_t>(packed, 64))) << note;
    const std::uint64_t passes = (packed + plan.partition.rows_per_block - 1) / plan.partition.rows_per_block;
    EXPECT_EQ(plan.partition.grid_blocks, 8u * c.kv_heads * passes * plan.partition.sequence_splits) << note;
    EXPECT_EQ(plan.partition.keys_per_split % plan.partition.tile_size, 0u) << note;
    EXPECT_EQ(plan.bounds.max_q_len, c.max_q_len);
    EXPECT_EQ(plan.bounds.max_total_q, e.total_q_bound());
    EXPECT_EQ(plan.bounds.workspace_bytes, plan.evidence.workspace_bytes) << note;
    EXPECT_EQ(plan.bounds.workspace_bytes,
              states(plan.partition.sequence_splits, static_cast<std::uint64_t>(e.total_q_bound()), c.heads, 128))
        << note;
    if (c.window > 0) {
      // The split range covers the window plus the query rows one block spans.
      EXPECT_GE(static_cast<std::int64_t>(plan.partition.keys_per_split) * plan.partition.sequence_splits,
                c.window + plan.partition.rows_per_block / e.group_size())
          << note;
    }
  }
}

// A window at or beyond kv_len covers every key: extend plans as without one (the widening by the
// block's query rows overflowed for windows near 2^63 before: a planner-fuzzer finding).
ExtendProblem long_chunk(std::int64_t max_q_len, std::int64_t page, DType dtype = DType::kBF16) {
  ExtendProblem e;
  e.batch = 2;
  e.num_heads = 32;
  e.kv_heads = 8;
  e.head_dim = 128;
  e.cache = {4096, page, 1024, PageLayout::kHND};
  e.max_q_len = max_q_len;
  e.kv_len = 8192;
  e.kv_dtype = e.q_dtype = e.out_dtype = dtype;
  return e;
}

TEST(PagedCudaPlan, LongExtendChunksRunOnTheHopperKernelWithPageBoxes) {
  for (std::int64_t page : {8, 16, 24, 32, 256}) {
    for (std::int64_t head_dim : {64, 128, 256}) {
      ExtendProblem e = long_chunk(512, page);
      e.head_dim = head_dim;
      e.out_dtype = head_dim == 64 ? DType::kF32 : DType::kBF16;
      const std::string note = "page " + std::to_string(page) + " d" + std::to_string(head_dim);
      const ExtendPlan plan = plan_extend(e, known_target("h100"));
      EXPECT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma) << note;
      // The contiguous prefill of the same work plans the same tiles, and the same matrix work.
      PrefillProblem pre;
      pre.batch = e.batch, pre.num_heads = e.num_heads, pre.kv_heads = e.kv_heads, pre.head_dim = head_dim;
      pre.q_len = e.max_q_len, pre.kv_len = e.kv_len, pre.causal = true, pre.dtype = e.kv_dtype,
      pre.out_dtype = e.out_dtype;
      const PrefillPlan prefill = plan_prefill(pre, known_target("h100"), KernelFamily::kWarpSpecializedWgmma);
      EXPECT_EQ(plan.partition.tile_size, prefill.partition.tile_size) << note;
      EXPECT_EQ(plan.partition.rows_per_block, prefill.partition.rows_per_block) << note;
      EXPECT_EQ(plan.evidence.matmul_flops, prefill.evidence.matmul_flops) << note;
      EXPECT_EQ(plan.bounds.workspace_bytes,
                states(plan.partition.sequence_splits, static_cast<std::uint64_t>(e.total_q_bound()), 32, head_dim))
          << note;
      const bool boxes = std::any_of(plan.reasons.begin(), plan.reasons.end(),
                                     [](const std::string& r) { return r.find("TMA boxes") != std::string::npos; });
      EXPECT_TRUE(boxes) << note;
    }
  }
}

TEST(PagedCudaPlan, ExtendStaysOnTheDecodeKernelWhereTheHopperKernelDoesNotFit) {
  auto family = [](const ExtendProblem& e) { return plan_extend(e, known_target("h200")).partition.family; };
  const KernelFamily decode = KernelFamily::kSplitKvDecode;
  EXPECT_EQ(family(long_chunk(127, 16)), decode);              // chunks under one 128-row query tile
  EXPECT_EQ(family(long_chunk(512, 12)), decode);              // pages not a multiple of 8 keys
  EXPECT_EQ(family(long_chunk(512, 16, DType::kF32)), decode);  // f32 pools
  ExtendProblem capped = long_chunk(512, 16);
  capped.options.softcap = 30.0f;
  EXPECT_EQ(family(capped), decode);
  ExtendProblem f32_q = long_chunk(512, 16);
  f32_q.q_dtype = DType::kF32;
  EXPECT_EQ(family(f32_q), decode);
  ExtendProblem d96 = long_chunk(512, 16);
  d96.head_dim = 96;
  EXPECT_EQ(family(d96), decode);
  EXPECT_EQ(family(long_chunk(128, 16)), KernelFamily::kWarpSpecializedWgmma);
  // A mixed batch: 64 sequences, one chunk of 512 rows and 63 decode rows (max_total_q 575). The
  // Hopper kernel would pad each decode row to a 128-row tile per head: the decode kernel, unless asked.
  ExtendProblem mixed = long_chunk(512, 16);
  mixed.batch = 64;
  mixed.max_total_q = 575;
  const ExtendPlan mixed_plan = plan_extend(mixed, known_target("h200"));
  EXPECT_EQ(mixed_plan.partition.family, decode);
  EXPECT_TRUE(std::any_of(mixed_plan.reasons.begin(), mixed_plan.reasons.end(),
                          [](const std::string& r) { return r.find("mostly short rows") != std::string::npos; }));
  EXPECT_EQ(plan_extend(mixed, known_target("h200"), KernelFamily::kWarpSpecializedWgmma).partition.family,
            KernelFamily::kWarpSpecializedWgmma);
  mixed.max_total_q = 64 * 64;  // half a tile per sequence on average: long chunks dominate
  EXPECT_EQ(family(mixed), KernelFamily::kWarpSpecializedWgmma);
}

TEST(PagedCudaPlan, ExtendTakesTheFamilyItIsAskedFor) {
  const Target h200 = known_target("h200");
  EXPECT_EQ(plan_extend(long_chunk(512, 16), h200, KernelFamily::kSplitKvDecode).partition.family,
            KernelFamily::kSplitKvDecode);
  EXPECT_EQ(plan_extend(long_chunk(512, 16), h200, KernelFamily::kWarpSpecializedWgmma).partition.family,
            KernelFamily::kWarpSpecializedWgmma);
  // Where the Hopper kernel cannot run it, asking for it is an error that names what it needs.
  try {
    plan_extend(long_chunk(64, 16), h200, KernelFamily::kWarpSpecializedWgmma);
    ADD_FAILURE() << "a 64-row chunk was planned on the Hopper extend kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_q_len >= 128"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_extend(long_chunk(512, 16), h200, KernelFamily::kCooperativeTiled), Error);
  EXPECT_THROW(plan_extend(long_chunk(512, 16), cpu_target(), KernelFamily::kSplitKvDecode), Error);
  EXPECT_EQ(plan_extend(long_chunk(512, 16), cpu_target(), KernelFamily::kCooperativeTiled).partition.family,
            KernelFamily::kCooperativeTiled);
}

TEST(PagedCudaPlan, ExtendWindowsBeyondTheSequenceAreNoWindow) {
  ExtendProblem e;
  e.batch = 4, e.num_heads = 32, e.kv_heads = 8, e.head_dim = 128, e.max_q_len = 8, e.kv_len = 4096;
  e.cache = {4 * 256 + 1, 16, 256, PageLayout::kHND};
  const ExtendPlan none = plan_extend(e, known_target("h200"));
  for (std::int64_t window : {std::int64_t{4096}, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max()}) {
    e.options.window = window;
    const ExtendPlan wide = plan_extend(e, known_target("h200"));
    EXPECT_EQ(wide.partition.sequence_splits, none.partition.sequence_splits) << window;
    EXPECT_EQ(wide.partition.keys_per_split, none.partition.keys_per_split) << window;
    EXPECT_EQ(wide.bounds.workspace_bytes, none.bounds.workspace_bytes) << window;
  }
}

// page_boxes: the producer copies page runs as TMA boxes exactly when every tile is page-aligned
// (no window, pages of >= 16 rows nesting with the tile, at most 4 runs per tile); the JSON says so.
TEST(PagedCudaPlan, PageBoxesExactlyWhenTilesArePageAligned) {
  struct Case {
    DType dtype;
    std::int64_t page_size, window;
    bool boxes;
  };
  for (const Case& c : {Case{DType::kBF16, 16, 0, true}, Case{DType::kBF16, 32, 0, true}, Case{DType::kBF16, 64, 0, true},
                        Case{DType::kBF16, 256, 0, true}, Case{DType::kF32, 16, 0, true}, Case{DType::kF32, 128, 0, true},
                        Case{DType::kBF16, 1, 0, false}, Case{DType::kBF16, 8, 0, false}, Case{DType::kBF16, 48, 0, false},
                        Case{DType::kBF16, 16, 100, false}, Case{DType::kF32, 32, 7, false},
                        Case{DType::kE4M3, 16, 0, true}, Case{DType::kE4M3, 64, 0, true}, Case{DType::kE4M3, 1, 0, false},
                        Case{DType::kE4M3, 16, 100, false}}) {
    PagedDecodeProblem p;
    p.batch = 4;
    p.num_heads = 32;
    p.kv_heads = 8;
    p.head_dim = 128;
    p.kv_len = 4096;
    p.cache = {4 * (4096 / c.page_size + 1) + 1, c.page_size, 4096 / c.page_size + 1, PageLayout::kNHD};
    p.kv_dtype = p.q_dtype = p.out_dtype = c.dtype;
    if (is_fp8(c.dtype)) p.q_dtype = p.out_dtype = DType::kBF16;
    p.options.window = c.window;
    const auto plan = plan_paged_decode(p, known_target("h200"));
    const std::uint32_t tile = plan.partition.tile_size;
    EXPECT_EQ(plan.page_boxes, c.boxes) << "page_size " << c.page_size << " window " << c.window << " tile " << tile;
    if (plan.page_boxes) {
      EXPECT_TRUE(c.page_size % tile == 0 || tile % c.page_size == 0);
      EXPECT_LE(tile / std::min<std::uint32_t>(tile, static_cast<std::uint32_t>(c.page_size)), 4u);
    }
    EXPECT_NE(to_json(plan).find(c.boxes ? "\"page_boxes\":true" : "\"page_boxes\":false"), std::string::npos);
    bool said = false;
    for (const auto& r : plan.reasons) said = said || r.find("page_boxes") != std::string::npos;
    EXPECT_TRUE(said) << "a reason line names the copy path";
  }
}

// An e4m3 pool plans the contiguous e4m3 kernel's blocks (16 heads a warp, the same tiles) and keeps
// its rule: head_dim a multiple of 16 (16-byte rows).
TEST(PagedCudaPlan, E4m3PoolsTakeTheContiguousE4m3Blocks) {
  PagedDecodeProblem p;
  p.batch = 8, p.num_heads = 32, p.kv_heads = 8, p.head_dim = 128, p.kv_len = 8192;
  p.cache = {8 * 512 + 1, 16, 512, PageLayout::kHND};
  p.kv_dtype = DType::kE4M3;
  p.q_dtype = p.out_dtype = DType::kBF16;
  const auto paged = plan_paged_decode(p, known_target("h200"));
  const auto flat = plan_decode(p.as_decode(), known_target("h200"));
  EXPECT_EQ(paged.partition.family, KernelFamily::kSplitKvDecode);
  EXPECT_EQ(paged.partition.tile_size, flat.partition.tile_size);
  EXPECT_EQ(paged.partition.rows_per_block, flat.partition.rows_per_block);
  EXPECT_EQ(paged.partition.warps_per_block, flat.partition.warps_per_block);
  EXPECT_TRUE(paged.page_boxes);
  // Half the bf16 pool's bytes, the same FLOPs.
  PagedDecodeProblem bf16 = p;
  bf16.kv_dtype = DType::kBF16;
  const auto wide = plan_paged_decode(bf16, known_target("h200"));
  EXPECT_LT(paged.evidence.traffic.global_read_bytes, wide.evidence.traffic.global_read_bytes * 0.55);
  EXPECT_EQ(paged.evidence.matmul_flops, wide.evidence.matmul_flops);
  p.head_dim = 72;
  p.cache.num_pages = 8 * 512 + 1;
  try {
    plan_paged_decode(p, known_target("h200"));
    ADD_FAILURE() << "head_dim 72 with an e4m3 pool planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit
