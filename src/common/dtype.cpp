#include "attnkit/dtype.hpp"

#include <cstring>

#include "attnkit/error.hpp"

namespace attnkit {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "half" || name == "fp16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  fail("dtype", "unknown dtype '" + std::string(name) + "'", "use one of f32, f16, bf16");
}

static std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
static float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) { return bits_float(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_f16_bits(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: add 0.5 to shift the bits into place
    const float shifted = bits_float(abs) + 0.5f;
    return static_cast<std::uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
  }
  std::uint32_t m = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent, round to even
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;  // 2^-24
    return bits_float(float_bits(mag) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

float load_as_float(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF16: return f16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kBF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kI32: return static_cast<float>(static_cast<const std::int32_t*>(data)[i]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType t, std::size_t i, float value) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = value; return;
    case DType::kF16: static_cast<std::uint16_t*>(data)[i] = float_to_f16_bits(value); return;
    case DType::kBF16: static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(value); return;
    case DType::kI32: static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(value); return;
  }
}

}  // namespace attnkit
