// Internal: overflow-checked integer arithmetic for the planner. Every count the planner reports
// (bytes, FLOPs, scratch elements) goes through these, so an overflow becomes an Error with a Fix
// instead of a wrapped, plausible-looking number.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::detail {

template <class T>
T checked_mul(T a, T b, const std::string& context, const std::string& what) {
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) {
    fail(context, what + " overflows " + std::to_string(sizeof(T) * 8) + " bits (" + std::to_string(a) +
                      " * " + std::to_string(b) + ")",
         "use smaller dimensions (or split the call into smaller batches / shorter sequences)");
  }
  return r;
}

template <class T>
T checked_add(T a, T b, const std::string& context, const std::string& what) {
  T r{};
  if (__builtin_add_overflow(a, b, &r)) {
    fail(context, what + " overflows " + std::to_string(sizeof(T) * 8) + " bits (" + std::to_string(a) +
                      " + " + std::to_string(b) + ")",
         "use smaller dimensions (or split the call into smaller batches / shorter sequences)");
  }
  return r;
}

// Product of several factors, each checked.
inline std::uint64_t checked_product(std::initializer_list<std::uint64_t> factors, const std::string& context,
                                     const std::string& what) {
  std::uint64_t r = 1;
  for (std::uint64_t f : factors) r = checked_mul(r, f, context, what);
  return r;
}

inline std::uint64_t checked_sum(std::initializer_list<std::uint64_t> terms, const std::string& context,
                                 const std::string& what) {
  std::uint64_t r = 0;
  for (std::uint64_t t : terms) r = checked_add(r, t, context, what);
  return r;
}

constexpr std::uint32_t div_ceil(std::uint32_t a, std::uint32_t b) { return a / b + (a % b != 0); }
constexpr std::uint64_t div_ceil(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

}  // namespace attnkit::detail
