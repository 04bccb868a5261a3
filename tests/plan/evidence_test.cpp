// Evidence rules on hand-built partitions (independent of every backend's partition rules).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "plan/evidence.hpp"

using namespace attnkit;

namespace {

DecodeProblem decode_problem() {
  DecodeProblem p;
  p.batch = 3;
  p.num_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.max_seq = 8192;
  p.kv_len = 5000;
  p.kv_dtype = p.q_dtype = p.out_dtype = DType::kBF16;
  return p;
}

PrefillProblem prefill_problem() {
  PrefillProblem p;
  p.batch = 2;
  p.num_heads = 16;
  p.kv_heads = 4;
  p.head_dim = 64;
  p.q_len = 700;
  p.kv_len = 1000;
  p.causal = true;
  p.dtype = p.out_dtype = DType::kF16;
  return p;
}

// A GQA-packed split-KV partition (what a fast decode rule produces).
WorkPartition packed(std::int64_t group, std::uint32_t splits = 1) {
  WorkPartition w;
  w.family = KernelFamily::kSplitKvDecode;
  w.tile_size = 64;
  w.sequence_splits = splits;
  w.rows_per_block = static_cast<std::uint32_t>(group);
  w.workgroup_lanes = 128;
  w.grid_blocks = 100;
  return w;
}

WorkPartition tiled(std::uint32_t splits = 1) {
  WorkPartition w;
  w.family = KernelFamily::kCooperativeTiled;
  w.tile_size = 64;
  w.sequence_splits = splits;
  w.rows_per_block = 64;
  w.workgroup_lanes = 128;
  w.grid_blocks = 100;
  return w;
}

Target gpu() {
  Target t;
  t.backend = Backend::kCuda;
  t.sm_count = 100;
  return t;
}

std::uint64_t total_bytes(const Evidence& e) { return e.traffic.global_read_bytes + e.traffic.global_write_bytes; }

}  // namespace

TEST(DecodeEvidence, MinimumTrafficTermByTerm) {
  const DecodeProblem p = decode_problem();
  const Evidence e = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  const std::uint64_t rows = 3 * 32, d = 128, s = 2;
  const std::uint64_t q = rows * d * s, kv = 2 * 3 * 8 * 5000 * d * s, lengths = 3 * 4;
  EXPECT_EQ(e.traffic.global_read_bytes, q + kv + lengths);
  EXPECT_EQ(e.traffic.global_write_bytes, rows * d * s + rows * 4);  // out + f32 LSE
  EXPECT_EQ(e.matmul_flops, 4 * rows * 5000 * d);
  EXPECT_EQ(e.workspace_bytes, 0u);
  EXPECT_EQ(e.rel_l2_tolerance, 1e-2);
  EXPECT_EQ(e.output_tolerance_abs, 1e-3);
}

TEST(DecodeEvidence, BytesScaleWithDtypeSize) {
  DecodeProblem p = decode_problem();
  const Evidence half = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  p.kv_dtype = p.q_dtype = p.out_dtype = DType::kF32;
  const Evidence full = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  // Everything but the i32 lengths and the f32 LSE doubles.
  const std::uint64_t fixed_read = 3 * 4, fixed_write = 3 * 32 * 4;
  EXPECT_EQ(full.traffic.global_read_bytes - fixed_read, 2 * (half.traffic.global_read_bytes - fixed_read));
  EXPECT_EQ(full.traffic.global_write_bytes - fixed_write, 2 * (half.traffic.global_write_bytes - fixed_write));
  EXPECT_EQ(full.rel_l2_tolerance, 1e-5);
  EXPECT_EQ(full.matmul_flops, half.matmul_flops);
}

TEST(DecodeEvidence, GqaReadsEachKvHeadOncePerGroup) {
  DecodeProblem gqa = decode_problem();  // 32 query heads, 8 KV heads
  DecodeProblem mha = gqa;
  mha.kv_heads = 32;
  const Evidence e_gqa = detail::compute_decode_evidence(gqa, packed(gqa.group_size()), gpu());
  const Evidence e_mha = detail::compute_decode_evidence(mha, packed(mha.group_size()), gpu());
  const std::uint64_t kv_per_head = 2ull * 3 * 5000 * 128 * 2;  // K and V of one head over the batch
  EXPECT_EQ(e_mha.traffic.global_read_bytes - e_gqa.traffic.global_read_bytes, (32 - 8) * kv_per_head);
  EXPECT_EQ(e_mha.traffic.global_write_bytes, e_gqa.traffic.global_write_bytes);
  EXPECT_EQ(e_mha.matmul_flops, e_gqa.matmul_flops);
}

TEST(DecodeEvidence, ScalarFamilyRereadsKvPerQueryHead) {
  const DecodeProblem p = decode_problem();
  WorkPartition scalar;
  scalar.family = KernelFamily::kScalarOnline;
  const Evidence e_scalar = detail::compute_decode_evidence(p, scalar, gpu());
  const Evidence e_packed = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  EXPECT_EQ(detail::decode_kv_reads_per_kv_head(p, scalar), 4u);
  EXPECT_EQ(detail::decode_kv_reads_per_kv_head(p, packed(p.group_size())), 1u);
  EXPECT_EQ(detail::decode_kv_reads_per_kv_head(p, packed(3)), 2u);  // ceil(4 / 3) blocks per group
  const std::uint64_t kv_once = 2ull * 3 * 8 * 5000 * 128 * 2;
  EXPECT_EQ(e_scalar.traffic.global_read_bytes - e_packed.traffic.global_read_bytes, 3 * kv_once);
  // Seed 004's FLOP models: the scalar family spends more non-matmul work per pair.
  EXPECT_GT(e_scalar.non_matmul_flops, e_packed.non_matmul_flops);
}

TEST(DecodeEvidence, WindowCountsOnlyVisibleKeys) {
  DecodeProblem p = decode_problem();
  const Evidence full = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  p.options.window = 1000;
  const Evidence windowed = detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
  const std::uint64_t kv_per_key = 2ull * 3 * 8 * 128 * 2;
  EXPECT_EQ(full.traffic.global_read_bytes - windowed.traffic.global_read_bytes, (5000 - 1000) * kv_per_key);
  EXPECT_EQ(windowed.matmul_flops, 4ull * 3 * 32 * 1000 * 128);
  p.options.window = 6000;  // wider than the cache: everything visible
  EXPECT_EQ(detail::compute_decode_evidence(p, packed(p.group_size()), gpu()).traffic.global_read_bytes,
            full.traffic.global_read_bytes);
}

TEST(DecodeEvidence, SplitsAddPartialStatesAndWorkspace) {
  const DecodeProblem p = decode_problem();
  const Evidence one = detail::compute_decode_evidence(p, packed(p.group_size(), 1), gpu());
  const Evidence four = detail::compute_decode_evidence(p, packed(p.group_size(), 4), gpu());
  const std::uint64_t states = 4ull * 3 * 32 * (128 + 2) * 4;
  EXPECT_EQ(one.workspace_bytes, 0u);
  EXPECT_EQ(four.traffic.global_read_bytes - one.traffic.global_read_bytes, states);
  EXPECT_EQ(four.traffic.global_write_bytes - one.traffic.global_write_bytes, states);
  EXPECT_GE(four.workspace_bytes, states);
  EXPECT_LT(four.workspace_bytes, states + 256);
  EXPECT_EQ(four.workspace_bytes % 256, 0u);
  EXPECT_GT(four.non_matmul_flops, one.non_matmul_flops);  // the merge
}

TEST(DecodeEvidence, PredictedTimeFromPeakBandwidth) {
  const DecodeProblem p = decode_problem();
  Target t = gpu();
  EXPECT_EQ(detail::compute_decode_evidence(p, packed(p.group_size()), t).predicted_seconds, 0.0);
  t.peak_read_bytes_per_s = 1e12;
  const Evidence e = detail::compute_decode_evidence(p, packed(p.group_size()), t);
  EXPECT_DOUBLE_EQ(e.predicted_seconds, static_cast<double>(total_bytes(e)) / 1e12);
}

TEST(DecodeEvidence, OccupancyCountsIdleMachine) {
  const DecodeProblem p = decode_problem();
  WorkPartition w = packed(p.group_size());
  w.grid_blocks = 25;  // a quarter of 100 SMs
  EXPECT_EQ(detail::compute_decode_evidence(p, w, gpu()).occupancy_proxy_bps, 2500u);
  w.grid_blocks = 1000;
  EXPECT_EQ(detail::compute_decode_evidence(p, w, gpu()).occupancy_proxy_bps, 10000u);
  // Lane fill (seed 004): one row of head_dim 64 on 128 lanes is half busy.
  WorkPartition scalar;
  scalar.family = KernelFamily::kScalarOnline;
  scalar.workgroup_lanes = 128;
  scalar.grid_blocks = 1000;
  DecodeProblem small = p;
  small.head_dim = 64;
  EXPECT_EQ(detail::compute_decode_evidence(small, scalar, gpu()).occupancy_proxy_bps, 5000u);
}

TEST(DecodeEvidence, OverflowIsAnErrorWithAFix) {
  DecodeProblem p = decode_problem();
  // Every tensor stays within validate()'s 2^62 elements, but 4 * rows * pairs * d is 2^71.
  p.batch = 1ll << 40;
  p.max_seq = p.kv_len = 1 << 12;
  p.kv_heads = 1;
  p.num_heads = 1 << 10;
  ASSERT_NO_THROW(p.validate());
  try {
    detail::compute_decode_evidence(p, packed(p.group_size()), gpu());
    FAIL() << "no overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
}

TEST(PrefillEvidence, MinimumTrafficAndExactFlops) {
  const PrefillProblem p = prefill_problem();
  const Evidence e = detail::compute_prefill_evidence(p, tiled(), gpu());
  const std::uint64_t heads = 2 * 16, rows = heads * 700, d = 64, s = 2;
  EXPECT_EQ(e.traffic.global_read_bytes, rows * d * s + 2ull * 2 * 4 * 1000 * d * s);
  EXPECT_EQ(e.traffic.global_write_bytes, rows * d * s + rows * 4);
  // Bottom-right causal: row r sees 300 + r + 1 keys.
  std::uint64_t pairs = 0;
  for (std::uint64_t r = 0; r < 700; ++r) pairs += 300 + r + 1;
  EXPECT_EQ(e.matmul_flops, 4 * heads * pairs * d);
  EXPECT_EQ(e.workspace_bytes, 0u);
  EXPECT_EQ(e.rel_l2_tolerance, 2e-3);
}

TEST(PrefillEvidence, WindowReducesFlopsAndUnseenKeys) {
  PrefillProblem p = prefill_problem();
  p.options.window = 128;
  const Evidence e = detail::compute_prefill_evidence(p, tiled(), gpu());
  // The first row (position 300) sees keys 173..300; keys before 173 are never read.
  const std::uint64_t keys_seen = 1000 - 173;
  EXPECT_EQ(e.traffic.global_read_bytes, 2ull * 16 * 700 * 64 * 2 + 2ull * 2 * 4 * keys_seen * 64 * 2);
  EXPECT_EQ(e.matmul_flops, 4ull * 2 * 16 * 700 * 128 * 64);  // every row sees exactly the window
}

TEST(PrefillEvidence, GqaAndSplits) {
  PrefillProblem gqa = prefill_problem();
  PrefillProblem mha = gqa;
  mha.kv_heads = 16;
  const Evidence a = detail::compute_prefill_evidence(gqa, tiled(), gpu());
  const Evidence b = detail::compute_prefill_evidence(mha, tiled(), gpu());
  EXPECT_EQ(b.traffic.global_read_bytes - a.traffic.global_read_bytes, 2ull * 2 * (16 - 4) * 1000 * 64 * 2);
  const Evidence split = detail::compute_prefill_evidence(gqa, tiled(3), gpu());
  const std::uint64_t states = 3ull * 2 * 16 * 700 * (64 + 2) * 4;
  EXPECT_EQ(split.traffic.global_write_bytes - a.traffic.global_write_bytes, states);
  EXPECT_EQ(split.workspace_bytes, (states + 255) / 256 * 256);
}

TEST(PrefillEvidence, BytesScaleWithDtypeSize) {
  PrefillProblem p = prefill_problem();
  const Evidence half = detail::compute_prefill_evidence(p, tiled(), gpu());
  p.dtype = p.out_dtype = DType::kF32;
  const Evidence full = detail::compute_prefill_evidence(p, tiled(), gpu());
  EXPECT_EQ(full.traffic.global_read_bytes, 2 * half.traffic.global_read_bytes);
  const std::uint64_t lse = 2ull * 16 * 700 * 4;
  EXPECT_EQ(full.traffic.global_write_bytes - lse, 2 * (half.traffic.global_write_bytes - lse));
}

TEST(Tolerance, ByDtype) {
  EXPECT_EQ(rel_l2_tolerance_for(DType::kF32), 1e-5);
  EXPECT_EQ(rel_l2_tolerance_for(DType::kF16), 2e-3);
  EXPECT_EQ(rel_l2_tolerance_for(DType::kBF16), 1e-2);
  EXPECT_THROW(rel_l2_tolerance_for(DType::kI32), Error);
}

TEST(PrefillEvidence, SeedProblemAsMinimumTraffic) {
  // Seed 004's 4096 x 128 problem (one head, f32, not causal): each input once, each output once,
  // far below the seed's per-row re-read model.
  PrefillProblem p;
  p.batch = p.num_heads = p.kv_heads = 1;
  p.head_dim = 128;
  p.q_len = p.kv_len = 4096;
  p.causal = false;
  p.dtype = p.out_dtype = DType::kF32;
  const Evidence e = detail::compute_prefill_evidence(p, tiled(), gpu());
  EXPECT_EQ(e.traffic.global_read_bytes, 3ull * 4096 * 128 * 4);
  EXPECT_EQ(e.traffic.global_write_bytes, 4096ull * 128 * 4 + 4096 * 4);
  const auto seed = plan_flash_attention_tiled(4096, 128, 128);
  EXPECT_EQ(e.matmul_flops, seed.evidence.matmul_flops);
  EXPECT_GT(seed.evidence.traffic.global_read_bytes, 1000 * e.traffic.global_read_bytes);
}
