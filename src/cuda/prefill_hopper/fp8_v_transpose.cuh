// V^T staging for e4m3 prefill (hopper_prefill.cuh reads it).
//
// Why: wgmma takes 8-bit B operands K-major only, and in O += P V the K dimension is the keys, so
// the kernel needs V as [head_dim][keys]. V arrives as [keys][head_dim]; this kernel writes it
// transposed into the caller's workspace, once per call, before the attention kernel.
// Layout: e4m3 [batch][kv_heads][head_dim][row_keys] (row_keys: the plan's kv_len rounded up to
//   whole 128-key tiles; a ragged batch puts sequence b in slot b), keys past the sequence zero
//   (the attention kernel masks them to P = 0, and 0 x NaN would not be 0). Inside every 32-key
//   block the keys are permuted by staged_key, matching how scores_to_a packs P into wgmma's
//   8-bit A fragments without shuffles.
// Parallelism: one block per (128-key tile, KV head, sequence): 16-byte loads of the tile's rows
//   into shared memory, then 16-byte stores of 16 staged keys per head_dim row.
// Bound: memory (reads V once, writes it once), small beside the attention's matrix work.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace attnkit::cuda_prefill_hopper {

// Key of a 32-key block that V^T's column j of that block holds: the P value that lane t of a quad
// packs into its A slot 4t + b of a 16-key half is the accumulator's key 8(b / 2) + 2t + b % 2.
__host__ __device__ constexpr int staged_key(int j) {
  const int b = j & 3, t = (j >> 2) & 3;
  return (j & 16) + 8 * (b >> 1) + 2 * t + (b & 1);
}

struct VtParams {
  const std::uint8_t* v;  // [batch, kv_heads, kv_len, D] (ragged: [1, kv_heads, total, D])
  std::int64_t v_batch_stride, v_head_stride, v_row_stride;  // bytes (= elements)
  const int* cu_seqlens_k;  // ragged offsets, or nullptr
  std::uint8_t* vt;         // [batch][kv_heads][D][row_keys]
  int batch, kv_heads, head_dim, kv_len, row_keys;
};

inline constexpr int kVtTileKeys = 128;
inline constexpr int kVtThreads = 256;

template <int D>
__global__ void __launch_bounds__(kVtThreads) fp8_v_transpose_kernel(const VtParams p) {
  constexpr int kRowVecs = D / 16;  // 16-byte vectors of one V row
  constexpr int kPitch = D + 16;    // shared row pitch (bytes): 16-byte aligned, spreads the banks
  __shared__ __align__(16) std::uint8_t tile[kVtTileKeys * kPitch];
  const int key0 = blockIdx.x * kVtTileKeys, h = blockIdx.y, b = blockIdx.z;
  int len = p.kv_len;
  std::int64_t first_row = 0, batch = b;
  if (p.cu_seqlens_k != nullptr) {
    first_row = p.cu_seqlens_k[b];
    len = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    batch = 0;
  }
  len = min(max(len, 0), p.row_keys);  // a sequence longer than the plan never writes past its slot
  const std::uint8_t* src = p.v + batch * p.v_batch_stride + h * p.v_head_stride;
  for (int i = threadIdx.x; i < kVtTileKeys * kRowVecs; i += blockDim.x) {
    const int r = i / kRowVecs, vec = i % kRowVecs, key = key0 + r;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (key < len) x = *reinterpret_cast<const uint4*>(src + (first_row + key) * p.v_row_stride + vec * 16);
    *reinterpret_cast<uint4*>(tile + r * kPitch + vec * 16) = x;
  }
  __syncthreads();
  std::uint8_t* dst = p.vt + ((static_cast<std::int64_t>(b) * p.kv_heads + h) * D) * p.row_keys + key0;
  for (int i = threadIdx.x; i < D * (kVtTileKeys / 16); i += blockDim.x) {
    const int n = i / (kVtTileKeys / 16), j0 = (i % (kVtTileKeys / 16)) * 16;  // head_dim row, first staged key
    std::uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      std::uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + 4 * q + e;
        const int key = (j & ~31) + staged_key(j & 31);
        word |= static_cast<std::uint32_t>(tile[key * kPitch + n]) << (8 * e);
      }
      w[q] = word;
    }
    *reinterpret_cast<uint4*>(dst + static_cast<std::int64_t>(n) * p.row_keys + j0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace attnkit::cuda_prefill_hopper
