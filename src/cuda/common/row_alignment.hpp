// Whether a tensor's rows can be copied in `bytes`-wide words: its data pointer and every stride
// but the last (contiguous) one are multiples of `bytes`. An absent tensor qualifies.
#pragma once
#include <cstdint>

#include "attnkit/tensor.hpp"

namespace attnkit::cuda_common {

inline bool aligned_rows(const TensorView& t, int bytes) {
  if (t.empty()) return true;
  if (reinterpret_cast<std::uintptr_t>(t.data) % bytes != 0) return false;
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (static_cast<std::int64_t>(t.strides[d] * dtype_size(t.dtype)) % bytes != 0) return false;
  }
  return true;
}

}  // namespace attnkit::cuda_common
