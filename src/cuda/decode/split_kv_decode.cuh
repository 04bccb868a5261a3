// GQA-packed split-KV flash-decoding (KernelFamily::kSplitKvDecode), and the fused RoPE + KV
// append + decode step built on it.
//
// Inputs: q [batch, num_heads, head_dim] (kv dtype or f32), K/V caches [batch, kv_heads, max_seq,
//   head_dim] (f32, f16 or bf16, 16-byte aligned rows), lengths i32 [batch] on the device (or, fused,
//   positions i32 [batch] and the new k/v rows).
// Parallelism: one block per (sequence, KV head, head pass, key split). The block's warps form
//   head_chunks x key_warps (decode_geometry.hpp): every warp of a head chunk serves heads_per_warp
//   query heads of the GQA group, so one shared-memory K/V tile serves the whole group and each
//   K/V element leaves device memory once. The per-warp math is an engine: tensor cores for f16 and
//   bf16 (engine_mma.cuh, 16 heads per warp), CUDA cores for f32 (engine_simt.cuh). Tiles stream
//   through a cp.async ring of `stages` slots with 16-byte copies, the first ones requested before
//   the q load; out-of-window tiles are never loaded (the key range starts at the window). Softmax
//   is online in f32 (log2 domain); splits write normalised partial (output, LSE) states to the
//   caller's workspace and merge_states.cu combines them.
// Lengths: read on the device and clamped to [0, plan kv_len] (sequence_range.cuh); a sequence of
//   length 0 writes zeros and LSE -inf.
// Row addressing is a compile-time policy: kPaged = false reads row j of (b, kvh) at
//   k + b*stride_b + kvh*stride_h + j*stride_s (contiguous decode, the loop exactly as before);
//   kPaged = true reads it from page page_table[b][j / page_size], slot j % page_size (paged decode,
//   extend). A tile's rows are looked up once per row, one tile ahead of its copies (the table load
//   is in flight while the previous tile is processed), and their K/V element offsets stored in a
//   shared-memory ring beside the K/V ring; a page index outside [0, num_pages) reads zeros (device indices cannot be checked on
//   the host), so no copy ever leaves the pool.
// kExtend packs (query row, head of the group) pairs into the engine's rows: sequence b's q_len_b
//   tokens (cu_seqlens_q) times the group, rows_per_block of them per pass, each row masked to its
//   own causal/window key range (bottom-right aligned) inside the block's union range.
// Bound: device-memory reads of K and V (2 * keys * head_dim * sizeof(kv) per KV head); measured
//   within 0.4% of that by ncu. Time is lost to latency (docs/perf-notes.md), not to extra bytes.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "cuda/common/convert.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/shared_memory_limit.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/engine_mma.cuh"
#include "cuda/decode/engine_simt.cuh"
#include "cuda/decode/rope.cuh"
#include "cuda/decode/sequence_range.cuh"

namespace attnkit::cuda_decode {

inline constexpr float kLn2 = 0.69314718055994530942f;
inline constexpr float kLog2e = 1.44269504088896340736f;

template <class T, int kCap, class Engine, bool kPaged = false, bool kExtend = false>
__global__ void __launch_bounds__(kMaxThreads) split_kv_decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(kPaged || !kExtend, "extend reads a paged cache");
  using Traits = cuda_common::StorageTraits<T>;
  constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte vector
  constexpr int kRowVecs = kCap / kVecElems;
  constexpr int kStride = Engine::kStride;  // padded shared-memory row (elements)
  extern __shared__ __align__(16) unsigned char smem[];

  // Block -> (split, pass, kv head, sequence); the split index varies fastest.
  std::int64_t block = blockIdx.x;
  const int split = static_cast<int>(block % p.splits);
  block /= p.splits;
  const int pass = static_cast<int>(block % p.passes);
  block /= p.passes;
  const int kvh = static_cast<int>(block % p.kv_heads);
  const int b = static_cast<int>(block / p.kv_heads);

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
  } else {
    range = sequence_range(p, b);
  }
  const int visible = range.len - range.lo;
  const int active_splits = (visible + p.keys_per_split - 1) / p.keys_per_split;
  if (p.splits > 1 && split >= active_splits) return;  // the merge writes empty and invalid rows
  const int k_begin = range.lo + split * p.keys_per_split;
  const int k_end = min(range.len, k_begin + p.keys_per_split);
  const int new_pos = (p.fused && range.valid) ? range.len - 1 : -1;
  const bool owns_new = new_pos >= k_begin && new_pos < k_end;  // only this block appends it
  const int cache_end = owns_new ? new_pos : k_end;              // keys read from the cache

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int head_chunk = warp / p.key_warps, key_warp = warp % p.key_warps;
  const int row0 = pass * p.rows_per_block;  // first packed row of this block (a head of the group in decode)
  const int rows_here = min(p.rows_per_block, rows_in_sequence - row0);
  const int hpw = (p.rows_per_block + p.head_chunks - 1) / p.head_chunks;
  const int g_base = head_chunk * hpw;
  const int n_mine = max(0, min(hpw, rows_here - g_base));
  const int h0 = kvh * p.group + row0;  // first query head of this block

  // Shared memory: [K/V ring] [q staging, later the cross-warp reduction] [stats] [fused scratch].
  const int ring_elems = p.stages * p.tile * kStride;
  const int ring_bytes = 2 * ring_elems * static_cast<int>(sizeof(T));
  T* k_ring = reinterpret_cast<T*>(smem);
  T* v_ring = k_ring + ring_elems;
  float* staging = reinterpret_cast<float*>(smem + ring_bytes);  // [rows_per_block][kCap]
  float* warp_m = staging + p.rows_per_block * kCap;             // [key_warps][rows_per_block]
  float* warp_l = warp_m + p.key_warps * p.rows_per_block;
  float* row_m = warp_l + p.key_warps * p.rows_per_block;       // [rows_per_block]
  float* row_l = row_m + p.rows_per_block;
  float* new_k = row_l + p.rows_per_block;                      // [kCap] fused: rotated k_new
  float* new_v = new_k + kCap;
  // Paged: [stages][tile] element offsets (K, V) of the tiles' rows, 16-byte aligned; extend:
  // [rows] visible key ranges.
  auto* row_offsets = reinterpret_cast<longlong2*>(
      (reinterpret_cast<std::uintptr_t>(new_v + kCap) + 15) / 16 * 16);
  int2* row_keys = reinterpret_cast<int2*>(row_offsets + p.stages * p.tile);

  // Packed row r of this block -> its token (q/out/lse row) and query head.
  auto token_of = [&](int r) {
    if constexpr (kExtend) return ext.q_start + (row0 + r) / p.group;
    return b;
  };
  auto head_of = [&](int r) {
    if constexpr (kExtend) return kvh * p.group + (row0 + r) % p.group;
    return h0 + r;
  };

  const std::int64_t seq_offset_k = kPaged ? 0 : b * p.k_stride_b;  // paged: the page stride is per row
  const std::int64_t seq_offset_v = kPaged ? 0 : b * p.v_stride_b;
  const T* k_base = static_cast<const T*>(p.k) + seq_offset_k + kvh * p.k_stride_h;
  const T* v_base = static_cast<const T*>(p.v) + seq_offset_v + kvh * p.v_stride_h;
  const int n_tiles = cache_end > k_begin ? (cache_end - k_begin + p.tile - 1) / p.tile : 0;
  const std::int32_t* table_row = kPaged ? p.page_table + b * p.table_stride_b : nullptr;

  // Paged: the table index of a key row (one fast division), and the K and V element offsets of
  // the row once its page is known; -1 marks a row past cache_end or whose page is out of the pool.
  auto page_index = [&](int key) {
    return static_cast<int>((__umulhi(static_cast<unsigned>(key), p.page_div_magic) + static_cast<unsigned>(key)) >>
                            p.page_div_shift);
  };
  auto lookup_page = [&](int key) { return key < cache_end ? __ldg(table_row + page_index(key) * p.table_stride_p) : -1; };
  auto offsets_of = [&](int key, int page) {
    if (key >= cache_end || page < 0 || page >= p.num_pages) return make_longlong2(-1, -1);
    const int slot = key - page_index(key) * p.page_size;
    return make_longlong2(page * p.k_stride_b + slot * p.k_stride_s, page * p.v_stride_b + slot * p.v_stride_s);
  };

  // Copies tile t into ring slot `slot`; keys past cache_end and vectors past head_dim are zeros.
  // Paged: the tile's row offsets are in row_offsets[slot] (written one tile ahead).
  auto load_tile = [&](int t, int slot) {
    const int key0 = k_begin + t * p.tile;
    T* ks = k_ring + slot * p.tile * kStride;
    T* vs = v_ring + slot * p.tile * kStride;
    for (int i = tid; i < p.tile * kRowVecs; i += blockDim.x) {
      const int r = i / kRowVecs, vec = i % kRowVecs;
      const int key = key0 + r;
      std::int64_t k_off = 0, v_off = 0;
      bool ok;
      if constexpr (kPaged) {
        const longlong2 row = row_offsets[slot * p.tile + r];
        ok = row.x >= 0 && vec * kVecElems < p.head_dim;
        if (ok) {
          k_off = row.x + vec * kVecElems;
          v_off = row.y + vec * kVecElems;
        }
      } else {
        ok = key < cache_end && vec * kVecElems < p.head_dim;
        k_off = ok ? key * p.k_stride_s + vec * kVecElems : 0;
        v_off = ok ? key * p.v_stride_s + vec * kVecElems : 0;
      }
      cuda_common::cp_async_16(ks + r * kStride + vec * kVecElems, k_base + k_off, ok);
      cuda_common::cp_async_16(vs + r * kStride + vec * kVecElems, v_base + v_off, ok);
    }
  };

  // 1. The first tiles are requested before anything else, so their latency covers the q load.
  //    Paged: the rows of the first `stages` tiles are looked up first, all in parallel (one table
  //    latency and one barrier before the first copies).
  if constexpr (kPaged) {
    const int rows = min(p.stages, n_tiles) * p.tile;
    for (int i = tid; i < rows; i += blockDim.x) {
      const int key = k_begin + i;
      row_offsets[i] = offsets_of(key, lookup_page(key));
    }
    __syncthreads();
  }
  for (int st = 0; st < p.stages - 1; ++st) {
    if (st < n_tiles) load_tile(st, st);
    cuda_common::cp_async_commit();
  }
  if constexpr (kExtend) {
    // Each packed row's own key range (padding rows up to whole engine warps: empty).
    const int entries = static_cast<int>(row_keys_entries(p.rows_per_block));
    for (int r = tid; r < entries; r += blockDim.x) {
      row_keys[r] = r < rows_here ? extend_row_keys(p, seq_len, ext.q_len, (row0 + r) / p.group)
                                  : make_int2(0, 0);
    }
  }

  // 2. Query rows of the block -> f32 staging (zeros past head_dim), RoPE for the fused step.
  for (int i = tid; i < rows_here * kCap; i += blockDim.x) {
    const int r = i / kCap, d = i % kCap;
    float x = 0.0f;
    if (d < p.head_dim && range.valid) {
      x = cuda_common::load_as_f32(p.q, p.q_dtype, token_of(r) * p.q_stride_b + head_of(r) * p.q_stride_h + d);
    }
    staging[i] = x;
  }
  __syncthreads();
  if constexpr (!kPaged) {
    if (new_pos >= 0) {
      rope_rows(staging, rows_here, kCap, p, new_pos);
      __syncthreads();
    }
  }
  Engine engine;
  engine.init(staging, g_base, n_mine, p.q_scale, lane);
  if constexpr (kExtend) engine.set_row_keys(row_keys, g_base, n_mine);

  // 3. Stream the block's key range through the ring.
  for (int t = 0; t < n_tiles; ++t) {
    cuda_common::cp_async_wait_dynamic(p.stages - 2);  // tile t has landed (one group per tile)
    __syncthreads();                                   // ...for every thread; slot t-1 is free
    const int next = t + p.stages - 1;
    if (next < n_tiles) load_tile(next, next % p.stages);
    cuda_common::cp_async_commit();
    // Paged: the page of the tile after `next` is loaded now and stored after this tile's math.
    int ahead_page = -1;
    const int ahead_key = k_begin + (next + 1) * p.tile + tid;
    if constexpr (kPaged) {
      if (tid < p.tile && next + 1 < n_tiles) ahead_page = lookup_page(ahead_key);
    }
    const int slot = t % p.stages;
    const int tile_key0 = k_begin + t * p.tile;
    if constexpr (kExtend) {
      engine.process_rows(k_ring + slot * p.tile * kStride, v_ring + slot * p.tile * kStride,
                          min(p.tile, cache_end - tile_key0), key_warp, p.softcap, tile_key0);
    } else {
      engine.process(k_ring + slot * p.tile * kStride, v_ring + slot * p.tile * kStride,
                     min(p.tile, cache_end - tile_key0), key_warp, p.softcap);
    }
    if constexpr (kPaged) {
      // Slot (next + 1) % stages held tile t's rows, whose copies were issued stages - 1 tiles ago.
      if (tid < p.tile && next + 1 < n_tiles) {
        row_offsets[((next + 1) % p.stages) * p.tile + tid] = offsets_of(ahead_key, ahead_page);
      }
    }
  }
  cuda_common::cp_async_wait<0>();
  __syncthreads();

  // 4. Fused step: the block owning the new position rotates k_new, appends k and v, and attends
  //    to that key from shared memory (no other block reads or writes that cache row).
  if (!kPaged && owns_new) {
    const T* kn = static_cast<const T*>(p.k_new) + b * p.k_new_stride_b + kvh * p.k_new_stride_h;
    const T* vn = static_cast<const T*>(p.v_new) + b * p.v_new_stride_b + kvh * p.v_new_stride_h;
    for (int d = tid; d < kCap; d += blockDim.x) {
      new_k[d] = d < p.head_dim ? Traits::to_f32(kn[d]) : 0.0f;
      new_v[d] = d < p.head_dim ? Traits::to_f32(vn[d]) : 0.0f;
    }
    __syncthreads();
    rope_rows(new_k, 1, kCap, p, new_pos);
    __syncthreads();
    T* k_dst = static_cast<T*>(p.k_cache_out) + b * p.k_stride_b + kvh * p.k_stride_h + new_pos * p.k_stride_s;
    T* v_dst = static_cast<T*>(p.v_cache_out) + b * p.v_stride_b + kvh * p.v_stride_h + new_pos * p.v_stride_s;
    for (int i = tid; i < p.tile * kStride; i += blockDim.x) {
      const int r = i / kStride, d = i % kStride;
      const bool row0_elem = r == 0 && d < kCap;
      const T kv = Traits::from_f32(row0_elem ? new_k[d] : 0.0f);
      const T vv = Traits::from_f32(row0_elem ? new_v[d] : 0.0f);
      k_ring[i] = kv;
      v_ring[i] = vv;
      if (row0_elem && d < p.head_dim && pass == 0) {
        k_dst[d] = kv;
        v_dst[d] = vv;
      }
    }
    __syncthreads();
    engine.process(k_ring, v_ring, 1, key_warp, p.softcap);
    __syncthreads();
  }

  // 5. Combine: within each warp (engine), then key warps (shared memory, in warp order).
  engine.finish();
  engine.write_stats(warp_m + key_warp * p.rows_per_block, warp_l + key_warp * p.rows_per_block, g_base, n_mine);
  __syncthreads();
  for (int r = tid; r < rows_here; r += blockDim.x) {
    float mx = -INFINITY;
    for (int w = 0; w < p.key_warps; ++w) mx = fmaxf(mx, warp_m[w * p.rows_per_block + r]);
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int w = 0; w < p.key_warps; ++w) {
      sum += warp_l[w * p.rows_per_block + r] * exp2f(warp_m[w * p.rows_per_block + r] - m_use);
    }
    row_m[r] = mx;
    row_l[r] = sum;
  }
  __syncthreads();
  float* reduced = staging;  // [rows_per_block][kCap]; every engine read its q before the barriers above
  for (int w = 0; w < p.key_warps; ++w) {
    if (key_warp == w) engine.add_output(reduced, row_m, g_base, n_mine, w == 0);
    __syncthreads();
  }

  // 6. Write the normalised output and LSE (final when unsplit, else this split's partial state).
  //    Split states are indexed by (token, head): [splits, state rows * num_heads, head_dim].
  const std::int64_t rows_total = static_cast<std::int64_t>(kExtend ? p.state_rows : p.batch) * p.num_heads;
  for (int i = tid; i < rows_here * p.head_dim; i += blockDim.x) {
    const int r = i / p.head_dim, d = i % p.head_dim;
    const float sum = row_l[r];
    float o = sum > 0.0f ? reduced[r * kCap + d] / sum : 0.0f;
    const std::int64_t token = token_of(r);
    const int head = head_of(r);
    if (p.splits == 1) {
      if (!range.valid) o = NAN;
      cuda_common::store_from_f32(p.out, p.out_dtype, token * p.out_stride_b + head * p.out_stride_h + d, o);
    } else {
      const std::int64_t row = token * p.num_heads + head;
      p.partial_out[(split * rows_total + row) * p.head_dim + d] = o;
    }
  }
  for (int r = tid; r < rows_here; r += blockDim.x) {
    const float sum = row_l[r];
    float lse = sum > 0.0f ? (row_m[r] + log2f(sum)) * kLn2 : -INFINITY;
    const std::int64_t token = token_of(r);
    const int head = head_of(r);
    if (p.splits == 1) {
      if (!range.valid) lse = NAN;
      if (p.lse != nullptr) p.lse[token * p.lse_stride_b + head * p.lse_stride_h] = lse;
    } else {
      p.partial_lse[split * rows_total + token * p.num_heads + head] = lse;
    }
  }
}

// Host: launches one instantiation (its shared-memory limit raised once per device).
template <class T, int kCap, int kHpw, bool kPaged = false, bool kExtend = false>
void launch_decode_instance(const DecodeParams& p, cudaStream_t stream) {
  using Engine = std::conditional_t<kHpw == kMmaRows, MmaEngine<T, kCap>, SimtEngine<T, kCap, kHpw>>;
  auto kernel = split_kv_decode_kernel<T, kCap, Engine, kPaged, kExtend>;
  cuda_common::check(cuda_common::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel)), "cuda::decode",
                     "raising the kernel's shared-memory limit");
  const std::int64_t blocks = static_cast<std::int64_t>(p.batch) * p.kv_heads * p.passes * p.splits;
  const int threads = 32 * p.head_chunks * p.key_warps;
  kernel<<<static_cast<unsigned>(blocks), threads, p.shared_bytes, stream>>>(p);
  cuda_common::check_launch("cuda::decode", "split_kv_decode_kernel");
}

// Host: the instantiation for a plan's head_dim capacity and heads per warp.
template <class T, bool kPaged = false, bool kExtend = false>
void launch_decode_typed(const DecodeParams& p, cudaStream_t stream) {
  const int cap = head_dim_capacity(p.head_dim);
  const int hpw = heads_per_warp(p.rows_per_block, sizeof(T));
  // 16-bit K/V: tensor-core engine only (16 heads per warp); f32: CUDA-core engine (4 or 8).
#define ATTNKIT_DECODE_CASE(CAP, HPW)                                                                     \
  if constexpr ((sizeof(T) == 2) == (HPW == kMmaRows)) {                                                  \
    if (cap == CAP && hpw == HPW) return launch_decode_instance<T, CAP, HPW, kPaged, kExtend>(p, stream); \
  }
#include "cuda/decode/decode_instances.inc"
#undef ATTNKIT_DECODE_CASE
  fail("cuda::decode", "no kernel instance for head_dim capacity " + std::to_string(cap) + " and " +
                           std::to_string(hpw) + " heads per warp",
       "report this: decode_instances.inc and decode_geometry.hpp disagree");
}

}  // namespace attnkit::cuda_decode
