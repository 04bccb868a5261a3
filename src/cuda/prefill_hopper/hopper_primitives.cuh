// PTX wrappers of the Hopper (sm_90a) features the warp-specialized prefill kernel uses (mbarriers
// and the TMA tensor load come from cuda/common/sm90_primitives.cuh): wgmma
// fences/commit/wait, shared-memory matrix descriptors (128-byte swizzle) and setmaxnreg.
// Each wrapper is one PTX instruction (or a wait loop on one), written from the PTX ISA.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/sm90_primitives.cuh"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/prefill_hopper/wgmma_ops.cuh"

namespace attnkit::cuda_prefill_hopper {

// mbarriers: the shared wrappers (cuda/common/sm90_primitives.cuh).
using cuda_common::fence_proxy_async_shared;
using cuda_common::mbar_arrive;
using cuda_common::mbar_arrive_expect_tx;
using cuda_common::mbar_init;
using cuda_common::mbar_init_fence;
using cuda_common::mbar_try_wait;
using cuda_common::mbar_wait;
using cuda_common::smem_u32;
using cuda_common::tma_load_4d;
using cuda_common::tma_store_4d;
using cuda_common::bulk_commit_group;
using cuda_common::bulk_wait_group_read_all;
using cuda_common::tma_prefetch_descriptor;

// ---- wgmma --------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins accumulator registers across an asynchronous wgmma so the compiler neither reads them
// early nor moves their uses across the wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(std::uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1). Start address, leading and
// stride byte offsets are stored >> 4. K-major operands: 8-row groups 1024 B apart (stride), the
// leading offset unused (1). MN-major operands: `leading` = bytes between 64-element column
// chunks, `stride` = 1024 B between 8-row (8-key) groups.
__device__ __forceinline__ std::uint64_t smem_descriptor(std::uint32_t addr, std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<std::uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<std::uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<std::uint64_t>(1) << 62;
  return d;
}

template <int N, HopperInput In>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t da, std::uint64_t db, int accumulate) {
  if constexpr (In == HopperInput::kBF16) {
    if constexpr (N == 64) wgmma_ss_bf16_n64(d, da, db, accumulate);
    else if constexpr (N == 80) wgmma_ss_bf16_n80(d, da, db, accumulate);
    else if constexpr (N == 128) wgmma_ss_bf16_n128(d, da, db, accumulate);
    else static_assert(N == 64, "no wgmma_ss instance for this N (dev/hopper/gen_wgmma.py)");
  } else if constexpr (In == HopperInput::kF16) {
    if constexpr (N == 64) wgmma_ss_f16_n64(d, da, db, accumulate);
    else if constexpr (N == 80) wgmma_ss_f16_n80(d, da, db, accumulate);
    else if constexpr (N == 128) wgmma_ss_f16_n128(d, da, db, accumulate);
    else static_assert(N == 64, "no wgmma_ss instance for this N (dev/hopper/gen_wgmma.py)");
  } else {
    if constexpr (N == 128) wgmma_ss_e4m3_n128(d, da, db, accumulate);
    else static_assert(N == 128, "no e4m3 wgmma_ss instance for this N (dev/hopper/gen_wgmma.py)");
  }
}

template <int N, HopperInput In>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t db,
                                         int accumulate) {
  if constexpr (In == HopperInput::kBF16) {
    if constexpr (N == 64) wgmma_rs_bf16_n64(d, a, db, accumulate);
    else if constexpr (N == 72) wgmma_rs_bf16_n72(d, a, db, accumulate);
    else if constexpr (N == 128) wgmma_rs_bf16_n128(d, a, db, accumulate);
    else if constexpr (N == 256) wgmma_rs_bf16_n256(d, a, db, accumulate);
    else static_assert(N == 64, "no wgmma_rs instance for this N (dev/hopper/gen_wgmma.py)");
  } else if constexpr (In == HopperInput::kF16) {
    if constexpr (N == 64) wgmma_rs_f16_n64(d, a, db, accumulate);
    else if constexpr (N == 72) wgmma_rs_f16_n72(d, a, db, accumulate);
    else if constexpr (N == 128) wgmma_rs_f16_n128(d, a, db, accumulate);
    else if constexpr (N == 256) wgmma_rs_f16_n256(d, a, db, accumulate);
    else static_assert(N == 64, "no wgmma_rs instance for this N (dev/hopper/gen_wgmma.py)");
  } else {
    if constexpr (N == 128) wgmma_rs_e4m3_n128(d, a, db, accumulate);
    else if constexpr (N == 256) wgmma_rs_e4m3_n256(d, a, db, accumulate);
    else static_assert(N == 128, "no e4m3 wgmma_rs instance for this N (dev/hopper/gen_wgmma.py)");
  }
}

// S = Q K^T with Q's fragments in registers (B = K, K-major).
template <int N, HopperInput In>
__device__ __forceinline__ void wgmma_rk(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t db,
                                         int accumulate) {
  static_assert(N == 128, "no wgmma_rk instance for this N (dev/hopper/gen_wgmma.py)");
  if constexpr (In == HopperInput::kBF16) wgmma_rk_bf16_n128(d, a, db, accumulate);
  else if constexpr (In == HopperInput::kF16) wgmma_rk_f16_n128(d, a, db, accumulate);
  else wgmma_rs_e4m3_n128(d, a, db, accumulate);  // 8-bit B operands are K-major in either form
}

// Four 8x8 b16 matrices from shared memory into the mma A-fragment layout (lanes 8i..8i+7 give
// matrix i's row addresses).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ---- registers, barriers, math ------------------------------------------------------------
template <int Count>
__device__ __forceinline__ void regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Count));
}
template <int Count>
__device__ __forceinline__ void regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Count));
}
// Named barrier among `threads` threads (id 0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace attnkit::cuda_prefill_hopper
