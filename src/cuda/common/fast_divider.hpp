// Division by a divisor fixed at launch, without a division instruction: a 32-bit integer
// division is a ~20-instruction dependent chain on the GPU, and index decodes that run once per
// work item (page lookups, persistent-tile schedules) sit on the critical path.
// n / d = (umulhi(n, magic) + n) >> shift for 0 <= n < 2^31 and any d >= 1, with
// shift = ceil(log2 d) and magic = 2^32 (2^shift - d) / d + 1. Plain C++ (host code fills it; the
// host tests check it), __umulhi on the device.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_HOST_DEVICE __host__ __device__
#else
#define ATTNKIT_HOST_DEVICE
#endif

namespace attnkit::cuda_common {

struct FastDivider {
  std::uint32_t magic = 1;  // the default divides by 1
  int shift = 0;
  int divisor = 1;

  constexpr FastDivider() = default;
  constexpr explicit FastDivider(std::uint32_t d) : divisor(static_cast<int>(d)) {
    while ((std::uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }

  // n / divisor for 0 <= n < 2^31.
  ATTNKIT_HOST_DEVICE int quotient(int n) const {
    const auto u = static_cast<std::uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const std::uint32_t hi = __umulhi(u, magic);
#else
    const auto hi = static_cast<std::uint32_t>((static_cast<std::uint64_t>(u) * magic) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
};

}  // namespace attnkit::cuda_common

#undef ATTNKIT_HOST_DEVICE
