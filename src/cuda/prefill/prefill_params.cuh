// Internal: the arguments every CUDA prefill kernel takes, resolved from a plan and its tensors by
// the launcher (prefill.cu). Strides are in elements; head_dim is contiguous.
#pragma once
#include <cstdint>

namespace attnkit::cuda_prefill {

enum class OutKind : int { kInput = 0, kF32 = 1 };

struct PrefillParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // optional [batch, num_heads, q_len] (ragged: [1, num_heads, total_q])
  const float* sinks;  // optional [num_heads]: attention-sink logits, folded into final rows (common/attention_sinks.hpp)

  std::int64_t q_batch_stride, q_head_stride, q_row_stride;
  std::int64_t k_batch_stride, k_head_stride, k_row_stride;
  std::int64_t v_batch_stride, v_head_stride, v_row_stride;
  std::int64_t o_batch_stride, o_head_stride, o_row_stride;
  std::int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  const int* cu_seqlens_q;  // ragged batch offsets, or nullptr
  const int* cu_seqlens_k;
  // Extend over a paged cache (Hopper kernel): sequence b's keys are kv_lengths[b] (its last q_len_b
  // are the new rows), its rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q / out, clamped to q_rows
  // and q_len; cu_seqlens_k is unused. nullptr: not an extend.
  const int* kv_lengths;
  int q_rows;

  int batch, num_heads, group_size, head_dim;
  int q_len, kv_len;  // per sequence (ragged: the longest, for the grid)
  bool causal;
  std::int64_t window;  // 0 = none
  float scale;          // effective scale
  float softcap;        // 0 = none
  OutKind out_kind;

  // Key splits: split partial states (normalised f32 output and LSE) go to the workspace, laid out
  // [splits, num_heads, workspace_rows, head_dim] and [splits, num_heads, workspace_rows].
  int splits;
  int tiles_per_split;
  std::int64_t workspace_rows;  // batch * q_len (covers a ragged batch's total rows)
  float* partial_out;
  float* partial_lse;
};

__device__ inline std::int64_t max_i64(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
__device__ inline std::int64_t min_i64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// Rows and keys of sequence b, and where its rows start in the q/out tensors.
struct SequenceExtent {
  int q_len, kv_len;
  std::int64_t q_start, k_start;  // row offsets inside the (ragged) tensors; 0 when not ragged
  std::int64_t q_base_batch;      // batch index for batch strides (0 when ragged)
  std::int64_t workspace_row0;    // first workspace row of this sequence
};

__device__ inline SequenceExtent sequence_extent(const PrefillParams& p, int b) {
  SequenceExtent e;
  if (p.kv_lengths != nullptr) {  // extend: device data, clamped so a corrupt value never reaches past q / out
    const int q0 = p.cu_seqlens_q[b] < 0 ? 0 : (p.cu_seqlens_q[b] > p.q_rows ? p.q_rows : p.cu_seqlens_q[b]);
    const int q1 = p.cu_seqlens_q[b + 1] < q0 ? q0 : (p.cu_seqlens_q[b + 1] > p.q_rows ? p.q_rows : p.cu_seqlens_q[b + 1]);
    const int len = p.kv_lengths[b];
    e.q_len = q1 - q0 < p.q_len ? q1 - q0 : p.q_len;
    e.kv_len = len < 0 ? 0 : (len > p.kv_len ? p.kv_len : len);
    e.q_start = q0;
    e.k_start = 0;
    e.q_base_batch = 0;
    e.workspace_row0 = q0;
  } else if (p.cu_seqlens_q != nullptr) {
    const int q0 = p.cu_seqlens_q[b], q1 = p.cu_seqlens_q[b + 1];
    const int k0 = p.cu_seqlens_k[b], k1 = p.cu_seqlens_k[b + 1];
    e.q_len = q1 - q0;
    e.kv_len = k1 - k0;
    e.q_start = q0;
    e.k_start = k0;
    e.q_base_batch = 0;
    e.workspace_row0 = q0;
  } else {
    e.q_len = p.q_len;
    e.kv_len = p.kv_len;
    e.q_start = 0;
    e.k_start = 0;
    e.q_base_batch = b;
    e.workspace_row0 = static_cast<std::int64_t>(b) * p.q_len;
  }
  return e;
}

}  // namespace attnkit::cuda_prefill
