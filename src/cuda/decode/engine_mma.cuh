// Internal: the tensor-core warp engine of the split-KV decode kernel (f16 and bf16 K/V).
// A warp's 16 mma.sync m16n8k16 rows are up to 16 query heads of the GQA group (unused rows are
// zeros), its columns 16 keys of the shared-memory tile: S = Q K^T with K fragments from ldmatrix,
// online softmax on the accumulator fragments (rows lane/4 and lane/4 + 8), then O += P V with P
// re-packed from the S fragments into A fragments and V fragments from ldmatrix.trans. f32
// accumulation; q (unscaled) and P are rounded to the K/V dtype for the tensor cores (exact for a
// 16-bit q; an f32 or rotated q loses its low bits, within the 16-bit parity rule).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/decode/decode_geometry.hpp"

namespace attnkit::cuda_decode {

template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* shared_ptr) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(shared_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* shared_ptr) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(shared_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The online-softmax state of a 16-row engine (this one and engine_mma_fp8.cuh): each lane holds
// rows lane/4 and lane/4 + 8, their running max m (log2 units) and sum l, the score scale, and for
// extend the rows' key ranges.
struct MmaRowsSoftmax {
  static constexpr unsigned kFull = 0xffffffffu;
  float m[2], l[2];
  int lane;
  float score_scale;

  __device__ void reset(int lane_id, float q_scale) {
    lane = lane_id;
    score_scale = q_scale;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Extend: each of this lane's two rows sees only keys [lo, hi) (absolute positions).
  int row_lo[2], row_hi[2];
  __device__ void set_row_keys(const int2* row_keys, int g_base, int n_mine) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      const int2 k = row < n_mine ? row_keys[g_base + row] : make_int2(0, 0);
      row_lo[h] = k.x;
      row_hi[h] = k.y;
    }
  }

  // The raw scores S of keys key0.. of the tile (C fragments of two 8-key blocks) scaled, soft-capped
  // and masked: -inf past n_valid (which also drops whatever rows past the sequence hold) and, for
  // extend (kRowKeys), outside the row's key range; tile_key0 is the tile's first absolute key.
  template <bool kRowKeys>
  __device__ void scale_and_mask(float (&s)[2][4], int key0, int n_valid, float softcap, int tile_key0) const {
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nb][e] * score_scale;
        if (softcap > 0.0f) x = softcap * 1.44269504088896340736f * tanhf(x / softcap);
        const int key = key0 + nb * 8 + 2 * (lane % 4) + (e & 1);
        bool visible = key < n_valid;
        if constexpr (kRowKeys) {
          const int pos = tile_key0 + key;
          visible = visible && pos >= row_lo[e >> 1] && pos < row_hi[e >> 1];
        }
        s[nb][e] = visible ? x : -INFINITY;
      }
    }
  }

  // One 16-key tile: the scaled, masked scores s (C fragments of two 8-key blocks: rows lane/4 in
  // [.][0..1], lane/4 + 8 in [.][2..3]) become exp2(s - m_new) in place; O's fragments shrink by
  // exp2(m - m_new).
  template <int kNBlocks>
  __device__ void update(float (&s)[2][4], float (&o)[kNBlocks][4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[h] - m_use);
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[nb][2 * h + e] = exp2f(s[nb][2 * h + e] - m_use);
          sum += s[nb][2 * h + e];
        }
      }
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) {
        o[nb][2 * h] *= alpha;
        o[nb][2 * h + 1] *= alpha;
      }
    }
  }

  // Row sums over the quad (the four lanes holding one row's keys).
  __device__ void finish() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(kFull, l[h], 1);
      l[h] += __shfl_xor_sync(kFull, l[h], 2);
    }
  }

  __device__ void write_stats(float* warp_m, float* warp_l, int g_base, int n_mine) const {
    if (lane % 4 != 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      if (row < n_mine) {
        warp_m[g_base + row] = m[h];
        warp_l[g_base + row] = l[h];
      }
    }
  }
};

template <class T, int kCap>
struct MmaEngine : MmaRowsSoftmax {
  static constexpr int kKSteps = kCap / 16;  // QK^T k-steps over head_dim
  static constexpr int kNBlocks = kCap / 8;  // P.V n-blocks over head_dim
  static constexpr int kRegisters = register_budget(kMmaRows, kCap, 2);  // the kernel's __maxnreg__

  std::uint32_t qa[kKSteps][4];
  float o[kNBlocks][4];
  int tile = 0;  // rows of a ring slot (decode_geometry.hpp's tile layout)

  __device__ void set_tile(int tile_rows) { tile = tile_rows; }
  // Shared-memory offset of column d (a multiple of 8: one 16-byte chunk) of key row r.
  __device__ int at(int r, int d) const { return tile_offset(r, d, tile, kCap, 2); }

  // q enters the tensor cores unscaled (a 16-bit q stays exact); the scale is applied to S in f32.
  __device__ void init(const float* staging, int g_base, int n_mine, float q_scale, int lane_id) {
    reset(lane_id, q_scale);
    const int r = lane / 4, c = 2 * (lane % 4);
    auto qv = [&](int row, int d) { return row < n_mine ? staging[(g_base + row) * kCap + d] : 0.0f; };
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int d = ks * 16 + c;
      qa[ks][0] = pack2<T>(qv(r, d), qv(r, d + 1));
      qa[ks][1] = pack2<T>(qv(r + 8, d), qv(r + 8, d + 1));
      qa[ks][2] = pack2<T>(qv(r, d + 8), qv(r, d + 9));
      qa[ks][3] = pack2<T>(qv(r + 8, d + 8), qv(r + 8, d + 9));
    }
#pragma unroll
    for (int nb = 0; nb < kNBlocks; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  }

  // Decode: every row sees the tile's first n_valid keys.
  __device__ void process(const T* ks, const T* vs, int n_valid, int key_warp, float softcap) {
    process_impl<false>(ks, vs, n_valid, key_warp, softcap, 0);
  }
  // Extend: additionally, key k of the tile (absolute position tile_key0 + k) must be in the row's range.
  __device__ void process_rows(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    process_impl<true>(ks, vs, n_valid, key_warp, softcap, tile_key0);
  }

  template <bool kRowKeys>
  __device__ void process_impl(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    const int key0 = key_warp * kMmaKeysPerWarp;
    float s[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    // S = Q K^T: one ldmatrix.x4 gives the B fragments of two k-steps for 8 keys.
#pragma unroll
    for (int kk = 0; kk < kKSteps / 2; ++kk) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        std::uint32_t b[4];
        ldmatrix_x4(b, ks + at(key0 + nb * 8 + (lane % 8), kk * 32 + (lane / 8) * 8));
        mma_16816<T>(s[nb], qa[2 * kk], b[0], b[1]);
        mma_16816<T>(s[nb], qa[2 * kk + 1], b[2], b[3]);
      }
    }
    scale_and_mask<kRowKeys>(s, key0, n_valid, softcap, tile_key0);
    update(s, o);
    // O += P V: the S accumulators of the two key blocks are the A fragment of one k-step. V rows
    // past n_valid may hold anything (a TMA tile reads past the sequence): their B fragment halves
    // (keys kq, kq + 1 in b[0], b[2]; kq + 8, kq + 9 in b[1], b[3]) are zeroed, so 0 * inf never
    // makes a NaN.
    const std::uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]), pack2<T>(s[1][0], s[1][1]),
                                 pack2<T>(s[1][2], s[1][3])};
    const bool partial = n_valid < key0 + kMmaKeysPerWarp;
    const int kq = key0 + 2 * (lane % 4);
    const std::uint32_t keep_lo = (kq < n_valid ? 0x0000ffffu : 0u) | (kq + 1 < n_valid ? 0xffff0000u : 0u);
    const std::uint32_t keep_hi = (kq + 8 < n_valid ? 0x0000ffffu : 0u) | (kq + 9 < n_valid ? 0xffff0000u : 0u);
#pragma unroll
    for (int dn = 0; dn < kNBlocks; dn += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, vs + at(key0 + ((lane / 8) & 1) * 8 + (lane % 8), dn * 8 + (lane / 16) * 8));
      if (partial) {
        b[0] &= keep_lo;
        b[1] &= keep_hi;
        b[2] &= keep_lo;
        b[3] &= keep_hi;
      }
      mma_16816<T>(o[dn], pa, b[0], b[1]);
      mma_16816<T>(o[dn + 1], pa, b[2], b[3]);
    }
  }

  // slice[row][dim] = this warp's unscaled output (relative to its own row max m).
  __device__ void write_output(float* slice, int g_base, int n_mine) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      if (row >= n_mine) continue;
      float* dst = slice + (g_base + row) * kCap + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) {
        *reinterpret_cast<float2*>(dst + nb * 8) = make_float2(o[nb][2 * h], o[nb][2 * h + 1]);
      }
    }
  }
};

}  // namespace attnkit::cuda_decode
