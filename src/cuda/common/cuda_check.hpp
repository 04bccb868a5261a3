// Shared CUDA helpers (decode and prefill): turn a CUDA status into attnkit::Error with a Fix.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda_common {

inline void check(cudaError_t status, const std::string& context, const char* what) {
  if (status != cudaSuccess) {
    fail(context, std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")",
         "check that the device is present and the tensors are valid device memory");
  }
}

// After a launch: a configuration error (too much shared memory, bad grid) shows here at once.
inline void check_launch(const std::string& context, const char* kernel) { check(cudaGetLastError(), context, kernel); }

}  // namespace attnkit::cuda_common
