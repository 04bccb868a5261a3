// Internal: how the vector wrappers (vec_avx512.hpp, vec_avx2.hpp, vec_scalar.hpp) read e4m3
// (OCP e4m3fn) bytes as f32: through f16, with no table and no branch.
// An e4m3 byte s eeee mmm (exponent bias 7) placed in f16's bits as s 0eeee mmm0000000 (bias 15)
// is its value times 2^-8: exponent field e weighs 2^(e - 15) instead of 2^(e - 7), and e = 0 (the
// e4m3 subnormals) lands on f16 subnormals with the same mantissa. The f16 -> f32 conversion
// (vcvtph2ps) is exact, subnormals included, and ignores MXCSR's DAZ, so times 2^8 every finite
// e4m3 code reads exactly. The wrappers return the f16 value (load_e4m3_over_256); the kernel
// bodies fold the 2^8 into their score and output scales (fast_body.hpp, e4m3_task).
// The NaN codes 0x7f / 0xff read as +-480 (exponent 15, mantissa 7), not as NaN as the golden
// reads them: a cache written by append never holds them (it saturates at +-448), and a check per
// lane would cost more than the conversion.
#pragma once
#include <cstdint>

namespace attnkit::cpu::simd {

// 2^8: the f16 value of the bits below times this is the e4m3 value (folded into the bodies' scales).
inline constexpr float kE4m3FromF16 = 256.0f;

// The vector units build the f16 bits in two integer ops after widening: the byte sign-extended to
// 16 bits and shifted left by 7 has the sign at bits 15 and 14 and exponent and mantissa at 7-13;
// clearing bit 14 leaves the f16 bits. Zero-extending, masking and or-ing the two fields took five
// (b1 / b4 x 64k group-4 decode, two threads of a Zen 4: 10.0 / 36.7 ms -> 8.0 / 33.9, one run each).
inline constexpr short kE4m3F16Mask = static_cast<short>(0xbfff);

// The f16 bits (sign at bit 15, exponent and mantissa at bits 7-13) of an e4m3 byte, times 2^-8.
constexpr std::uint16_t e4m3_as_f16_bits(std::uint8_t b) {
  return static_cast<std::uint16_t>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
}

}  // namespace attnkit::cpu::simd
