// Internal: the arguments of one split-KV decode launch (plain decode or the fused RoPE + append +
// decode step), filled on the host from a validated plan and tensors, passed to the kernel by value.
// Strides are in elements. Plain C++ so host code can fill it without CUDA headers.
#pragma once
#include <cstdint>

#include "attnkit/dtype.hpp"
#include "attnkit/problem.hpp"
#include "cuda/common/fast_divider.hpp"

namespace attnkit::cuda_decode {

struct DecodeParams {
  // TMA descriptors (CUtensorMap, 128 opaque bytes each, kv_box_map.hpp) of K and V: contiguous
  // caches as (head_dim, max_seq, kv_heads, batch) with boxes of one row segment x tile rows; paged
  // pools with page_boxes as (head_dim, page_size, kv_heads, num_pages) with boxes of one row
  // segment x page_box_rows slots. Empty when the paged kernels copy rows themselves.
  alignas(64) unsigned char k_map[128] = {};
  alignas(64) unsigned char v_map[128] = {};

  // q [batch, num_heads, head_dim]
  const void* q = nullptr;
  DType q_dtype = DType::kF32;
  std::int64_t q_stride_b = 0, q_stride_h = 0;
  // K/V caches [batch, kv_heads, max_seq, head_dim], kv dtype (16-byte aligned rows)
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t k_stride_b = 0, k_stride_h = 0, k_stride_s = 0;
  std::int64_t v_stride_b = 0, v_stride_h = 0, v_stride_s = 0;
  const std::int32_t* lengths = nullptr;  // plain decode: valid keys per sequence (device)
  const std::int32_t* key_starts = nullptr;  // plain decode, optional: first real key per sequence (left padding)
  // out [batch, num_heads, head_dim], optional lse f32 [batch, num_heads]
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  std::int64_t out_stride_b = 0, out_stride_h = 0;
  float* lse = nullptr;
  std::int64_t lse_stride_b = 0, lse_stride_h = 0;
  // Optional [num_heads]: attention-sink logits, folded into final rows (common/attention_sinks.hpp).
  const float* sinks = nullptr;
  // Split states in the caller's workspace: out_partial [splits, batch*num_heads, head_dim],
  // lse_partial [splits, batch*num_heads] (f32).
  float* partial_out = nullptr;
  float* partial_lse = nullptr;

  int batch = 0, num_heads = 0, kv_heads = 0, group = 0, head_dim = 0;
  int kv_len = 0;   // the plan's longest sequence: lengths are clamped to [0, kv_len]
  int max_seq = 0;
  std::int64_t window = 0;
  float q_scale = 0;   // multiplies q: scale * log2(e) without soft-cap, scale with it (x the e4m3 K scale)
  float v_scale = 1;   // multiplies the normalised output: the e4m3 V scale (1 for other caches)
  float softcap = 0;   // 0 = none; else s = softcap * tanh(s / softcap)
  // The plan's partition.
  int rows_per_block = 0, head_chunks = 0, key_warps = 0, tile = 0, stages = 0, splits = 1;
  int keys_per_split = 0, passes = 1;
  // Block index -> (split, pass, KV head, sequence) without division instructions (they sit before
  // the first load of every block); launch_decode_instance fills them from splits, passes, kv_heads.
  cuda_common::FastDivider split_div, pass_div, kv_head_div;
  int shared_bytes = 0;
  // The plan's resident_blocks: launch_decode_instance reserves shared memory so that no more
  // blocks share an SM (0: as many as fit).
  int resident_blocks = 0;
  // The plan's merge_cluster: the splits of a (sequence, KV head, pass) run as one cluster (rank =
  // split) and merge their states in distributed shared memory; no workspace, no merge launch.
  bool cluster_merge = false;
  // The plan's kv_evict_first: each K/V element is read by one block only, so its L2 lines are
  // loaded with the evict-first policy (they then replace each other, not the L2's other lines).
  bool kv_evict_first = false;

  // The fused step (RoPE on q and k_new, append k_new and v_new at positions[b], attend over
  // positions[b] + 1 keys). Off for plain decode.
  bool fused = false;
  const std::int32_t* positions = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  std::int64_t k_new_stride_b = 0, k_new_stride_h = 0, v_new_stride_b = 0, v_new_stride_h = 0;
  void* k_cache_out = nullptr;  // the same caches as k / v, writable
  void* v_cache_out = nullptr;
  RopeStyle rope_style = RopeStyle::kHalf;
  float rope_theta = 10000.0f;
  const float* cos_table = nullptr;
  const float* sin_table = nullptr;
  std::int64_t table_positions = 0;

  // Paged cache (paged_decode, extend; kernels instantiated with PagedRows). K/V row j of (b, kvh)
  // lives in page page_table[b][j / page_size], slot j % page_size; the k/v strides above then mean
  // k_stride_b = page, k_stride_h = KV head, k_stride_s = slot (HND and NHD differ only in them).
  const std::int32_t* page_table = nullptr;
  std::int64_t table_stride_b = 0, table_stride_p = 0;
  int page_size = 1, num_pages = 0, table_width = 0;  // table_width: entries per table row
  bool page_boxes = false;  // tiles are page-aligned runs copied as TMA boxes (decode_geometry.hpp)
  cuda_common::FastDivider page_div;  // key / page_size

  // Extend (kernels instantiated with kExtend): q/out/lse rows are tokens (q_stride_b is the token
  // stride), sequence b owns tokens cu_seqlens_q[b] .. cu_seqlens_q[b+1] (clamped to [0, q_rows]
  // and to max_q_len rows). A block's packed rows are (query row, head of the group) pairs:
  // packed row r = i * group + g; passes cover max_q_len * group packed rows.
  const std::int32_t* cu_seqlens_q = nullptr;
  int max_q_len = 1;
  int q_rows = 0;        // rows of the q/out tensors of this run (<= the plan's max_total_q)
  int state_rows = 0;    // token rows of the split-state layout (the plan's max_total_q)
};

// Launchers (split_kv_decode_<dtype>.cu, merge_states.cu). Asynchronous on `stream`.
void launch_split_kv_decode(const DecodeParams& params, DType kv_dtype, void* stream);
void launch_merge_splits(const DecodeParams& params, void* stream);
// Paged variants (src/cuda/paged/): the same kernel body with page-table row addressing; `extend`
// selects the packed (query row, head) rows. launch_merge_extend merges extend's split states.
void launch_split_kv_decode_paged(const DecodeParams& params, DType kv_dtype, bool extend, void* stream);
void launch_merge_extend(const DecodeParams& params, void* stream);

}  // namespace attnkit::cuda_decode
