// Warp-specialized prefill attention for Hopper (sm_90a): TMA + mbarrier ring + wgmma.
//
// Inputs:  q [batch, heads, q_len, D], k/v [batch, kv_heads, kv_len, D] (f16 or bf16, any strides
//          with D contiguous, 16-byte aligned rows), or ragged [1, heads, total, D] + cu_seqlens;
//          the launcher describes each as a 4-D TMA tensor map (D, rows, heads, batch).
//          e4m3 (fp8) inputs with per-tensor scales: the same, except that V is read from a V^T
//          staging [batch][kv_heads][D][keys] (fp8_v_transpose.cuh), since 8-bit wgmma takes its B
//          operand K-major only; P is rounded to e4m3 for P V (the 5e-2 parity rule).
// Output:  out in the input dtype or f32 (e4m3: bf16, f16 or f32), written from registers
//          (bf16/f16 d256 rows as whole 16-byte blocks after a shuffle within each quad), optional
//          f32 LSE. With key splits (p.splits > 1, 16-bit inputs) each (tile, split) unit writes
//          its normalised f32 state and LSE to the workspace instead, merged afterwards
//          (cuda/prefill/split_merge.cuh).
// Layout:  shared tiles are split into 128-byte row chunks ([rows][64] 16-bit or [rows][128] e4m3
//          elements) with the 128-byte swizzle (what TMA writes and wgmma reads): Q [chunk][128
//          rows], K and V [chunk][Bc keys] per slot; e4m3 V^T [D rows][128 keys] per slot.
// Parallelism: persistent blocks of 3 or 4 warpgroups walk the work tiles (query tile of 128 or 192 rows,
//          head, sequence) in the plan's order (hopper_walk.hpp: groups of heads whose K/V share
//          L2; causal, more tiles than SMs: units of two tiles of equal work, then the tail's single
//          tiles longest first; key splits: a unit is one tile's split), in rounds of gridDim.x
//          units, odd rounds in reverse block order.
//          Warpgroup 0 is the producer: one thread loads Q, then K and V tiles into the ring
//          (k_full / v_full barriers carry the TMA byte counts; the consumers release K slots
//          after S and V slots after P V, through k_empty / v_empty). The 2 or 3 consumer
//          warpgroups (the config's) each own 64 query rows: S = Q K^T with both operands in
//          shared memory, online softmax in registers, O += P V with P straight from registers
//          (wgmma's register-A form). The consumers take turns to issue, in a round on named
//          barriers, so each one's softmax runs under the others' matrix work; inside a
//          warpgroup S of tile j+1 and P V of tile j are issued together (its softmax of tile j+1
//          follows both: see the key loop).
//          Paged instances (extend over a page pool, hopper_extend.cu): the producer is warp 0, a
//          lane per page box of each K / V tile (page_boxes.hpp); everything else is the same.
//          GQA: head h reads KV head h / group_size. Where a group's queries fit one tile (the
//          plan's packed_heads, 16-bit inputs), the tile holds the group's heads x q_len rows (one
//          Q box of q_len rows x group heads) and its work tile is the KV head's.
// Masks:   causal bottom-right aligned, sliding window: tiles no row of the block sees are never
//          loaded; only tiles some row of the warpgroup cannot fully see pay for the mask.
//          Masked keys get probability 0; rows with no visible key write 0 and LSE -inf.
// Bound:   tensor cores (wgmma) on long sequences, with the softmax's FFMA + MUFU.EX2 per score
//          the next limit; global memory only for very short ones.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/attention_sinks.hpp"
#include "common/window_begin.hpp"
#include "cuda/common/fast_divider.hpp"
#include "cuda/prefill/prefill_params.cuh"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/prefill_hopper/hopper_primitives.cuh"
#include "cuda/prefill_hopper/hopper_walk.hpp"
#include "cuda/prefill_hopper/page_boxes.hpp"

namespace attnkit::cuda_prefill_hopper {

using cuda_prefill::OutKind;
using cuda_prefill::PrefillParams;
using cuda_prefill::SequenceExtent;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Development probe hooks (dev/hopper/boundary_timeline.cu), compiled out unless
// ATTNKIT_HOPPER_STAMPS is defined: thread 0 of each warpgroup records clock64() at landmarks of its
// block's first kStampSteps walk steps, to see where a work tile's boundary spends its time.
#ifdef ATTNKIT_HOPPER_STAMPS
inline constexpr int kStampSteps = 32, kStampEvents = 8;
static __device__ long long* hopper_stamps = nullptr;
#define ATTNKIT_HOPPER_STAMP(step, event)                                                                     \
  do {                                                                                                       \
    if (hopper_stamps != nullptr && threadIdx.x % 128 == 0 && (step) < kStampSteps) {                         \
      hopper_stamps[((blockIdx.x * 4 + threadIdx.x / 128) * kStampSteps + (step)) * kStampEvents + (event)] = \
          clock64();                                                                                         \
    }                                                                                                        \
  } while (0)
#else
#define ATTNKIT_HOPPER_STAMP(step, event) \
  do {                                    \
  } while (0)
#endif

// The kernel's arguments: the common prefill arguments plus the TMA descriptors (which must live
// in kernel parameter space: the struct is passed as __grid_constant__).
struct HopperParams {
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  CUtensorMap o_map;  // the output, boxes of 64 rows x 128 bytes (valid when o_tma)
  PrefillParams p;
  HopperWalk walk;  // the persistent walk (hopper_walk.hpp)
  cuda_common::FastDivider heads;  // heads per sequence (KV heads when packed)
  // e4m3 inputs: the per-tensor scales (q x k folded into the score scale), and whether a 16-bit
  // output is bf16 (16-bit inputs write their own type).
  float qk_scale;
  float v_scale;
  int out_bf16;
  int out_vec16;  // 16-bit out whose rows all start 16-byte aligned: whole-block stores
  int o_tma;      // o_map holds the output: staged O tiles may leave by TMA store
  // GQA packing (the plan's packed_heads > 1): a query tile holds the group's heads x packed_rows
  // query rows (row r: head r / packed_rows of the group, query row r % packed_rows), and a work
  // tile's "head" is its KV head; 0: a tile holds one head's rows.
  int packed_rows;
  cuda_common::FastDivider packed_div;  // by packed_rows (1 when unpacked)
  std::uint32_t q_tile_bytes;           // bytes one Q tile's boxes bring
  // Extend over a paged cache (the kernel's Paged instances): k_map / v_map describe the pools as
  // (D, slot, KV head, page), and the producer warp loads each K / V tile as page boxes
  // (page_boxes.hpp).
  HopperPages pages;
};

// Whether a call's O tiles may be staged in shared memory and leave whole: 16-bit out of the input's
// type whose rows all start 16-byte aligned, one head per tile, no key splits. The kernel adds its
// config's condition (kStagedO), the launcher the head dims that have one (for the TMA store's map).
__host__ __device__ inline bool call_stages_o(const HopperParams& hp) {
  return hp.p.out_kind == OutKind::kInput && hp.out_vec16 != 0 && hp.p.splits == 1 && hp.packed_rows == 0;
}

// One work tile and the key tiles it needs (identical in the producer and the consumers).
struct WorkTile {
  int b, h, m0, split;
  SequenceExtent e;
  int tile_lo, tile_hi;
  bool active;
};

template <int Bc, int Br>
__device__ inline WorkTile work_tile(const HopperParams& hp, TileCoord t) {
  const PrefillParams& p = hp.p;
  WorkTile w;
  w.b = hp.heads.quotient(t.bh);
  w.h = t.bh - w.b * static_cast<int>(hp.heads.divisor);  // the KV head when packed
  w.m0 = (hp.walk.m_tiles - 1 - t.m_rev) * Br;
  w.split = t.split;
  w.e = cuda_prefill::sequence_extent(p, w.b);
  w.active = w.m0 < w.e.q_len;
  w.tile_lo = w.tile_hi = 0;
  if (!w.active) return w;
  const int rows_here = min(Br, w.e.q_len - w.m0);
  const std::int64_t offset = static_cast<std::int64_t>(w.e.kv_len) - w.e.q_len;
  const std::int64_t first_pos = w.m0 + offset, last_pos = w.m0 + rows_here - 1 + offset;
  const std::int64_t key_lo = attnkit::detail::window_begin(first_pos, p.window);
  const std::int64_t key_hi = p.causal ? cuda_prefill::min_i64(w.e.kv_len, last_pos + 1) : w.e.kv_len;
  if (key_hi > key_lo) {
    w.tile_lo = static_cast<int>(key_lo / Bc);
    w.tile_hi = static_cast<int>((key_hi + Bc - 1) / Bc);
  }
  if (p.splits > 1) {  // this split's share of the key tiles (possibly none: it writes an empty state)
    w.tile_lo = max(w.tile_lo, w.split * p.tiles_per_split);
    w.tile_hi = min(w.tile_hi, (w.split + 1) * p.tiles_per_split);
    if (w.tile_lo >= w.tile_hi) w.tile_lo = w.tile_hi = 0;
  }
  return w;
}

template <bool Bf16>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (Bf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

// Four f32 into four e4m3 bytes (a in the lowest byte), rounded to nearest even, saturating.
__device__ __forceinline__ std::uint32_t pack4_e4m3(float a, float b, float c, float d) {
  std::uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// One row of 16-bit output, spread over the four lanes of a quad as the accumulator leaves it
// (lane c holds columns 8i + 2c and 8i + 2c + 1 of every 8-column block i: piece(i), packed; made
// four blocks at a time, so that d256's O adds few live registers beside it).
// Rotating the pieces through the quad (three shuffles per four blocks) gives lane c all of block
// 4k + c: one 16-byte store instead of four 4-byte ones, a quarter of the store instructions and of
// the row's memory transactions (docs/perf-notes.md, "Hopper prefill round 8"). Every lane of the
// warp must call it (shuffles); `valid` gates the store. `lane` must be read after the key loop (the
// epilogue's asm volatile read), or the shuffle indices and selects derived from it are hoisted
// above the loop and held through it.
template <int D, class Piece>
__device__ __forceinline__ void store_row_blocks(std::uint16_t* dst, Piece piece, int lane, bool valid) {
  const int quad = lane & ~3, c = lane & 3;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    const std::uint32_t mine[4] = {piece(4 * k), piece(4 * k + 1), piece(4 * k + 2), piece(4 * k + 3)};
    std::uint32_t block[4] = {0, 0, 0, 0};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // Step s: lane x sends its piece of block (x - s) mod 4, and lane c receives the piece of
      // block c from lane (c + s) mod 4 (the block's columns 2 (c + s) mod 4 ..).
      const int send = (c - s) & 3, from = (c + s) & 3;
      const std::uint32_t v = send == 0 ? mine[0] : send == 1 ? mine[1] : send == 2 ? mine[2] : mine[3];
      const std::uint32_t got = s == 0 ? v : __shfl_sync(0xffffffffu, v, quad + from);
#pragma unroll
      for (int j = 0; j < 4; ++j) block[j] = from == j ? got : block[j];
    }
    if (valid) *reinterpret_cast<uint4*>(dst + 8 * (4 * k + c)) = make_uint4(block[0], block[1], block[2], block[3]);
  }
}

// O staged through shared memory (head_dim 128 and 256, 16-bit inputs and out): a warpgroup
// writes its 64 x D tile with stmatrix into the last K slot of the work tile (head_dim 128: its
// half; free once every warpgroup's last S is done; its release waits for the copy-out), or at
// head_dim 256, where a slot holds one warpgroup's tile, warpgroup 1 into the last V slot (free
// once every warpgroup's last P V is done). The tile leaves by TMA store where its boxes cannot
// reach another sequence's rows, else as whole rows of 16-byte stores. The register-to-global
// stores write 4-byte pieces of 8 rows per instruction; these write each row's bytes contiguously
// (docs/perf-notes.md, "Hopper prefill round 9" and "round 20").
// The tile is D / 64 boxes of 64 rows x 128 bytes, in the TMA's 128-byte swizzle: column block b
// of row r at b * 8 KiB + r * 128 bytes, its 16-byte chunk j at j ^ (r % 8), so neither the
// stmatrix rows nor the copy-out's quarter-warps hit one bank twice, and a box is what a TMA store
// of the out map reads (tests/cuda/hopper_staged_o_layout_test.cu checks all three on the host).
constexpr std::uint32_t kStagedBoxBytes = 64 * 128;
__host__ __device__ __forceinline__ constexpr std::uint32_t staged_o_offset(int row, int chunk) {
  return static_cast<std::uint32_t>((chunk / 8) * kStagedBoxBytes + row * 128 + ((chunk ^ row) & 7) * 16);
}
// Lane `lane` of warp `warp` holds, for row halves hr (rows warp * 16 + lane / 4 + 8 hr) and n8
// blocks i, the packed pair piece(hr, i) (wgmma's accumulator layout, which is stmatrix's).
template <int D, class Piece>
__device__ __forceinline__ void stage_o_tile(std::uint32_t tile, Piece piece, int warp, int lane) {
  const int m = lane / 8;                           // the matrix this lane addresses: (hr, i) = (m % 2, 2q + m / 2)
  const int row = warp * 16 + (m & 1) * 8 + (lane & 7);
#pragma unroll
  for (int q = 0; q < D / 16; ++q) {
    const std::uint32_t addr = tile + staged_o_offset(row, 2 * q + (m >> 1));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                 "r"(piece(0, 2 * q)), "r"(piece(1, 2 * q)), "r"(piece(0, 2 * q + 1)), "r"(piece(1, 2 * q + 1))
                 : "memory");
  }
}
// The copy-out: thread t of the warpgroup's 128 moves chunks t, t + 128, ... of the staged tile to
// rows [0, rows) of dst (row stride in elements; 16-byte aligned rows).
template <int D>
__device__ __forceinline__ void copy_out_o_tile(std::uint32_t tile, std::uint16_t* dst, std::int64_t row_stride, int rows,
                                                int wtid) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int k = 0; k < 64 * kChunks / 128; ++k) {
    const int idx = wtid + 128 * k, row = idx / kChunks, chunk = idx % kChunks;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(tile + staged_o_offset(row, chunk)));
    // One 16-byte store in asm: a uint4 assignment here compiled to four 4-byte stores (so did
    // make_uint4 of the loaded words), a quarter of the bytes per store instruction.
    if (row < rows) {
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst + row * row_stride + chunk * 8), "r"(v.x), "r"(v.y),
                   "r"(v.z), "r"(v.w)
                   : "memory");
    }
  }
}

// Keys of one wgmma k-step of O += P V (32 bytes of the operand's K dimension).
constexpr int keys_per_step(HopperInput in) { return in == HopperInput::kE4M3 ? 32 : 16; }
// e4m3 P is computed 2^8 times too large (folded into the exponent, undone by the row sum and in
// the LSE), so probabilities down to 2^-14 stay normal e4m3 numbers instead of flushing to zero
// below 2^-10; the largest, 256, is well under e4m3's 448.
constexpr float p_log2_offset(HopperInput in) { return in == HopperInput::kE4M3 ? 8.0f : 0.0f; }

// The consumer's per-row softmax state for its two rows (g and g + 8 of its warp's 16).
struct RowState {
  float m[2];  // running max, score units (-inf: nothing seen yet)
  float l[2];  // running sum of this thread's columns
};

// Masks S (this thread's entries) to the keys its two rows (query positions pos[0], pos[1]) may
// see. 32-bit arithmetic: the planner keeps lengths <= 2^30, and the window is clamped to what can
// matter.
template <int Bc>
__device__ __forceinline__ void mask_scores(float (&s)[Bc / 2], const PrefillParams& p, int kv_len, const int (&pos_of)[2],
                                            int key0, int c) {
  const int window = static_cast<int>(cuda_prefill::min_i64(p.window, std::int64_t{1} << 30));
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int pos = pos_of[hr];
    const int hi = p.causal ? min(kv_len - 1, pos) : kv_len - 1;
    const int lo = window > 0 ? max(0, pos - window + 1) : 0;
    // Relative to this lane's first column, clamped to the tile (the compares below stay small).
    const int rlo = max(-1, min(lo - key0 - 2 * c, Bc + 1));
    const int rhi = max(-2, min(hi - key0 - 2 * c, Bc + 1));
#pragma unroll
    for (int i = 0; i < Bc / 8; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = i * 8 + j;
        if (col < rlo || col > rhi) s[4 * i + 2 * hr + j] = -INFINITY;
      }
    }
  }
}

// Lazy rescaling (as in FlashAttention-4): the running max moves only when a tile's max passes it
// by more than a slack (log2 units); until then P = exp2(s - m) stays <= 2^slack, far inside f32 and
// 16-bit range, and O keeps its scale, so most key tiles skip O's rescale (D / 2 multiplies per
// thread). e4m3 P (at most 448, computed 2^8 too large: p_log2_offset) has no room: its max moves
// on any rise. On where it measured faster (docs/perf-notes.md, "Hopper prefill round 11"): d256
// +2-6%, e4m3 +1-11%; d64 lost 1-4% and bf16 d128 0-2% (the vote and branch cost more there).
template <int D, HopperInput In>
constexpr bool lazy_rescale() { return D == 256 || In == HopperInput::kE4M3; }
constexpr float rescale_slack(HopperInput in) { return in == HopperInput::kE4M3 ? 0.0f : 8.0f; }

// Online softmax of one S tile: running max, P = exp2((s - m) * sl + offset) in place, f32 row sums
// where `Sums` (else the tensor core sums the rows: hopper_config.hpp's tensor_row_sums); returns
// the factors the previous O must be scaled by (all 1: leave O alone). `Sums` is a template
// argument: as a run-time flag the predicated adds still took their issue slots (-3-5% at d64).
template <int Bc, HopperInput In, bool Lazy, bool Sums>
__device__ __forceinline__ void softmax_tile(float (&s)[Bc / 2], RowState& st, float sl, float (&alpha)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = st.m[hr];
#pragma unroll
    for (int i = 0; i < Bc / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * hr], s[4 * i + 2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_old = st.m[hr] * sl;                                 // -inf: no visible key yet
    const float m_new = (mx == -INFINITY ? 0.0f : mx) * sl;            // all masked so far: keep exp2 finite
    const bool move = !Lazy || st.m[hr] == -INFINITY || m_new > m_old + rescale_slack(In);
    alpha[hr] = move ? exp2_approx(m_old - m_new) : 1.0f;              // -inf (first tile) gives 0
    if (move) st.m[hr] = mx;
    const float bias = p_log2_offset(In) - (move ? m_new : m_old);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < Bc / 8; ++i) {
      s[4 * i + 2 * hr] = exp2_approx(fmaf(s[4 * i + 2 * hr], sl, bias));
      s[4 * i + 2 * hr + 1] = exp2_approx(fmaf(s[4 * i + 2 * hr + 1], sl, bias));
      if constexpr (Sums) sum += s[4 * i + 2 * hr] + s[4 * i + 2 * hr + 1];
    }
    if constexpr (Sums) st.l[hr] = st.l[hr] * alpha[hr] + sum;
  }
}

// P (f32 accumulator layout of m64nBc) into the register-A fragments of O += P V.
// 16-bit: m64nDk16, key block kk = accumulator n8 blocks 2kk and 2kk + 1, in place.
// e4m3: m64nDk32, whose A fragment wants keys 4t..4t+3 (and 16 + 4t..) of each 32-key block in
// lane t of a quad, while the accumulator holds keys 2t, 2t + 1 of each n8 block. Rather than
// shuffle, each lane packs what it holds: its A slot for key 4t + b of a 16-key half takes the
// accumulator's key 8(b / 2) + 2t + b % 2, and V^T is staged with its keys permuted the same way
// (fp8_v_transpose.cuh), so the products pair up exactly.
template <int Bc, HopperInput In>
__device__ __forceinline__ void scores_to_a(const float (&s)[Bc / 2], std::uint32_t (&pf)[Bc / keys_per_step(In)][4]) {
  if constexpr (In == HopperInput::kE4M3) {
#pragma unroll
    for (int kk = 0; kk < Bc / 32; ++kk) {
      const float* x = s + 16 * kk;  // n8 blocks 4kk .. 4kk + 3: [block][row half][2 keys]
      pf[kk][0] = pack4_e4m3(x[0], x[1], x[4], x[5]);      // row g, keys of blocks 0 and 1
      pf[kk][1] = pack4_e4m3(x[2], x[3], x[6], x[7]);      // row g + 8
      pf[kk][2] = pack4_e4m3(x[8], x[9], x[12], x[13]);    // row g, blocks 2 and 3
      pf[kk][3] = pack4_e4m3(x[10], x[11], x[14], x[15]);  // row g + 8
    }
  } else {
    constexpr bool kBf16 = In == HopperInput::kBF16;
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      pf[kk][0] = pack2<kBf16>(s[8 * kk + 0], s[8 * kk + 1]);
      pf[kk][1] = pack2<kBf16>(s[8 * kk + 2], s[8 * kk + 3]);
      pf[kk][2] = pack2<kBf16>(s[8 * kk + 4], s[8 * kk + 5]);
      pf[kk][3] = pack2<kBf16>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
}

template <int D, int Bc, int Stages, HopperInput In, int Consumers, bool TensorSums, bool Paged = false>
__global__ void __launch_bounds__(threads_per_block(Consumers), 1)
    hopper_prefill_kernel(const __grid_constant__ HopperParams hp) {
  attnkit::detail::prefetch_sinks(hp.p.sinks, hp.p.num_heads);
  constexpr bool kFp8 = In == HopperInput::kE4M3;
  constexpr int kBytes = input_bytes(In);
  constexpr int kChunkElems = 128 / kBytes;  // elements of one 128-byte swizzled row chunk
  constexpr int kKeysPerStep = keys_per_step(In);
  constexpr int Br = 64 * Consumers;
  constexpr int Chunks = D / kChunkElems;
  constexpr std::uint32_t kQBytes = Br * D * kBytes;
  constexpr std::uint32_t kTileBytes = Bc * D * kBytes;  // one K (or V, or V^T) tile
  // Row sums on the tensor core (hopper_config.hpp): a config that has them keeps a chunk of ones
  // after each V slot, the B operand's columns D .. D + 7. The instance that uses them (TensorSums)
  // gives O's accumulator those 8 columns too; the launcher takes it for calls that write neither
  // an LSE nor split states (the sums of bf16 / f16 P are exact for normalising O, which the same
  // P multiplies, but not for the LSE: 2^-9 relative per probability, up to ~1e-3 in a row of few
  // keys), and the other instance, which sums P in f32, for the rest.
  constexpr bool kOnesChunks = !kFp8 && tensor_row_sums(D, Consumers);
  static_assert(!TensorSums || kOnesChunks, "row sums on the tensor core need the config's ones chunks");
  constexpr int kAccCols = D + (TensorSums ? 8 : 0);
  constexpr std::uint32_t kQChunkBytes = Br * 128, kKvChunkBytes = Bc * 128;
  // Q's fragments held in registers for the work tile (hopper_config.hpp's q_in_registers): S by
  // wgmma with A from registers, and Q's slot released as soon as they are loaded.
  constexpr bool kQInRegisters = q_in_registers(D, Bc);
  constexpr int kQFrags = kQInRegisters ? D * kBytes / 32 : 1;
  constexpr std::uint32_t kVSlotBytes = kTileBytes + (kOnesChunks ? kKvChunkBytes : 0);
  static_assert(D % kChunkElems == 0 && Bc % kKeysPerStep == 0, "tile sizes");
  static_assert(!kFp8 || Bc == 128, "an e4m3 V^T tile is one 128-byte swizzle row per head_dim row");
  static_assert(!Paged || !kFp8, "paged pools run 16-bit inputs");

  extern __shared__ unsigned char shared_raw[];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(shared_raw) + 1023) & ~std::uintptr_t{1023});
  unsigned char* s_q = base;
  unsigned char* s_k = s_q + kQBytes;
  unsigned char* s_v = s_k + Stages * kTileBytes;
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(s_v + Stages * kVSlotBytes);
  std::uint64_t* q_full = bars;
  std::uint64_t* q_empty = bars + 1;
  std::uint64_t* k_full = bars + 2;
  std::uint64_t* v_full = k_full + Stages;
  // K and V slots are released apart: K(j) is free once S(j) is done, a whole iteration before P V
  // of tile j frees V(j), so the producer can refill K slots early (with one shared release, a
  // 2-stage ring left no time to load K(j + 2) before it was needed).
  std::uint64_t* k_empty = v_full + Stages;
  std::uint64_t* v_empty = k_empty + Stages;
  // Staged O: every consumer warp's last S of a work tile is done (its K slot then takes O), and
  // (head_dim 256) every consumer warp's last P V is done (its V slot then takes warpgroup 1's O).
  std::uint64_t* o_slot_free = v_empty + Stages;
  std::uint64_t* o_v_slot_free = o_slot_free + 1;
  constexpr int kConsumerWarps = 4 * Consumers;
  // O through the last K slot at head_dim 128 (the block's O tile is exactly one K tile), and the
  // last K and V slots at head_dim 256 (one warpgroup's tile each), when it is 16-bit with 16-byte
  // aligned rows; else (f32 out, split states, e4m3, d64) from registers. d64's 128-row blocks could
  // take it too, but ran 5-6% slower with it at causal 512-1k. At d256 the register path's quad
  // shuffles held 13-15% of a 512-key call's stall samples (docs/perf-notes.md, "Hopper prefill
  // round 19").
  constexpr bool kTwoSlotO = D == 256 && Consumers == 2 && Br <= 2 * Bc && 64 <= Bc;
  constexpr bool kStagedO = !kFp8 && ((D == 128 && Br <= Bc) || kTwoSlotO);
  const bool staged_o = kStagedO && call_stages_o(hp);
  constexpr bool kLazyRescale = lazy_rescale<D, In>();
  constexpr bool kSkipDeadTiles = skips_dead_key_tiles(Bc, Consumers);
  // GQA packing: 16-bit inputs only (the plan's rule), so the e4m3 kernels compile without it (their
  // d256 key loop has no register to spare).
  const int packed_rows = kFp8 ? 0 : hp.packed_rows;

  const PrefillParams& p = hp.p;
  const int warpgroup = threadIdx.x / 128;
  // The block's steps (hopper_walk.hpp: step_tile; bh < 0: none).
  const int steps = hp.walk.steps;
  auto block_tile = [&](int step) { return step_tile(hp.walk, static_cast<int>(blockIdx.x), step); };
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, kConsumerWarps);
    mbar_init(o_slot_free, kConsumerWarps);
    mbar_init(o_v_slot_free, kConsumerWarps);
#pragma unroll
    for (int s = 0; s < Stages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], kConsumerWarps);
      mbar_init(&v_empty[s], kConsumerWarps);
    }
    mbar_init_fence();
  }
  if constexpr (TensorSums) {  // the ones chunks, written once (every element 1, so the swizzle is moot)
    constexpr std::uint32_t kOne2 = In == HopperInput::kBF16 ? 0x3F803F80u : 0x3C003C00u;
    for (int i = threadIdx.x; i < Stages * static_cast<int>(kKvChunkBytes / 16); i += blockDim.x) {
      const int stage = i / static_cast<int>(kKvChunkBytes / 16), at = i % static_cast<int>(kKvChunkBytes / 16);
      *reinterpret_cast<uint4*>(s_v + stage * kVSlotBytes + kTileBytes + at * 16) = make_uint4(kOne2, kOne2, kOne2, kOne2);
    }
    fence_proxy_async_shared();  // visible to wgmma's operand reads
  }
  __syncthreads();

  if (warpgroup == 0) {
    regs_decrease<kProducerRegisters>();
    if constexpr (Paged) {
      // ---- producer (paged pools): warp 0, a lane per page box of each K / V tile ------------
      if (threadIdx.x >= 32) return;
      const int lane = static_cast<int>(threadIdx.x);
      if (lane == 0) {
        tma_prefetch_descriptor(&hp.q_map);
        tma_prefetch_descriptor(&hp.k_map);
        tma_prefetch_descriptor(&hp.v_map);
      }
      const HopperPages& pages = hp.pages;
      const int boxes = Bc / pages.box_rows;
      const std::uint32_t box_bytes = static_cast<std::uint32_t>(pages.box_rows) * 128u;  // one chunk's rows
      std::uint32_t q_iter = 0, kv_iter = 0;
      for (int step = 0; step < steps; ++step) {
        const TileCoord t = block_tile(step);
        if (t.bh < 0) continue;
        const WorkTile w = work_tile<Bc, Br>(hp, t);
        if (!w.active || w.tile_lo >= w.tile_hi) continue;
        const int kvh = w.h / p.group_size;
        if (lane == 0) {
          mbar_wait(q_empty, (q_iter & 1) ^ 1);
          mbar_arrive_expect_tx(q_full, hp.q_tile_bytes);
#pragma unroll
          for (int c = 0; c < Chunks; ++c) {
            tma_load_4d(s_q + c * kQChunkBytes, &hp.q_map, q_full, c * kChunkElems, static_cast<int>(w.e.q_start + w.m0),
                        w.h, 0);
          }
        }
        ++q_iter;
        const int* table_row = pages.table + static_cast<std::int64_t>(w.b) * pages.table_stride;
        for (int j = w.tile_lo; j < w.tile_hi; ++j, ++kv_iter) {
          const int stage = kv_iter % Stages;
          const std::uint32_t phase = (kv_iter / Stages) & 1;
          PageBox pb{pages.num_pages, 0, 0};
          if (lane < boxes) pb = page_box(pages, j * Bc, lane, w.e.kv_len, [&](int i) { return table_row[i]; });
          const std::uint32_t box_off = static_cast<std::uint32_t>(lane) * box_bytes;
          mbar_wait(&k_empty[stage], phase ^ 1);
          if (lane == 0) mbar_arrive_expect_tx(&k_full[stage], kTileBytes);
          __syncwarp();
          if (lane < boxes) {  // a cut box's stale keys are masked, so K takes it whole
#pragma unroll
            for (int c = 0; c < Chunks; ++c) {
              tma_load_4d(s_k + stage * kTileBytes + c * kKvChunkBytes + box_off, &hp.k_map, &k_full[stage],
                          c * kChunkElems, pb.slot, kvh, pb.page);
            }
          }
          mbar_wait(&v_empty[stage], phase ^ 1);
          // The box the sequence's end cuts (at most one per tile): V's rows copied by hand, the
          // stale ones as zeros, by the whole warp.
          const bool cut = lane < boxes && pb.rows > 0 && pb.rows < pages.box_rows;
          const unsigned cut_lanes = __ballot_sync(0xffffffffu, cut);
          if (cut_lanes != 0) {
            const int from = __ffs(cut_lanes) - 1;
            const int c_page = __shfl_sync(0xffffffffu, pb.page, from), c_slot = __shfl_sync(0xffffffffu, pb.slot, from);
            const int c_rows = __shfl_sync(0xffffffffu, pb.rows, from);
            const auto* src = static_cast<const std::uint16_t*>(pages.v_pool) + c_page * pages.v_page_stride +
                              kvh * pages.v_head_stride + c_slot * pages.v_row_stride;
            unsigned char* dst = s_v + stage * kVSlotBytes + from * box_bytes;
            constexpr int kUnitsPerRow = D / 8;  // 16-byte units
            for (int i = lane; i < pages.box_rows * kUnitsPerRow; i += 32) {
              const int r = i / kUnitsPerRow, u = i % kUnitsPerRow;
              uint4 v = make_uint4(0, 0, 0, 0);
              if (r < c_rows) v = *reinterpret_cast<const uint4*>(src + r * pages.v_row_stride + u * 8);
              *reinterpret_cast<uint4*>(dst + (u / 8) * kKvChunkBytes + r * 128 + (((u % 8) ^ (r % 8)) * 16)) = v;
            }
            fence_proxy_async_shared();  // the stores before wgmma's reads through the barrier
            __syncwarp();
          }
          if (lane == 0) mbar_arrive_expect_tx(&v_full[stage], kTileBytes - (cut_lanes != 0 ? box_bytes * Chunks : 0u));
          __syncwarp();
          if (lane < boxes && !cut) {
#pragma unroll
            for (int c = 0; c < Chunks; ++c) {
              tma_load_4d(s_v + stage * kVSlotBytes + c * kKvChunkBytes + box_off, &hp.v_map, &v_full[stage],
                          c * kChunkElems, pb.slot, kvh, pb.page);
            }
          }
        }
      }
      return;
    }
    // ---- producer: one thread issues every TMA load ----------------------------------------
    if (threadIdx.x != 0) return;
    tma_prefetch_descriptor(&hp.q_map);
    tma_prefetch_descriptor(&hp.k_map);
    tma_prefetch_descriptor(&hp.v_map);
    std::uint32_t q_iter = 0, kv_iter = 0;
    for (int step = 0; step < steps; ++step) {
      ATTNKIT_HOPPER_STAMP(step, 0);
      const TileCoord t = block_tile(step);
      if (t.bh < 0) continue;
      const WorkTile w = work_tile<Bc, Br>(hp, t);
      if (!w.active || w.tile_lo >= w.tile_hi) continue;
      const int kvh = packed_rows > 0 ? w.h : w.h / p.group_size;
      const int q_head = packed_rows > 0 ? w.h * p.group_size : w.h;  // packed: the group's first head
      const int q_row = static_cast<int>(w.e.q_start + w.m0);
      const int batch = static_cast<int>(w.e.q_base_batch);
      mbar_wait(q_empty, (q_iter & 1) ^ 1);
      ATTNKIT_HOPPER_STAMP(step, 1);
      mbar_arrive_expect_tx(q_full, hp.q_tile_bytes);
#pragma unroll
      for (int c = 0; c < Chunks; ++c) {
        tma_load_4d(s_q + c * kQChunkBytes, &hp.q_map, q_full, c * kChunkElems, q_row, q_head, batch);
      }
      ++q_iter;
      for (int j = w.tile_lo; j < w.tile_hi; ++j, ++kv_iter) {
        const int stage = kv_iter % Stages;
        const std::uint32_t phase = (kv_iter / Stages) & 1;
        const int k_row = static_cast<int>(w.e.k_start) + j * Bc;
        mbar_wait(&k_empty[stage], phase ^ 1);
        if (j == w.tile_lo) ATTNKIT_HOPPER_STAMP(step, 2);
        mbar_arrive_expect_tx(&k_full[stage], kTileBytes);
#pragma unroll
        for (int c = 0; c < Chunks; ++c) {
          tma_load_4d(s_k + stage * kTileBytes + c * kKvChunkBytes, &hp.k_map, &k_full[stage], c * kChunkElems, k_row,
                      kvh, batch);
        }
        mbar_wait(&v_empty[stage], phase ^ 1);
        mbar_arrive_expect_tx(&v_full[stage], kTileBytes);
        if constexpr (kFp8) {
          // V^T staging [batch][kv_heads][D][keys]: one box of D rows x 128 keys, the sequence's own slot.
          tma_load_4d(s_v + stage * kVSlotBytes, &hp.v_map, &v_full[stage], j * Bc, 0, kvh, w.b);
        } else {
#pragma unroll
          for (int c = 0; c < Chunks; ++c) {
            tma_load_4d(s_v + stage * kVSlotBytes + c * kKvChunkBytes, &hp.v_map, &v_full[stage], c * kChunkElems, k_row,
                        kvh, batch);
          }
        }
      }
      ATTNKIT_HOPPER_STAMP(step, 3);
    }
    return;
  }

  // ---- consumers: 64 query rows per warpgroup ------------------------------------------------
  regs_increase<consumer_registers(Consumers)>();
  // Broadcast from lane 0, so that ptxas knows it is warp-uniform: branches on it (the dead-tile
  // iterations) then keep the wgmma pipeline (else C7518: every wgmma serialised).
  const int cw = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
  const int wtid = threadIdx.x % 128, warp = wtid / 32, lane = wtid % 32;
  const int g = lane / 4, c = lane % 4;
  const int row0 = cw * 64 + warp * 16 + g;  // this thread's rows in the block tile: row0, row0 + 8
  const bool lane_leader = lane == 0;
  const float sl = p.scale * hp.qk_scale * kLog2e;  // qk_scale: e4m3's q and k scales, else 1
  const std::uint32_t q_base = smem_u32(s_q) + cw * 64 * 128;
  const std::uint32_t k_base = smem_u32(s_k), v_base = smem_u32(s_v);
  std::uint32_t q_iter = 0, kv_iter = 0;
  // Turns: the consumer warpgroups take turns to issue their wgmma batches, in a round (named
  // barrier 1 + cw is "my turn"; a warpgroup hands the turn to the next), so each one's softmax
  // runs while the others' matrix work occupies the tensor cores. All walk the same tiles with
  // the same key-tile counts, so the turns stay in step; the last warpgroup opens by handing the
  // first turn to warpgroup 0.
  static_assert(Consumers == 2 || Consumers == 3, "two or three consumer warpgroups");
  auto my_turn = [&] { named_barrier_sync(1 + cw, 256); };
  auto their_turn = [&] { named_barrier_arrive(1 + (cw + 1) % Consumers, 256); };
  if (cw == Consumers - 1) their_turn();

  for (int step = 0; step < steps; ++step) {
    ATTNKIT_HOPPER_STAMP(step, 0);
    const TileCoord t = block_tile(step);
    if (t.bh < 0) continue;
    const WorkTile w = work_tile<Bc, Br>(hp, t);
    if (!w.active) continue;
    const int rows_here = min(Br, w.e.q_len - w.m0);
    // Positions fit 32 bits (kv_len is an int); the key loop keeps only 32-bit state, so that d256
    // (O alone is 128 registers) does not spill inside it.
    // The query positions of this thread's rows (row0, row0 + 8): with GQA packing row r is query
    // row r % packed_rows (of head r / packed_rows of the group).
    int pos[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = row0 + 8 * hr;
      const int q_row = packed_rows > 0 ? r - static_cast<int>(hp.packed_div.quotient(r)) * packed_rows : r;
      pos[hr] = w.m0 + q_row + w.e.kv_len - w.e.q_len;
    }

    float o[kAccCols / 2];  // O, then (row sums) P's running row sums in columns D .. D + 7
#pragma unroll
    for (int i = 0; i < kAccCols / 2; ++i) o[i] = 0.0f;
    RowState st{{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
    const int n = w.tile_hi - w.tile_lo;
    ATTNKIT_HOPPER_STAMP(step, 1);

    if (n > 0) {
      // Iterations [free_lo, free_hi] of the key loop need no mask: their whole tile lies inside
      // the sequence and every row of the warpgroup sees all of it.
      int free_lo, free_hi;
      {
        // The warpgroup's first and last query positions (packed: its rows span the tile's query rows).
        const int wg_row = packed_rows > 0 ? 0 : cw * 64, wg_rows = packed_rows > 0 ? packed_rows : 64;
        const std::int64_t wg_first = static_cast<std::int64_t>(w.m0) + wg_row + w.e.kv_len - w.e.q_len;
        std::int64_t last_key0 = w.e.kv_len - Bc;  // the largest unmasked tile start
        if (p.causal) last_key0 = cuda_prefill::min_i64(last_key0, wg_first - Bc + 1);
        const std::int64_t first_key0 = attnkit::detail::window_begin(wg_first + wg_rows - 1, p.window);
        const auto floor_div = [](std::int64_t a) { return a >= 0 ? a / Bc : -((-a + Bc - 1) / Bc); };
        free_hi = static_cast<int>(cuda_prefill::max_i64(-1, floor_div(last_key0) - w.tile_lo));
        free_lo = static_cast<int>(cuda_prefill::min_i64(n, cuda_prefill::max_i64(0, -floor_div(-first_key0) - w.tile_lo)));
      }
      auto needs_mask = [&](int it) { return it < free_lo || it > free_hi; };
      // Causal: the work tile's last key tiles can lie wholly past this warpgroup's rows (its rows
      // end up to Br - 64 before the block's): iterations [live, n) skip their matrix work and
      // softmax, keeping only the turns and the slot releases. The first tile always runs. The
      // planner counts the same (padded_tile_work).
      int live = n;
      if (kSkipDeadTiles && p.causal && packed_rows == 0) {
        const std::int64_t wg_last = static_cast<std::int64_t>(w.m0) + cw * 64 + 63 + w.e.kv_len - w.e.q_len;
        live = static_cast<int>(cuda_prefill::min_i64(n, cuda_prefill::max_i64(1, wg_last / Bc + 1 - w.tile_lo)));
      }
      // Slot releases by each warp's lane leader. A work tile's last K slot goes to the staged O
      // (o_slot_free) instead of the producer; at head_dim 256 it takes warpgroup 0's O only, so
      // warpgroup 1 releases it at once, and the last V slot likewise takes warpgroup 1's.
      auto release_k = [&](int stage, bool last) {
        if (!(staged_o && last)) return mbar_arrive(&k_empty[stage]);
        mbar_arrive(o_slot_free);
        if (kTwoSlotO && cw != 0) mbar_arrive(&k_empty[stage]);
      };
      auto release_v = [&](int stage, bool last) {
        if (!(kTwoSlotO && staged_o && last)) return mbar_arrive(&v_empty[stage]);
        mbar_arrive(o_v_slot_free);
        if (cw == 0) mbar_arrive(&v_empty[stage]);
      };
      std::uint32_t qf[kQFrags][4];
      auto issue_s = [&](float (&s)[Bc / 2], int stage) {
        const std::uint32_t kb = k_base + stage * kTileBytes;
#pragma unroll
        for (int kk = 0; kk < D * kBytes / 32; ++kk) {  // k-steps of 32 bytes of head_dim
          const std::uint32_t off_k = (kk / 4) * kKvChunkBytes + (kk % 4) * 32;
          if constexpr (kQInRegisters) {
            wgmma_rk<Bc, In>(s, qf[kk], smem_descriptor(kb + off_k, 16, 1024), kk > 0 ? 1 : 0);
          } else {
            const std::uint32_t off_q = (kk / 4) * kQChunkBytes + (kk % 4) * 32;
            wgmma_ss<Bc, In>(s, smem_descriptor(q_base + off_q, 16, 1024), smem_descriptor(kb + off_k, 16, 1024),
                             kk > 0 ? 1 : 0);
          }
        }
      };
      auto issue_pv = [&](const std::uint32_t (&pf)[Bc / kKeysPerStep][4], int stage) {
        const std::uint32_t vb = v_base + stage * kVSlotBytes;
#pragma unroll
        for (int kk = 0; kk < Bc / kKeysPerStep; ++kk) {
          if constexpr (kFp8) {  // V^T rows (head_dim) of 128 keys, K-major like Q and K
            wgmma_rs<kAccCols, In>(o, pf[kk], smem_descriptor(vb + kk * 32, 16, 1024), 1);
          } else {  // V rows (keys) of head_dim, MN-major (row sums: the ones chunk is the next chunk)
            wgmma_rs<kAccCols, In>(o, pf[kk], smem_descriptor(vb + kk * 16 * 128, kKvChunkBytes, 1024), 1);
          }
        }
      };

      mbar_wait(q_full, q_iter & 1);
      if constexpr (kQInRegisters) {
        // This warp's 16 rows of the warpgroup's Q (128-byte swizzle: a row's 16-byte chunk j sits
        // at j ^ (row % 8)), one 32-byte k-step per ldmatrix.x4 (the A fragment of k16 for 16-bit
        // inputs, of k32 for e4m3); then Q's slot is free.
        const int mat = lane / 8, row = warp * 16 + (mat & 1) * 8 + lane % 8;
#pragma unroll
        for (int kk = 0; kk < kQFrags; ++kk) {
          const int chunk16 = 2 * (kk % 4) + (mat >> 1);
          ldmatrix_x4(qf[kk], q_base + (kk / 4) * kQChunkBytes + row * 128 + ((chunk16 ^ (row & 7)) << 4));
        }
        __syncwarp();
        if (lane_leader) mbar_arrive(q_empty);
      }
      ATTNKIT_HOPPER_STAMP(step, 2);
      float s[Bc / 2];
      std::uint32_t pf[Bc / kKeysPerStep][4];
      float alpha[2];
      // First key tile: S, mask, softmax (O is still zero, nothing to rescale).
      {
        const int stage = kv_iter % Stages;
        mbar_wait(&k_full[stage], (kv_iter / Stages) & 1);
        my_turn();
        ATTNKIT_HOPPER_STAMP(step, 3);
        wgmma_fence();
        issue_s(s, stage);
        wgmma_commit();
        their_turn();
        wgmma_wait<0>();
        fence_registers(s);
        __syncwarp();
        if (lane_leader) {
          release_k(stage, n == 1);
          if (!kQInRegisters && n == 1) mbar_arrive(q_empty);
        }
        if (needs_mask(0)) mask_scores<Bc>(s, p, w.e.kv_len, pos, w.tile_lo * Bc, c);
        softmax_tile<Bc, In, kLazyRescale, !TensorSums>(s, st, sl, alpha);
        scores_to_a<Bc, In>(s, pf);
        ATTNKIT_HOPPER_STAMP(step, 4);
      }
      for (int it = 1; it < live; ++it) {
        const std::uint32_t prev = kv_iter + it - 1, cur = kv_iter + it;
        const int prev_stage = prev % Stages, stage = cur % Stages;
        mbar_wait(&k_full[stage], (cur / Stages) & 1);
        mbar_wait(&v_full[prev_stage], (prev / Stages) & 1);
        my_turn();
        wgmma_fence();
        issue_s(s, stage);  // S of tile it ...
        wgmma_commit();
        fence_registers(o);
        issue_pv(pf, prev_stage);  // ... and P V of tile it - 1 in flight together
        wgmma_commit();
        their_turn();
        wgmma_wait<1>();  // S done: K(it) is free
        fence_registers(s);
        __syncwarp();
        if (lane_leader) {
          release_k(stage, it == n - 1);
          if (!kQInRegisters && it == n - 1) mbar_arrive(q_empty);
        }
        if (needs_mask(it)) mask_scores<Bc>(s, p, w.e.kv_len, pos, (w.tile_lo + it) * Bc, c);
        // ptxas places the P V wait above this softmax (it has no data dependence on it), so the
        // softmax runs beside the other warpgroups' matrix work, not beside this one's P V. Held
        // above the wait (a never-taken branch) it measured 0-10% slower: the warpgroups'
        // softmaxes then overlap each other (docs/perf-notes.md, "Hopper prefill round 13").
        softmax_tile<Bc, In, kLazyRescale, !TensorSums>(s, st, sl, alpha);
        wgmma_wait<0>();
        fence_registers(o);
        fence_registers(pf[0]);
        __syncwarp();
        if (lane_leader) release_v(prev_stage, false);
        if (!kLazyRescale || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // a row's max moved
#pragma unroll
          for (int i = 0; i < kAccCols / 8; ++i) {
            o[4 * i + 0] *= alpha[0];
            o[4 * i + 1] *= alpha[0];
            o[4 * i + 2] *= alpha[1];
            o[4 * i + 3] *= alpha[1];
          }
        }
        scores_to_a<Bc, In>(s, pf);
      }
      // Tiles past this warpgroup's rows: the last live tile's P V beside the first one's turn,
      // then only turns and slot releases (each after the slot's fill, so that an arrival cannot
      // count towards the slot's previous phase).
      for (int it = live; it < n; ++it) {
        const std::uint32_t prev = kv_iter + it - 1, cur = kv_iter + it;
        const int prev_stage = prev % Stages, stage = cur % Stages;
        mbar_wait(&k_full[stage], (cur / Stages) & 1);
        mbar_wait(&v_full[prev_stage], (prev / Stages) & 1);
        my_turn();
        if (it == live) {
          wgmma_fence();
          issue_pv(pf, prev_stage);
          wgmma_commit();
        }
        their_turn();
        wgmma_wait<0>();  // unconditional: a wait in a branch of its own made ptxas inject another (C7517)
        fence_registers(o);
        __syncwarp();
        if (lane_leader) {
          release_k(stage, it == n - 1);
          if (!kQInRegisters && it == n - 1) mbar_arrive(q_empty);
          release_v(prev_stage, false);
        }
      }
      ATTNKIT_HOPPER_STAMP(step, 5);
      {  // the last tile's P V (none when it is past this warpgroup's rows)
        const std::uint32_t last = kv_iter + n - 1;
        const int stage = last % Stages;
        mbar_wait(&v_full[stage], (last / Stages) & 1);
        my_turn();
        if (live == n) {
          wgmma_fence();
          issue_pv(pf, stage);
          wgmma_commit();
        }
        their_turn();
        wgmma_wait<0>();
        fence_registers(o);
        __syncwarp();
        if (lane_leader) release_v(stage, true);
        ATTNKIT_HOPPER_STAMP(step, 6);
      }
      kv_iter += n;
      ++q_iter;
    }

    // Epilogue: finish the row sums (across the quad, or read from the ones columns, where every
    // lane holds its rows' whole sums), normalise, write.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      if constexpr (TensorSums) {
        st.l[hr] = o[kAccCols / 2 - 4 + 2 * hr];  // the ones columns' block
      } else {
        st.l[hr] += __shfl_xor_sync(0xffffffffu, st.l[hr], 1);
        st.l[hr] += __shfl_xor_sync(0xffffffffu, st.l[hr], 2);
      }
    }
    // Row half hr's log-sum-exp (natural log; -inf for a row that saw no key).
    auto row_lse = [&](int hr) {
      const float l = st.l[hr];
      return l > 0.0f ? (st.m[hr] * sl + log2f(l) - p_log2_offset(In)) * kLn2 : -INFINITY;
    };
    if constexpr (kStagedO) {
      if (staged_o && n > 0) {
        // The last K slot (kv_iter - 1) takes O once every warpgroup's last S is done (work tile
        // q_iter - 1 completes o_slot_free once): this warpgroup's half, or at head_dim 256
        // warpgroup 0's tile while warpgroup 1's goes to the last V slot once every last P V is
        // done (o_v_slot_free); then its rows out.
        const int stage = (kv_iter - 1) % Stages;
        const bool in_v = kTwoSlotO && cw != 0;
        const std::uint32_t tile = in_v ? v_base + stage * kVSlotBytes
                                        : k_base + stage * kTileBytes + (kTwoSlotO ? 0 : cw * 64 * D * 2);
        float inv[2], lse[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          inv[hr] = st.l[hr] > 0.0f ? 1.0f / st.l[hr] : 0.0f;
          lse[hr] = row_lse(hr);
          if (p.sinks != nullptr) {  // staged tiles are whole (unsplit, unpacked) rows of head w.h
            const attnkit::detail::SinkFold f = attnkit::detail::fold_sink(lse[hr], p.sinks[w.h]);
            inv[hr] *= f.weight;
            lse[hr] = f.lse;
          }
        }
        constexpr bool kBf16Out = In == HopperInput::kBF16;
        auto piece = [&](int hr, int i) { return pack2<kBf16Out>(o[4 * i + 2 * hr] * inv[hr], o[4 * i + 2 * hr + 1] * inv[hr]); };
        mbar_wait(in_v ? o_v_slot_free : o_slot_free, (q_iter - 1) & 1);
        stage_o_tile<D>(tile, piece, warp, lane);
        const std::int64_t row = w.e.q_start + w.m0 + cw * 64;
        const int rows_left = rows_here - cw * 64;
        // By TMA: the map's row bound is the sequence's own unless the batch is ragged, where a
        // short tile's box would write the next sequence's rows.
        const bool by_tma = hp.o_tma != 0 && (rows_left >= 64 || p.cu_seqlens_q == nullptr);
        if (by_tma) fence_proxy_async_shared();  // the stmatrix writes before the TMA's reads
        named_barrier_sync(1 + Consumers + cw, 128);  // the warpgroup's tile is in shared memory
        if (by_tma) {
          if (wtid == 0) {
#pragma unroll
            for (int b = 0; b < D / 64; ++b) {
              tma_store_4d(&hp.o_map, tile + b * kStagedBoxBytes, b * 64, static_cast<int>(row), w.h,
                           static_cast<int>(w.e.q_base_batch));
            }
            bulk_commit_group();
            bulk_wait_group_read_all();  // the slot is the producer's again once read
          }
        } else {
          auto* dst = static_cast<std::uint16_t*>(p.out) + w.e.q_base_batch * p.o_batch_stride + w.h * p.o_head_stride +
                      row * p.o_row_stride;
          copy_out_o_tile<D>(tile, dst, p.o_row_stride, rows_left, wtid);
          fence_proxy_async_shared();  // these reads before the producer's next TMA write of the slot
        }
        __syncwarp();
        if (lane_leader) mbar_arrive(in_v ? &v_empty[stage] : &k_empty[stage]);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = row0 + hr * 8;
          if (r < rows_here && p.lse != nullptr && c == 0) {
            p.lse[w.e.q_base_batch * p.lse_batch_stride + w.h * p.lse_head_stride + (w.e.q_start + w.m0 + r) * p.lse_row_stride] =
                lse[hr];
          }
        }
        ATTNKIT_HOPPER_STAMP(step, 7);
        continue;
      }
    }
    // Block stores (whole 16-byte blocks, store_row_blocks) at head_dim 256 only, 16-bit inputs:
    // against the 4-byte stores they read +3-10% at 512-2k there, but 2-18% less at d64 and d128
    // (the shuffles and selects cost more than the store instructions they save), and e4m3 d256
    // has no registers to spare (ptxas then moved a value it keeps in local memory into the key
    // loop). Their rows and columns come from a lane read here (asm volatile): with the stores
    // unconditional (a quad's lanes must all shuffle), ptxas otherwise hoisted the address
    // arithmetic above the key loop and held it through it, and d256 spilled there.
    constexpr bool kBlockStores = D == 256 && !kFp8;
    int e_lane = lane;
    if constexpr (kBlockStores) asm volatile("mov.u32 %0, %%laneid;" : "=r"(e_lane));
    const int e_row0 = cw * 64 + warp * 16 + e_lane / 4, e_c = e_lane % 4;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = e_row0 + hr * 8;
      // Row r's query row and head (GQA packing: head r / packed_rows of the group; rows past the
      // group's are padding).
      int q_row = r, head = w.h;
      if (packed_rows > 0) {
        const int in_group = static_cast<int>(hp.packed_div.quotient(r));
        q_row = r - in_group * packed_rows;
        head = in_group < p.group_size ? w.h * p.group_size + in_group : -1;
      }
      const bool valid = q_row < rows_here && head >= 0;  // the same for a quad's four lanes
      if (!kBlockStores && !valid) continue;
      const float l = st.l[hr];
      const bool any = l > 0.0f;
      float inv = any ? hp.v_scale / l : 0.0f;  // v_scale: e4m3's V scale, else 1
      float lse = row_lse(hr);
      const std::int64_t row = w.e.q_start + w.m0 + q_row;
      const std::int64_t out_off = w.e.q_base_batch * p.o_batch_stride + head * p.o_head_stride + row * p.o_row_stride;
      // Key splits: this split's normalised state, row [split][head][workspace row] of the
      // workspace (f32), which the merge combines by LSE (and folds the sinks into).
      const bool split_state = p.splits > 1;
      if (p.sinks != nullptr && !split_state && valid) {
        const attnkit::detail::SinkFold f = attnkit::detail::fold_sink(lse, p.sinks[head]);
        inv *= f.weight;
        lse = f.lse;
      }
      const std::int64_t state_row =
          (static_cast<std::int64_t>(w.split) * p.num_heads + head) * p.workspace_rows + w.e.workspace_row0 + w.m0 + q_row;
      if (split_state || p.out_kind == OutKind::kF32) {
        float* dst = split_state ? p.partial_out + state_row * D : static_cast<float*>(p.out) + out_off;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          if (valid) *reinterpret_cast<float2*>(dst + i * 8 + 2 * e_c) = make_float2(o[4 * i + 2 * hr] * inv, o[4 * i + 2 * hr + 1] * inv);
        }
      } else {
        // A 16-bit output: the input's type, or for e4m3 inputs the plan's (bf16 or f16).
        const bool bf16_out = kFp8 ? hp.out_bf16 != 0 : In == HopperInput::kBF16;
        auto* dst = static_cast<std::uint16_t*>(p.out) + out_off;
        auto piece = [&](int i) {
          const float a = o[4 * i + 2 * hr] * inv, b = o[4 * i + 2 * hr + 1] * inv;
          return bf16_out ? pack2<true>(a, b) : pack2<false>(a, b);
        };
        if (kBlockStores && hp.out_vec16) {  // uniform: the whole warp shuffles
          store_row_blocks<D>(dst, piece, e_lane, valid);
        } else if (valid) {
#pragma unroll
          for (int i = 0; i < D / 8; ++i) *reinterpret_cast<std::uint32_t*>(dst + i * 8 + 2 * e_c) = piece(i);
        }
      }
      if (valid && e_c == 0) {
        if (split_state) {
          p.partial_lse[state_row] = lse;
        } else if (p.lse != nullptr) {
          p.lse[w.e.q_base_batch * p.lse_batch_stride + head * p.lse_head_stride + row * p.lse_row_stride] = lse;
        }
      }
    }
    ATTNKIT_HOPPER_STAMP(step, 7);
  }
  if (cw == 0) my_turn();  // takes the last warpgroup's last hand-over, so no arrival is left pending
}

}  // namespace attnkit::cuda_prefill_hopper
