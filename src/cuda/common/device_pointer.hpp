// Shared CUDA helpers (decode and prefill): host-side checks that a tensor really is device memory
// (a host pointer passed as cuda would fault inside a kernel, so it is rejected first) and that it
// is 16-byte aligned where kernels use 16-byte vector copies. Neither synchronises.
#pragma once
#include <string>

#include "attnkit/tensor.hpp"

namespace attnkit::cuda_common {

// Where `data` lives: the CUDA device it was allocated on, and whether it is managed memory (then
// every device may read it). An error with a Fix for host memory or a pointer CUDA does not know.
struct DeviceMemory {
  int device = 0;
  bool managed = false;
};
DeviceMemory device_of_memory(const void* data, const std::string& context, const std::string& name);

// Error with a Fix unless `data` is device memory of the current device (or managed memory).
// Null / empty = skipped.
void require_device_memory(const void* data, const std::string& context, const std::string& name);
// A view of no elements is never read or written (an idle extend step's q / out, whose pointer may
// be null or, from Python, a host marker), so only views with elements are checked.
inline void require_device_memory(const TensorView& t, const std::string& context, const std::string& name) {
  if (!t.empty() && t.numel() > 0) require_device_memory(t.data, context, name);
}

// Error with a Fix unless the base pointer and every stride except the last (in bytes) are
// multiples of 16, so each row can be moved with 16-byte vector copies.
void require_vector_aligned(const TensorView& t, const std::string& context, const std::string& name);

}  // namespace attnkit::cuda_common
