#include "attnkit/dtype.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "attnkit/error.hpp"

namespace attnkit {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kE4M3: return "e4m3";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "half" || name == "fp16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  if (name == "e4m3" || name == "float8_e4m3fn" || name == "fp8_e4m3") return DType::kE4M3;
  fail("dtype", "unknown dtype '" + std::string(name) + "'", "use one of f32, f16, bf16 (or e4m3 for fp8 prefill inputs)");
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

std::uint8_t float_to_e4m3_bits(float x) {
  if (std::isnan(x)) return 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7E;  // satfinite: anything past the largest finite value is 448
  // Subnormals (below 2^-6) are multiples of 2^-9; a rounded count of 8 is the smallest normal,
  // whose bits (exponent 1, mantissa 0) are also 8. Scaling by a power of two is exact, and
  // nearbyint rounds ties to even in the default rounding mode.
  if (a < 0.015625f) return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0f));
  int exponent = 0;
  std::frexp(a, &exponent);  // a = f * 2^exponent, f in [0.5, 1)
  const int e = exponent - 1;  // a in [2^e, 2^(e+1)), e in -6..8
  int steps = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - e)));  // 8..16 eighths of 2^e
  int biased = e + 7;
  if (steps == 16) {  // rounded up into the next binade
    steps = 8;
    ++biased;
  }
  // a < 448 keeps (biased, steps) below (15, 15), so the NaN code 0x7F is never produced here.
  return static_cast<std::uint8_t>(sign | (biased << 3) | (steps - 8));
}

namespace {

float decode_e4m3(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

// All 256 values, decoded once: the golden reads every e4m3 element through this.
struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int code = 0; code < 256; ++code) value[code] = decode_e4m3(static_cast<std::uint8_t>(code));
  }
};

}  // namespace

float e4m3_bits_to_float(std::uint8_t bits) {
  static const E4m3Table table;  // built on first use (thread-safe), never written after
  return table.value[bits];
}

float load_as_float(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF16: return f16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kBF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kI32: return static_cast<float>(static_cast<const std::int32_t*>(data)[i]);
    case DType::kE4M3: return e4m3_bits_to_float(static_cast<const std::uint8_t*>(data)[i]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType t, std::size_t i, float value) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = value; return;
    case DType::kF16: static_cast<std::uint16_t*>(data)[i] = float_to_f16_bits(value); return;
    case DType::kBF16: static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(value); return;
    case DType::kI32: static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(value); return;
    case DType::kE4M3: static_cast<std::uint8_t*>(data)[i] = float_to_e4m3_bits(value); return;
  }
}

}  // namespace attnkit
