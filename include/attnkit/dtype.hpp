// Element types. Attention storage is f32, f16 or bf16 (compute is always f32);
// i32 is for index tensors (lengths, positions, offsets, page tables); e4m3 (fp8, OCP "e4m3fn":
// 4 exponent bits with bias 7, 3 mantissa bits, no infinities, 0x7F/0xFF are NaN, largest 448)
// is an input-only dtype with a per-tensor scale that only the ops which opt in accept (CUDA
// prefill on Hopper, PrefillTensors::scales; the contiguous KV cache of decode and append on both
// backends, DecodeTensors::kv_scales); every other op rejects it like any non-storage dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace attnkit {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32, kE4M3 };

constexpr std::size_t dtype_size(DType t) {
  return t == DType::kE4M3 ? 1 : t == DType::kF16 || t == DType::kBF16 ? 2 : 4;
}
// The dtypes every attention op stores and reads (e4m3 is not one: see above).
constexpr bool is_storage_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
constexpr bool is_fp8(DType t) { return t == DType::kE4M3; }

std::string_view dtype_name(DType t);            // "f32", "f16", "bf16", "i32", "e4m3"
DType parse_dtype(std::string_view name);         // throws Error naming the accepted spellings

// Host-side conversions, round-to-nearest-even, NaN preserved.
std::uint16_t float_to_f16_bits(float x);
float f16_bits_to_float(std::uint16_t bits);
// (Inline and branch-free, so a loop of them vectorizes: the CPU kernels' output rows.)
inline std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
float bf16_bits_to_float(std::uint16_t bits);
// e4m3: round to nearest even, saturating to +-448 (as PTX cvt.rn.satfinite.e4m3x2.f32; infinities
// too), NaN -> 0x7F. Decoding is exact (subnormals down to 2^-9); 0x7F and 0xFF decode to NaN.
std::uint8_t float_to_e4m3_bits(float x);
float e4m3_bits_to_float(std::uint8_t bits);

// Element i of a buffer of dtype t, as float (t must be a storage dtype, or e4m3: its stored value,
// without any per-tensor scale).
float load_as_float(const void* data, DType t, std::size_t i);
void store_from_float(void* data, DType t, std::size_t i, float value);

}  // namespace attnkit
