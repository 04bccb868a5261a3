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
// Parallelism: one block per (128-key tile, KV head, sequence): every thread's 16-byte loads of the
//   tile's rows in flight at once, into shared memory whose 16-byte chunks are swizzled by key
//   group; then each thread reads 4 head_dim rows x 16 staged keys as 32-bit words (conflict-free:
//   the warp's 8 key groups fall in 8 different chunks), transposes them with byte permutes and
//   writes 4 x 16 bytes. (Byte reads from a padded tile ran 8-way bank conflicts: 44 us for
//   34 MB, docs/perf-notes.md, Hopper prefill round 17.)
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
  static_assert(D % 64 == 0 && D / 16 >= 8, "the chunk swizzle needs 8 chunks per row");
  constexpr int kRowVecs = D / 16;                               // 16-byte chunks of one V row
  constexpr int kLoads = kVtTileKeys * kRowVecs / kVtThreads;    // per thread
  constexpr int kItems = (D / 4) * (kVtTileKeys / 16);           // (4 rows x 16 keys) per thread
  __shared__ __align__(16) std::uint8_t tile[kVtTileKeys * D];
  // Chunk c of key row r sits at chunk c ^ (r / 16 % 8).
  auto chunk_at = [](int r, int c) { return r * D + ((c ^ ((r >> 4) & 7)) << 4); };
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
  uint4 x[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = threadIdx.x + k * kVtThreads, key = key0 + i / kRowVecs;
    x[k] = key < len ? *reinterpret_cast<const uint4*>(src + (first_row + key) * p.v_row_stride + (i % kRowVecs) * 16)
                     : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = threadIdx.x + k * kVtThreads;
    *reinterpret_cast<uint4*>(tile + chunk_at(i / kRowVecs, i % kRowVecs)) = x[k];
  }
  __syncthreads();
  std::uint8_t* dst = p.vt + ((static_cast<std::int64_t>(b) * p.kv_heads + h) * D) * p.row_keys + key0;
#pragma unroll
  for (int it = threadIdx.x; it < kItems; it += kVtThreads) {
    const int j0 = (it % 8) * 16, n0 = (it / 8) * 4;  // staged keys j0.., head_dim rows n0..n0 + 3
    std::uint32_t w[16];                               // w[j]: bytes n0..n0 + 3 of staged key j0 + j
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int jj = j0 + j, key = (jj & ~31) + staged_key(jj & 31);
      w[j] = *reinterpret_cast<const std::uint32_t*>(tile + chunk_at(key, n0 >> 4) + (n0 & 15));
    }
    std::uint32_t out[4][4];  // [row n0 + t][keys 4q .. 4q + 3]: a 4 x 4 byte transpose per q
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const std::uint32_t lo_ab = __byte_perm(w[4 * q], w[4 * q + 1], 0x5140);  // a0 b0 a1 b1
      const std::uint32_t hi_ab = __byte_perm(w[4 * q], w[4 * q + 1], 0x7362);  // a2 b2 a3 b3
      const std::uint32_t lo_cd = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x5140);
      const std::uint32_t hi_cd = __byte_perm(w[4 * q + 2], w[4 * q + 3], 0x7362);
      out[0][q] = __byte_perm(lo_ab, lo_cd, 0x5410);  // a0 b0 c0 d0
      out[1][q] = __byte_perm(lo_ab, lo_cd, 0x7632);
      out[2][q] = __byte_perm(hi_ab, hi_cd, 0x5410);
      out[3][q] = __byte_perm(hi_ab, hi_cd, 0x7632);
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      *reinterpret_cast<uint4*>(dst + static_cast<std::int64_t>(n0 + t) * p.row_keys + j0) =
          make_uint4(out[t][0], out[t][1], out[t][2], out[t][3]);
    }
  }
}

}  // namespace attnkit::cuda_prefill_hopper
