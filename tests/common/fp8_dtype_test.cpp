// e4m3 (fp8, OCP e4m3fn) on the host: every one of the 256 codes, round-to-nearest-even at every
// pair of neighbours, saturation to +-448, NaN, subnormals, and the dtype's name and size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"

using namespace attnkit;

namespace {

// The format written out independently of the library: sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN.
double decode_by_definition(int code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? mantissa / 8.0 * std::pow(2.0, -6)
                                         : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

bool is_nan_code(int code) { return (code & 0x7F) == 0x7F; }

}  // namespace

TEST(E4M3, EveryCodeDecodesByTheDefinitionAndRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const float x = e4m3_bits_to_float(static_cast<std::uint8_t>(code));
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(x)) << code;
      EXPECT_EQ(float_to_e4m3_bits(x), 0x7F) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(x), decode_by_definition(code)) << code;
    EXPECT_EQ(std::signbit(x), (code & 0x80) != 0) << code;  // -0 (0x80) keeps its sign
    EXPECT_EQ(float_to_e4m3_bits(x), code) << code << " = " << x;
  }
}

TEST(E4M3, KnownValues) {
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x08), std::ldexp(1.0f, -6));      // smallest normal
  EXPECT_EQ(e4m3_bits_to_float(0x07), 7 * std::ldexp(1.0f, -9));   // largest subnormal
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));       // smallest subnormal
  EXPECT_EQ(float_to_e4m3_bits(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3_bits(-1.0f), 0xB8);
}

TEST(E4M3, PositiveCodesIncreaseStrictly) {
  for (int code = 1; code <= 0x7E; ++code) {
    EXPECT_LT(e4m3_bits_to_float(static_cast<std::uint8_t>(code - 1)), e4m3_bits_to_float(static_cast<std::uint8_t>(code)))
        << code;
  }
}

// Between every two neighbours (subnormal, across the subnormal/normal boundary, across binades,
// both signs): the midpoint goes to the even code, anything off the midpoint to the nearer one.
TEST(E4M3, RoundsToNearestEvenBetweenEveryPairOfNeighbours) {
  for (int sign : {0x00, 0x80}) {
    for (int low = 0; low < 0x7E; ++low) {
      const float a = e4m3_bits_to_float(static_cast<std::uint8_t>(sign | low));
      const float b = e4m3_bits_to_float(static_cast<std::uint8_t>(sign | (low + 1)));
      const float mid = (a + b) / 2;  // exact: both have 4 significant bits
      const int even = (low % 2 == 0) ? low : low + 1;
      EXPECT_EQ(float_to_e4m3_bits(mid), sign | even) << "between codes " << low << " and " << low + 1;
      EXPECT_EQ(float_to_e4m3_bits(std::nextafter(mid, a)), sign | low) << low;
      EXPECT_EQ(float_to_e4m3_bits(std::nextafter(mid, b)), sign | (low + 1)) << low;
    }
  }
}

TEST(E4M3, SaturatesToLargestFiniteLikeSatfinite) {
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1.0e6f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_e4m3_bits(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3_bits(-x), 0xFE) << -x;
  }
  // Just under the largest value rounds to it, and to its neighbour below where that is nearer.
  EXPECT_EQ(float_to_e4m3_bits(432.0f), 0x7E);  // tie between 416 (0x7D) and 448: 448's mantissa is even
  EXPECT_EQ(float_to_e4m3_bits(431.0f), 0x7D);
}

TEST(E4M3, SubnormalsAndUnderflow) {
  const float tiny = std::ldexp(1.0f, -9);
  EXPECT_EQ(float_to_e4m3_bits(tiny / 2), 0x00);  // tie between 0 and 2^-9: even is 0
  EXPECT_EQ(float_to_e4m3_bits(std::nextafter(tiny / 2, 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3_bits(-tiny / 2), 0x80);
  EXPECT_EQ(float_to_e4m3_bits(1.0e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_e4m3_bits(3 * tiny), 0x03);
  // 7.5 * 2^-9 is the tie between the largest subnormal (7) and the smallest normal (8): even is 8.
  EXPECT_EQ(float_to_e4m3_bits(7.5f * tiny), 0x08);
}

TEST(E4M3, NanBecomesTheCanonicalNanCode) {
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::signaling_NaN()), 0x7F);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0xFF)));
}

TEST(E4M3, NameSizeAndParse) {
  EXPECT_EQ(dtype_size(DType::kE4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kE4M3), "e4m3");
  EXPECT_EQ(parse_dtype("e4m3"), DType::kE4M3);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kE4M3);  // torch's name
  EXPECT_TRUE(is_fp8(DType::kE4M3));
  EXPECT_FALSE(is_storage_dtype(DType::kE4M3));  // ops that do not opt in keep rejecting it
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) EXPECT_FALSE(is_fp8(t));
  // The existing dtypes keep their values (the enum gained e4m3 at its end).
  EXPECT_EQ(static_cast<int>(DType::kI32), 3);
  EXPECT_EQ(static_cast<int>(DType::kE4M3), 4);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kE4M3}) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  }
  try {
    parse_dtype("e5m2");
    FAIL() << "accepted e5m2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
}

TEST(E4M3, LoadAndStoreThroughTheDtypeHelpers) {
  std::uint8_t buffer[4] = {};
  store_from_float(buffer, DType::kE4M3, 0, 1.0f);
  store_from_float(buffer, DType::kE4M3, 1, -3.3f);  // between -3.25 and -3.5: nearer -3.25
  store_from_float(buffer, DType::kE4M3, 2, 1000.0f);
  store_from_float(buffer, DType::kE4M3, 3, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(buffer[0], 0x38);
  EXPECT_EQ(load_as_float(buffer, DType::kE4M3, 1), -3.25f);
  EXPECT_EQ(load_as_float(buffer, DType::kE4M3, 2), 448.0f);
  EXPECT_TRUE(std::isnan(load_as_float(buffer, DType::kE4M3, 3)));
}
