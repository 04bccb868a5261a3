// Element types. Attention storage is f32, f16 or bf16 (compute is always f32);
// i32 is for index tensors (lengths, positions, offsets, page tables).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnkit {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32 };

constexpr std::size_t dtype_size(DType t) {
  return t == DType::kF16 || t == DType::kBF16 ? 2 : 4;
}
constexpr bool is_storage_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

std::string_view dtype_name(DType t);            // "f32", "f16", "bf16", "i32"
DType parse_dtype(std::string_view name);         // throws Error naming the accepted spellings

// Host-side conversions, round-to-nearest-even, NaN preserved.
std::uint16_t float_to_f16_bits(float x);
float f16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(std::uint16_t bits);

// Element i of a buffer of dtype t, as float (t must be a storage dtype).
float load_as_float(const void* data, DType t, std::size_t i);
void store_from_float(void* data, DType t, std::size_t i, float value);

}  // namespace attnkit
