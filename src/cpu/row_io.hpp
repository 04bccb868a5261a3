// Internal: load and store one contiguous row (head_dim elements) of any storage dtype as f32.
// The dtype switch happens once per row, not per element.
#pragma once
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cpu::detail {

inline void load_row(const void* base, DType dtype, std::int64_t offset, std::int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_float(src[i]);
      return;
    }
    case DType::kBF16: {
      const auto* src = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
      return;
    }
    case DType::kI32: {
      const auto* src = static_cast<const std::int32_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
      return;
    }
    case DType::kE4M3: {  // the stored value (an e4m3 decode cache; its scale is applied by the caller)
      const auto* src = static_cast<const std::uint8_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = e4m3_bits_to_float(src[i]);
      return;
    }
  }
}

inline void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t n, const float* src) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(base) + offset, src, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_f16_bits(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* dst = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
      return;
    }
    case DType::kI32: {
      auto* dst = static_cast<std::int32_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::int32_t>(src[i]);
      return;
    }
    case DType::kE4M3: {
      auto* dst = static_cast<std::uint8_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_e4m3_bits(src[i]);
      return;
    }
  }
}

// Element i of a rank-1 i32 index tensor (lengths, positions, offsets) on the host.
inline std::int64_t index_at(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]];
}

}  // namespace attnkit::cpu::detail
