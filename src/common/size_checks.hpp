// Internal: the size checks every problem and tensor validation shares. Element counts stay below
// 2^62 so byte counts and offsets fit in int64.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::detail {

inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 62;

inline void require_positive(const char* context, const char* name, std::int64_t value) {
  if (value <= 0)
    fail(context, std::string(name) + "=" + std::to_string(value) + " is not positive",
         std::string("pass ") + name + " >= 1");
}

// Multiplies non-negative factors; fails with `problem` and `fix` when the product leaves the range.
inline std::int64_t checked_product(const char* context, const std::string& problem, const std::string& fix,
                                    std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (f != 0 && product > kMaxElements / f) fail(context, problem, fix);
    product *= f;
  }
  return product;
}

}  // namespace attnkit::detail
