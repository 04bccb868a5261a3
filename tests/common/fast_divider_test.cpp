// The launch-time divider of the CUDA index decodes (src/cuda/common/fast_divider.hpp), checked on
// the host against the division it replaces.
#include "cuda/common/fast_divider.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using attnkit::cuda_common::FastDivider;

TEST(FastDivider, MatchesDivisionForSmallDivisorsAndEveryShortNumerator) {
  for (std::uint32_t d = 1; d <= 300; ++d) {
    const FastDivider div(d);
    for (int n = 0; n < 70000; ++n) ASSERT_EQ(div.quotient(n), n / static_cast<int>(d)) << n << " / " << d;
  }
}

TEST(FastDivider, MatchesDivisionNearPowersOfTwoAndAtTheTopOfTheRange) {
  std::vector<std::uint32_t> divisors = {0x7fffffffu, 0x7ffffffeu, 3, 5, 7, 80, 96, 132, 264};
  for (int k = 1; k <= 30; ++k) {
    for (std::uint32_t delta : {0u, 1u}) divisors.push_back((1u << k) + delta);
    divisors.push_back((1u << k) - 1);
  }
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<std::uint32_t> random_divisor(1, 0x7fffffffu);
  for (int i = 0; i < 20000; ++i) divisors.push_back(random_divisor(rng));
  std::uniform_int_distribution<int> numerator(0, 0x7fffffff);
  for (const std::uint32_t d : divisors) {
    const FastDivider div(d);
    const std::int64_t di = d;
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, di - 1, di, di + 1, 2 * di - 1, 2 * di,
                                 std::int64_t{0x7ffffffe}, std::int64_t{0x7fffffff}, std::int64_t{numerator(rng)}}) {
      if (n > 0x7fffffff) continue;
      ASSERT_EQ(div.quotient(static_cast<int>(n)), n / di) << n << " / " << d;
    }
  }
}

TEST(FastDivider, DefaultDividesByOne) {
  const FastDivider div;
  EXPECT_EQ(div.divisor, 1);
  for (int n : {0, 1, 17, 0x7fffffff}) EXPECT_EQ(div.quotient(n), n);
}

}  // namespace
