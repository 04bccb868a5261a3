// Shared by the Hopper prefill gpu tests (prefill_hopper_test.cpp, prefill_fp8_test.cpp): whether
// an sm_90 device is here, a visible skip when not, and device copies of host tensors.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::testing {

inline bool have_hopper() {
  if (!cuda::built() || cuda::device_count() == 0) return false;
  const Target t = cuda::target();
  return t.cc_major == 9 && t.cc_minor == 0;
}

// Skips the test, visibly, without a Hopper GPU; `kernel` names what was compiled but not run.
#define ATTNKIT_SKIP_WITHOUT_HOPPER(kernel)                                                    \
  if (!::attnkit::testing::have_hopper()) {                                                   \
    GTEST_SKIP() << "no Hopper (sm_90) device: the " << (kernel) << " was compiled, not run"; \
  }

// A device copy of a host tensor (same shape and strides), freed on destruction.
struct DeviceTensor {
  void* data = nullptr;
  TensorView view;
  explicit DeviceTensor(const HostTensor& h) : view(h.view) {
    const std::size_t bytes = h.bytes.empty() ? 16 : h.bytes.size();
    EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
    if (!h.bytes.empty()) EXPECT_EQ(cudaMemcpy(data, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    view.data = data;
    view.device = DeviceKind::kCuda;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(data); }
  void copy_to(HostTensor& h) const {
    if (!h.bytes.empty()) ASSERT_EQ(cudaMemcpy(h.bytes.data(), data, h.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

}  // namespace attnkit::testing
