// Shared CUDA helpers (decode and prefill): host-side checks that a tensor really is device memory
// (a host pointer passed as cuda would fault inside a kernel, so it is rejected first) and that it
// is 16-byte aligned where kernels use 16-byte vector copies. Neither synchronises.
#pragma once
#include <string>

#include "attnkit/tensor.hpp"

namespace attnkit::cuda_common {

// Error with a Fix unless `data` is device (or managed) memory of a CUDA device. Empty = skipped.
void require_device_memory(const void* data, const std::string& context, const std::string& name);
inline void require_device_memory(const TensorView& t, const std::string& context, const std::string& name) {
  if (!t.empty()) require_device_memory(t.data, context, name);
}

// Error with a Fix unless the base pointer and every stride except the last (in bytes) are
// multiples of 16, so each row can be moved with 16-byte vector copies.
void require_vector_aligned(const TensorView& t, const std::string& context, const std::string& name);

}  // namespace attnkit::cuda_common
