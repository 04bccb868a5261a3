// Shared by the Hopper prefill gpu tests (prefill_hopper_test.cpp, prefill_fp8_test.cpp): whether
// an sm_90 device is here, a visible skip when not, and device copies of host tensors.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "attnkit/attnkit.hpp"
#include "cuda/decode_support.hpp"

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

// Device copies of host tensors and the (poisonable) workspace: decode_support.hpp's.
using cuda_decode_tests::DeviceTensor;
using cuda_decode_tests::DeviceWorkspace;

}  // namespace attnkit::testing
