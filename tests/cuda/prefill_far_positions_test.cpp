// CUDA prefill rows at positions past 2^24 (label gpu): the causal diagonal and the window's start
// stay exact there, on the planner's kernel (the Hopper one on sm_90) and the tiled one. K and V
// hold kv_len = 2^25 + 77 keys on the device (zeros but near the queries' windows); the golden
// reads the same rows from a host reservation mapped only there (tests/support/sparse_rows.hpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_shapes.hpp"
#include "support/far_positions.hpp"

namespace attnkit::testing {
namespace {

// The device copy of a SparseRows: the whole span allocated, zeros where the host is unmapped.
struct DeviceRows {
  void* data = nullptr;
  TensorView view;
  explicit DeviceRows(const SparseRows& host) : view(host.view) {
    EXPECT_EQ(cudaMalloc(&data, host.total_bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(data, 0, host.mapped_offset()), cudaSuccess);
    const std::size_t off = host.mapped_offset();
    EXPECT_EQ(cudaMemcpy(static_cast<char*>(data) + off, static_cast<const char*>(host.view.data) + off,
                         host.total_bytes() - off, cudaMemcpyHostToDevice),
              cudaSuccess);
    view.data = data;
    view.device = DeviceKind::kCuda;
  }
  ~DeviceRows() { cudaFree(data); }
  DeviceRows(const DeviceRows&) = delete;
  DeviceRows& operator=(const DeviceRows&) = delete;
};

struct DeviceTensor {
  void* data = nullptr;
  TensorView view;
  explicit DeviceTensor(const HostTensor& h) : view(h.view) {
    EXPECT_EQ(cudaMalloc(&data, h.bytes.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    view.data = data;
    view.device = DeviceKind::kCuda;
  }
  ~DeviceTensor() { cudaFree(data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  void copy_to(HostTensor& h) const {
    ASSERT_EQ(cudaMemcpy(h.bytes.data(), data, h.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

TEST(PrefillFarPositionsCuda, CausalAndWindowMasksStayExactPast2To24) {
  if (!cuda::built() || cuda::device_count() == 0) {
    GTEST_SKIP() << "no CUDA device: the CUDA prefill kernels were compiled but not run here";
  }
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (bool causal : {true, false}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      FarPositionsCase c(dtype, causal, /*q_len=*/300, /*window=*/200, /*head_dim=*/64, rng);
      const PrefillProblem& p = c.p;
      HostTensor &out = c.out, &lse = c.lse;
      const reference::Result golden = reference::prefill(p, c.tensors());
      DeviceRows dk(c.k), dv(c.v);
      DeviceTensor dq(c.q);
      const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : " non-causal") +
                               " (ATTNKIT_TEST_SEED=" + std::to_string(seed) + ")";
      const Target gpu = cuda::target();
      for (const PrefillPlan& plan : {plan_prefill(p, gpu), plan_prefill(p, gpu, KernelFamily::kCooperativeTiled)}) {
        poison(out);
        poison(lse);
        DeviceTensor dout(out), dlse(lse);
        void* ws = nullptr;
        if (plan.evidence.workspace_bytes > 0) ASSERT_EQ(cudaMalloc(&ws, plan.evidence.workspace_bytes), cudaSuccess);
        cuda::prefill(plan, PrefillTensors{dq.view, dk.view, dv.view, dout.view, dlse.view, {}, {}},
                      Workspace{ws, plan.evidence.workspace_bytes, DeviceKind::kCuda});
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        if (ws != nullptr) cudaFree(ws);
        dout.copy_to(out);
        dlse.copy_to(lse);
        EXPECT_EQ(prefill_parity_failure(out, golden.out, dtype), "") << what << "\n" << to_table(plan);
        EXPECT_EQ(prefill_lse_failure(lse, golden.lse), "") << what << " " << to_string(plan.partition.family);
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::testing
