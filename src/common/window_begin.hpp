// The first key a query at position `pos` sees under a sliding window of `window` keys (0: none):
// max(0, pos - window + 1), written so that no window up to 2^63 - 1 overflows, also at the negative
// positions of prefill rows when q_len > kv_len. A window past every position is no window (callers
// pass INT64_MAX for "unbounded"; a planner fuzzer found the plain form overflowing there).
// Shared by the host (visible_keys, the planners, the CPU bodies) and the CUDA prefill kernels.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_WINDOW_FN __host__ __device__ __forceinline__
#else
#define ATTNKIT_WINDOW_FN inline
#endif

namespace attnkit::detail {

ATTNKIT_WINDOW_FN std::int64_t window_begin(std::int64_t pos, std::int64_t window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

}  // namespace attnkit::detail
