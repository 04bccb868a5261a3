// plan_decode / plan_prefill end to end: validation, family checks, and evidence consistent with
// the partition the backend's rules chose (the CPU rules; the CUDA ones are checked where they exist).
#include <gtest/gtest.h>

#include <limits>

#include <functional>
#include <span>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "plan/evidence.hpp"

using namespace attnkit;

namespace {

std::string error_of(auto&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Target cpu(int threads) {
  Target t;  // built by hand so the test does not depend on the host
  t.backend = Backend::kCpu;
  t.threads = threads;
  return t;
}

}  // namespace

TEST(PlanDecode, InvalidProblemIsRejectedBeforeRules) {
  DecodeProblem p;
  p.kv_heads = 5;  // 32 % 5 != 0
  const std::string message = error_of([&] { plan_decode(p, cpu(4)); });
  EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
  EXPECT_NE(message.find("kv_heads"), std::string::npos) << message;
}

TEST(PlanDecode, UnavailableFamilyNamesTheOnesThatExist) {
  const DecodeProblem p;
  const std::string cpu_message = error_of([&] { plan_decode(p, cpu(4), KernelFamily::kCooperativeTiled); });
  EXPECT_NE(cpu_message.find("Fix:"), std::string::npos) << cpu_message;
  EXPECT_NE(cpu_message.find("split_kv_decode"), std::string::npos) << cpu_message;
  EXPECT_NE(cpu_message.find("scalar_online"), std::string::npos) << cpu_message;
  // Checked before any rule runs, so it holds whatever the CUDA rules' state.
  const std::string gpu_message = error_of([&] { plan_decode(p, known_target("h200"), KernelFamily::kScalarOnline); });
  EXPECT_NE(gpu_message.find("Fix:"), std::string::npos) << gpu_message;
  EXPECT_NE(gpu_message.find("split_kv_decode"), std::string::npos) << gpu_message;
  const std::string prefill_message =
      error_of([&] { plan_prefill(PrefillProblem{}, cpu(4), KernelFamily::kSplitKvDecode); });
  EXPECT_NE(prefill_message.find("cooperative_tiled"), std::string::npos) << prefill_message;
}

TEST(PlanDecode, EvidenceMatchesThePartitionChosen) {
  DecodeProblem p;
  p.batch = 2;
  p.kv_len = 3000;
  p.max_seq = 4096;
  const DecodePlan plan = plan_decode(p, cpu(8));
  EXPECT_EQ(plan.partition.family, KernelFamily::kSplitKvDecode);
  EXPECT_FALSE(plan.reasons.empty());
  const Evidence expected = detail::compute_decode_evidence(p, plan.partition, plan.target);
  EXPECT_EQ(plan.evidence.traffic.global_read_bytes, expected.traffic.global_read_bytes);
  EXPECT_EQ(plan.evidence.workspace_bytes, expected.workspace_bytes);
  EXPECT_EQ(plan.evidence.matmul_flops, 4ull * 2 * 32 * 3000 * 128);
  EXPECT_EQ(plan.evidence.workspace_bytes == 0, plan.partition.sequence_splits == 1);
  // The packed family reads K/V once per KV head, the scalar baseline once per query head.
  const DecodePlan scalar = plan_decode(p, cpu(8), KernelFamily::kScalarOnline);
  EXPECT_EQ(scalar.partition.family, KernelFamily::kScalarOnline);
  EXPECT_GT(scalar.evidence.traffic.global_read_bytes, plan.evidence.traffic.global_read_bytes);
}

TEST(PlanPrefill, EvidenceMatchesThePartitionChosen) {
  PrefillProblem p;
  p.batch = 1;
  p.q_len = 500;
  p.kv_len = 800;
  const PrefillPlan plan = plan_prefill(p, cpu(4));
  EXPECT_EQ(plan.partition.family, KernelFamily::kCooperativeTiled);
  std::uint64_t pairs = 0;
  for (std::uint64_t r = 0; r < 500; ++r) pairs += 300 + r + 1;
  EXPECT_EQ(plan.evidence.matmul_flops, 4ull * 32 * pairs * 128);
  EXPECT_EQ(plan.evidence.rel_l2_tolerance, 1e-2);
  EXPECT_EQ(plan_prefill(p, cpu(4), KernelFamily::kScalarOnline).partition.family, KernelFamily::kScalarOnline);
}

// CPU prefill rows per block: whole 3-vector register blocks on 8-lane (AVX2) vectors for long
// queries, powers of two elsewhere, and no extra block for a query one block covers.
TEST(PlanPrefill, CpuRowsFillWholeRegisterBlocksOnEightLaneVectors) {
  PrefillProblem p;
  p.batch = 1;
  p.q_len = 2048;
  p.kv_len = 2048;
  Target avx2 = cpu(2), avx512 = cpu(2);
  avx2.cpu_vector_lanes = 8;
  avx512.cpu_vector_lanes = 16;
  const PrefillPlan wide = plan_prefill(p, avx512), narrow = plan_prefill(p, avx2);
  EXPECT_EQ(wide.partition.rows_per_block, 128u) << to_table(wide);
  EXPECT_EQ(narrow.partition.rows_per_block, 120u) << to_table(narrow);
  EXPECT_NE(to_table(narrow).find("whole 3-vector register blocks"), std::string::npos) << to_table(narrow);
  p.q_len = p.kv_len = 100;  // one block of 104 rows: 96 would add a second block for 4 rows
  EXPECT_EQ(plan_prefill(p, avx2).partition.rows_per_block, 104u) << to_table(plan_prefill(p, avx2));
}

TEST(PlanGpu, PlansDecodeForAKnownTargetWithoutTheDevice) {
  // Planning is host code: a GPU plan needs only the target's description, never the device.
  const Target h200 = known_target("h200");
  DecodeProblem problem;  // llama3-8b-like: 32 / 8 heads, head_dim 128, bf16, 4096 keys
  const DecodePlan plan = plan_decode(problem, h200);
  EXPECT_EQ(plan.partition.family, KernelFamily::kSplitKvDecode);
  EXPECT_EQ(plan.partition.rows_per_block, 4u);  // the GQA group shares each K/V read
  EXPECT_GT(plan.partition.sequence_splits, 1u);  // one sequence must be split to fill 132 SMs
  EXPECT_GE(std::uint64_t{plan.partition.sequence_splits} * plan.partition.keys_per_split, 4096u);
  EXPECT_GT(plan.evidence.workspace_bytes, 0u);
  EXPECT_GT(plan.evidence.predicted_seconds, 0.0);
  PrefillProblem prefill;
  const PrefillPlan prefill_plan = plan_prefill(prefill, h200);
  EXPECT_EQ(prefill_plan.partition.family, KernelFamily::kWarpSpecializedWgmma);  // Hopper: wgmma + TMA
  EXPECT_GT(prefill_plan.evidence.matmul_flops, 0u);
}

// Which prefill family the CUDA rules pick: the Hopper kernel where target, dtype, head_dim and
// options allow and the tiled family would not split keys; the tiled family everywhere else.
// head_dim 256 has two Hopper kernels, 64- and 80-key tiles: the planner weighs the key rows each
// streams (masked tile parts included) by their measured speed (hopper_config.hpp). Long or
// non-causal problems take 80; a short causal one, whose 128-row diagonal wastes more of an
// 80-key tile, keeps 64. The gpu suite's d256 shapes (tests/cuda/prefill_hopper_test.cpp) land on
// both, so both kernels are checked against the golden.
// The split merge: in clusters (no workspace) only for short splits of tensor-core plans whose grid
// stays within three quarters of the resident wave; else through the workspace and the merge kernel.
TEST(PlanGpu, DecodeMergesShortSplitsInClusters) {
  const Target h200 = known_target("h200");
  auto plan = [&](std::int64_t batch, std::int64_t kv_len, std::int64_t head_dim, DType dtype) {
    DecodeProblem p;
    p.batch = batch;
    p.kv_len = p.max_seq = kv_len;
    p.head_dim = head_dim;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    return plan_decode(p, h200);
  };
  const DecodePlan short_calls = plan(1, 1024, 128, DType::kBF16);
  EXPECT_EQ(short_calls.partition.sequence_splits, 8u);
  EXPECT_EQ(short_calls.partition.merge_cluster, 8u) << to_table(short_calls);
  EXPECT_EQ(short_calls.evidence.workspace_bytes, 0u);
  EXPECT_EQ(plan(8, 1024, 128, DType::kBF16).partition.merge_cluster, 2u);
  // More than 8 splits, long splits, CUDA-core (f32) plans, a grid near the wave: the merge kernel.
  for (const DecodePlan& p : {plan(1, 4096, 128, DType::kBF16), plan(4, 16384, 128, DType::kBF16),
                              plan(1, 1024, 128, DType::kF32), plan(4, 2048, 256, DType::kBF16)}) {
    EXPECT_GT(p.partition.sequence_splits, 1u) << to_table(p);
    EXPECT_EQ(p.partition.merge_cluster, 0u) << to_table(p);
    EXPECT_GT(p.evidence.workspace_bytes, 0u) << to_table(p);
  }
}

// The K/V loads' L2 policy: evict-first where each element is read by one block and the call's K/V
// are at most four L2s (50 MiB on the H200); evict-normal for longer streams, for groups that take
// several passes over the same K/V, and for a target that gives no L2 size.
TEST(PlanGpu, DecodeLoadsShortStreamsEvictFirst) {
  Target h200 = known_target("h200");
  auto plan = [&](std::int64_t batch, std::int64_t kv_len, DType dtype, std::int64_t heads = 32, std::int64_t window = 0) {
    DecodeProblem p;
    p.batch = batch;
    p.num_heads = heads;
    p.kv_len = p.max_seq = kv_len;
    p.options.window = window;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    return plan_decode(p, h200);
  };
  // bf16, 8 KV heads, d128: 4 MiB per sequence and 1k keys.
  for (const DecodePlan& p : {plan(1, 1024, DType::kBF16), plan(16, 1024, DType::kBF16), plan(1, 16384, DType::kBF16),
                              plan(48, 1024, DType::kBF16), plan(24, 1024, DType::kF32),
                              plan(32, 65536, DType::kBF16, 32, 1024)}) {  // a window bounds the keys read
    EXPECT_TRUE(p.partition.kv_evict_first) << to_table(p);
  }
  for (const DecodePlan& p : {plan(51, 1024, DType::kBF16), plan(16, 4096, DType::kBF16), plan(1, 65536, DType::kBF16),
                              plan(26, 1024, DType::kF32)}) {
    EXPECT_FALSE(p.partition.kv_evict_first) << to_table(p);
  }
  // f32 groups above max_rows_per_block take passes that re-read the K/V.
  const DecodePlan passes = plan(1, 1024, DType::kF32, 8 * 64);
  EXPECT_LT(passes.partition.rows_per_block, 64u) << to_table(passes);  // group 64: two passes
  EXPECT_FALSE(passes.partition.kv_evict_first) << to_table(passes);
  h200.cache_bytes = 0;
  EXPECT_FALSE(plan(1, 1024, DType::kBF16).partition.kv_evict_first);
}

// 16-bit K/V: groups of up to 8 heads take the key-rows tensor-core engine (8 heads per warp, keys as
// the MMA's rows), larger ones the 16-row engine; the key-rows engine's smaller register budget
// never costs a resident block.
TEST(PlanGpu, DecodeSmallGroupsTakeTheKeyRowsEngine) {
  namespace geo = cuda_decode;
  const Target h200 = known_target("h200");
  auto plan = [&](std::int64_t heads, std::int64_t head_dim) {
    DecodeProblem p;
    p.batch = 64;
    p.num_heads = heads;
    p.kv_heads = 8;
    p.head_dim = head_dim;
    p.kv_len = p.max_seq = 4096;
    p.kv_dtype = p.q_dtype = p.out_dtype = DType::kBF16;
    return plan_decode(p, h200);
  };
  auto says = [](const DecodePlan& d, const std::string& what) {
    for (const std::string& r : d.reasons) {
      if (r.rfind("threads", 0) == 0) return r.find(what) != std::string::npos;
    }
    return false;
  };
  for (const std::int64_t heads : {8, 16, 32, 48, 64}) {
    const DecodePlan d = plan(heads, 128);
    EXPECT_TRUE(says(d, "chunk(s) of 8 heads (the 8 columns of an mma.sync m16n8k16 tile whose 16 rows are keys")) << to_table(d);
    EXPECT_EQ(d.partition.rows_per_block, static_cast<std::uint32_t>(heads / 8));
    EXPECT_EQ(d.partition.warps_per_block, 5u);
  }
  for (const std::int64_t heads : {72, 128}) {
    const DecodePlan d = plan(heads, 128);
    EXPECT_TRUE(says(d, "chunk(s) of 16 heads (the 16 rows of an mma.sync")) << to_table(d);
  }
  EXPECT_EQ(geo::heads_per_warp(8, 2), geo::kKeyRowsHeads);
  EXPECT_EQ(geo::heads_per_warp(9, 2), geo::kMmaRows);
  EXPECT_EQ(geo::heads_per_warp(8, 4), 8);  // f32: the CUDA-core engine's 8 heads
  EXPECT_TRUE(geo::engine_exists(2, 8) && geo::engine_exists(2, 16) && geo::engine_exists(4, 4) && geo::engine_exists(4, 8));
  EXPECT_FALSE(geo::engine_exists(2, 4) || geo::engine_exists(4, 16));
  for (const int cap : {64, 128, 256}) {
    EXPECT_GE(geo::blocks_by_registers(5, geo::register_budget(geo::kKeyRowsHeads, cap, 2)),
              geo::blocks_by_registers(5, geo::register_budget(geo::kMmaRows, cap, 2)));
  }
}

// Tensor-core decode blocks that fill both of every SM's slots and stream at least 64 tiles each
// take a two-tile ring, contiguous or paged with TMA page boxes; short splits, part-full waves,
// f32 and pages copied row by row keep the budget's ring (perf-notes, decode round 26).
TEST(PlanGpu, DecodeFullWaveLongStreamsTakeATwoTileRing) {
  const Target h200 = known_target("h200");
  auto plan = [&](std::int64_t batch, std::int64_t kv_len, DType dtype = DType::kBF16) {
    DecodeProblem p;  // 32 query / 8 KV heads, head_dim 128
    p.batch = batch;
    p.kv_len = p.max_seq = kv_len;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    return plan_decode(p, h200);
  };
  for (const auto& [batch, kv_len] : {std::pair{256, 16384}, {256, 4096}, {128, 4096}, {64, 65536}, {33, 4096}}) {
    const DecodePlan d = plan(batch, kv_len);
    EXPECT_EQ(d.partition.pipeline_stages, 2u) << to_table(d);
    EXPECT_GE(d.partition.grid_blocks, 2u * 132) << to_table(d);
    // The ring was measured at two blocks per SM: the launch's shared memory keeps a third out.
    EXPECT_EQ(d.partition.resident_blocks, 2u) << to_table(d);
    namespace geo = cuda_decode;
    const std::int64_t two_slots = geo::shared_bytes(128, static_cast<int>(d.partition.tile_size), 2, 2,
                                                     d.partition.rows_per_block, 4);
    const std::int64_t per_sm = 228 << 10;
    EXPECT_GT(geo::blocks_by_shared(two_slots, per_sm), 2);  // the ring alone would let three in
    EXPECT_EQ(geo::blocks_by_shared(geo::shared_bytes_for_residency(two_slots, 2, per_sm), per_sm), 2);
    bool said = false;
    for (const std::string& r : d.reasons) said = said || (r.rfind("pipeline_stages 2", 0) == 0 && r.find("full-wave") != std::string::npos);
    EXPECT_TRUE(said) << to_table(d);
  }
  // 16 or 32 tiles per block; 256 or 128 blocks (part of a wave, or one block per SM).
  for (const DecodePlan& d : {plan(256, 1024), plan(32, 16384), plan(16, 65536), plan(1, 65536), plan(64, 2048)}) {
    EXPECT_GT(d.partition.pipeline_stages, 2u) << to_table(d);
  }
  // A cap at or above what fits changes nothing.
  EXPECT_EQ(cuda_decode::shared_bytes_for_residency(100000, 2, 228 << 10), 100000);
  EXPECT_EQ(cuda_decode::shared_bytes_for_residency(50000, 0, 228 << 10), 50000);
  // f32 (CUDA cores, three blocks per SM) keeps its own budget's ring, whatever it is.
  for (const std::string& r : plan(256, 16384, DType::kF32).reasons) EXPECT_EQ(r.find("full-wave"), std::string::npos) << r;
  EXPECT_EQ(plan(256, 16384, DType::kF16).partition.pipeline_stages, 2u);
  // Paged, uniform lengths (the hint keeps the contiguous cut): page boxes of 16 rows take two
  // tiles; pages of 8 rows (no boxes) keep three; mixed lengths split into 32-tile blocks keep three.
  PagedDecodeProblem paged;
  paged.batch = 256;
  paged.cache = {256 * 1024 + 1, 16, 1024, PageLayout::kHND};
  paged.kv_len = 16384;
  paged.expected_total_keys = paged.batch * paged.kv_len;
  const PagedDecodePlan boxes = plan_paged_decode(paged, h200);
  EXPECT_TRUE(boxes.page_boxes);
  EXPECT_EQ(boxes.partition.pipeline_stages, 2u) << to_table(boxes);
  EXPECT_EQ(boxes.partition.resident_blocks, 2u) << to_table(boxes);
  bool said = false;
  for (const std::string& r : boxes.reasons) said = said || r.rfind("paged: pipeline_stages 2", 0) == 0;
  EXPECT_TRUE(said) << to_table(boxes);
  PagedDecodeProblem rows = paged;
  rows.cache = {256 * 2048 + 1, 8, 2048, PageLayout::kHND};
  const PagedDecodePlan by_rows = plan_paged_decode(rows, h200);
  EXPECT_FALSE(by_rows.page_boxes);
  EXPECT_GT(by_rows.partition.pipeline_stages, 2u) << to_table(by_rows);
  PagedDecodeProblem mixed = paged;
  mixed.kv_len = 4096;
  mixed.cache.max_pages_per_seq = 256;
  mixed.expected_total_keys = 0;  // unknown: split for mixed lengths
  EXPECT_GT(plan_paged_decode(mixed, h200).partition.pipeline_stages, 2u);
}

// CUDA-core (f32) decode blocks fill whole waves of resident blocks (three per SM on the H200's 132
// SMs): a many-wave plan splits too where its last wave would run part-full (perf-notes, decode
// round 20: b256 x 16k 4.08 -> 4.37 TB/s with 3 splits).
TEST(PlanGpu, DecodeF32SplitsToFillItsLastWave) {
  const Target h200 = known_target("h200");
  auto plan = [&](std::int64_t batch, std::int64_t kv_len) {
    DecodeProblem p;  // 32 query / 8 KV heads, head_dim 128
    p.batch = batch;
    p.kv_len = p.max_seq = kv_len;
    p.kv_dtype = p.q_dtype = p.out_dtype = DType::kF32;
    return plan_decode(p, h200);
  };
  const std::uint64_t wave = 3 * 132;
  for (const auto& [batch, kv_len] : {std::pair{256, 16384}, {256, 4096}, {128, 4096}, {64, 16384}, {16, 65536}}) {
    const DecodePlan d = plan(batch, kv_len);
    const std::uint64_t blocks = d.partition.grid_blocks;
    const double fill = static_cast<double>(blocks) / static_cast<double>((blocks + wave - 1) / wave * wave);
    EXPECT_GE(fill, 0.95) << to_table(d);  // unsplit b256 (2048 blocks: 5.2 waves) fills 0.86
    EXPECT_LE(d.partition.sequence_splits, 4u) << to_table(d);
  }
  EXPECT_EQ(plan(256, 16384).partition.sequence_splits, 3u);
}

// e4m3 decode blocks aim at two per SM (one e4m3 block per SM read 78-82% of an H100's ceiling at
// b16, two 85-95%; perf-notes, "e4m3 KV-cache decode on CUDA"); 16-bit blocks keep one per SM.
TEST(PlanGpu, DecodeE4m3AimsAtTwoBlocksPerSm) {
  const Target h100 = known_target("h100");
  auto plan = [&](std::int64_t batch, std::int64_t kv_len, DType kv) {
    DecodeProblem p;  // 32 query / 8 KV heads, head_dim 128
    p.batch = batch;
    p.kv_len = p.max_seq = kv_len;
    p.kv_dtype = kv;
    p.q_dtype = p.out_dtype = DType::kBF16;
    return plan_decode(p, h100);
  };
  for (std::int64_t kv_len : {4096, 16384, 65536}) {
    EXPECT_EQ(plan(16, kv_len, DType::kE4M3).partition.sequence_splits, 2u) << kv_len;
    EXPECT_EQ(plan(16, kv_len, DType::kBF16).partition.sequence_splits, 1u) << kv_len;
    EXPECT_EQ(plan(1, kv_len, DType::kE4M3).partition.sequence_splits, 32u) << kv_len;
    EXPECT_EQ(plan(1, kv_len, DType::kBF16).partition.sequence_splits, 16u) << kv_len;
    EXPECT_EQ(plan(64, kv_len, DType::kE4M3).partition.sequence_splits, 1u) << kv_len;  // 512 blocks already
  }
  bool said = false;
  for (const std::string& r : plan(16, 65536, DType::kE4M3).reasons) said = said || r.find("two blocks per SM") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(PlanGpu, PrefillHead256ChoosesItsKeyTileByPaddedWork) {
  const Target h200 = known_target("h200");
  const KernelFamily hopper = KernelFamily::kWarpSpecializedWgmma;
  auto tile_of = [&](std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t q_len,
                     std::int64_t kv_len, bool causal) {
    PrefillProblem p;
    p.batch = batch;
    p.num_heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = 256;
    p.q_len = q_len;
    p.kv_len = kv_len;
    p.causal = causal;
    return plan_prefill(p, h200, hopper).partition.tile_size;
  };
  EXPECT_EQ(tile_of(2, 8, 8, 8192, 8192, false), 80u);
  EXPECT_EQ(tile_of(1, 8, 8, 16384, 16384, true), 80u);
  EXPECT_EQ(tile_of(16, 8, 8, 1024, 1024, true), 80u);
  EXPECT_EQ(tile_of(32, 8, 8, 512, 512, true), 64u);    // measured 8% slower with 80
  EXPECT_EQ(tile_of(32, 8, 8, 512, 512, false), 64u);   // 560 padded rows against 512: a tie
  EXPECT_EQ(tile_of(1, 4, 1, 300, 450, false), 80u);    // hop_noncausal_gqa4_d256_f16
  EXPECT_EQ(tile_of(1, 4, 2, 200, 260, true), 64u);     // hop_causal_large_scores_d256_bf16
  PrefillProblem d128;
  d128.head_dim = 128;
  EXPECT_EQ(plan_prefill(d128, h200, hopper).partition.tile_size, 128u);  // one config
}

// Causal d64, q_len = kv_len = 2048: a 192-row block's first warpgroup skips the key tile past its
// rows (the kernel's dead tiles), a 128-row block (rows = key tile) has none to skip. The planner's
// padded work counts each warpgroup's tiles as the kernel walks them: 11 blocks of 192 rows over
// 128-key tiles give 2,359,296 (query row, key row) pairs, not the 2,482,176 of every warpgroup
// walking its block's tiles; 16 blocks of 128 rows give 2,228,224.
TEST(PlanGpu, PrefillPaddedWorkCountsEachWarpgroupsLiveKeyTiles) {
  PrefillProblem p;
  p.head_dim = 64;
  p.q_len = p.kv_len = 2048;
  p.causal = true;
  const PrefillPlan plan = plan_prefill(p, known_target("h200"), KernelFamily::kWarpSpecializedWgmma);
  EXPECT_EQ(plan.partition.rows_per_block, 192u) << to_table(plan);
  const auto has = [](const PrefillPlan& in, const std::string& text) {
    for (const std::string& r : in.reasons) {
      if (r.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(plan, "padded tile work 2359296 vs 2228224")) << to_table(plan);
  EXPECT_TRUE(has(plan, "a warpgroup skips the tiles wholly past its own rows (192-row blocks over 128-key tiles)"))
      << to_table(plan);
  PrefillProblem d128 = p;  // 128-row blocks of 128-key tiles: nothing to skip, and no such reason
  d128.head_dim = 128;
  const PrefillPlan square = plan_prefill(d128, known_target("h200"), KernelFamily::kWarpSpecializedWgmma);
  for (const std::string& r : square.reasons) EXPECT_EQ(r.find("skips the tiles"), std::string::npos) << r;
  p.causal = false;  // nothing to skip: every warpgroup walks all 16 tiles of all 11 blocks
  const PrefillPlan full = plan_prefill(p, known_target("h200"), KernelFamily::kWarpSpecializedWgmma);
  EXPECT_TRUE(has(full, "padded tile work 4325376 vs 4194304")) << to_table(full);
}

// A window past every position is no window, also where q_len > kv_len puts the first rows at
// negative positions (the padded-work count overflowed there for windows near 2^63: a planner-fuzzer
// finding); the plan is the unwindowed one's.
TEST(PlanGpu, PrefillWindowsBeyondEveryPositionPlanAsNoWindow) {
  for (std::int64_t head_dim : {64, 128, 256}) {
    PrefillProblem p;
    p.head_dim = head_dim;
    p.q_len = 5000;
    p.kv_len = 300;
    p.causal = false;  // (causal needs q_len <= kv_len)
    const PrefillPlan none = plan_prefill(p, known_target("h200"));
    for (std::int64_t window : {std::int64_t{5000}, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max()}) {
      p.options.window = window;
      const PrefillPlan wide = plan_prefill(p, known_target("h200"));
      EXPECT_EQ(wide.partition.family, none.partition.family) << window << to_table(wide);
      EXPECT_EQ(wide.partition.rows_per_block, none.partition.rows_per_block) << window;
      EXPECT_EQ(wide.partition.tile_size, none.partition.tile_size) << window;
      EXPECT_EQ(wide.evidence.matmul_flops, none.evidence.matmul_flops) << window;
      EXPECT_EQ(wide.evidence.traffic.global_read_bytes, none.evidence.traffic.global_read_bytes) << window;
    }
  }
}

// The evidence's shared bytes are what the Hopper kernel reserves (hopper_config.hpp), ring,
// barriers, alignment slack and the row sums' chunks of ones included, and the reasons say where
// S reads Q from and how P's rows are summed.
TEST(PlanGpu, HopperEvidenceHasTheKernelsSharedBytesAndOperands) {
  namespace hop = cuda_prefill_hopper;
  const auto has = [](const PrefillPlan& in, const std::string& text) {
    for (const std::string& r : in.reasons) {
      if (r.find(text) != std::string::npos) return true;
    }
    return false;
  };
  for (int head_dim : {64, 128, 256}) {
    for (DType dtype : {DType::kBF16, DType::kE4M3}) {
      if (dtype == DType::kE4M3 && head_dim == 64) continue;  // e4m3 has d128 and d256
      PrefillProblem p;
      p.head_dim = head_dim;
      p.q_len = p.kv_len = 4096;
      p.causal = false;
      p.dtype = dtype;
      p.out_dtype = DType::kBF16;
      const PrefillPlan plan = plan_prefill(p, known_target("h200"), KernelFamily::kWarpSpecializedWgmma);
      const bool fp8 = dtype == DType::kE4M3;
      const hop::HopperConfig* config = nullptr;
      for (const hop::HopperConfig& c : fp8 ? std::span<const hop::HopperConfig>(hop::kHopperFp8Configs)
                                            : std::span<const hop::HopperConfig>(hop::kHopperConfigs)) {
        if (c.head_dim == head_dim && c.keys_per_tile == static_cast<int>(plan.partition.tile_size) &&
            hop::rows_per_block(c) == static_cast<int>(plan.partition.rows_per_block)) {
          config = &c;
        }
      }
      ASSERT_NE(config, nullptr) << to_table(plan);
      EXPECT_EQ(plan.evidence.traffic.shared_memory_bytes,
                static_cast<std::uint64_t>(fp8 ? hop::hopper_fp8_shared_bytes(*config) : hop::hopper_shared_bytes(*config)))
          << to_table(plan);
      const bool q_regs = head_dim == 128;
      EXPECT_EQ(has(plan, "with Q's fragments in registers"), q_regs) << to_table(plan);
      EXPECT_EQ(has(plan, "from shared memory, P V"), !q_regs) << to_table(plan);
      const bool row_sums = !fp8 && head_dim == 64 && plan.partition.rows_per_block == 192;
      EXPECT_EQ(has(plan, "against [V | ones]"), row_sums) << to_table(plan);
    }
  }
}

constexpr KernelFamily kHopperFamily = KernelFamily::kWarpSpecializedWgmma;

TEST(PlanGpu, PrefillPicksTheHopperFamilyOnlyWhereItRuns) {
  const Target h200 = known_target("h200");
  PrefillProblem p;  // bf16, d128, 32 heads, 4096 x 4096, causal
  const PrefillPlan hopper = plan_prefill(p, h200);
  ASSERT_EQ(hopper.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(hopper);
  EXPECT_EQ(hopper.partition.rows_per_block, 128u);
  EXPECT_EQ(hopper.partition.workgroup_lanes, 384u);  // producer + 2 consumer warpgroups
  EXPECT_EQ(hopper.partition.sequence_splits, 1u);
  EXPECT_EQ(hopper.partition.grid_blocks, 132u);  // persistent: one block per SM (1024 work tiles)
  EXPECT_EQ(hopper.evidence.workspace_bytes, 0u);
  EXPECT_EQ(hopper.partition.heads_per_tile_group, 12u);  // 2 MiB of K/V per head: 12 heads in 24 MiB of L2
  PrefillProblem long_seq = p;  // 16k keys: 8 MiB of K/V per head, 3 heads per group
  long_seq.q_len = long_seq.kv_len = 16384;
  EXPECT_EQ(plan_prefill(long_seq, h200).partition.heads_per_tile_group, 3u);
  long_seq.causal = false;  // equal tiles: one head at a time
  EXPECT_EQ(plan_prefill(long_seq, h200).partition.heads_per_tile_group, 1u);
  EXPECT_EQ(hopper.partition.tiles_per_unit, 2u);  // causal, 1024 tiles: pairs of equal work
  EXPECT_EQ(plan_prefill(long_seq, h200).partition.tiles_per_unit, 1u);  // non-causal: single tiles
  // Same FLOPs and bytes as the tiled family: the evidence counts the problem, not the kernel.
  const PrefillPlan tiled = plan_prefill(p, h200, KernelFamily::kCooperativeTiled);
  EXPECT_EQ(tiled.partition.family, KernelFamily::kCooperativeTiled);
  EXPECT_EQ(hopper.evidence.matmul_flops, tiled.evidence.matmul_flops);
  EXPECT_EQ(hopper.evidence.traffic.global_read_bytes, tiled.evidence.traffic.global_read_bytes);
  for (std::int64_t d : {64, 128, 256}) {
    PrefillProblem q = p;
    q.head_dim = d;
    EXPECT_EQ(plan_prefill(q, h200).partition.family, KernelFamily::kWarpSpecializedWgmma) << d;
  }
  // d64: 192-row blocks of three consumer warpgroups where their speed outweighs their padding
  // (long sequences), 128-row blocks where a 192-row causal diagonal pads too much (short ones).
  PrefillProblem d64 = p;
  d64.head_dim = 64;
  d64.q_len = d64.kv_len = 8192;
  const PrefillPlan d64_long = plan_prefill(d64, h200);
  EXPECT_EQ(d64_long.partition.rows_per_block, 192u) << to_table(d64_long);
  EXPECT_EQ(d64_long.partition.workgroup_lanes, 512u);
  d64.batch = 32;
  d64.q_len = d64.kv_len = 512;
  const PrefillPlan d64_short = plan_prefill(d64, h200);
  ASSERT_EQ(d64_short.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(d64_short);
  EXPECT_EQ(d64_short.partition.rows_per_block, 128u) << to_table(d64_short);
  EXPECT_EQ(d64_short.partition.workgroup_lanes, 384u);
  auto family = [&](PrefillProblem q, const Target& t) { return plan_prefill(q, t).partition.family; };
  PrefillProblem f32 = p;
  f32.dtype = f32.out_dtype = DType::kF32;
  EXPECT_EQ(family(f32, h200), KernelFamily::kCooperativeTiled);
  PrefillProblem d96 = p;
  d96.head_dim = 96;
  EXPECT_EQ(family(d96, h200), KernelFamily::kCooperativeTiled);
  PrefillProblem capped = p;
  capped.options.softcap = 30.0f;
  EXPECT_EQ(family(capped, h200), KernelFamily::kCooperativeTiled);
  // 16 query rows against 3000 keys: 2 work tiles, far from a wave, so the Hopper kernel splits
  // keys (its states go to the workspace the plan reports).
  PrefillProblem long_keys = p;
  long_keys.num_heads = long_keys.kv_heads = 2;
  long_keys.q_len = 16;
  long_keys.kv_len = 3000;
  const PrefillPlan split = plan_prefill(long_keys, h200);
  EXPECT_EQ(split.partition.family, KernelFamily::kWarpSpecializedWgmma);
  EXPECT_GT(split.partition.sequence_splits, 1u);
  EXPECT_GE(split.partition.tiles_per_split, kTargetTilesPerSplit);
  EXPECT_EQ(split.partition.grid_blocks,
            std::min<std::uint64_t>(132, 2ull * split.partition.sequence_splits));
  EXPECT_GT(split.evidence.workspace_bytes, 0u);
  // One sequence of 1024 rows x 32 heads: the tiled family would split keys (256 blocks do not fill
  // its 264-block wave), but the Hopper kernel's 128 causal units fill 97% of its 132 persistent
  // blocks, and it ran 4.2x faster there (27 vs 113 us on the H200).
  PrefillProblem one_sequence = p;
  one_sequence.batch = 1;
  one_sequence.num_heads = 32;
  one_sequence.kv_heads = 8;
  one_sequence.head_dim = 128;
  one_sequence.q_len = one_sequence.kv_len = 1024;
  one_sequence.causal = true;
  EXPECT_EQ(family(one_sequence, h200), KernelFamily::kWarpSpecializedWgmma);
  EXPECT_GT(plan_prefill(one_sequence, h200, KernelFamily::kCooperativeTiled).partition.sequence_splits, 1u);
  EXPECT_EQ(plan_prefill(one_sequence, h200).partition.sequence_splits, 1u);  // 256 tiles: no split
  // 128 query rows x 32 heads against 8192 keys (32 work tiles) and 16 rows x 8 heads against 32768
  // keys (8): the Hopper kernel with its keys split, not the tiled family.
  PrefillProblem quarter = one_sequence;
  quarter.q_len = 128;
  quarter.kv_len = 8192;
  quarter.causal = false;
  EXPECT_EQ(family(quarter, h200), KernelFamily::kWarpSpecializedWgmma);
  EXPECT_GT(plan_prefill(quarter, h200).partition.sequence_splits, 1u);
  PrefillProblem sliver = one_sequence;
  sliver.num_heads = 8;
  sliver.kv_heads = 2;
  sliver.q_len = 16;
  sliver.kv_len = 32768;
  EXPECT_EQ(family(sliver, h200), KernelFamily::kWarpSpecializedWgmma);
  // GQA-packed (4 heads x 16 rows in one tile): 2 work tiles x 64 splits = 128 units, one round.
  EXPECT_EQ(plan_prefill(sliver, h200).partition.packed_heads, 4u);
  EXPECT_EQ(plan_prefill(sliver, h200).partition.sequence_splits, 64u);
  // 4 sequences x 32 heads of 16 rows (no GQA: nothing to pack): 128 work tiles fill 97% of the
  // wave, so no split (in two it ran 64 against 56 us); 64 tiles split in two (one round of 128
  // units), not three (two rounds).
  PrefillProblem nearly_full = sliver;
  nearly_full.batch = 4;
  nearly_full.num_heads = 32;
  nearly_full.kv_heads = 32;
  nearly_full.kv_len = 4096;
  EXPECT_EQ(plan_prefill(nearly_full, h200).partition.sequence_splits, 1u);
  nearly_full.batch = 2;
  EXPECT_EQ(plan_prefill(nearly_full, h200).partition.sequence_splits, 2u);
  // A square causal problem with 64 work tiles keeps its paired units whole (split, it ran slower).
  PrefillProblem square = sliver;
  square.q_len = square.kv_len = 1024;
  EXPECT_EQ(plan_prefill(square, h200).partition.sequence_splits, 1u);
  Target ampere = h200;
  ampere.cc_major = 8;
  EXPECT_EQ(family(p, ampere), KernelFamily::kCooperativeTiled);
  EXPECT_EQ(family(p, known_target("h100")), KernelFamily::kWarpSpecializedWgmma);

  // Asked for where it cannot run: an Error with a Fix, before any rule's choice leaves the planner.
  for (const auto& bad : {std::pair{f32, h200}, std::pair{d96, h200}, std::pair{capped, h200}, std::pair{p, ampere}}) {
    const std::string message = error_of([&] { plan_prefill(bad.first, bad.second, KernelFamily::kWarpSpecializedWgmma); });
    EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
  }
  const std::string cpu_message = error_of([&] { plan_prefill(p, cpu(2), KernelFamily::kWarpSpecializedWgmma); });
  EXPECT_NE(cpu_message.find("cooperative_tiled"), std::string::npos) << cpu_message;
  // The GPU kernels index positions in 32 bits: longer sequences are refused, whatever the family.
  PrefillProblem huge = p;
  huge.num_heads = huge.kv_heads = 1;
  huge.head_dim = 64;
  huge.q_len = 1;
  huge.kv_len = (std::int64_t{1} << 30) + 1;
  for (const KernelFamily* f : {static_cast<const KernelFamily*>(nullptr), &kHopperFamily}) {
    const std::string message = error_of([&] { f ? plan_prefill(huge, h200, *f) : plan_prefill(huge, h200); });
    EXPECT_NE(message.find("2^30"), std::string::npos) << message;
  }
  huge.kv_len = std::int64_t{1} << 30;
  EXPECT_NO_THROW(plan_prefill(huge, h200));
}

TEST(Targets, KnownTargets) {
  const Target h200 = known_target("h200");
  EXPECT_EQ(h200.backend, Backend::kCuda);
  EXPECT_EQ(h200.sm_count, 132);
  EXPECT_EQ(h200.cc_major, 9);
  EXPECT_EQ(h200.shared_bytes_per_block, 232448);
  EXPECT_EQ(h200.peak_read_bytes_per_s, 4.8e12);
  EXPECT_EQ(known_target("H100").peak_read_bytes_per_s, 3.35e12);
  EXPECT_EQ(known_target("cpu").backend, Backend::kCpu);
  const std::string message = error_of([] { known_target("a100"); });
  EXPECT_NE(message.find("Fix:"), std::string::npos);
  EXPECT_NE(message.find("h200"), std::string::npos);
}

TEST(Targets, CpuTargetReadsTheHost) {
  const Target t = cpu_target();
  EXPECT_EQ(t.backend, Backend::kCpu);
  EXPECT_GE(t.threads, 1);
  EXPECT_GT(t.cache_bytes, 0);
  EXPECT_FALSE(t.name.empty());
  EXPECT_EQ(cpu_target(3).threads, 3);
  EXPECT_THROW(cpu_target(-1), Error);
}

// e4m3 inputs: only the Hopper family has an fp8 kernel (hopper_config.hpp's kHopperFp8Configs),
// so the planner takes it on sm_90 or fails; V^T is staged in the workspace, whose size the plan
// reports exactly.
TEST(PlanGpu, PrefillHopperPairsCausalTilesOnlyBeyondOneWave) {
  const Target h200 = known_target("h200");  // 132 SMs
  PrefillProblem p;  // bf16, d128, causal
  p.num_heads = p.kv_heads = 8;
  p.q_len = p.kv_len = 2048;  // 16 query tiles x 8 heads = 128 tiles: one wave
  const PrefillPlan one_wave = plan_prefill(p, h200);
  ASSERT_EQ(one_wave.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(one_wave);
  EXPECT_EQ(one_wave.partition.tiles_per_unit, 1u) << to_table(one_wave);
  EXPECT_EQ(one_wave.partition.grid_blocks, 128u);  // a block per tile, not 64 pairs on 132 SMs
  EXPECT_EQ(one_wave.partition.sequence_splits, 1u);
  p.q_len = p.kv_len = 2049;  // 17 tiles x 8 = 136 > 132: pairs again (9 per head, 72 units)
  const PrefillPlan beyond = plan_prefill(p, h200);
  EXPECT_EQ(beyond.partition.tiles_per_unit, 2u) << to_table(beyond);
  EXPECT_EQ(beyond.partition.grid_blocks, 72u);
  p.causal = false;  // equal tiles: never paired
  EXPECT_EQ(plan_prefill(p, h200).partition.tiles_per_unit, 1u);
  p.causal = true;
  p.q_len = 16;  // key splits (decode-like): units are single tiles of one split
  p.kv_len = 32768;
  const PrefillPlan split = plan_prefill(p, h200);
  EXPECT_GT(split.partition.sequence_splits, 1u) << to_table(split);
  EXPECT_EQ(split.partition.tiles_per_unit, 1u);
}

// Causal pairs leave the blocks uneven by the last partial round; the planner's model of the walk
// (hopper_walk.hpp) picks a tail of single tiles that evens them out (perf-notes, round 28).
TEST(PlanGpu, PrefillHopperCausalPairsEndInATailThatEvensTheBlocks) {
  const Target h200 = known_target("h200");
  PrefillProblem p;  // bf16, d128: 128-row tiles
  p.num_heads = p.kv_heads = 16;
  p.q_len = p.kv_len = 16384;  // 64 pairs of tiles x 16 heads = 1024 units: 7.76 rounds on 132 SMs
  const PrefillPlan plan = plan_prefill(p, h200);
  ASSERT_EQ(plan.partition.tiles_per_unit, 2u) << to_table(plan);
  EXPECT_EQ(plan.partition.tail_pairs, 2u) << to_table(plan);  // 256 tiles: two rounds
  bool said = false;
  for (const std::string& r : plan.reasons) said = said || r.find("from 0.970 to 0.999") != std::string::npos;
  EXPECT_TRUE(said) << to_table(plan);
  p.num_heads = p.kv_heads = 33;  // 2112 units: 16 whole rounds, nothing to even out
  EXPECT_EQ(plan_prefill(p, h200).partition.tail_pairs, 0u);
  p.num_heads = p.kv_heads = 16;
  p.options.window = 4096;  // pairs of unequal work: no tail
  EXPECT_EQ(plan_prefill(p, h200).partition.tail_pairs, 0u);
  p.options.window = 0;
  p.causal = false;  // single tiles: no tail
  EXPECT_EQ(plan_prefill(p, h200).partition.tail_pairs, 0u);
}

TEST(PlanGpu, PrefillHopperRejectsWalksTooLongForItsIndexArithmetic) {
  const Target h200 = known_target("h200");
  const auto units_error = [&](const PrefillProblem& p) {
    const std::string message = error_of([&] { plan_prefill(p, h200); });
    return message.find("work units exceed") != std::string::npos && message.find("Fix:") != std::string::npos;
  };
  PrefillProblem p;  // bf16, d128, causal: 128-row tiles walked in pairs (and a tail)
  p.num_heads = p.kv_heads = 1;
  p.q_len = p.kv_len = 128 * 3;  // 3 tiles, 2 units per (sequence, head) pair
  p.batch = 1 << 29;             // 2^30 units: the most a walk takes
  EXPECT_NO_THROW(plan_prefill(p, h200));
  p.batch = INT32_MAX / 3;  // 2^31 - 2 work tiles, 1.4e9 units
  EXPECT_TRUE(units_error(p));
  p.causal = false;
  p.q_len = p.kv_len = 128;  // one tile per pair: INT32_MAX single-tile units fitted 31 bits,
  p.batch = INT32_MAX;       // but the walk's last round overflowed int (found by the fuzzer)
  EXPECT_TRUE(units_error(p));
}

TEST(PlanGpu, PrefillHopperPacksGqaGroupsWhoseQueriesFitOneTile) {
  const Target h200 = known_target("h200");
  PrefillProblem p;  // bf16, d128, 32 query / 8 KV heads, causal: 128-row tiles
  p.q_len = 16;
  p.kv_len = 32768;
  const PrefillPlan packed = plan_prefill(p, h200);
  ASSERT_EQ(packed.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(packed);
  EXPECT_EQ(packed.partition.packed_heads, 4u) << to_table(packed);  // 4 heads x 16 rows = 64 rows
  EXPECT_EQ(packed.partition.tiles_per_unit, 1u);
  // 8 work tiles (one per KV head) against 256 key tiles: split so one round fills the SMs.
  EXPECT_EQ(packed.partition.grid_blocks, std::min<std::uint64_t>(132, 8ull * packed.partition.sequence_splits));
  EXPECT_GT(packed.partition.sequence_splits, 8u);
  p.q_len = 32;  // 4 x 32 = 128 rows: still one tile
  EXPECT_EQ(plan_prefill(p, h200).partition.packed_heads, 4u);
  p.q_len = 33;  // 132 rows: one head per tile again
  EXPECT_EQ(plan_prefill(p, h200).partition.packed_heads, 1u);
  // d64, a group of 8: 20 rows each (160) fit a 192-row block of three consumer warpgroups, not a
  // 128-row one, so the planner takes the block that packs; 16 rows each (128) fit both: the smaller.
  PrefillProblem d64 = p;
  d64.head_dim = 64;
  d64.kv_heads = 4;
  d64.q_len = 20;
  const PrefillPlan d64_packed = plan_prefill(d64, h200);
  EXPECT_EQ(d64_packed.partition.rows_per_block, 192u) << to_table(d64_packed);
  EXPECT_EQ(d64_packed.partition.packed_heads, 8u);
  d64.q_len = 16;
  EXPECT_EQ(plan_prefill(d64, h200).partition.rows_per_block, 128u);
  EXPECT_EQ(plan_prefill(d64, h200).partition.packed_heads, 8u);
  p.q_len = 1;
  p.kv_heads = 32;  // no GQA: nothing to pack
  EXPECT_EQ(plan_prefill(p, h200).partition.packed_heads, 1u);
  p.kv_heads = 8;
  p.dtype = DType::kE4M3;  // the e4m3 kernel has no packing
  p.out_dtype = DType::kBF16;
  EXPECT_EQ(plan_prefill(p, h200).partition.packed_heads, 1u);
}

TEST(PlanGpu, PrefillE4m3PlansTheHopperFp8KernelOrFails) {
  namespace hop = cuda_prefill_hopper;
  const Target h200 = known_target("h200");
  PrefillProblem p;  // 32 heads, 8 KV heads, 4096 x 4096, causal
  p.batch = 2;
  p.dtype = DType::kE4M3;
  p.out_dtype = DType::kBF16;
  for (std::int64_t d : {128, 256}) {
    PrefillProblem q = p;
    q.head_dim = d;
    q.kv_len = 1000;  // V^T rows padded to 1024 keys
    q.q_len = 1000;
    const hop::HopperConfig& config = *hop::find_hopper_fp8_config(d);
    const PrefillPlan plan = plan_prefill(q, h200);
    ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(plan);
    EXPECT_EQ(plan.partition.tile_size, 128u);
    EXPECT_EQ(plan.partition.tile_size, static_cast<std::uint32_t>(config.keys_per_tile));
    EXPECT_EQ(plan.partition.pipeline_stages, static_cast<std::uint32_t>(config.stages));
    EXPECT_EQ(plan.partition.rows_per_block, 128u);
    EXPECT_EQ(plan.partition.sequence_splits, 1u);
    EXPECT_EQ(plan.evidence.traffic.shared_memory_bytes, static_cast<std::uint64_t>(hop::hopper_fp8_shared_bytes(config)));
    EXPECT_EQ(plan.evidence.workspace_bytes, 2ull * 8 * d * 1024);  // batch x kv_heads x head_dim x padded keys
    EXPECT_EQ(plan.evidence.workspace_bytes, static_cast<std::uint64_t>(hop::hopper_fp8_vt_bytes(2, 8, d, 1000)));
    EXPECT_EQ(plan.evidence.rel_l2_tolerance, 5e-2);
    const std::string table = to_table(plan);
    EXPECT_NE(table.find("K-major"), std::string::npos) << table;
    EXPECT_NE(table.find("V^T"), std::string::npos) << table;
    EXPECT_EQ(table.find("split states"), std::string::npos) << table;  // the workspace is V^T, not splits
    // The same problem in bf16: the same FLOPs, about half the input bytes plus the V^T staging.
    PrefillProblem bf16 = q;
    bf16.dtype = DType::kBF16;
    const PrefillPlan plan16 = plan_prefill(bf16, h200);
    EXPECT_EQ(plan.evidence.matmul_flops, plan16.evidence.matmul_flops);
    EXPECT_LT(plan.evidence.traffic.global_read_bytes, plan16.evidence.traffic.global_read_bytes);
    EXPECT_LT(plan.evidence.predicted_seconds, plan16.evidence.predicted_seconds);
    EXPECT_EQ(to_table(plan_prefill(q, h200, KernelFamily::kWarpSpecializedWgmma)), table);
  }

  // Bytes, counted exactly where every key is visible (non-causal, no window): q, k and v at one
  // byte an element, V read once more by the transpose, V^T written (padded) and read.
  PrefillProblem full = p;
  full.causal = false;
  full.q_len = 300;
  full.kv_len = 700;
  full.out_dtype = DType::kF32;
  const PrefillPlan plan = plan_prefill(full, h200);
  const std::uint64_t q_elems = 2ull * 32 * 300 * 128, kv_elems = 2ull * 8 * 700 * 128;
  const std::uint64_t vt = 2ull * 8 * 128 * 768;
  EXPECT_EQ(plan.evidence.traffic.global_read_bytes, q_elems + 2 * kv_elems + kv_elems);
  EXPECT_EQ(plan.evidence.traffic.global_write_bytes, q_elems * 4 + 2ull * 32 * 300 * 4 + vt);
  EXPECT_EQ(plan.evidence.workspace_bytes, vt);

  // Decode-like shapes stay on the Hopper kernel (bf16 would split keys in the tiled family,
  // which has no fp8), unsplit.
  PrefillProblem long_keys = p;
  long_keys.num_heads = long_keys.kv_heads = 2;
  long_keys.q_len = 16;
  long_keys.kv_len = 3000;
  const PrefillPlan narrow = plan_prefill(long_keys, h200);
  EXPECT_EQ(narrow.partition.family, KernelFamily::kWarpSpecializedWgmma);
  EXPECT_EQ(narrow.partition.sequence_splits, 1u);
  EXPECT_NE(to_table(narrow).find("no fp8"), std::string::npos) << to_table(narrow);
  EXPECT_EQ(plan_prefill(p, known_target("h100")).partition.family, KernelFamily::kWarpSpecializedWgmma);

  // Everything the fp8 kernel cannot run: an Error with a Fix naming why.
  auto expect_rejected = [](const std::function<void()>& call, const std::string& needle) {
    const std::string message = error_of(call);
    EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
    EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
  };
  PrefillProblem d64 = p;
  d64.head_dim = 64;
  expect_rejected([&] { plan_prefill(d64, h200); }, "no e4m3 kernel for head_dim=64 (e4m3 prefill has head_dim 128, 256)");
  PrefillProblem d96 = p;
  d96.head_dim = 96;
  expect_rejected([&] { plan_prefill(d96, h200, KernelFamily::kWarpSpecializedWgmma); }, "head_dim=96");
  Target ampere = h200;
  ampere.cc_major = 8;
  expect_rejected([&] { plan_prefill(p, ampere); }, "e4m3 prefill needs a Hopper GPU (sm_90)");
  Target blackwell = h200;
  blackwell.cc_major = 10;
  expect_rejected([&] { plan_prefill(p, blackwell); }, "sm_100");
  PrefillProblem capped = p;
  capped.options.softcap = 30.0f;
  expect_rejected([&] { plan_prefill(capped, h200); }, "e4m3 prefill has no soft-cap");
  PrefillProblem e4m3_out = p;
  e4m3_out.out_dtype = DType::kE4M3;
  expect_rejected([&] { plan_prefill(e4m3_out, h200); }, "out_dtype is e4m3");
  expect_rejected([&] { plan_prefill(p, h200, KernelFamily::kCooperativeTiled); }, "cooperative_tiled has no fp8 kernel");
  expect_rejected([&] { plan_prefill(p, cpu(2)); }, "e4m3 prefill runs on the CUDA backend on Hopper (sm_90)");
}
