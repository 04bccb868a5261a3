// Seed 004's own facts about its two plans, pinned.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"

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

}  // namespace

TEST(SeedPlans, TiledReadsFewerGlobalBytesThanScalar) {
  const auto scalar = plan_flash_attention_scalar(128, 64);
  const auto tiled = plan_flash_attention_tiled(128, 64, 64);
  EXPECT_EQ(scalar.partition.family, KernelFamily::kScalarOnline);
  EXPECT_EQ(tiled.partition.family, KernelFamily::kCooperativeTiled);
  EXPECT_EQ(tiled.partition.workgroup_lanes, 64u);
  EXPECT_EQ(tiled.partition.warp_lanes, 32u);
  EXPECT_EQ(tiled.partition.warps_per_block, 2u);
  EXPECT_EQ(tiled.partition.tile_count, 2u);
  EXPECT_EQ(tiled.partition.sequence_splits, 1u);
  EXPECT_EQ(tiled.partition.workgroups_per_row, 1u);
  EXPECT_LT(tiled.evidence.traffic.global_read_bytes, scalar.evidence.traffic.global_read_bytes);
  EXPECT_GT(tiled.evidence.traffic.shared_memory_bytes, 0u);
  EXPECT_GT(tiled.evidence.occupancy_proxy_bps, 0u);
  EXPECT_GT(tiled.evidence.non_matmul_flops, 0u);
  EXPECT_EQ(tiled.evidence.output_tolerance_abs, kFlashAttentionOutputToleranceAbs);
  EXPECT_EQ(scalar.evidence.output_tolerance_abs, 1e-3);
}

TEST(SeedPlans, ScalarPlanShape) {
  const auto scalar = plan_flash_attention_scalar(9, 7);
  EXPECT_EQ(scalar.logical_elements, 63u);
  EXPECT_EQ(scalar.partition.tile_size, 1u);
  EXPECT_EQ(scalar.partition.tile_count, 9u);
  EXPECT_EQ(scalar.partition.workgroup_lanes, 128u);
  EXPECT_EQ(scalar.partition.warps_per_block, 4u);
  EXPECT_EQ(scalar.partition.q_scratch_elements, 128u * 7);
  EXPECT_EQ(scalar.partition.o_acc_scratch_elements, scalar.partition.q_scratch_elements);
  // Seed traffic: every row reads q, K and V (3 * seq^2 * head_dim f32), writes its output once.
  EXPECT_EQ(scalar.evidence.traffic.global_read_bytes, 3ull * 9 * 9 * 7 * 4);
  EXPECT_EQ(scalar.evidence.traffic.global_write_bytes, 9ull * 7 * 4);
  EXPECT_EQ(scalar.evidence.traffic.shared_memory_bytes, 128ull * 7 * 4);
  // Occupancy: head_dim active lanes of 128.
  EXPECT_EQ(scalar.evidence.occupancy_proxy_bps, 7u * 10000 / 128);
  EXPECT_EQ(scalar.evidence.non_matmul_flops, 9ull * 9 * 9 + 4ull * 9 * 7);
  EXPECT_EQ(scalar.evidence.matmul_flops, 4ull * 9 * 9 * 7);
}

TEST(SeedPlans, SequenceParallelSplitsLongRows) {
  const auto scalar = plan_flash_attention_scalar(4096, 128);
  const auto tiled = plan_flash_attention_tiled(4096, 128, 128);
  EXPECT_EQ(tiled.partition.tile_count, 32u);
  EXPECT_EQ(tiled.partition.sequence_splits, 8u);
  EXPECT_EQ(tiled.partition.tiles_per_split, kTargetTilesPerSplit);
  EXPECT_EQ(tiled.partition.keys_per_split, 512u);
  EXPECT_EQ(tiled.partition.workgroups_per_row, tiled.partition.sequence_splits);
  EXPECT_EQ(tiled.partition.split_reduce_scratch_elements, tiled.partition.sequence_splits * (tiled.head_dim + 2));
  EXPECT_GT(tiled.evidence.traffic.shared_memory_bytes, 0u);
  EXPECT_GT(tiled.evidence.occupancy_proxy_bps, 0u);
  EXPECT_GT(tiled.evidence.non_matmul_flops, 0u);
  EXPECT_LT(tiled.evidence.non_matmul_flops, scalar.evidence.non_matmul_flops);
  EXPECT_LT(tiled.evidence.traffic.global_read_bytes, scalar.evidence.traffic.global_read_bytes);
  // Tiled traffic: K and V re-read per row, q once: (2 * seq^2 * d + seq * d) f32.
  EXPECT_EQ(tiled.evidence.traffic.global_read_bytes, (2ull * 4096 * 4096 * 128 + 4096ull * 128) * 4);
  // Shared footprint: q, scores, accumulator (64 lanes each) and the split states.
  EXPECT_EQ(tiled.evidence.traffic.shared_memory_bytes, (64ull * 128 + 64 * 128 + 64 * 128 + 8 * 130) * 4);
}

TEST(SeedPlans, SplitsRoundUpAndKeysClampToSequence) {
  // 10 keys in tiles of 4: 3 tiles, one split, the split spans all 10 keys (not 12).
  const auto small = plan_flash_attention_tiled(10, 16, 4);
  EXPECT_EQ(small.partition.tile_count, 3u);
  EXPECT_EQ(small.partition.sequence_splits, 1u);
  EXPECT_EQ(small.partition.tiles_per_split, 3u);
  EXPECT_EQ(small.partition.keys_per_split, 10u);
  // 17 tiles: ceil(17 / 4) = 5 splits of ceil(17 / 5) = 4 tiles.
  const auto odd = plan_flash_attention_tiled(17 * 8, 16, 8);
  EXPECT_EQ(odd.partition.sequence_splits, 5u);
  EXPECT_EQ(odd.partition.tiles_per_split, 4u);
  EXPECT_EQ(odd.partition.keys_per_split, 32u);
}

TEST(SeedPlans, ZeroDimensionsAreRejectedWithAFix) {
  for (const std::string& message :
       {error_of([] { plan_flash_attention_scalar(0, 64); }), error_of([] { plan_flash_attention_scalar(64, 0); }),
        error_of([] { plan_flash_attention_tiled(0, 64, 64); }), error_of([] { plan_flash_attention_tiled(64, 0, 64); }),
        error_of([] { plan_flash_attention_tiled(64, 64, 0); })}) {
    EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([] { plan_flash_attention_tiled(64, 64, 0); }).find("tile_size"), std::string::npos);
  EXPECT_NE(error_of([] { plan_flash_attention_scalar(0, 64); }).find("seq_len"), std::string::npos);
}

TEST(SeedPlans, OverflowIsRejectedWithAFix) {
  // seq_len * head_dim overflows u32.
  const std::string logical = error_of([] { plan_flash_attention_scalar(1u << 20, 1u << 12); });
  EXPECT_NE(logical.find("Fix:"), std::string::npos) << logical;
  EXPECT_NE(logical.find("overflows"), std::string::npos) << logical;
  // 128 lanes * head_dim overflows u32 while seq_len * head_dim does not.
  const std::string scratch = error_of([] { plan_flash_attention_scalar(1, 1u << 26); });
  EXPECT_NE(scratch.find("Fix:"), std::string::npos) << scratch;
  // 64 lanes * tile_size overflows u32.
  const std::string tile = error_of([] { plan_flash_attention_tiled(16, 16, 1u << 27); });
  EXPECT_NE(tile.find("Fix:"), std::string::npos) << tile;
  // Largest valid sizes still plan: seq^2 * d fits u64.
  EXPECT_NO_THROW(plan_flash_attention_tiled(1u << 16, 1u << 8, 128));
}
