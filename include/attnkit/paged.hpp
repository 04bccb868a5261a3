// Serving layouts: a paged KV cache, ragged batches and multi-token queries against the cache,
// planned once per batch composition and run many times (CUDA-graph safe). docs/paged.md is the
// long form of this header.
//
// Page pool. K and V each live in one pool of fixed-size pages shared by all sequences:
//   PageLayout::kHND: [num_pages, kv_heads, page_size, head_dim]  (a page holds page_size rows of
//                     each KV head contiguously: one KV head's keys of a page are one block)
//   PageLayout::kNHD: [num_pages, page_size, kv_heads, head_dim]  (a page holds page_size tokens,
//                     each with all its KV heads: vLLM-style, one token's heads are one block)
// Any strides with head_dim contiguous. page_size is any value >= 1 (1, 16, 32, 64 are tested).
//
// Page table. A dense i32 [batch, max_pages_per_seq] table: key j of sequence b lives in page
// page_table[b][j / page_size], slot j % page_size. Only the first ceil(length / page_size) entries
// of a row are read; the rest may hold anything (-1 by convention). Pages may be shared between
// sequences for reading (prefix caching). A dense table, not CSR (indptr + indices), because its
// shape does not change with the batch composition, so a captured CUDA graph keeps its pointers and
// only the table's contents change between replays, and a kernel finds a key's page with one load
// (no indptr read). A CSR table converts to it in one pass.
//
// Lengths. lengths[b] counts sequence b's keys in the cache, including new tokens already appended.
//
// Extend (multi-token queries). Sequence b has q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b] new
// query rows, packed token-major in q [total_q, num_heads, head_dim]; they are the last q_len_b of
// its lengths[b] keys (append them with paged_append_kv first), so row i sits at absolute position
// lengths[b] - q_len_b + i: causal, bottom-right aligned, with the window of problem.hpp. q_len_b = 1
// is decode; q_len_b > 1 is chunked prefill or speculative-decoding verification.
//
// Plan/run contract. A plan is made on the host from host-side bounds (never from device data) and
// covers every run whose sizes stay within them: the same batch (pad with empty sequences), each
// length <= kv_len, each q_len_b <= max_q_len, total rows <= max_total_q. plan.bounds states them and
// the exact workspace bytes. A run allocates nothing and (on CUDA) never synchronises with the host,
// so its launches can be captured once and replayed while lengths, offsets and tables change.
// Validation: index tensors on the host are checked before anything is written (pages in range,
// table long enough, offsets non-negative and non-decreasing, no two appended tokens in one slot).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/plan.hpp"
#include "attnkit/problem.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit {

enum class PageLayout : std::uint8_t {
  kHND,  // [num_pages, kv_heads, page_size, head_dim]
  kNHD,  // [num_pages, page_size, kv_heads, head_dim]
};
std::string to_string(PageLayout layout);  // "HND", "NHD"

// The shape of a page pool and its table (no data).
struct PagedCacheSpec {
  std::int64_t num_pages = 1;
  std::int64_t page_size = 16;
  std::int64_t max_pages_per_seq = 1;  // width of the page table
  PageLayout layout = PageLayout::kHND;

  // Longest sequence a table row can address.
  std::int64_t capacity() const { return max_pages_per_seq * page_size; }
};

// One new query token per sequence against a paged cache.
struct PagedDecodeProblem {
  std::int64_t batch = 1;
  std::int64_t num_heads = 32;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  PagedCacheSpec cache;
  std::int64_t kv_len = 4096;  // longest sequence this plan covers (1..cache.capacity())
  DType kv_dtype = DType::kBF16;
  DType q_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  AttentionOptions options;
  // Optional planning hint, 0 = unknown: the sum of the lengths the plan will mostly run with (the
  // host's view of the batch, 0..batch * kv_len). It changes only the partition, never what a run
  // computes: the CUDA planner splits keys finely for mixed lengths (unknown counts as mixed) and
  // keeps the contiguous decode partition when lengths are near-uniform (mean >= 90% of kv_len).
  std::int64_t expected_total_keys = 0;

  float effective_scale() const;
  std::int64_t group_size() const { return num_heads / kv_heads; }
  void validate() const;  // throws Error with a Fix
  // The same attention on a contiguous cache (max_seq = cache.capacity()): what the planner costs.
  DecodeProblem as_decode() const;
};

// q_len_b >= 0 new query rows per sequence (ragged, cu_seqlens_q) against the paged cache.
struct ExtendProblem {
  std::int64_t batch = 1;
  std::int64_t num_heads = 32;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  PagedCacheSpec cache;
  std::int64_t max_q_len = 16;    // longest q_len_b covered
  std::int64_t max_total_q = 0;   // packed query rows covered (0 = batch * max_q_len)
  std::int64_t kv_len = 4096;     // longest sequence (prefix + new tokens) covered, <= capacity
  DType kv_dtype = DType::kBF16;
  DType q_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  AttentionOptions options;

  float effective_scale() const;
  std::int64_t group_size() const { return num_heads / kv_heads; }
  std::int64_t total_q_bound() const { return max_total_q > 0 ? max_total_q : batch * max_q_len; }
  void validate() const;
};

// The page pool and its index tensors, shared by decode and extend.
struct PagedKvCache {
  TensorView k_pages;     // layout-dependent (see PageLayout), kv_dtype
  TensorView v_pages;     // same shape and dtype
  TensorView page_table;  // i32 [batch, max_pages_per_seq]
  TensorView lengths;     // i32 [batch]: keys per sequence, 0..kv_len of the plan
};

struct PagedDecodeTensors {
  TensorView q;  // [batch, num_heads, head_dim], q_dtype
  PagedKvCache cache;
  TensorView out;  // [batch, num_heads, head_dim], out_dtype
  TensorView lse;  // optional f32 [batch, num_heads]
  TensorView sinks = {};  // optional f32 [num_heads]: attention-sink logits (tensors.hpp)
  KvScales kv_scales = {};  // e4m3 pools only: dequantization scales of k_pages / v_pages (tensors.hpp)
};

struct ExtendTensors {
  TensorView q;             // [rows, num_heads, head_dim], rows >= cu_seqlens_q[batch]
  TensorView cu_seqlens_q;  // i32 [batch + 1]: 0, non-decreasing; rows past the last are ignored
  PagedKvCache cache;
  TensorView out;  // [rows, num_heads, head_dim]; rows past cu_seqlens_q[batch] are not written
  TensorView lse;  // optional f32 [rows, num_heads]
  TensorView sinks = {};  // optional f32 [num_heads]: attention-sink logits (tensors.hpp)
  KvScales kv_scales = {};  // e4m3 pools only (as PagedDecodeTensors)
};

// Writes n_b = cu_seqlens_new[b+1] - cu_seqlens_new[b] new tokens of sequence b at positions
// start_positions[b] .. start_positions[b] + n_b - 1, crossing page boundaries as needed. An e4m3
// pool takes rows in f32, f16 or bf16 and stores e4m3(x / kv_scales.k) (and .v), as AppendTensors
// (tensors.hpp); other pools take rows of their dtype and store their bytes.
struct PagedAppendTensors {
  TensorView k_new;            // optional [rows, kv_heads, head_dim], pool dtype (f32/f16/bf16 for e4m3)
  TensorView v_new;            // optional, same; at least one of k_new / v_new
  TensorView cu_seqlens_new;   // i32 [batch + 1]; rows past cu_seqlens_new[batch] are not read
  TensorView start_positions;  // i32 [batch]: position of each sequence's first new token
  TensorView k_pages;          // required when k_new is given
  TensorView v_pages;          // required when v_new is given
  TensorView page_table;       // i32 [batch, max_pages_per_seq]
  KvScales kv_scales = {};     // e4m3 pools only
};

// What a plan covers: runs within these bounds reuse it (and a CUDA graph captured with it).
struct PlanBounds {
  std::int64_t batch = 0;
  std::int64_t max_kv_len = 0;
  std::int64_t max_q_len = 1;
  std::int64_t max_total_q = 0;
  std::uint64_t workspace_bytes = 0;  // exact bytes a run needs (same as evidence.workspace_bytes)
};

struct PagedDecodePlan {
  PagedDecodeProblem problem;
  Target target;
  WorkPartition partition;
  Evidence evidence;
  PlanBounds bounds;
  // CPU: keys gathered from pages into contiguous staging per kernel call (a multiple of the tile),
  // or 0: the decode bodies read every tile in place in its page (pages of a power of two keys that
  // the tile divides; a window's keys before its first tile boundary are copied).
  std::uint32_t gather_keys = 0;
  // CUDA: tiles are page-aligned (no window, pages of >= 16 rows that divide or are divided by the
  // tile), so a producer warp copies each page run as TMA boxes; else every thread copies rows.
  bool page_boxes = false;
  std::vector<std::string> reasons;
};

struct ExtendPlan {
  ExtendProblem problem;
  Target target;
  WorkPartition partition;
  Evidence evidence;
  PlanBounds bounds;
  std::uint32_t gather_keys = 0;
  std::vector<std::string> reasons;
};

PagedDecodePlan plan_paged_decode(const PagedDecodeProblem& problem, const Target& target);
ExtendPlan plan_extend(const ExtendProblem& problem, const Target& target);
// The same with the kernel family named (CUDA: split_kv_decode, the decode kernel at any chunk, or
// warp_specialized_wgmma, long chunks on Hopper; CPU: cooperative_tiled); an Error with a Fix where
// that family cannot run the problem.
ExtendPlan plan_extend(const ExtendProblem& problem, const Target& target, KernelFamily family);

std::string to_table(const PagedDecodePlan& plan);
std::string to_table(const ExtendPlan& plan);
// One JSON object shaped like the contiguous plans' (plan.hpp) with the paged problem ("cache" is
// the page pool), "bounds" and "gather_keys".
std::string to_json(const PagedDecodePlan& plan);
std::string to_json(const ExtendPlan& plan);

// Validation (throws Error with a Fix before anything is written). Index tensors are read only when
// they live on the host; callers running on a device with host mirrors of the index tensors can
// call validate_paged_indices_host on the mirrors.
void validate_paged_decode(const PagedDecodeProblem& problem, const PagedDecodeTensors& t, DeviceKind device);
void validate_extend(const ExtendProblem& problem, const ExtendTensors& t, DeviceKind device);
void validate_paged_append(const PagedCacheSpec& cache, const PagedAppendTensors& t, DeviceKind device);
// Host page_table [batch, max_pages_per_seq] and lengths [batch]: each length within 0..max_len, the
// table wide enough, and every page a sequence uses in 0..num_pages-1.
void validate_paged_indices_host(const PagedCacheSpec& cache, const TensorView& page_table,
                                 const TensorView& lengths, std::int64_t batch, std::int64_t max_len,
                                 const char* context);

}  // namespace attnkit
