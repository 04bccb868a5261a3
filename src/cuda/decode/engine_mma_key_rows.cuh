// Internal: the tensor-core warp engine for GQA groups of up to 8 query heads (f16 and bf16 K/V).
// The same mma.sync m16n8k16 as engine_mma.cuh with the operands swapped: the MMA's 16 rows are 16
// keys of the tile and its 8 columns the warp's query heads, so S^T = K Q^T and O^T += V^T P^T.
// Where a group has at most 8 heads the 16-row engine spends at least half of every MMA and of
// O's registers on rows that are zeros; here a warp's 16 keys take 8 + 8 MMAs instead of 16 + 16,
// q's B fragments 2 registers per k-step instead of 4 and O 32 registers at head_dim 128 instead of
// 64 (half the rescale multiplies). P^T leaves the S^T accumulators as the B fragment of P V after
// one movmatrix transpose per 8 keys. f32 accumulation; q (unscaled) and P rounded to the K/V dtype
// for the tensor cores, as in the 16-row engine.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/engine_mma.cuh"

namespace attnkit::cuda_decode {

// Transposes an 8x8 matrix of 16-bit elements held as one mma fragment (lane holds row lane / 4,
// columns 2 * (lane % 4) and + 1) into the same fragment of its transpose.
__device__ __forceinline__ std::uint32_t movmatrix_trans(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <class T, int kCap>
struct KeyRowsMmaEngine {
  static constexpr int kKSteps = kCap / 16;  // Q K^T k-steps over head_dim
  static constexpr int kMTiles = kCap / 16;  // P V m-tiles of 16 head_dim columns
  static constexpr unsigned kFull = 0xffffffffu;
  static constexpr int kRegisters = register_budget(kKeyRowsHeads, kCap, 2);  // the kernel's __maxnreg__

  std::uint32_t qb[kKSteps][2];  // Q^T's B fragments: head lane / 4, head_dim ks * 16 + 2 * (lane % 4) (+ 1, + 8, + 9)
  float o[kMTiles][4];           // O^T: head_dim mt * 16 + lane / 4 (+ 8) x heads 2 * (lane % 4) (+ 1)
  float m[2], l[2];              // heads 2 * (lane % 4) and + 1 (l: this lane's keys until finish())
  int tile = 0;                  // rows of a ring slot (decode_geometry.hpp's tile layout)
  float score_scale;
  int lane;

  __device__ void set_tile(int tile_rows) { tile = tile_rows; }
  __device__ int at(int r, int d) const { return tile_offset(r, d, tile, kCap, 2); }

  __device__ void init(const float* staging, int g_base, int n_mine, float q_scale, int lane_id) {
    lane = lane_id;
    score_scale = q_scale;
    const int head = lane / 4, c = 2 * (lane % 4);
    auto qv = [&](int d) { return head < n_mine ? staging[(g_base + head) * kCap + d] : 0.0f; };
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int d = ks * 16 + c;
      qb[ks][0] = pack2<T>(qv(d), qv(d + 1));
      qb[ks][1] = pack2<T>(qv(d + 8), qv(d + 9));
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Extend: each of this lane's two heads (columns) sees only keys [lo, hi) (absolute positions).
  int row_lo[2], row_hi[2];
  __device__ void set_row_keys(const int2* row_keys, int g_base, int n_mine) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 2 * (lane % 4) + j;
      const int2 k = row < n_mine ? row_keys[g_base + row] : make_int2(0, 0);
      row_lo[j] = k.x;
      row_hi[j] = k.y;
    }
  }

  __device__ void process(const T* ks, const T* vs, int n_valid, int key_warp, float softcap) {
    process_impl<false>(ks, vs, n_valid, key_warp, softcap, 0);
  }
  __device__ void process_rows(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    process_impl<true>(ks, vs, n_valid, key_warp, softcap, tile_key0);
  }

  template <bool kRowKeys>
  __device__ void process_impl(const T* ks, const T* vs, int n_valid, int key_warp, float softcap, int tile_key0) {
    const int key0 = key_warp * kMmaKeysPerWarp;
    // S^T = K Q^T, the k-steps alternating between two accumulators (two chains of kKSteps / 2
    // MMAs instead of one of kKSteps). One ldmatrix.x4 gives the A fragment of 16 keys x 16 columns.
    float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int k_row = key0 + ((lane / 8) & 1) * 8 + (lane % 8);
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      std::uint32_t a[4];
      ldmatrix_x4(a, ks + at(k_row, k * 16 + (lane / 16) * 8));
      mma_16816<T>(k % 2 == 0 ? sa : sb, a, qb[k][0], qb[k][1]);
    }
    // s[e]: key key0 + lane / 4 + 8 * (e / 2), head 2 * (lane % 4) + e % 2.
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = (sa[e] + sb[e]) * score_scale;
      if (softcap > 0.0f) x = softcap * 1.44269504088896340736f * tanhf(x / softcap);
      const int key = key0 + lane / 4 + 8 * (e >> 1);
      bool visible = key < n_valid;
      if constexpr (kRowKeys) {
        const int pos = tile_key0 + key;
        visible = visible && pos >= row_lo[e & 1] && pos < row_hi[e & 1];
      }
      s[e] = visible ? x : -INFINITY;
    }
    // Each head's max over the warp's 16 keys: two in the lane, then across the 8 lanes of its column.
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float mx = fmaxf(s[j], s[2 + j]);
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 16));
      const float m_new = fmaxf(m[j], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[j] - m_use);
      m[j] = m_new;
      s[j] = exp2f(s[j] - m_use);
      s[2 + j] = exp2f(s[2 + j] - m_use);
      l[j] = l[j] * alpha + (s[j] + s[2 + j]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        o[mt][j] *= alpha;
        o[mt][2 + j] *= alpha;
      }
    }
    // P^T as the B fragment of O^T += V^T P^T: keys 0-7 and 8-15 of the warp, each an 8x8
    // (keys x heads) fragment transposed into the (heads x keys) one the B operand wants.
    const std::uint32_t pb0 = movmatrix_trans(pack2<T>(s[0], s[1]));
    const std::uint32_t pb1 = movmatrix_trans(pack2<T>(s[2], s[3]));
    // V rows past n_valid may hold anything (a TMA tile reads past the sequence): their A fragment
    // halves (keys kq, kq + 1 in a[0], a[1]; kq + 8, kq + 9 in a[2], a[3]) are zeroed, so 0 * inf
    // never makes a NaN.
    const bool partial = n_valid < key0 + kMmaKeysPerWarp;
    const int kq = key0 + 2 * (lane % 4);
    const std::uint32_t keep_lo = (kq < n_valid ? 0x0000ffffu : 0u) | (kq + 1 < n_valid ? 0xffff0000u : 0u);
    const std::uint32_t keep_hi = (kq + 8 < n_valid ? 0x0000ffffu : 0u) | (kq + 9 < n_valid ? 0xffff0000u : 0u);
    const int v_row = key0 + (lane / 16) * 8 + (lane % 8);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      std::uint32_t a[4];
      ldmatrix_x4_trans(a, vs + at(v_row, mt * 16 + ((lane / 8) & 1) * 8));
      if (partial) {
        a[0] &= keep_lo;
        a[1] &= keep_lo;
        a[2] &= keep_hi;
        a[3] &= keep_hi;
      }
      mma_16816<T>(o[mt], a, pb0, pb1);
    }
  }

  // Each head's sum over the warp's keys (the 8 lanes of its column).
  __device__ void finish() {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      l[j] += __shfl_xor_sync(kFull, l[j], 4);
      l[j] += __shfl_xor_sync(kFull, l[j], 8);
      l[j] += __shfl_xor_sync(kFull, l[j], 16);
    }
  }

  __device__ void write_stats(float* warp_m, float* warp_l, int g_base, int n_mine) const {
    if (lane >= 4) return;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 2 * lane + j;
      if (row < n_mine) {
        warp_m[g_base + row] = m[j];
        warp_l[g_base + row] = l[j];
      }
    }
  }

  // slice[row][dim] = this warp's unscaled output (relative to its own row max m).
  __device__ void write_output(float* slice, int g_base, int n_mine) const {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = 2 * (lane % 4) + j;
      if (row >= n_mine) continue;
      float* dst = slice + (g_base + row) * kCap + lane / 4;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        dst[mt * 16] = o[mt][j];
        dst[mt * 16 + 8] = o[mt][2 + j];
      }
    }
  }
};

}  // namespace attnkit::cuda_decode
