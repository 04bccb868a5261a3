// Seed 004's flash-attention work planner: one head of square self-attention (seq_len queries
// against seq_len keys, f32), planned either as the scalar online-softmax baseline (one query row
// per 128-lane block, keys one by one) or as the cooperative tiled kernel (64 lanes share key
// tiles; long key ranges cut into sequence-parallel splits of kTargetTilesPerSplit tiles whose
// partial softmax states are merged afterwards). The traffic model is the seed's: every row
// re-reads the keys and values it needs from global memory (no cross-row reuse), which is why the
// tiled plan reads fewer bytes (q stays in scratch) and the general planner (plan.cpp) is needed.
#include <algorithm>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "plan/checked_math.hpp"
#include "plan/evidence.hpp"

namespace attnkit {
namespace {

constexpr std::uint32_t kScalarOnlineLanes = 128;
constexpr std::uint32_t kCooperativeTiledLanes = 64;
constexpr std::uint32_t kWarpLanes = 32;
constexpr std::uint64_t kF32Bytes = 4;

using detail::checked_add;
using detail::checked_mul;
using detail::checked_product;
using detail::checked_sum;

std::uint32_t validate_attention_dims(const char* context, std::uint32_t seq_len, std::uint32_t head_dim) {
  if (seq_len <= 0) fail(context, "seq_len=0 is invalid: empty sequence", "pass seq_len >= 1");
  if (head_dim <= 0) fail(context, "head_dim=0 is invalid: empty head dimension", "pass head_dim >= 1");
  return checked_mul<std::uint32_t>(seq_len, head_dim, context, "seq_len * head_dim (u32)");
}

// seq_len^2 * head_dim: the elements of K (or V) every row re-reads in the seed's model.
std::uint64_t square_times_dim(std::uint32_t seq_len, std::uint32_t head_dim, const char* context) {
  return checked_product({seq_len, seq_len, head_dim}, context, "seq_len^2 * head_dim (u64)");
}

std::uint32_t sequence_parallel_splits(std::uint32_t tile_count) {
  return std::max<std::uint32_t>(1, detail::div_ceil(tile_count, kTargetTilesPerSplit));
}

Evidence common_evidence(std::uint32_t seq_len, std::uint32_t head_dim, const char* context) {
  Evidence e;
  e.output_tolerance_abs = kFlashAttentionOutputToleranceAbs;
  e.rel_l2_tolerance = rel_l2_tolerance_for(DType::kF32);
  e.matmul_flops = checked_mul<std::uint64_t>(4, square_times_dim(seq_len, head_dim, context), context,
                                              "matmul FLOPs");
  e.workspace_bytes = 0;  // the seed keeps split states in block scratch
  return e;
}

}  // namespace

FlashAttentionWorkPlan plan_flash_attention_scalar(std::uint32_t seq_len, std::uint32_t head_dim) {
  const char* ctx = "flash_attention";
  FlashAttentionWorkPlan plan;
  plan.seq_len = seq_len;
  plan.head_dim = head_dim;
  plan.logical_elements = validate_attention_dims(ctx, seq_len, head_dim);

  const std::uint32_t q_scratch = checked_mul<std::uint32_t>(kScalarOnlineLanes, head_dim, ctx, "q/o scratch (u32)");
  WorkPartition& p = plan.partition;
  p.family = KernelFamily::kScalarOnline;
  p.tile_size = 1;
  p.tile_count = seq_len;
  p.sequence_splits = 1;
  p.tiles_per_split = seq_len;
  p.keys_per_split = seq_len;
  p.rows_per_block = 1;
  p.workgroups_per_row = 1;
  p.workgroup_lanes = kScalarOnlineLanes;
  p.warp_lanes = kWarpLanes;
  p.warps_per_block = kScalarOnlineLanes / kWarpLanes;
  p.q_scratch_elements = q_scratch;
  p.score_scratch_elements = 0;
  p.o_acc_scratch_elements = q_scratch;
  p.split_reduce_scratch_elements = 0;
  p.grid_blocks = seq_len;

  Evidence& e = plan.evidence;
  e = common_evidence(seq_len, head_dim, ctx);
  // Each row reads its q row plus every key and value: 3 * seq_len^2 * head_dim elements in all.
  const std::uint64_t pair_elements = square_times_dim(seq_len, head_dim, ctx);
  e.traffic.global_read_bytes = checked_product({pair_elements, 3, kF32Bytes}, ctx, "global read bytes");
  e.traffic.global_write_bytes = checked_product({seq_len, head_dim, kF32Bytes}, ctx, "global write bytes");
  e.traffic.shared_memory_bytes = checked_mul<std::uint64_t>(q_scratch, kF32Bytes, ctx, "shared bytes");
  e.occupancy_proxy_bps = detail::lane_occupancy_bps(head_dim, kScalarOnlineLanes);
  e.non_matmul_flops = detail::non_matmul_flops(KernelFamily::kScalarOnline,
                                                checked_mul<std::uint64_t>(seq_len, seq_len, ctx, "pairs"),
                                                /*tile_visits=*/0, seq_len, head_dim, 1, ctx);
  return plan;
}

FlashAttentionWorkPlan plan_flash_attention_tiled(std::uint32_t seq_len, std::uint32_t head_dim,
                                                  std::uint32_t tile_size) {
  const char* ctx = "flash_attention_2";
  FlashAttentionWorkPlan plan;
  plan.seq_len = seq_len;
  plan.head_dim = head_dim;
  plan.logical_elements = validate_attention_dims(ctx, seq_len, head_dim);
  if (tile_size <= 0) fail(ctx, "tile_size=0 is invalid", "pass tile_size >= 1 (keys per tile, e.g. 64)");

  WorkPartition& p = plan.partition;
  p.family = KernelFamily::kCooperativeTiled;
  p.tile_size = tile_size;
  p.tile_count = detail::div_ceil(seq_len, tile_size);
  p.sequence_splits = sequence_parallel_splits(p.tile_count);
  p.tiles_per_split = detail::div_ceil(p.tile_count, p.sequence_splits);
  p.keys_per_split =
      std::min(checked_mul<std::uint32_t>(tile_size, p.tiles_per_split, ctx, "split key span (u32)"), seq_len);
  p.rows_per_block = 1;
  p.workgroups_per_row = p.sequence_splits;
  p.workgroup_lanes = kCooperativeTiledLanes;
  p.warp_lanes = kWarpLanes;
  p.warps_per_block = kCooperativeTiledLanes / kWarpLanes;
  p.q_scratch_elements = checked_mul<std::uint32_t>(kCooperativeTiledLanes, head_dim, ctx, "q scratch (u32)");
  p.score_scratch_elements = checked_mul<std::uint32_t>(kCooperativeTiledLanes, tile_size, ctx, "score scratch (u32)");
  p.o_acc_scratch_elements = checked_mul<std::uint32_t>(kCooperativeTiledLanes, head_dim, ctx, "o accumulator (u32)");
  // Each split's partial state: head_dim accumulators plus the running max and sum.
  const std::uint32_t softmax_scalars = checked_add<std::uint32_t>(head_dim, 2, ctx, "split reduction state (u32)");
  p.split_reduce_scratch_elements =
      checked_mul<std::uint32_t>(p.sequence_splits, softmax_scalars, ctx, "split reduction scratch (u32)");
  p.grid_blocks = checked_mul<std::uint64_t>(seq_len, p.sequence_splits, ctx, "grid blocks");

  std::uint32_t shared_elements = p.q_scratch_elements;
  shared_elements = checked_add(shared_elements, p.score_scratch_elements, ctx, "shared scratch (u32)");
  shared_elements = checked_add(shared_elements, p.o_acc_scratch_elements, ctx, "shared scratch (u32)");
  shared_elements = checked_add(shared_elements, p.split_reduce_scratch_elements, ctx, "shared scratch (u32)");

  Evidence& e = plan.evidence;
  e = common_evidence(seq_len, head_dim, ctx);
  // q is read once per row and kept in scratch; keys and values are still re-read by every row.
  const std::uint64_t pair_elements = square_times_dim(seq_len, head_dim, ctx);
  const std::uint64_t row_elements = std::uint64_t{seq_len} * head_dim;
  e.traffic.global_read_bytes =
      checked_mul(checked_sum({checked_mul<std::uint64_t>(pair_elements, 2, ctx, "global read elements"), row_elements},
                              ctx, "global read elements"),
                  kF32Bytes, ctx, "global read bytes");
  e.traffic.global_write_bytes = checked_mul(row_elements, kF32Bytes, ctx, "global write bytes");
  e.traffic.shared_memory_bytes = checked_mul<std::uint64_t>(shared_elements, kF32Bytes, ctx, "shared bytes");
  e.occupancy_proxy_bps = detail::lane_occupancy_bps(std::max(head_dim, tile_size), kCooperativeTiledLanes);
  e.non_matmul_flops = detail::non_matmul_flops(
      KernelFamily::kCooperativeTiled, checked_mul<std::uint64_t>(seq_len, seq_len, ctx, "pairs"),
      checked_mul<std::uint64_t>(seq_len, p.tile_count, ctx, "tile updates"), seq_len, head_dim,
      p.sequence_splits, ctx);
  return plan;
}

}  // namespace attnkit
