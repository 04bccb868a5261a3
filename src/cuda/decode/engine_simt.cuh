// Internal: the CUDA-core warp engine of the split-KV decode kernel (f32 K/V).
// A warp holds kHpw query heads in registers; a thread owns 8 elements of head_dim of one key
// (one or two 16-byte vectors), threads_per_key threads cover a key row and reduce the partial
// dot products with xor-shuffles; a warp takes kStepsPerTile steps of 32 / threads_per_key keys.
// Online softmax per warp in the log2 domain; f32 throughout.
// The threads of a key reduce their kHpw partial dot products by reduce-scatter: each xor level
// halves the heads a thread carries, so after log2(kHpw) levels the kTpk / kHpw threads of each
// head slice hold that head's score, and only they run its softcap, mask, softmax and exp. P is
// gathered back per step for P.V. Against every thread reducing every head this halves the
// shuffles and adds and cuts the exps by kTpk / kHpw (fewer instructions per byte: the f32 decode
// runs at the 700 W cap, docs/perf-notes.md, decode round 21).
#pragma once
#include "cuda/common/convert.cuh"
#include "cuda/decode/decode_geometry.hpp"

namespace attnkit::cuda_decode {

template <class T, int kCap, int kHpw>
struct SimtEngine {
  static constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kChunks = kSliceElems / kVecElems;
  static constexpr int kTpk = threads_per_key(kCap);
  static constexpr int kKps = 32 / kTpk;
  static constexpr unsigned kFull = 0xffffffffu;
  static constexpr int kHeadThreads = kTpk / kHpw;  // threads of a key that end with one head's score
  static_assert(kTpk % kHpw == 0, "reduce-scatter needs at least one thread per head");
  // 4 heads per warp fit in 128 registers, so three blocks share an SM (this latency-bound engine
  // needs the warps; decode_geometry.hpp); 8 heads need up to 255.
  static constexpr int kRegisters = register_budget(kHpw, kCap, sizeof(T));  // the kernel's __maxnreg__

  float q[kHpw][kSliceElems], acc[kHpw][kSliceElems];
  float m = -INFINITY, l = 0.0f;  // the running max and sum of this thread's head, `head`
  int lane, key_group, slice, head;
  int tile = 0;  // rows of a ring slot (decode_geometry.hpp's tile layout)

  __device__ void set_tile(int tile_rows) { tile = tile_rows; }

  __device__ int dim_of(int j, int e) const { return (slice + j * kTpk) * kVecElems + e; }

  __device__ void init(const float* staging, int g_base, int n_mine, float q_scale, int lane_id) {
    lane = lane_id;
    key_group = lane / kTpk;
    slice = lane % kTpk;
    head = slice / kHeadThreads;
    m = -INFINITY;
    l = 0.0f;
#pragma unroll
    for (int g = 0; g < kHpw; ++g) {
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
#pragma unroll
        for (int e = 0; e < kVecElems; ++e) {
          q[g][j * kVecElems + e] = g < n_mine ? staging[(g_base + g) * kCap + dim_of(j, e)] * q_scale : 0.0f;
          acc[g][j * kVecElems + e] = 0.0f;
        }
      }
    }
  }

  __device__ void load_row(const T* rows, int r, float (&x)[kSliceElems]) const {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const uint4 raw =
          *reinterpret_cast<const uint4*>(rows + tile_offset(r, (slice + j * kTpk) * kVecElems, tile, kCap, sizeof(T)));
      cuda_common::vec16_to_f32(raw, x + j * kVecElems, T{});
    }
  }

  // Extend: row g of this warp sees only keys [row_keys[g].x, row_keys[g].y) (absolute positions,
  // read from shared memory per tile: registers are the f32 engine's limit).
  const int2* row_keys = nullptr;
  __device__ void set_row_keys(const int2* keys, int g_base, int) { row_keys = keys + g_base; }

  // Scores, online softmax and P.V for this warp's keys of one resident tile.
  __device__ void process(const T* ks, const T* vs, int n_valid, int key_warp, float softcap) {
    process_impl<false>(ks, vs, n_valid, key_warp, softcap, 0);
  }
  __device__ void process_rows(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    process_impl<true>(ks, vs, n_valid, key_warp, softcap, tile_key0);
  }

  // The sum over the key's kTpk threads of part[0..kHpw), scattered: the result is head `head`'s.
  __device__ float reduce_scatter(float (&part)[kHpw]) const {
    float v[kHpw];
#pragma unroll
    for (int g = 0; g < kHpw; ++g) v[g] = part[g];
    // Level n: a thread keeps the half of its n values its lane bit selects and adds its
    // partner's copy of that half.
#pragma unroll
    for (int n = kHpw, off = kTpk / 2; n > 1; n /= 2, off /= 2) {
      const bool upper = (lane & off) != 0;
#pragma unroll
      for (int k = 0; k < n / 2; ++k) {
        const float keep = upper ? v[n / 2 + k] : v[k];
        const float send = upper ? v[k] : v[n / 2 + k];
        v[k] = keep + __shfl_xor_sync(kFull, send, off);
      }
    }
#pragma unroll
    for (int off = kHeadThreads / 2; off >= 1; off /= 2) v[0] += __shfl_xor_sync(kFull, v[0], off);
    return v[0];
  }

  template <bool kRowKeys>
  __device__ void process_impl(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    const int warp_key0 = key_warp * kStepsPerTile * kKps;
    float s[kStepsPerTile];  // this thread's head's scores, one per step
#pragma unroll
    for (int st = 0; st < kStepsPerTile; ++st) {
      float kx[kSliceElems], part[kHpw];
      load_row(ks, warp_key0 + st * kKps + key_group, kx);
#pragma unroll
      for (int g = 0; g < kHpw; ++g) {
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < kSliceElems; ++e) a = fmaf(q[g][e], kx[e], a);
        part[g] = a;
      }
      float x = reduce_scatter(part);
      const int key = warp_key0 + st * kKps + key_group;
      if (softcap > 0.0f) x = softcap * 1.44269504088896340736f * tanhf(x / softcap);
      bool visible = key < n_valid;
      if constexpr (kRowKeys) {
        // Rows past the warp's n_mine hold zero q and an empty range (their output is discarded).
        const int2 k = row_keys[head];
        visible = visible && tile_key0 + key >= k.x && tile_key0 + key < k.y;
      }
      s[st] = visible ? x : -INFINITY;
    }
    float tile_max = s[0];
#pragma unroll
    for (int st = 1; st < kStepsPerTile; ++st) tile_max = fmaxf(tile_max, s[st]);
#pragma unroll
    for (int off = kTpk; off < 32; off *= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, off));
    const float m_new = fmaxf(m, tile_max);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: no NaN from -inf - -inf
    const float alpha_mine = exp2f(m - m_use);
    m = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int st = 0; st < kStepsPerTile; ++st) {
      s[st] = exp2f(s[st] - m_use);
      sum += s[st];
    }
    l = l * alpha_mine + sum;
#pragma unroll
    for (int g = 0; g < kHpw; ++g) {
      const float alpha = __shfl_sync(kFull, alpha_mine, g * kHeadThreads, kTpk);
#pragma unroll
      for (int e = 0; e < kSliceElems; ++e) acc[g][e] *= alpha;
    }
#pragma unroll
    for (int st = 0; st < kStepsPerTile; ++st) {
      float vx[kSliceElems];
      const int key = warp_key0 + st * kKps + key_group;
      load_row(vs, key, vx);
      // V rows past n_valid may hold anything (a TMA tile reads past the sequence): 0 * inf is NaN.
      if (key >= n_valid) {
#pragma unroll
        for (int e = 0; e < kSliceElems; ++e) vx[e] = 0.0f;
      }
#pragma unroll
      for (int g = 0; g < kHpw; ++g) {
        const float pg = __shfl_sync(kFull, s[st], g * kHeadThreads, kTpk);
#pragma unroll
        for (int e = 0; e < kSliceElems; ++e) acc[g][e] = fmaf(pg, vx[e], acc[g][e]);
      }
    }
  }

  // Combines the key groups of the warp (same head_dim slice, different keys).
  __device__ void finish() {
#pragma unroll
    for (int off = kTpk; off < 32; off *= 2) {
      l += __shfl_xor_sync(kFull, l, off);
#pragma unroll
      for (int g = 0; g < kHpw; ++g)
#pragma unroll
        for (int e = 0; e < kSliceElems; ++e) acc[g][e] += __shfl_xor_sync(kFull, acc[g][e], off);
    }
  }

  // (max, sum) of each of this warp's rows: stats[row] for rows g_base .. g_base + n_mine.
  // The first thread of each head slice of key group 0 writes its head's.
  __device__ void write_stats(float* warp_m, float* warp_l, int g_base, int n_mine) const {
    if (key_group != 0 || slice % kHeadThreads != 0 || head >= n_mine) return;
    warp_m[g_base + head] = m;
    warp_l[g_base + head] = l;
  }

  // slice[row][dim] = this warp's unscaled output (relative to its own row max m).
  __device__ void write_output(float* slice, int g_base, int n_mine) const {
    if (key_group != 0) return;
#pragma unroll
    for (int g = 0; g < kHpw; ++g) {
      if (g < n_mine) {
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
#pragma unroll
          for (int e = 0; e < kVecElems; ++e) slice[(g_base + g) * kCap + dim_of(j, e)] = acc[g][j * kVecElems + e];
        }
      }
    }
  }
};

}  // namespace attnkit::cuda_decode
