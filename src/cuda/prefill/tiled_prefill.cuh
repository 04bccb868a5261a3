// Tiled prefill attention (FlashAttention-2 class), tensor cores via mma.sync m16n8k16.
//
// Inputs:  q [batch, heads, q_len, D], k/v [batch, kv_heads, kv_len, D] (f16 or bf16, any strides
//          with D contiguous and 16-byte aligned rows), or ragged [1, heads, total, D] + cu_seqlens.
// Output:  out in the input dtype or f32, optional f32 LSE; with key splits, normalised f32
//          partial states in the workspace instead (merged by split_merge.cuh).
// Parallelism: one block per (query tile of 16 * row_tiles * warps rows, head, batch * split). Each
//          warp owns 16 * row_tiles query rows (every K/V fragment it loads feeds all its m16
//          tiles): S = Q K^T and O += P V run on tensor cores with the scores held in registers;
//          P goes from the S accumulators straight into the A operand of the second product. K and V tiles stream through `stages` shared-memory buffers with cp.async: the
//          next K tile loads while this tile's scores are computed, the next V tile while P V runs.
//          GQA: head h reads KV head h / group_size.
// Masks:   causal bottom-right aligned (row r at position r + kv_len - q_len), sliding window.
//          Tiles no row can see are never loaded; only boundary tiles pay for the mask test.
//          Masked keys get probability exactly 0; a row with no visible key writes 0 and LSE -inf.
// Bound:   tensor-core issue and shared-memory bandwidth (ldmatrix of K/V fragments per warp) on
//          long sequences; global memory only for very short ones. The per-score epilogue is one
//          FFMA + one MUFU.EX2 (scale folded into the exponent); mask code runs on boundary tiles
//          only, soft-cap code only in the soft-cap instantiation.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/attention_sinks.hpp"
#include "common/window_begin.hpp"
#include "cuda/prefill/mma_primitives.cuh"
#include "cuda/prefill/prefill_config.hpp"
#include "cuda/prefill/prefill_params.cuh"

namespace attnkit::cuda_prefill {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Copies `rows` rows of D elements (row r at src + r * stride) into shared rows of `Pitch`
// elements; rows at or beyond `valid` are zero-filled so they contribute nothing.
template <int D, int Pitch, int Threads, class T>
__device__ inline void load_tile(T* dst, const T* src, std::int64_t stride, int rows, int valid, int tid) {
  constexpr int kChunks = D / 8;
  for (int i = tid; i < rows * kChunks; i += Threads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    const T* g = ok ? src + r * stride + c * 8 : src;
    cp_async_16(shared_address(dst + r * Pitch + c * 8), g, ok ? 16 : 0);
  }
}

// Rows this thread's scores may see, as an inclusive key range [lo, hi] (empty when lo > hi).
struct RowKeys {
  int lo, hi;
};

__device__ inline RowKeys row_keys(const PrefillParams& p, int kv_len, std::int64_t pos) {
  RowKeys r;
  const std::int64_t hi = p.causal ? min_i64(kv_len - 1, pos) : kv_len - 1;
  const std::int64_t lo = attnkit::detail::window_begin(pos, p.window);
  r.hi = static_cast<int>(max_i64(hi, -1));
  r.lo = static_cast<int>(min_i64(lo, static_cast<std::int64_t>(kv_len)));
  return r;
}

// One block: Warps warps x RowTiles m16 tiles of query rows. Softcap is a template parameter so
// the common path carries no tanh; the mask costs one uniform branch per key tile.
template <int D, int Bc, int Warps, int RowTiles, int Stages, bool QInRegs, bool Softcap, class T>
__global__ void __launch_bounds__(Warps * 32, 1) tiled_prefill_kernel(const PrefillParams p) {
  attnkit::detail::prefetch_sinks(p.sinks, p.num_heads);
  using H = HalfType<T>;
  constexpr int WarpRows = 16 * RowTiles;
  constexpr int Br = Warps * WarpRows;
  constexpr int Pitch = D + kSharedRowPad;
  constexpr int Threads = Warps * 32;
  constexpr int DTiles = D / 8;   // n-tiles of the output
  constexpr int KTiles = Bc / 8;  // n-tiles of the scores
  static_assert(D % 16 == 0 && Bc % 16 == 0, "tile sizes must be multiples of 16");
  static_assert(Stages == 2, "the K/V pipeline below is written for two stages");

  extern __shared__ uint4 shared_raw[];
  T* s_q = reinterpret_cast<T*>(shared_raw);
  T* s_k = s_q + Br * Pitch;
  T* s_v = s_k + Stages * Bc * Pitch;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;  // mma fragment row group and column pair
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y;
  const int b = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const SequenceExtent e = sequence_extent(p, b);
  const int m0 = q_tile * Br;
  if (m0 >= e.q_len) return;
  const int kvh = h / p.group_size;
  const int rows_here = min(Br, e.q_len - m0);
  const std::int64_t offset = static_cast<std::int64_t>(e.kv_len) - e.q_len;  // bottom-right causal

  // Keys any row of this block can see, as a tile range (then this split's share of it).
  const std::int64_t first_pos = m0 + offset, last_pos = m0 + rows_here - 1 + offset;
  const std::int64_t key_lo = attnkit::detail::window_begin(first_pos, p.window);
  const std::int64_t key_hi = p.causal ? min_i64(e.kv_len, last_pos + 1) : e.kv_len;
  int tile_lo = 0, tile_hi = 0;
  if (key_hi > key_lo) {
    tile_lo = static_cast<int>(key_lo / Bc);
    tile_hi = static_cast<int>((key_hi + Bc - 1) / Bc);
  }
  if (p.splits > 1) {
    const int s0 = split * p.tiles_per_split;
    tile_lo = max(tile_lo, s0);
    tile_hi = min(tile_hi, s0 + p.tiles_per_split);
  }

  const T* q_ptr = static_cast<const T*>(p.q) + e.q_base_batch * p.q_batch_stride + h * p.q_head_stride +
                   (e.q_start + m0) * p.q_row_stride;
  const T* k_ptr = static_cast<const T*>(p.k) + e.q_base_batch * p.k_batch_stride + kvh * p.k_head_stride +
                   e.k_start * p.k_row_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + e.q_base_batch * p.v_batch_stride + kvh * p.v_head_stride +
                   e.k_start * p.v_row_stride;

  float o[RowTiles][DTiles][4];
#pragma unroll
  for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
    for (int i = 0; i < DTiles; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  }
  // Running max in score units (pre-scale), running sum of this thread's columns; [m-tile][half].
  float m_run[RowTiles][2], l_run[RowTiles][2];
#pragma unroll
  for (int mt = 0; mt < RowTiles; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
  std::uint32_t qf[QInRegs ? RowTiles : 1][QInRegs ? D / 16 : 1][4];

  // exp2 argument = s * sl - m * sl (one FFMA); soft-capped scores are already in log2 units.
  const float sl = Softcap ? 1.0f : p.scale * kLog2e;
  const float cap_in = Softcap ? p.scale / p.softcap : 0.0f, cap_out = Softcap ? p.softcap * kLog2e : 0.0f;
  const int row_in_block0 = warp * WarpRows + g;  // this thread's rows: + mt * 16 + {0, 8}
  const std::int64_t pos0 = m0 + row_in_block0 + offset;

  if (tile_lo < tile_hi) {
    load_tile<D, Pitch, Threads>(s_q, q_ptr, p.q_row_stride, Br, rows_here, tid);
    load_tile<D, Pitch, Threads>(s_k, k_ptr + static_cast<std::int64_t>(tile_lo) * Bc * p.k_row_stride,
                                 p.k_row_stride, Bc, e.kv_len - tile_lo * Bc, tid);
    cp_async_commit();
    load_tile<D, Pitch, Threads>(s_v, v_ptr + static_cast<std::int64_t>(tile_lo) * Bc * p.v_row_stride,
                                 p.v_row_stride, Bc, e.kv_len - tile_lo * Bc, tid);
    cp_async_commit();

    const std::uint32_t q_addr = shared_address(s_q + (warp * WarpRows + lane % 16) * Pitch + (lane / 16) * 8);
    const std::uint32_t k_addr0 = shared_address(s_k + (lane % 8 + (lane / 16) * 8) * Pitch + ((lane / 8) % 2) * 8);
    const std::uint32_t v_addr0 = shared_address(s_v + (lane % 8 + ((lane / 8) % 2) * 8) * Pitch + (lane / 16) * 8);
    for (int t = tile_lo; t < tile_hi; ++t) {
      const int it = t - tile_lo;
      const int stage = it % Stages, next_stage = (it + 1) % Stages;
      const int key0 = t * Bc;
      if (t + 1 < tile_hi) {
        load_tile<D, Pitch, Threads>(s_k + next_stage * Bc * Pitch,
                                     k_ptr + static_cast<std::int64_t>(key0 + Bc) * p.k_row_stride, p.k_row_stride,
                                     Bc, e.kv_len - key0 - Bc, tid);
      }
      cp_async_commit();
      cp_async_wait<2>();  // Q and K[t] have landed
      __syncthreads();

      if constexpr (QInRegs) {
        if (it == 0) {
#pragma unroll
          for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[mt][kk], q_addr + (mt * 16 * Pitch + kk * 16) * 2);
          }
        }
      }

      // S = Q K^T for this warp's rows and Bc keys; each K fragment feeds all RowTiles m-tiles.
      float s[RowTiles][KTiles][4];
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
        for (int i = 0; i < KTiles; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
      }
      const std::uint32_t k_addr = k_addr0 + stage * Bc * Pitch * 2;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t a[RowTiles][4];
#pragma unroll
        for (int mt = 0; mt < RowTiles; ++mt) {
          if constexpr (QInRegs) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a[mt][r] = qf[QInRegs ? mt : 0][QInRegs ? kk : 0][r];
          } else {
            ldmatrix_x4(a[mt], q_addr + (mt * 16 * Pitch + kk * 16) * 2);
          }
        }
#pragma unroll
        for (int nn = 0; nn < Bc / 16; ++nn) {
          std::uint32_t bf[4];
          ldmatrix_x4(bf, k_addr + (nn * 16 * Pitch + kk * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < RowTiles; ++mt) {
            H::mma(s[mt][2 * nn], a[mt], bf[0], bf[1]);
            H::mma(s[mt][2 * nn + 1], a[mt], bf[2], bf[3]);
          }
        }
      }

      if constexpr (Softcap) {  // into log2 units: c * tanh(scale * s / c) * log2(e)
#pragma unroll
        for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < KTiles; ++i) {
#pragma unroll
            for (int r = 0; r < 4; ++r) s[mt][i][r] = cap_out * tanhf(s[mt][i][r] * cap_in);
          }
        }
      }
      // Mask only tiles some row cannot fully see (one uniform branch per tile).
      const bool needs_mask = key0 + Bc > e.kv_len || (p.causal && key0 + Bc - 1 > first_pos) ||
                              key0 < attnkit::detail::window_begin(last_pos, p.window);
      if (needs_mask) {
#pragma unroll
        for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const RowKeys rk = row_keys(p, e.kv_len, pos0 + mt * 16 + hr * 8);
            const int lo = rk.lo - key0 - 2 * c, hi = rk.hi - key0 - 2 * c;  // relative to this lane's column
#pragma unroll
            for (int i = 0; i < KTiles; ++i) {
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const int col = i * 8 + j;
                if (col < lo || col > hi) s[mt][i][2 * hr + j] = -INFINITY;
              }
            }
          }
        }
      }

      // Online softmax per m-tile: rows g (regs 0,1) and g + 8 (regs 2,3); a row spans a quad.
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt) {
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float mx = m_run[mt][hr];
#pragma unroll
          for (int i = 0; i < KTiles; ++i) mx = fmaxf(mx, fmaxf(s[mt][i][2 * hr], s[mt][i][2 * hr + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_scaled = (mx == -INFINITY ? 0.0f : mx) * sl;  // all masked so far: keep exp2 finite
          alpha[hr] = fast_exp2(m_run[mt][hr] * sl - m_scaled);        // -inf (first tile) gives 0
          m_run[mt][hr] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < KTiles; ++i) {
            s[mt][i][2 * hr] = fast_exp2(fmaf(s[mt][i][2 * hr], sl, -m_scaled));
            s[mt][i][2 * hr + 1] = fast_exp2(fmaf(s[mt][i][2 * hr + 1], sl, -m_scaled));
            sum += s[mt][i][2 * hr] + s[mt][i][2 * hr + 1];
          }
          l_run[mt][hr] = l_run[mt][hr] * alpha[hr] + sum;
        }
#pragma unroll
        for (int i = 0; i < DTiles; ++i) {
          o[mt][i][0] *= alpha[0];
          o[mt][i][1] *= alpha[0];
          o[mt][i][2] *= alpha[1];
          o[mt][i][3] *= alpha[1];
        }
      }
      // P in the A-operand layout of m16n8k16: key block kk = score n-tiles 2kk and 2kk + 1.
      std::uint32_t pf[RowTiles][Bc / 16][4];
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
        for (int kk = 0; kk < Bc / 16; ++kk) {
          pf[mt][kk][0] = H::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pf[mt][kk][1] = H::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pf[mt][kk][2] = H::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pf[mt][kk][3] = H::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
      }

      if (t + 1 < tile_hi) {
        load_tile<D, Pitch, Threads>(s_v + next_stage * Bc * Pitch,
                                     v_ptr + static_cast<std::int64_t>(key0 + Bc) * p.v_row_stride, p.v_row_stride,
                                     Bc, e.kv_len - key0 - Bc, tid);
      }
      cp_async_commit();
      cp_async_wait<2>();  // V[t] has landed
      __syncthreads();

      // O += P V; each V fragment feeds all RowTiles m-tiles.
      const std::uint32_t v_addr = v_addr0 + stage * Bc * Pitch * 2;
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < D / 16; ++nn) {
          std::uint32_t bf[4];
          ldmatrix_x4_trans(bf, v_addr + (kk * 16 * Pitch + nn * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < RowTiles; ++mt) {
            H::mma(o[mt][2 * nn], pf[mt][kk], bf[0], bf[1]);
            H::mma(o[mt][2 * nn + 1], pf[mt][kk], bf[2], bf[3]);
          }
        }
      }
    }
    cp_async_wait<0>();
  }

  // Epilogue: finish the row sums across the quad, normalise, write.
#pragma unroll
  for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l_run[mt][hr] += __shfl_xor_sync(0xffffffffu, l_run[mt][hr], 1);
      l_run[mt][hr] += __shfl_xor_sync(0xffffffffu, l_run[mt][hr], 2);
    }
  }
#pragma unroll
  for (int mt = 0; mt < RowTiles; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = row_in_block0 + mt * 16 + hr * 8;
      if (r >= rows_here) continue;
      const float l = l_run[mt][hr];
      const bool any = l > 0.0f;
      float inv = any ? 1.0f / l : 0.0f;
      float lse = any ? (m_run[mt][hr] * sl + log2f(l)) * kLn2 : -INFINITY;
      if (p.splits == 1 && p.sinks != nullptr) {
        const attnkit::detail::SinkFold f = attnkit::detail::fold_sink(lse, p.sinks[h]);
        inv *= f.weight;
        lse = f.lse;
      }
      if (p.splits > 1) {
        const std::int64_t row = (static_cast<std::int64_t>(split) * p.num_heads + h) * p.workspace_rows +
                                 e.workspace_row0 + m0 + r;
        float* dst = p.partial_out + row * D;
#pragma unroll
        for (int i = 0; i < DTiles; ++i) {
          *reinterpret_cast<float2*>(dst + i * 8 + 2 * c) =
              make_float2(o[mt][i][2 * hr] * inv, o[mt][i][2 * hr + 1] * inv);
        }
        if (c == 0) p.partial_lse[row] = lse;
        continue;
      }
      const std::int64_t out_off = e.q_base_batch * p.o_batch_stride + h * p.o_head_stride +
                                   (e.q_start + m0 + r) * p.o_row_stride;
      if (p.out_kind == OutKind::kF32) {
        float* dst = static_cast<float*>(p.out) + out_off;
#pragma unroll
        for (int i = 0; i < DTiles; ++i) {
          *reinterpret_cast<float2*>(dst + i * 8 + 2 * c) =
              make_float2(o[mt][i][2 * hr] * inv, o[mt][i][2 * hr + 1] * inv);
        }
      } else {
        T* dst = static_cast<T*>(p.out) + out_off;
#pragma unroll
        for (int i = 0; i < DTiles; ++i) {
          *reinterpret_cast<std::uint32_t*>(dst + i * 8 + 2 * c) =
              H::pack(o[mt][i][2 * hr] * inv, o[mt][i][2 * hr + 1] * inv);
        }
      }
      if (p.lse != nullptr && c == 0) {
        p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride +
              (e.q_start + m0 + r) * p.lse_row_stride] = lse;
      }
    }
  }
}

}  // namespace attnkit::cuda_prefill
