// Internal: the tensor-core warp engine of the split-KV decode kernel for e4m3 (fp8) K/V.
// The cache streams at one byte per element; in registers each element becomes an f16 (exact: every
// e4m3 value is an f16 value) for mma.sync m16n8k16 with f32 accumulation, as in engine_mma.cuh:
// the MMA's 16 rows are up to 16 query heads, S = Q K^T, online softmax on the S fragments, then
// O += P V with P re-packed from them. q (unscaled) and P are rounded to f16.
//
// Fragments from byte tiles. ldmatrix moves 16-bit elements, so it is given the byte tile as
// 16-bit pairs:
// - K (B operand of S, one column per key): a plain ldmatrix hands lane (g = lane/4, t = lane%4)
//   key g's bytes 4t..4t+3 of a 16-column chunk. The MMA wants dims (2t, 2t+1) and (2t+8, 2t+9)
//   of its k-step; a dot product does not care in which order dims are summed, so the k-step's
//   dims are the chunk's dims taken in the order 0,1,4,5,8,9,12,13,2,3,6,7,...: the lane's bytes
//   (4t, 4t+1) are MMA dims (2t, 2t+1) and (4t+2, 4t+3) are (2t+8, 2t+9). q's A fragments take
//   the same order (init).
// - V (B operand of P V, one column per output dim): ldmatrix.trans hands lane (g, t) keys 2t and
//   2t+1 at the 16-bit column g, i.e. bytes V[2t][2g], V[2t][2g+1], V[2t+1][2g], V[2t+1][2g+1].
//   A byte permute makes (V[2t][2g], V[2t+1][2g]) and (V[2t][2g+1], V[2t+1][2g+1]): the B
//   fragments of two n-blocks, one of the chunk's even dims, one of its odd dims. O's columns are
//   then in that order and write_output puts them back (its lane holds dims 4t..4t+3 of each chunk).
// Bank use: the tile is the 16-bit engine's (128-byte rows, 128-byte swizzle), so the 8 row
// addresses of every ldmatrix matrix hit 8 different 16-byte bank groups.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/engine_mma.cuh"

namespace attnkit::cuda_decode {

// Two e4m3 bytes (low byte first) as an f16 pair (low half first).
__device__ __forceinline__ std::uint32_t e4m3x2_to_f16x2(std::uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
}

template <int kCap>
struct Fp8MmaEngine : MmaRowsSoftmax {
  static constexpr int kChunks = kCap / 16;      // 16-column chunks of head_dim = k-steps of S
  static constexpr int kNBlocks = kCap / 8;      // P.V n-blocks: an even and an odd one per chunk
  static constexpr int kRegisters = register_budget(kMmaRows, kCap, 1);

  std::uint32_t qa[kChunks][4];
  float o[kNBlocks][4];
  int tile = 0;

  __device__ void set_tile(int tile_rows) { tile = tile_rows; }
  // Shared-memory byte offset of column d (a multiple of 16: one chunk) of key row r.
  __device__ int at(int r, int d) const { return tile_offset(r, d, tile, kCap, 1); }

  __device__ void init(const float* staging, int g_base, int n_mine, float q_scale, int lane_id) {
    reset(lane_id, q_scale);
    const int r = lane / 4, c = 4 * (lane % 4);
    auto qv = [&](int row, int d) { return row < n_mine ? staging[(g_base + row) * kCap + d] : 0.0f; };
#pragma unroll
    for (int ks = 0; ks < kChunks; ++ks) {
      const int d = ks * 16 + c;  // the dims of this lane's K bytes (header)
      qa[ks][0] = pack2<__half>(qv(r, d), qv(r, d + 1));
      qa[ks][1] = pack2<__half>(qv(r + 8, d), qv(r + 8, d + 1));
      qa[ks][2] = pack2<__half>(qv(r, d + 2), qv(r, d + 3));
      qa[ks][3] = pack2<__half>(qv(r + 8, d + 2), qv(r + 8, d + 3));
    }
#pragma unroll
    for (int nb = 0; nb < kNBlocks; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  }

  // Decode: every row sees the tile's first n_valid keys.
  __device__ void process(const __nv_fp8_e4m3* k_tile, const __nv_fp8_e4m3* v_tile, int n_valid, int key_warp,
                          float softcap) {
    process_impl<false>(k_tile, v_tile, n_valid, key_warp, softcap, 0);
  }
  // Extend: additionally, key k of the tile (absolute position tile_key0 + k) must be in the row's range.
  __device__ void process_rows(const __nv_fp8_e4m3* k_tile, const __nv_fp8_e4m3* v_tile, int n_valid, int key_warp,
                               float softcap, int tile_key0) {
    process_impl<true>(k_tile, v_tile, n_valid, key_warp, softcap, tile_key0);
  }

  template <bool kRowKeys>
  __device__ void process_impl(const __nv_fp8_e4m3* k_tile, const __nv_fp8_e4m3* v_tile, int n_valid, int key_warp,
                               float softcap, int tile_key0) {
    const auto* ks = reinterpret_cast<const unsigned char*>(k_tile);
    const auto* vs = reinterpret_cast<const unsigned char*>(v_tile);
    const int key0 = key_warp * kMmaKeysPerWarp;
    float s[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    // S = Q K^T: one ldmatrix.x4 gives 8 keys' bytes of four chunks (four k-steps).
#pragma unroll
    for (int c4 = 0; c4 < kChunks; c4 += 4) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        std::uint32_t b[4];
        ldmatrix_x4(b, ks + at(key0 + nb * 8 + (lane % 8), (c4 + lane / 8) * 16));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (c4 + i < kChunks) {
            mma_16816<__half>(s[nb], qa[c4 + i], e4m3x2_to_f16x2(b[i]), e4m3x2_to_f16x2(b[i] >> 16));
          }
        }
      }
    }
    scale_and_mask<kRowKeys>(s, key0, n_valid, softcap, tile_key0);  // also drops NaN codes past the sequence
    update(s, o);
    // O += P V. V rows past n_valid may hold anything (a NaN code included): their halves of the B
    // fragments (keys kq, kq + 1 in b0, kq + 8, kq + 9 in b1) are zeroed after conversion.
    const std::uint32_t pa[4] = {pack2<__half>(s[0][0], s[0][1]), pack2<__half>(s[0][2], s[0][3]),
                                 pack2<__half>(s[1][0], s[1][1]), pack2<__half>(s[1][2], s[1][3])};
    const bool partial = n_valid < key0 + kMmaKeysPerWarp;
    const int kq = key0 + 2 * (lane % 4);
    const std::uint32_t keep_lo = (kq < n_valid ? 0x0000ffffu : 0u) | (kq + 1 < n_valid ? 0xffff0000u : 0u);
    const std::uint32_t keep_hi = (kq + 8 < n_valid ? 0x0000ffffu : 0u) | (kq + 9 < n_valid ? 0xffff0000u : 0u);
    // One ldmatrix.x4.trans: keys 0-7 and 8-15 of two chunks -> four n-blocks (even, odd dims of each).
#pragma unroll
    for (int c = 0; c < kChunks; c += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, vs + at(key0 + ((lane / 8) & 1) * 8 + (lane % 8), (c + lane / 16) * 16));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (c + half < kChunks) {
          const std::uint32_t lo = b[2 * half], hi = b[2 * half + 1];  // keys kq, kq+1 / kq+8, kq+9
          std::uint32_t even_lo = e4m3x2_to_f16x2(__byte_perm(lo, 0, 0x0020));
          std::uint32_t odd_lo = e4m3x2_to_f16x2(__byte_perm(lo, 0, 0x0031));
          std::uint32_t even_hi = e4m3x2_to_f16x2(__byte_perm(hi, 0, 0x0020));
          std::uint32_t odd_hi = e4m3x2_to_f16x2(__byte_perm(hi, 0, 0x0031));
          if (partial) {
            even_lo &= keep_lo, odd_lo &= keep_lo;
            even_hi &= keep_hi, odd_hi &= keep_hi;
          }
          mma_16816<__half>(o[2 * (c + half)], pa, even_lo, even_hi);
          mma_16816<__half>(o[2 * (c + half) + 1], pa, odd_lo, odd_hi);
        }
      }
    }
  }

  // slice[row][dim] = this warp's unscaled output (relative to its own row max m). Chunk c's even
  // n-block holds dims 16c + 4t and 16c + 4t + 2 in this lane's columns (2t, 2t + 1), the odd one
  // dims 16c + 4t + 1 and 16c + 4t + 3: four consecutive dims per chunk.
  __device__ void write_output(float* slice, int g_base, int n_mine) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      if (row >= n_mine) continue;
      float* dst = slice + (g_base + row) * kCap + 4 * (lane % 4);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float* even = o[2 * c];
        const float* odd = o[2 * c + 1];
        *reinterpret_cast<float4*>(dst + c * 16) = make_float4(even[2 * h], odd[2 * h], even[2 * h + 1], odd[2 * h + 1]);
      }
    }
  }
};

}  // namespace attnkit::cuda_decode
