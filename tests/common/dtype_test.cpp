#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/problem.hpp"

using namespace attnkit;

TEST(DType, HalfRoundTripsRepresentableValues) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(x)), x) << x;
  }
  EXPECT_TRUE(std::isinf(f16_bits_to_float(float_to_f16_bits(65520.0f))));  // ties to even -> inf
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, HalfRoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(1.0f + 0.00048828125f)), 1.0f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(1.0f + 3 * 0.00048828125f)), 1.0f + 4 * 0.00048828125f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, ParseNamesTheAcceptedSpellings) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  try {
    parse_dtype("f8");
    FAIL() << "accepted f8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos);
  }
}

TEST(VisibleKeys, DecodeWindowSkipsKeysBeforeTotalMinusWindow) {
  // decode: query at total_len - 1 = 9; window 4 sees keys 6..9.
  KeyRange r = visible_keys(9, 10, true, 4);
  EXPECT_EQ(r.begin, 6);
  EXPECT_EQ(r.end, 10);
  EXPECT_EQ(visible_keys(9, 10, true, 100).begin, 0);  // window longer than the sequence
  EXPECT_EQ(visible_keys(9, 10, true, 1).size(), 1);
}

TEST(VisibleKeys, WindowsPastEveryPositionAreNoWindowWithoutOverflow) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t pos : {std::int64_t{-5}, std::int64_t{0}, std::int64_t{66}}) {  // q_len > kv_len: rows before 0
    const KeyRange r = visible_keys(pos, 67, false, kMax);
    EXPECT_EQ(r.begin, 0) << pos;
    EXPECT_EQ(r.end, 67) << pos;
  }
  EXPECT_EQ(visible_keys(kMax - 1, kMax, true, kMax).begin, 0);
  EXPECT_EQ(visible_keys(kMax - 1, kMax, true, 2).begin, kMax - 2);
}

TEST(VisibleKeys, CausalIsBottomRightAligned) {
  // q_len 2 against kv_len 5: row 0 sits at absolute position 3.
  KeyRange r = visible_keys(0 + (5 - 2), 5, true, 0);
  EXPECT_EQ(r.end, 4);
  EXPECT_EQ(visible_keys(3, 5, false, 0).end, 5);
}
