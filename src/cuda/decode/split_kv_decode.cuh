// GQA-packed split-KV flash-decoding (KernelFamily::kSplitKvDecode), and the fused RoPE + KV
// append + decode step built on it.
//
// Inputs: q [batch, num_heads, head_dim] (kv dtype or f32; any of f32/f16/bf16 for e4m3 K/V),
//   K/V caches [batch, kv_heads, max_seq, head_dim] (f32, f16, bf16 or e4m3 with per-tensor scales,
//   16-byte aligned rows), lengths i32 [batch] on the device (or, fused, positions i32 [batch] and
//   the new k/v rows; not for e4m3).
// Parallelism: one block per (sequence, KV head, head pass, key split). The block's consumer warps
//   form head_chunks x key_warps (decode_geometry.hpp): every warp of a head chunk serves
//   heads_per_warp query heads of the GQA group, so one shared-memory K/V tile serves the whole
//   group and each K/V element leaves device memory once. The per-warp math is an engine: tensor
//   cores for f16 and bf16 (engine_mma.cuh, 16 heads per warp) and for e4m3 converted to f16 in
//   registers (engine_mma_fp8.cuh), CUDA cores for f32 (engine_simt.cuh). An e4m3 cache's scales
//   fold into q's scale (k) and the output normalisation (v). Contiguous caches, and paged pools whose tiles are page-aligned (plan's
//   page_boxes: no window, pages of >= 16 rows): one more warp, the producer, streams the tiles
//   into a ring of `stages` slots with TMA boxes (one row segment x tile rows, or x the rows
//   of one page run), guarded by mbarriers (full: the slot's boxes have landed; empty: every
//   consumer warp is done with it), so the whole ring is in flight with no block-wide barrier per
//   tile; the first tiles go out while the consumer warps stage q (a contiguous 16-bit cache's
//   first tile as the producer warp's cp.async copies, which need no descriptor). Other paged pools and
//   extend: every thread fills a cp.async ring, one block barrier per tile (docs/perf-notes.md,
//   "Decode round 5", has the variants tried). Out-of-window tiles are never loaded (the key range
//   starts at the window). Softmax is online in f32 (log2 domain); splits write normalised partial
//   (output, LSE) states to the caller's workspace and merge_states.cu combines them (launched as a
//   programmatic dependent, so its launch and prologue overlap this kernel). Needs sm_90 (mbarrier
//   try_wait, griddepcontrol).
// Lengths: read on the device and clamped to [0, plan kv_len] (sequence_range.cuh); a sequence of
//   length 0 writes zeros and LSE -inf.
// Row addressing is a compile-time policy: kPaged = false reads row j of (b, kvh) at
//   k + b*stride_b + kvh*stride_h + j*stride_s (contiguous decode); kPaged = true reads it from page
//   page_table[b][j / page_size], slot j % page_size (paged decode, extend). The copy ring looks up
//   the next tile's pages while it issues the current one, the producer a tile's pages before it
//   waits for the tile's slot; a page index outside [0, num_pages) (device indices cannot be
//   checked on the host) zero-fills its rows, so no copy leaves the pool.
// kExtend packs (query row, head of the group) pairs into the engine's rows: sequence b's q_len_b
//   tokens (cu_seqlens_q) times the group, rows_per_block of them per pass, each row masked to its
//   own causal/window key range (bottom-right aligned) inside the block's union range.
// Bound: device-memory reads of K and V (2 * keys * head_dim * sizeof(kv) per KV head); measured
//   within 0.4% of that by ncu (docs/perf-notes.md).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "common/attention_sinks.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/sm90_primitives.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/shared_memory_limit.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/engine_mma.cuh"
#include "cuda/decode/engine_mma_fp8.cuh"
#include "cuda/decode/engine_mma_key_rows.cuh"
#include "cuda/decode/engine_simt.cuh"
#include "cuda/decode/rope.cuh"
#include "cuda/decode/sequence_range.cuh"

// Phase stamps for dev/decode_timeline.cu (which defines the hook before including this header);
// empty in the library.
#ifndef ATTNKIT_DECODE_STAMP
#define ATTNKIT_DECODE_STAMP(phase)
#endif

namespace attnkit::cuda_decode {

inline constexpr float kLn2 = 0.69314718055994530942f;
inline constexpr float kLog2e = 1.44269504088896340736f;

// One batch of a thread's query values as f32: elements first, first + step, ... (kBatch of them)
// of the block's rows x kCap (zeros past head_dim and past the rows); row_offset(r) is row r's
// element offset in q. One loop per q dtype, so the loads are independent and all in flight at
// once (a dtype switch per element serialised them, dev/decode_timeline.cu).
inline constexpr int kQBatch = 8;
template <int kCap, class RowOffset>
__device__ __forceinline__ void load_q_batch(const DecodeParams& p, int rows, int first, int step, RowOffset row_offset,
                                             float (&x)[kQBatch]) {
  auto load = [&](const auto* q) {
    using Q = std::remove_cv_t<std::remove_pointer_t<decltype(q)>>;
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      const int i = first + j * step, r = i / kCap, d = i % kCap;
      x[j] = (r < rows && d < p.head_dim) ? cuda_common::StorageTraits<Q>::to_f32(q[row_offset(r) + d]) : 0.0f;
    }
  };
  switch (p.q_dtype) {
    case DType::kF16: return load(static_cast<const __half*>(p.q));
    case DType::kBF16: return load(static_cast<const __nv_bfloat16*>(p.q));
    default: return load(static_cast<const float*>(p.q));
  }
}

template <class T, int kCap, class Engine, bool kPaged = false, bool kExtend = false, bool kPageBoxes = false>
__global__ void __launch_bounds__(kMaxThreads) __maxnreg__(Engine::kRegisters) split_kv_decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(kPaged || !kExtend, "extend reads a paged cache");
  static_assert(!kPageBoxes || (kPaged && !kExtend), "page boxes serve paged decode");
  using Traits = cuda_common::StorageTraits<T>;
  constexpr int kBoxWidth = segment_elems(kCap, sizeof(T));  // columns of one row segment (one TMA box)
  constexpr int kPitch = segment_pitch(kCap, sizeof(T));     // its shared-memory row (padded for f32)
  constexpr int kBoxes = row_segments(kCap, sizeof(T));      // row segments per key
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ std::uint64_t full_bar[kMaxStages], empty_bar[kMaxStages];

  ATTNKIT_DECODE_STAMP(0);
  // A merge launched after this grid (programmatic dependent launch) may start its prologue now.
  cuda_common::launch_dependents();
  // Tiles arrive as TMA boxes from a producer warp (contiguous caches, and paged pools whose tiles
  // the plan found page-aligned) or through a cp.async ring that every thread fills (other pools).
  // Separate instances: one kernel holding both pipelines needs 177 registers for bf16 d128 (160
  // for either alone), which leaves room for one block per SM instead of two.
  constexpr bool kTmaTiles = !kPaged || kPageBoxes;

  // Block -> (split, pass, kv head, sequence); the split index varies fastest.
  const int block = static_cast<int>(blockIdx.x);
  const int split_group = p.split_div.quotient(block), split = block - split_group * p.splits;
  const int pass_group = p.pass_div.quotient(split_group), pass = split_group - pass_group * p.passes;
  const int b = p.kv_head_div.quotient(pass_group), kvh = pass_group - b * p.kv_heads;
  if constexpr (kPageBoxes) {
    // No window: the split's first key is known before the length, so the table entries of its
    // first tiles travel to L2 while the length is read (the lookups then wait on L2, not DRAM).
    const int key0 = split * p.keys_per_split;
    const int entry = key0 / p.page_size;
    const int last = min((key0 + p.stages * p.tile - 1) / p.page_size, p.table_width - 1);
    if (threadIdx.x == 0 && entry <= last) {
      const std::int32_t* row = p.page_table + static_cast<std::int64_t>(b) * p.table_stride_b;
      cuda_common::prefetch_l2(row + entry * p.table_stride_p);
      cuda_common::prefetch_l2(row + last * p.table_stride_p);
    }
  }

  // Shared memory: [K/V ring: stages x boxes x tile x kPitch each] [q staging, later the block's
  // state for a cluster merge] [stats, block LSEs] [fused scratch] [paged: row offsets] [extend:
  // row key ranges].
  // The ring is 1024-byte aligned (TMA destinations; the 128-byte swizzle's 8-row atom).
  const int ring_elems = p.stages * cuda_decode::tile_elems(p.tile, kCap, sizeof(T));
  // The ring region also holds the key warps' output slices once the ring is idle (epilogue).
  const int ring_bytes = max(2 * ring_elems * static_cast<int>(sizeof(T)), p.key_warps * p.rows_per_block * kCap * 4);
  // Offset from `smem` itself (not rounded as an integer) so that every pointer below stays in the
  // shared state space: the compiler then emits LDS / STS with 32-bit addresses, where a generic
  // pointer cost 64-bit address arithmetic and generic loads (the epilogue's combine alone compiled
  // to ~950 instructions).
  unsigned char* aligned = smem + (kRingAlignment - cuda_common::smem_u32(smem) % kRingAlignment) % kRingAlignment;
  T* k_ring = reinterpret_cast<T*>(aligned);
  T* v_ring = k_ring + ring_elems;
  float* staging = reinterpret_cast<float*>(aligned + ring_bytes);  // [rows_per_block][kCap]
  float* warp_m = staging + p.rows_per_block * kCap;             // [key_warps][rows_per_block]
  float* warp_l = warp_m + p.key_warps * p.rows_per_block;
  float* state_lse = warp_l + p.key_warps * p.rows_per_block;   // [rows_per_block] cluster merge: log2 LSE
  float* new_k = state_lse + p.rows_per_block;                  // [kCap] fused: rotated k_new
  float* new_v = new_k + kCap;
  // Paged: the K/V element offsets of the rows of `stages` tiles (16-byte aligned); extend: each
  // packed row's key range.
  auto* row_offsets = reinterpret_cast<longlong2*>(
      reinterpret_cast<unsigned char*>(new_v + kCap) + (16 - cuda_common::smem_u32(new_v + kCap) % 16) % 16);
  int2* row_keys = reinterpret_cast<int2*>(row_offsets + (kPaged ? p.stages * p.tile : 0));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int consumer_warps = p.head_chunks * p.key_warps;
  const bool producer = warp == consumer_warps;  // the last warp copies tiles in; the others compute
  const int tile_elems = cuda_decode::tile_elems(p.tile, kCap, sizeof(T));  // one ring slot of K (or V)

  // TMA tiles. The producer warp's lane 0 copies each tile as kBoxes row segments of K and of V
  // (decode_geometry.hpp's layout: swizzled 128-byte segments, or padded f32 ones; columns past
  // head_dim, rows past the cache and pages outside the pool read as zeros), into a ring of
  // `stages` slots guarded by mbarriers that the lane sets up: full[s] completes when slot s holds
  // its tile (the arrival plus the boxes' bytes), empty[s] when every consumer warp is done with it.
  // Rows past cache_end are copied too and masked by the engines. A paged tile is tile / box_rows
  // runs of rows that share a page, one box per run and segment (pages: the runs' pages).
  const bool producer_lane = kTmaTiles && producer && lane == 0;
  const std::uint32_t tile_bytes = static_cast<std::uint32_t>(2 * tile_elems * sizeof(T));
  const auto* k_map = reinterpret_cast<const CUtensorMap*>(p.k_map);
  const auto* v_map = reinterpret_cast<const CUtensorMap*>(p.v_map);
  const int box_rows = page_box_rows(p.tile, p.page_size);  // paged: rows of one page run
  auto page_index = [&](int key) { return p.page_div.quotient(key); };
  // The plan's kv_evict_first (contiguous caches only): K/V lines loaded evict-first; else the
  // loads carry no cache hint (a hint with the evict-normal policy measured 12-27% slower at
  // streaming points than none, and the paged kernels lost 2.5% to the branch alone).
  const std::uint64_t kv_policy = cuda_common::l2_evict_first_policy();
  auto load_box = [&](T* dst, const CUtensorMap* map, int slot, int c0, int c1, int c2, int c3) {
    if (!kPaged && p.kv_evict_first) {
      cuda_common::tma_load_4d(dst, map, &full_bar[slot], c0, c1, c2, c3, kv_policy);
    } else {
      cuda_common::tma_load_4d(dst, map, &full_bar[slot], c0, c1, c2, c3);
    }
  };
  auto copy_16 = [&](T* dst, const T* src, bool valid) {
    if (!kPaged && p.kv_evict_first) {
      cuda_common::cp_async_16(dst, src, valid, kv_policy);
    } else {
      cuda_common::cp_async_16(dst, src, valid);
    }
  };
  auto copy_tile = [&](int slot, int key0, const int (&pages)[kMaxPageRuns]) {
    cuda_common::mbar_arrive_expect_tx(&full_bar[slot], tile_bytes);
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
      const int offset = slot * tile_elems + box * p.tile * kPitch;
      if constexpr (!kPaged) {
        load_box(k_ring + offset, k_map, slot, box * kBoxWidth, key0, kvh, b);
        load_box(v_ring + offset, v_map, slot, box * kBoxWidth, key0, kvh, b);
      } else {
#pragma unroll
        for (int i = 0; i < kMaxPageRuns; ++i) {
          const int key = key0 + i * box_rows;
          if (i * box_rows >= p.tile) break;
          const int slot_in_page = key - page_index(key) * p.page_size;  // 0 unless a page holds several tiles
          const int run = offset + i * box_rows * kPitch;  // whole 8-row swizzle atoms (box_rows >= 16)
          load_box(k_ring + run, k_map, slot, box * kBoxWidth, slot_in_page, kvh, pages[i]);
          load_box(v_ring + run, v_map, slot, box * kBoxWidth, slot_in_page, kvh, pages[i]);
        }
      }
    }
  };
  // A contiguous cache without a window starts each split at a key the length does not move, so
  // the lane requests the split's first tiles (of the plan's kv_len) at entry: their latency runs
  // beside the length's read instead of after it (a tile past the length is masked; one past the
  // split's last tile, or every tile of a split the length leaves empty, is waited for and dropped).
  // With 16-bit K/V the first of those tiles goes by plain 16-byte cp.async from the producer warp's
  // lanes instead: a block's first TMA copy waits for its descriptor before it leaves the SM, these
  // do not (docs/perf-notes.md, "Decode round 22"; f32 measured slower with them). The lanes wait
  // for their copies and lane 0 then makes the slot's one arrival, so the full barrier's phases
  // stay those of a TMA slot.
  constexpr bool kCopyFirstTile = !kPaged && sizeof(T) == 2;
  auto copy_first_tile = [&](int key0) {
    constexpr int kVecElems = 16 / static_cast<int>(sizeof(T)), kRowVecs = kCap / kVecElems;
    const T* k_rows = static_cast<const T*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
    const T* v_rows = static_cast<const T*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
    for (int i = lane; i < p.tile * kRowVecs; i += 32) {
      const int r = i / kRowVecs, c = (i % kRowVecs) * kVecElems, key = key0 + r;
      const bool ok = key < p.max_seq && c < p.head_dim;  // as TMA: zeros past the cache and head_dim
      const int dst = tile_offset(r, c, p.tile, kCap, sizeof(T));
      copy_16(k_ring + dst, k_rows + (ok ? key * p.k_stride_s + c : 0), ok);
      copy_16(v_ring + dst, v_rows + (ok ? key * p.v_stride_s + c : 0), ok);
    }
    cuda_common::cp_async_commit();
  };
  int issued = 0;  // tiles the producer lane has requested
  if (kTmaTiles && producer) {
    if (lane == 0) {
      cuda_common::tma_prefetch_descriptor(k_map);
      cuda_common::tma_prefetch_descriptor(v_map);
      for (int s = 0; s < p.stages; ++s) {
        cuda_common::mbar_init(&full_bar[s], 1);
        cuda_common::mbar_init(&empty_bar[s], static_cast<std::uint32_t>(consumer_warps));
      }
      cuda_common::mbar_init_fence();
    }
    __syncwarp();
    if constexpr (!kPaged) {
      // The first tiles go out before the length is read where they cannot depend on it: from key
      // 0 of the split, so not with a window or left padding (whose first key depends on data).
      if (p.window == 0 && p.key_starts == nullptr) {
        const int key0 = split * p.keys_per_split;
        const int keys = min(p.kv_len - key0, p.keys_per_split);
        const int first = keys > 0 ? min(p.stages, (keys + p.tile - 1) / p.tile) : 0;
        if (kCopyFirstTile && first > 0) copy_first_tile(key0);
        if (lane == 0) {
          issued = first;
          const int no_pages[kMaxPageRuns] = {};
          for (int t = kCopyFirstTile ? 1 : 0; t < issued; ++t) copy_tile(t, key0 + t * p.tile, no_pages);
        }
        if (kCopyFirstTile && first > 0) {
          cuda_common::cp_async_wait<0>();
          __syncwarp();
          if (lane == 0) cuda_common::mbar_arrive(&full_bar[0]);
        }
      }
    }
  }
  // Tiles [from, issued) were requested but will not be consumed: wait until they have landed, so
  // no copy writes the ring after the block reuses it or exits.
  auto drop_issued = [&](int from) {
    for (int t = from; t < issued; ++t) cuda_common::mbar_wait(&full_bar[t], 0);
  };

  // Extend: this block's packed rows (query row, head) and their union key range.
  ExtendRows ext;
  int rows_in_sequence = p.group;  // packed rows of (b, kvh): the group, or q_len * group
  SequenceRange range;
  int seq_len = 0;  // extend: the sequence's keys, clamped to the plan's kv_len
  if constexpr (kExtend) {
    ext = extend_rows(p, b);
    rows_in_sequence = ext.q_len * p.group;
    if (pass * p.rows_per_block >= rows_in_sequence) return;  // no row here: nothing to write
    seq_len = min(max(p.lengths[b], 0), p.kv_len);
    range = extend_block_range(p, seq_len, ext.q_len, pass * p.rows_per_block,
                               min(p.rows_per_block, rows_in_sequence - pass * p.rows_per_block));
  }
  const int head_chunk = warp / p.key_warps, key_warp = warp % p.key_warps;
  const int row0 = pass * p.rows_per_block;  // first packed row of this block (a head of the group in decode)
  const int rows_here = min(p.rows_per_block, rows_in_sequence - row0);
  const int hpw = (p.rows_per_block + p.head_chunks - 1) / p.head_chunks;
  const int g_base = head_chunk * hpw;
  const int n_mine = producer ? 0 : max(0, min(hpw, rows_here - g_base));
  const int h0 = kvh * p.group + row0;  // first query head of this block

  // Packed row r of this block -> its token (q/out/lse row) and query head.
  auto token_of = [&](int r) {
    if constexpr (kExtend) return ext.q_start + (row0 + r) / p.group;
    return b;
  };
  auto head_of = [&](int r) {
    if constexpr (kExtend) return kvh * p.group + (row0 + r) % p.group;
    return h0 + r;
  };
  attnkit::detail::prefetch_sinks(p.sinks, p.num_heads);

  // Query rows of the block -> f32 staging (zeros past head_dim; all zeros for an invalid fused
  // position), by `threads` threads from `thread`, in batches of load_q_batch (from batch `from` on;
  // store_q stores one batch).
  const int q_elems = rows_here * kCap;
  auto q_row_offset = [&](int r) { return token_of(r) * p.q_stride_b + head_of(r) * p.q_stride_h; };
  auto store_q = [&](int base, int threads, const float (&x)[kQBatch]) {
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      const int i = base + j * threads;
      if (i < q_elems) staging[i] = range.valid ? x[j] : 0.0f;
    }
  };
  auto stage_q = [&](int thread, int threads, int from) {
    for (int base = thread + from * kQBatch * threads; base < q_elems; base += kQBatch * threads) {
      float x[kQBatch];
      load_q_batch<kCap>(p, rows_here, base, threads, q_row_offset, x);
      store_q(base, threads, x);
    }
  };
  // Decode with TMA tiles: the consumer threads' first batch of q is loaded before the length, so
  // its latency runs beside the length's and the first tiles' too.
  [[maybe_unused]] float q_first[kQBatch];
  if constexpr (kTmaTiles && !kExtend) {
    if (!producer) load_q_batch<kCap>(p, rows_here, tid, consumer_warps * 32, q_row_offset, q_first);
  }
  if constexpr (!kExtend) range = sequence_range(p, b);

  // Row r's output (4 columns from d) and LSE (natural log), final: q/out/lse rows of the token and
  // head of packed row r; an invalid fused position writes NaN.
  auto store_out = [&](int r, int d, float4 o) {
    const std::int64_t at = token_of(r) * p.out_stride_b + head_of(r) * p.out_stride_h + d;
    const float bad = range.valid ? 0.0f : NAN;
    cuda_common::store_from_f32(p.out, p.out_dtype, at, o.x + bad);
    cuda_common::store_from_f32(p.out, p.out_dtype, at + 1, o.y + bad);
    cuda_common::store_from_f32(p.out, p.out_dtype, at + 2, o.z + bad);
    cuda_common::store_from_f32(p.out, p.out_dtype, at + 3, o.w + bad);
  };
  auto store_lse = [&](int r, float lse) {
    if (p.lse != nullptr) p.lse[token_of(r) * p.lse_stride_b + head_of(r) * p.lse_stride_h] = range.valid ? lse : NAN;
  };
  // Cluster merge: the splits of this (sequence, KV head, pass) are one cluster, rank = split. Each
  // active split leaves its normalised output [rows][kCap] in `staging` and its log2 LSE per row in
  // `state_lse`; after a cluster barrier every block merges a share of the rows' 4-column pieces
  // from all active splits' shared memory (out = sum w_s out_s / sum w_s, w_s = 2^(lse_s - max)),
  // and a second barrier keeps each block's memory until its peers have read it. A row no split
  // saw writes zeros and LSE -inf.
  const bool cluster_merge = !kExtend && p.cluster_merge;
  auto merge_in_cluster = [&](int active) {
    ATTNKIT_DECODE_STAMP(8);
    cuda_common::cluster_sync();
    ATTNKIT_DECODE_STAMP(9);
    const int row_vecs = p.head_dim / 4, items = rows_here * row_vecs;
    const std::uint32_t lse_local = cuda_common::smem_u32(state_lse), out_local = cuda_common::smem_u32(staging);
    // Items round-robin over the cluster's blocks; every split's LSE and piece is requested before
    // any is used (one distributed shared-memory round trip per item, not one per split).
    for (int i = tid * p.splits + split; i < items; i += p.splits * static_cast<int>(blockDim.x)) {
      const int r = i / row_vecs, d = (i % row_vecs) * 4;
      float lse[kMaxClusterSplits];
      float4 x[kMaxClusterSplits];
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) {
        lse[s] = -INFINITY;
        x[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (s < active) {
          lse[s] = cuda_common::load_cluster_f32(cuda_common::cluster_address(lse_local + 4 * r, s));
          x[s] = cuda_common::load_cluster_f32x4(cuda_common::cluster_address(out_local + 4 * (r * kCap + d), s));
        }
      }
      float mx = -INFINITY;
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) mx = fmaxf(mx, lse[s]);
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) {
        const float w = exp2f(lse[s] - m_use);  // 0 for an inactive split (lse -inf)
        sum += w;
        acc.x = fmaf(w, x[s].x, acc.x), acc.y = fmaf(w, x[s].y, acc.y), acc.z = fmaf(w, x[s].z, acc.z),
        acc.w = fmaf(w, x[s].w, acc.w);
      }
      // The sink joins the row's denominator (log2 units, relative to 2^m_use); its LSE folds once.
      const float sink = p.sinks != nullptr ? p.sinks[head_of(r)] : -INFINITY;
      const float denom = p.sinks != nullptr ? sum + exp2f(sink * kLog2e - m_use) : sum;
      const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
      store_out(r, d, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
      if (d == 0) store_lse(r, attnkit::detail::fold_sink(sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY, sink).lse);
    }
    ATTNKIT_DECODE_STAMP(10);
    cuda_common::cluster_sync_relaxed();  // the peers' reads of this block are done (their values are used)
  };

  const int visible = range.len - range.lo;
  const int keys_per_split = kExtend ? p.keys_per_split : split_keys(p, range);
  const int active_splits = (visible + keys_per_split - 1) / keys_per_split;
  if (p.splits > 1 && split >= active_splits) {  // the merge writes empty and invalid rows
    if (producer_lane) drop_issued(0);
    if (cluster_merge) merge_in_cluster(active_splits);
    return;
  }
  ATTNKIT_DECODE_STAMP(1);
  const int k_begin = range.lo + split * keys_per_split;
  const int k_end = min(range.len, k_begin + keys_per_split);
  const int new_pos = (p.fused && range.valid) ? range.len - 1 : -1;
  const bool owns_new = new_pos >= k_begin && new_pos < k_end;  // only this block appends it
  const int cache_end = owns_new ? new_pos : k_end;              // keys read from the cache
  const int n_tiles = cache_end > k_begin ? (cache_end - k_begin + p.tile - 1) / p.tile : 0;

  auto process_tile = [&](Engine& engine, int t, int slot) {
    const int tile_key0 = k_begin + t * p.tile;
    if constexpr (kExtend) {
      engine.process_rows(k_ring + slot * tile_elems, v_ring + slot * tile_elems, min(p.tile, cache_end - tile_key0),
                          key_warp, p.softcap, tile_key0);
    } else {
      engine.process(k_ring + slot * tile_elems, v_ring + slot * tile_elems, min(p.tile, cache_end - tile_key0),
                     key_warp, p.softcap);
    }
  };
  Engine engine;
  engine.set_tile(p.tile);

  // Paged rows: key -> page through the sequence's table row (keys past cache_end have no page).
  const std::int32_t* table_row = p.page_table + static_cast<std::int64_t>(b) * p.table_stride_b;
  auto lookup_page = [&](int key) { return key < cache_end ? __ldg(table_row + page_index(key) * p.table_stride_p) : -1; };

  if constexpr (kTmaTiles) {
    // The producer's lane 0 issues tile t into its slot (waiting for the slot to be released first
    // from the second round on); a paged tile's pages are looked up before that wait, so the table
    // latency overlaps it.
    auto issue_tile = [&](int t) {
      const int slot = t % p.stages;
      int pages[kMaxPageRuns] = {};
      if constexpr (kPaged) {
#pragma unroll
        for (int i = 0; i < kMaxPageRuns; ++i) pages[i] = i * box_rows < p.tile ? lookup_page(k_begin + t * p.tile + i * box_rows) : -1;
      }
      if (t >= p.stages) cuda_common::mbar_wait(&empty_bar[slot], ((t / p.stages) - 1) & 1);
      // Slot 0's first tile came by plain copies: order them before TMA rewrites the slot.
      if (kCopyFirstTile && t == p.stages) cuda_common::fence_proxy_async_shared();
      copy_tile(slot, k_begin + t * p.tile, pages);
    };
    // The first `stages` tiles go out before anything else (their slots are free) while the
    // consumer warps stage q (the producer's lane is busy issuing, and q loads behind its issues
    // put 2.7 us on a batch-1 call's critical path, dev/decode_timeline.cu); the block barrier
    // after it is whole-block (no named barrier for a subset of warps) and also publishes the
    // lane's barrier set-up to the consumers.
    const int first_tiles = min(p.stages, n_tiles);
    if (producer) {
      if (lane == 0) {
        for (int t = issued; t < first_tiles; ++t) issue_tile(t);
        ATTNKIT_DECODE_STAMP(2);
      }
      __syncwarp();
    } else {
      store_q(tid, consumer_warps * 32, q_first);
      stage_q(tid, consumer_warps * 32, 1);
    }
    __syncthreads();
    ATTNKIT_DECODE_STAMP(3);
    if (new_pos >= 0) {
      rope_rows(staging, rows_here, kCap, p, new_pos, tid, blockDim.x);
      __syncthreads();
    }
    if (producer) {
      if (lane == 0) {
        for (int t = max(first_tiles, issued); t < n_tiles; ++t) issue_tile(t);
        drop_issued(n_tiles);
      }
      __syncwarp();  // the warp reaches the block barriers below converged (bar.sync is warp-aligned)
    } else {
      engine.init(staging, g_base, n_mine, p.q_scale, lane);
      for (int t = 0; t < n_tiles; ++t) {
        const int slot = t % p.stages;
        cuda_common::mbar_wait(&full_bar[slot], (t / p.stages) & 1);
        if (t == 0) ATTNKIT_DECODE_STAMP(4);
        process_tile(engine, t, slot);
        __syncwarp();
        if (lane == 0) cuda_common::mbar_arrive(&empty_bar[slot]);
      }
    }
  } else if constexpr (kPaged) {
    // Paged cache: a cp.async ring that every thread fills with 16-byte copies (rows past cache_end,
    // vectors past head_dim and rows whose page lies outside the pool are zero-filled), one block
    // barrier per tile. A tile's rows are looked up once per row, one tile ahead of its copies (the
    // table load is in flight while the previous tile is processed), their K/V element offsets kept
    // in a shared ring beside the K/V ring.
    constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));
    constexpr int kRowVecs = kCap / kVecElems;
    const T* k_base = static_cast<const T*>(p.k) + kvh * p.k_stride_h;
    const T* v_base = static_cast<const T*>(p.v) + kvh * p.v_stride_h;
    auto offsets_of = [&](int key, int page) {
      if (key >= cache_end || page < 0 || page >= p.num_pages) return make_longlong2(-1, -1);
      const int slot = key - page_index(key) * p.page_size;
      return make_longlong2(page * p.k_stride_b + slot * p.k_stride_s, page * p.v_stride_b + slot * p.v_stride_s);
    };
    auto load_tile = [&](int slot) {
      T* ks = k_ring + slot * tile_elems;
      T* vs = v_ring + slot * tile_elems;
      for (int i = tid; i < p.tile * kRowVecs; i += blockDim.x) {
        const int r = i / kRowVecs, vec = i % kRowVecs;
        const longlong2 row = row_offsets[slot * p.tile + r];
        const int c = vec * kVecElems;  // column of the key row -> its segment's shared-memory offset
        const int dst = tile_offset(r, c, p.tile, kCap, sizeof(T));
        const bool ok = row.x >= 0 && c < p.head_dim;
        copy_16(ks + dst, k_base + (ok ? row.x + c : 0), ok);
        copy_16(vs + dst, v_base + (ok ? row.y + c : 0), ok);
      }
    };
    // The rows of the first `stages` tiles are looked up first, all in parallel (one table latency
    // and one barrier), then the first tiles are requested before the q load.
    for (int i = tid; i < min(p.stages, n_tiles) * p.tile; i += blockDim.x) {
      row_offsets[i] = offsets_of(k_begin + i, lookup_page(k_begin + i));
    }
    __syncthreads();
    for (int st = 0; st < p.stages - 1; ++st) {
      if (st < n_tiles) load_tile(st);
      cuda_common::cp_async_commit();
    }
    if constexpr (kExtend) {
      // Each packed row's own key range (padding rows up to whole engine warps: empty).
      const int entries = static_cast<int>(row_keys_entries(p.rows_per_block));
      for (int r = tid; r < entries; r += blockDim.x) {
        row_keys[r] = r < rows_here ? extend_row_keys(p, seq_len, ext.q_len, (row0 + r) / p.group) : make_int2(0, 0);
      }
    }
    stage_q(tid, blockDim.x, 0);
    __syncthreads();
    if (!producer) {
      engine.init(staging, g_base, n_mine, p.q_scale, lane);
      if constexpr (kExtend) engine.set_row_keys(row_keys, g_base, n_mine);
    }
    for (int t = 0; t < n_tiles; ++t) {
      cuda_common::cp_async_wait_dynamic(p.stages - 2);  // tile t has landed (one group per tile)
      __syncthreads();                                   // ...for every thread; slot t-1 is free
      const int next = t + p.stages - 1;
      if (next < n_tiles) load_tile(next % p.stages);
      cuda_common::cp_async_commit();
      // The page of the tile after `next` is loaded now and stored after this tile's math.
      int ahead_page = -1;
      const int ahead_key = k_begin + (next + 1) * p.tile + tid;
      if (tid < p.tile && next + 1 < n_tiles) ahead_page = lookup_page(ahead_key);
      if (!producer) process_tile(engine, t, t % p.stages);
      // Slot (next + 1) % stages held tile t's rows, whose copies were issued stages - 1 tiles ago.
      if (tid < p.tile && next + 1 < n_tiles) {
        row_offsets[((next + 1) % p.stages) * p.tile + tid] = offsets_of(ahead_key, ahead_page);
      }
    }
    cuda_common::cp_async_wait<0>();
  }
  __syncthreads();  // every tile consumed: every copy has landed, the ring is free
  ATTNKIT_DECODE_STAMP(5);

  // 4. Fused step: the block owning the new position rotates k_new, appends k and v, and attends
  //    to that key from shared memory (no other block reads or writes that cache row). (Not for
  //    e4m3 caches: validation rejects them before a fused launch.)
  constexpr bool kFusedStep = !kPaged && sizeof(T) > 1;
  if constexpr (kFusedStep) {
    if (owns_new) {
      const T* kn = static_cast<const T*>(p.k_new) + b * p.k_new_stride_b + kvh * p.k_new_stride_h;
      const T* vn = static_cast<const T*>(p.v_new) + b * p.v_new_stride_b + kvh * p.v_new_stride_h;
      for (int d = tid; d < kCap; d += blockDim.x) {
        new_k[d] = d < p.head_dim ? Traits::to_f32(kn[d]) : 0.0f;
        new_v[d] = d < p.head_dim ? Traits::to_f32(vn[d]) : 0.0f;
      }
      __syncthreads();
      rope_rows(new_k, 1, kCap, p, new_pos, tid, blockDim.x);
      __syncthreads();
      T* k_dst = static_cast<T*>(p.k_cache_out) + b * p.k_stride_b + kvh * p.k_stride_h + new_pos * p.k_stride_s;
      T* v_dst = static_cast<T*>(p.v_cache_out) + b * p.v_stride_b + kvh * p.v_stride_h + new_pos * p.v_stride_s;
      for (int i = tid; i < p.tile * kCap; i += blockDim.x) {
        const int r = i / kCap, d = i % kCap;  // row 0 holds the new key, the other rows zeros
        const T kv = Traits::from_f32(r == 0 ? new_k[d] : 0.0f);
        const T vv = Traits::from_f32(r == 0 ? new_v[d] : 0.0f);
        const int at = tile_offset(r, d, p.tile, kCap, sizeof(T));
        k_ring[at] = kv;
        v_ring[at] = vv;
        if (r == 0 && d < p.head_dim && pass == 0) {
          k_dst[d] = kv;
          v_dst[d] = vv;
        }
      }
      __syncthreads();
      if (!producer) engine.process(k_ring, v_ring, 1, key_warp, p.softcap);
      __syncthreads();
    }
  }

  // 5. Combine: within each warp (engine), then the key warps: each writes its rows' (max, sum)
  //    and unscaled output into its own slice of the (now idle) ring region, and after one block
  //    barrier the writers below weight the slices by 2^(m_w - row max) as they sum them (a
  //    separate row-stats pass cost two more barriers on the critical path of short calls).
  float* slices = reinterpret_cast<float*>(aligned);  // [key_warps][rows_per_block][kCap]
  if (!producer) {
    engine.finish();
    engine.write_stats(warp_m + key_warp * p.rows_per_block, warp_l + key_warp * p.rows_per_block, g_base, n_mine);
    engine.write_output(slices + key_warp * p.rows_per_block * kCap, g_base, n_mine);
  }
  __syncthreads();
  ATTNKIT_DECODE_STAMP(7);
  // Row r's max over the key warps (0 when no warp saw a key, so every weight is then 0).
  // Loops over the key warps run to the compile-time bound, predicated (one short straight path:
  // a runtime bound was unrolled with remainder paths into code that a short call fetches cold).
  auto row_max = [&](int r) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMaxKeyWarps; ++w) {
      if (w < p.key_warps) mx = fmaxf(mx, warp_m[w * p.rows_per_block + r]);
    }
    return mx;
  };

  // 6. Write the normalised output and LSE: final when unsplit; else this split's partial state,
  //    in shared memory for the cluster merge, or in the workspace for the merge kernel, indexed by
  //    (token, head): [splits, state rows * num_heads, head_dim]. A thread takes four consecutive
  //    columns per step (head_dim is a multiple of 8) and no division: this loop runs once per
  //    block, on the critical path of short calls (its scalar form took 1.8 us of a 16 us batch-1
  //    call, dev/decode_timeline.cu).
  const std::int64_t rows_total = static_cast<std::int64_t>(kExtend ? p.state_rows : p.batch) * p.num_heads;
  constexpr int kVec = 4, kRowVecs = kCap / kVec;
  // Each output mode gets its own copy of the loops (one short straight path per mode, no
  // per-element mode branches on the path a short call fetches cold).
  // Unsplit rows are final: the sinks fold in here (log2 units in, natural out).
  const bool fold_sinks = p.splits == 1 && p.sinks != nullptr;
  auto write_pieces = [&](auto&& write) {
    for (int i = tid; i < rows_here * kRowVecs; i += blockDim.x) {
      const int r = i / kRowVecs, d = (i % kRowVecs) * kVec;
      if (d >= p.head_dim) continue;
      const float mx = row_max(r), m_use = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < kMaxKeyWarps; ++w) {
        if (w >= p.key_warps) break;
        const float f = exp2f(warp_m[w * p.rows_per_block + r] - m_use);
        const float4 x = *reinterpret_cast<const float4*>(slices + (w * p.rows_per_block + r) * kCap + d);
        sum = fmaf(warp_l[w * p.rows_per_block + r], f, sum);
        acc.x = fmaf(x.x, f, acc.x), acc.y = fmaf(x.y, f, acc.y), acc.z = fmaf(x.z, f, acc.z), acc.w = fmaf(x.w, f, acc.w);
      }
      // The sink joins the row's denominator, relative to the same 2^m_use as the key sums.
      const float denom = fold_sinks ? sum + exp2f(p.sinks[head_of(r)] * kLog2e - m_use) : sum;
      const float inv = denom > 0.0f ? __frcp_rn(denom) * p.v_scale : 0.0f;  // v_scale: e4m3 V's scale, else 1
      write(r, d, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    }
  };
  auto write_lses = [&](auto&& write) {  // log2 units
    for (int r = tid; r < rows_here; r += blockDim.x) {
      const float mx = row_max(r), m_use = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kMaxKeyWarps; ++w) {
        if (w >= p.key_warps) break;
        sum = fmaf(warp_l[w * p.rows_per_block + r], exp2f(warp_m[w * p.rows_per_block + r] - m_use), sum);
      }
      write(r, sum > 0.0f ? mx + log2f(sum) : -INFINITY);
    }
  };
  if (p.splits == 1) {
    write_pieces([&](int r, int d, float4 o) { store_out(r, d, o); });
    write_lses([&](int r, float lse2) {
      store_lse(r, fold_sinks ? attnkit::detail::fold_sink(lse2 * kLn2, p.sinks[head_of(r)]).lse : lse2 * kLn2);
    });
  } else if (cluster_merge) {
    write_pieces([&](int r, int d, float4 o) { *reinterpret_cast<float4*>(staging + r * kCap + d) = o; });
    write_lses([&](int r, float lse2) { state_lse[r] = lse2; });
  } else {
    write_pieces([&](int r, int d, float4 o) {
      const std::int64_t row = token_of(r) * p.num_heads + head_of(r);
      *reinterpret_cast<float4*>(p.partial_out + (split * rows_total + row) * p.head_dim + d) = o;
    });
    write_lses([&](int r, float lse2) {
      p.partial_lse[split * rows_total + token_of(r) * p.num_heads + head_of(r)] = lse2 * kLn2;
    });
  }
  if (cluster_merge) merge_in_cluster(active_splits);
  ATTNKIT_DECODE_STAMP(6);
}

// Host: launches one instantiation (its shared-memory limit raised once per device).
template <class T, int kCap, int kHpw, bool kPaged = false, bool kExtend = false, bool kPageBoxes = false>
void launch_decode_instance(const DecodeParams& plan_params, cudaStream_t stream) {
  using Engine = std::conditional_t<
      sizeof(T) == 4, SimtEngine<T, kCap, kHpw>,
      std::conditional_t<sizeof(T) == 1, Fp8MmaEngine<kCap>,
                         std::conditional_t<kHpw == kMmaRows, MmaEngine<T, kCap>, KeyRowsMmaEngine<T, kCap>>>>;
  auto kernel = split_kv_decode_kernel<T, kCap, Engine, kPaged, kExtend, kPageBoxes>;
  cuda_common::check(cuda_common::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel)), "cuda::decode",
                     "raising the kernel's shared-memory limit");
  DecodeParams p = plan_params;
  if (p.resident_blocks > 0) {
    int device = 0, shared_per_sm = 0;
    cuda_common::check(cudaGetDevice(&device), "cuda::decode", "cudaGetDevice");
    cuda_common::check(cudaDeviceGetAttribute(&shared_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
                       "cuda::decode", "reading the device's shared memory per SM");
    p.shared_bytes = static_cast<int>(shared_bytes_for_residency(p.shared_bytes, p.resident_blocks, shared_per_sm));
  }
  p.split_div = cuda_common::FastDivider(static_cast<std::uint32_t>(p.splits));
  p.pass_div = cuda_common::FastDivider(static_cast<std::uint32_t>(p.passes));
  p.kv_head_div = cuda_common::FastDivider(static_cast<std::uint32_t>(p.kv_heads));
  const std::int64_t blocks = static_cast<std::int64_t>(p.batch) * p.kv_heads * p.passes * p.splits;
  if (blocks > INT32_MAX) {  // a grid's x extent, and the block decode's 31-bit range
    fail("cuda::decode", "the plan needs " + std::to_string(blocks) + " blocks, more than one launch holds",
         "split the batch into smaller calls");
  }
  if (p.key_warps < 1 || p.key_warps > kMaxKeyWarps) {  // the combine loops stop at kMaxKeyWarps
    fail("cuda::decode", "the plan has " + std::to_string(p.key_warps) + " key warps per head chunk, outside 1.." +
                             std::to_string(kMaxKeyWarps),
         "plan with this build's planner");
  }
  const int threads = 32 * block_warps(p.head_chunks, p.key_warps);
  if (!p.cluster_merge) {
    kernel<<<static_cast<unsigned>(blocks), threads, p.shared_bytes, stream>>>(p);
    cuda_common::check_launch("cuda::decode", "split_kv_decode_kernel");
    return;
  }
  if (kExtend || p.splits < 2 || p.splits > kMaxClusterSplits) {
    fail("cuda::decode", "a cluster merge of " + std::to_string(p.splits) + " splits is not supported here",
         "plan with this build's planner (it merges 2 to " + std::to_string(kMaxClusterSplits) +
             " splits of contiguous decode in a cluster)");
  }
  // One cluster per (sequence, KV head, pass): its splits are consecutive blocks.
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<std::size_t>(p.shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = static_cast<unsigned>(p.splits);
  attributes[0].val.clusterDim.y = attributes[0].val.clusterDim.z = 1;
  // A cluster's blocks on as many SMs as possible (by default they were packed two to an SM: b1 x 1k
  // 14.0 -> 13.3 us with the spread).
  attributes[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
  attributes[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
  config.attrs = attributes;
  config.numAttrs = 2;
  cuda_common::check(cudaLaunchKernelEx(&config, kernel, p), "cuda::decode", "launching split_kv_decode_kernel in clusters");
}

// Host: the instantiation for a plan's head_dim capacity and heads per warp.
template <class T, bool kPaged = false, bool kExtend = false, bool kPageBoxes = false>
void launch_decode_typed(const DecodeParams& p, cudaStream_t stream) {
  const int cap = head_dim_capacity(p.head_dim);
  const int hpw = heads_per_warp(p.rows_per_block, sizeof(T));
  // 16-bit K/V: tensor-core engines (8 heads per warp: keys as MMA rows; 16: heads as MMA rows);
  // e4m3: the 16-row tensor-core engine; f32: CUDA-core engine (4 or 8).
#define ATTNKIT_DECODE_CASE(CAP, HPW)                                                      \
  if constexpr (engine_exists(sizeof(T), HPW)) {                                           \
    if (cap == CAP && hpw == HPW) {                                                        \
      return launch_decode_instance<T, CAP, HPW, kPaged, kExtend, kPageBoxes>(p, stream); \
    }                                                                                      \
  }
#include "cuda/decode/decode_instances.inc"
#undef ATTNKIT_DECODE_CASE
  fail("cuda::decode", "no kernel instance for head_dim capacity " + std::to_string(cap) + " and " +
                           std::to_string(hpw) + " heads per warp",
       "report this: decode_instances.inc and decode_geometry.hpp disagree");
}

}  // namespace attnkit::cuda_decode
