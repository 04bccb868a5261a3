// Evidence of a decode or prefill partition: what the plan will move and compute, counted from the
// problem and the partition only (never from a device).
//
// Bytes are the minimum traffic of DESIGN.md (each input read once, each output written once),
// with two honest additions: split-KV partial states (written by the splits, read back by the
// merge) and, for a decode block that does not pack its GQA group, the K/V re-read per query head.
// Only the keys some query can see are read (a sliding window skips the rest). The LSE (f32 per
// row) is counted as written: the plan does not know whether the caller asks for it, and it is
// small (4 bytes against head_dim * dtype bytes of output per row). An e4m3 prefill on the Hopper
// family also stages V transposed in the workspace: V read once more, V^T written (padded) and read.
#include <algorithm>

#include "attnkit/error.hpp"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "plan/checked_math.hpp"
#include "plan/evidence.hpp"

namespace attnkit::detail {
namespace {

constexpr std::uint64_t kF32Bytes = 4;
constexpr std::uint64_t kI32Bytes = 4;
constexpr std::uint64_t kWorkspaceAlignment = 256;

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

std::uint64_t shared_bytes(const WorkPartition& p, const char* ctx) {
  std::uint64_t elements = std::uint64_t{p.q_scratch_elements} + p.score_scratch_elements;
  // The scalar family keeps its accumulator in registers (seed 004 counts only q scratch).
  if (p.family != KernelFamily::kScalarOnline) {
    elements += std::uint64_t{p.o_acc_scratch_elements} + p.split_reduce_scratch_elements;
  }
  return checked_mul(elements, kF32Bytes, ctx, "shared memory bytes");
}

double loosest_tolerance(std::initializer_list<DType> dtypes) {
  double tol = 0;
  for (DType t : dtypes) tol = std::max(tol, rel_l2_tolerance_for(t));
  return tol;
}

bool is_16_bit(DType t) { return dtype_size(t) == 2; }

// `matmul_rate` scales the target's 16-bit tensor-core peak (2 for fp8, which Hopper's tensor cores
// run at twice the 16-bit rate; 0 for f32 inputs, whose rate the target does not give).
double predicted_seconds(const Evidence& e, const Target& target, double matmul_rate) {
  double seconds = 0;
  const double bytes = static_cast<double>(e.traffic.global_read_bytes) + static_cast<double>(e.traffic.global_write_bytes);
  if (target.peak_read_bytes_per_s > 0) seconds = bytes / target.peak_read_bytes_per_s;
  if (matmul_rate > 0 && target.peak_matmul_flops_per_s > 0) {
    seconds = std::max(seconds, static_cast<double>(e.matmul_flops) / (matmul_rate * target.peak_matmul_flops_per_s));
  }
  return seconds;
}

double matmul_rate(bool tensor_core_inputs) { return tensor_core_inputs ? 1.0 : 0.0; }

// Split partial states: written by each split, read back by the merge.
std::uint64_t split_state_bytes(std::uint32_t splits, std::uint64_t rows, std::int64_t head_dim, const char* ctx) {
  if (splits <= 1) return 0;
  return checked_product({splits, rows, split_state_bytes_per_row(head_dim)}, ctx, "split state bytes");
}

std::uint64_t workspace_for(std::uint64_t state_bytes, const char* ctx) {
  if (state_bytes == 0) return 0;
  const std::uint64_t padded = checked_add(state_bytes, kWorkspaceAlignment - 1, ctx, "workspace bytes");
  return padded / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace

std::uint64_t split_state_bytes_per_row(std::int64_t head_dim) { return (u(head_dim) + 2) * kF32Bytes; }

std::uint64_t decode_kv_reads_per_kv_head(const DecodeProblem& problem, const WorkPartition& partition) {
  const std::uint64_t group = u(problem.group_size());
  if (partition.family == KernelFamily::kScalarOnline) return group;
  const std::uint64_t packed = std::clamp<std::uint64_t>(partition.rows_per_block, 1, group);
  return div_ceil(group, packed);
}

Evidence compute_decode_evidence(const DecodeProblem& pr, const WorkPartition& p, const Target& target) {
  const char* ctx = "plan_decode";
  const std::uint32_t tile = std::max<std::uint32_t>(1, p.tile_size);
  // The query is the newest token: position kv_len - 1, one row per (sequence, head).
  const VisibleRows per_row = sum_visible_rows(1, pr.kv_len, true, pr.options.window, tile);
  const std::uint64_t rows = checked_product({u(pr.batch), u(pr.num_heads)}, ctx, "rows");
  const std::uint64_t hd = u(pr.head_dim);

  const std::uint64_t q_bytes = checked_product({rows, hd, dtype_size(pr.q_dtype)}, ctx, "q bytes");
  const std::uint64_t kv_bytes =
      checked_product({2, u(pr.batch), u(pr.kv_heads), decode_kv_reads_per_kv_head(pr, p), per_row.keys_seen, hd,
                       dtype_size(pr.kv_dtype)},
                      ctx, "K/V bytes");
  const std::uint64_t lengths_bytes = checked_mul(u(pr.batch), kI32Bytes, ctx, "lengths bytes");
  const std::uint64_t out_bytes = checked_product({rows, hd, dtype_size(pr.out_dtype)}, ctx, "out bytes");
  const std::uint64_t lse_bytes = checked_mul(rows, kF32Bytes, ctx, "lse bytes");
  // Splits merged inside a cluster keep their states in shared memory.
  const std::uint64_t states = p.merge_cluster > 1 ? 0 : split_state_bytes(p.sequence_splits, rows, pr.head_dim, ctx);

  Evidence e;
  e.traffic.global_read_bytes = checked_sum({q_bytes, kv_bytes, lengths_bytes, states}, ctx, "global read bytes");
  e.traffic.global_write_bytes = checked_sum({out_bytes, lse_bytes, states}, ctx, "global write bytes");
  e.traffic.shared_memory_bytes = shared_bytes(p, ctx);
  e.matmul_flops = checked_product({4, rows, per_row.pairs, hd}, ctx, "matmul FLOPs");
  e.non_matmul_flops = non_matmul_flops(p.family, checked_mul(rows, per_row.pairs, ctx, "pairs"),
                                        checked_mul(rows, per_row.tile_visits, ctx, "tile visits"), rows,
                                        pr.head_dim, p.sequence_splits, ctx);
  e.occupancy_proxy_bps = occupancy_proxy_bps(p, pr.head_dim, target);
  e.workspace_bytes = workspace_for(states, ctx);
  e.output_tolerance_abs = kFlashAttentionOutputToleranceAbs;
  // An e4m3 cache's quantization is in the golden too (it reads the same bytes times their scales);
  // what remains is the kernels' rounding of q and P to f16 for the tensor cores (CUDA).
  const DType kv_compute = is_fp8(pr.kv_dtype) ? DType::kF16 : pr.kv_dtype;
  e.rel_l2_tolerance = loosest_tolerance({pr.q_dtype, kv_compute, pr.out_dtype});
  e.predicted_seconds = predicted_seconds(e, target, matmul_rate(is_16_bit(pr.q_dtype) && is_16_bit(pr.kv_dtype)));
  return e;
}

Evidence compute_prefill_evidence(const PrefillProblem& pr, const WorkPartition& p, const Target& target,
                                  StoredSizes stored) {
  const char* ctx = "plan_prefill";
  const std::uint32_t tile = std::max<std::uint32_t>(1, p.tile_size);
  const VisibleRows per_head = sum_visible_rows(pr.q_len, pr.kv_len, pr.causal, pr.options.window, tile);
  const std::uint64_t heads = checked_product({u(pr.batch), u(pr.num_heads)}, ctx, "heads");
  const std::uint64_t rows = checked_mul(heads, u(pr.q_len), ctx, "rows");
  const std::uint64_t hd = u(pr.head_dim);
  const std::uint64_t in_size = dtype_size(pr.dtype);
  const std::uint64_t q_size = stored.q > 0 ? stored.q : in_size, kv_size = stored.kv > 0 ? stored.kv : in_size;

  const std::uint64_t q_bytes = checked_product({rows, hd, q_size}, ctx, "q bytes");
  // K and V once per KV head, over the keys some query of the sequence can see.
  const std::uint64_t kv_bytes =
      checked_product({2, u(pr.batch), u(pr.kv_heads), per_head.keys_seen, hd, kv_size}, ctx, "K/V bytes");
  const std::uint64_t out_bytes = checked_product({rows, hd, dtype_size(pr.out_dtype)}, ctx, "out bytes");
  const std::uint64_t lse_bytes = checked_mul(rows, kF32Bytes, ctx, "lse bytes");
  const std::uint64_t states = split_state_bytes(p.sequence_splits, rows, pr.head_dim, ctx);
  // e4m3 on the Hopper family: the transpose pass reads all of V and writes V^T (rows padded to
  // whole 128-key tiles); the kernel then reads V^T where kv_bytes counted V. No key splits.
  const bool vt_staging = is_fp8(pr.dtype) && p.family == KernelFamily::kWarpSpecializedWgmma;
  if (vt_staging && states != 0)
    fail(ctx, "an e4m3 plan splits keys", "plan e4m3 with the Hopper family, which does not");
  const std::uint64_t v_stage_read =
      vt_staging ? checked_product({u(pr.batch), u(pr.kv_heads), u(pr.kv_len), hd, in_size}, ctx, "V staging bytes") : 0;
  const std::uint64_t vt_bytes =
      vt_staging ? u(cuda_prefill_hopper::hopper_fp8_vt_bytes(pr.batch, pr.kv_heads, pr.head_dim, pr.kv_len)) : 0;

  Evidence e;
  e.traffic.global_read_bytes = checked_sum({q_bytes, kv_bytes, states, v_stage_read}, ctx, "global read bytes");
  e.traffic.global_write_bytes = checked_sum({out_bytes, lse_bytes, states, vt_bytes}, ctx, "global write bytes");
  e.traffic.shared_memory_bytes = shared_bytes(p, ctx);
  e.matmul_flops = checked_product({4, heads, per_head.pairs, hd}, ctx, "matmul FLOPs");
  e.non_matmul_flops = non_matmul_flops(p.family, checked_mul(heads, per_head.pairs, ctx, "pairs"),
                                        checked_mul(heads, per_head.tile_visits, ctx, "tile visits"), rows,
                                        pr.head_dim, p.sequence_splits, ctx);
  e.occupancy_proxy_bps = occupancy_proxy_bps(p, pr.head_dim, target);
  // V^T sits at offset 0 of the workspace and is all of it (no split states: nothing else is used).
  e.workspace_bytes = vt_staging ? vt_bytes : workspace_for(states, ctx);
  e.output_tolerance_abs = kFlashAttentionOutputToleranceAbs;
  e.rel_l2_tolerance = loosest_tolerance({pr.dtype, pr.out_dtype});
  e.predicted_seconds = predicted_seconds(e, target, is_fp8(pr.dtype) ? 2.0 : matmul_rate(is_16_bit(pr.dtype)));
  return e;
}

}  // namespace attnkit::detail
