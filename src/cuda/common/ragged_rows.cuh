// Ragged batches packed token-major: which sequence a packed row belongs to.
#pragma once
#include <cstdint>

namespace attnkit::cuda_common {

// The last sequence b in [0, batch) whose first row, offsets[b] clamped to [0, rows], is <= row.
// Device offsets are not checked on the host, so they are clamped here, and decreasing offsets
// give a well-defined (if useless) answer instead of an out-of-range one.
__device__ inline int sequence_of_row(const std::int32_t* offsets, int batch, int rows, int row) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (min(max(offsets[mid], 0), rows) <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace attnkit::cuda_common
