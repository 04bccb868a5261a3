// Test support for the CUDA decode, append and fused tests (label gpu): device copies of host
// tensors, the skip when no GPU is present, and the golden comparison with DESIGN.md's tolerances.
// The device copies and the workspace serve the Hopper prefill tests too (hopper_support.hpp).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::testing::cuda_decode_tests {

#define ATTNKIT_SKIP_WITHOUT_GPU()                                                              \
  if (!::attnkit::cuda::built() || ::attnkit::cuda::device_count() == 0) {                      \
    GTEST_SKIP() << "no CUDA device: the CUDA decode kernels were compiled but not run here";   \
  }

// A device copy of a host tensor (same shape and strides), freed on destruction.
struct DeviceTensor {
  void* data = nullptr;
  std::size_t bytes = 0;
  TensorView view;

  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& h) : bytes(h.bytes.size()), view(h.view) {
    EXPECT_EQ(cudaMalloc(&data, bytes == 0 ? 16 : bytes), cudaSuccess);
    if (bytes > 0) EXPECT_EQ(cudaMemcpy(data, h.bytes.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    view.data = data;
    view.device = DeviceKind::kCuda;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (data != nullptr) cudaFree(data);
  }
  void copy_to(HostTensor& h) const {
    if (bytes > 0) ASSERT_EQ(cudaMemcpy(h.bytes.data(), data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

// Caller-owned device workspace of exactly the plan's size, optionally filled with `poison` bytes
// (0xFF: NaN as f32 and as e4m3) so a kernel that reads what it did not write is caught.
struct DeviceWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceWorkspace(std::size_t n, int poison = -1) : bytes(n) {
    if (n > 0) EXPECT_EQ(cudaMalloc(&data, n), cudaSuccess);
    if (n > 0 && poison >= 0) EXPECT_EQ(cudaMemset(data, poison, n), cudaSuccess);
  }
  DeviceWorkspace(const DeviceWorkspace&) = delete;
  DeviceWorkspace& operator=(const DeviceWorkspace&) = delete;
  ~DeviceWorkspace() {
    if (data != nullptr) cudaFree(data);
  }
  Workspace view() const { return view(bytes); }
  Workspace view(std::size_t size) const { return Workspace{data, size, DeviceKind::kCuda}; }
};

// DESIGN.md's parity rule for the storage dtypes involved (the loosest one applies). An e4m3 cache's
// quantization is in the golden too, so it counts as the f16 its values are computed in.
inline double rel_l2_limit(DType kv, DType q, DType out) {
  const DType kv_compute = is_fp8(kv) ? DType::kF16 : kv;
  return std::max({rel_l2_tolerance_for(kv_compute), rel_l2_tolerance_for(q), rel_l2_tolerance_for(out)});
}

inline void expect_matches_golden(const HostTensor& out, const std::vector<double>& golden, DType kv, DType q,
                                  DType out_dtype, const std::string& note) {
  const Comparison c = compare(out, golden);
  EXPECT_EQ(c.nan_count, 0u) << note << " " << describe(c);
  EXPECT_LE(c.rel_l2, rel_l2_limit(kv, q, out_dtype)) << note << " " << describe(c);
  if (kv == DType::kF32 && q == DType::kF32 && out_dtype == DType::kF32) {
    EXPECT_LE(c.max_abs, kFlashAttentionOutputToleranceAbs) << note << " " << describe(c);
  }
}

// LSE: -inf exactly where the golden has no visible key, else within max(1e-3, rel * max(1, |lse|))
// with rel the output's rel-L2 rule for the dtypes involved (as `attnkit check` does): 16-bit
// inputs run on tensor cores with a 16-bit q, so their scores carry the dtype's rounding.
// `slack` (optional, per row) widens the bound where the kernel documents an extra rounding.
inline void expect_lse_matches(const HostTensor& lse, const std::vector<double>& golden, const std::string& note,
                               double rel, const std::vector<double>& slack = {}) {
  ASSERT_EQ(lse.numel(), golden.size()) << note;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = lse.get(i);
    if (std::isinf(golden[i])) {
      EXPECT_TRUE(std::isinf(a) && a < 0) << note << " lse[" << i << "]=" << a << " expected -inf";
    } else {
      const double extra = slack.empty() ? 0.0 : slack[i];
      EXPECT_NEAR(a, golden[i], std::max(1e-3, rel * std::max(1.0, std::abs(golden[i]))) + extra)
          << note << " lse[" << i << "]";
    }
  }
}

}  // namespace attnkit::testing::cuda_decode_tests
