// Shared device helpers (decode and prefill): element conversions between the storage dtypes and
// f32: one element at a run-time dtype (out, written once per block; the stand-alone RoPE and
// merge), per-type traits (q, read at its compile-time type), and one 16-byte vector at a
// compile-time type (the K/V stream).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attnkit/dtype.hpp"

namespace attnkit::cuda_common {

__device__ __forceinline__ void store_from_f32(void* base, DType dtype, std::int64_t i, float x) {
  switch (dtype) {
    case DType::kF16: static_cast<__half*>(base)[i] = __float2half_rn(x); break;
    case DType::kBF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<float*>(base)[i] = x; break;
  }
}

__device__ __forceinline__ float load_as_f32(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

template <class T> struct StorageTraits;
template <> struct StorageTraits<float> {
  static constexpr DType kDType = DType::kF32;
  __device__ static float to_f32(float x) { return x; }
  __device__ static float from_f32(float x) { return x; }
};
template <> struct StorageTraits<__half> {
  static constexpr DType kDType = DType::kF16;
  __device__ static float to_f32(__half x) { return __half2float(x); }
  __device__ static __half from_f32(float x) { return __float2half_rn(x); }
};
template <> struct StorageTraits<__nv_bfloat16> {
  static constexpr DType kDType = DType::kBF16;
  __device__ static float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }
};

// One 16-byte vector to f32: 4 floats, or 8 halves / bfloat16s.
__device__ __forceinline__ void vec16_to_f32(const uint4& v, float* out, float) {
  out[0] = __uint_as_float(v.x);
  out[1] = __uint_as_float(v.y);
  out[2] = __uint_as_float(v.z);
  out[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void vec16_to_f32(const uint4& v, float* out, __half) {
  const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void vec16_to_f32(const uint4& v, float* out, __nv_bfloat16) {
  const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 is the top half of an f32: two bit operations per pair
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

}  // namespace attnkit::cuda_common
