// Bad inputs to the CUDA decode, append and fused entry points are rejected as on the CPU: an Error
// with a Fix, thrown before any launch, so outputs and caches stay exactly as they were (label gpu).
#include <cstring>
#include <random>

#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct Fixture {
  DecodeProblem problem;
  HostTensor q, k, v, lengths, out, lse;
  Fixture() {
    problem.batch = 1, problem.num_heads = 8, problem.kv_heads = 2, problem.head_dim = 64;
    problem.max_seq = 4096, problem.kv_len = 4096;  // long enough for the planner to split
    std::mt19937_64 rng(fresh_seed());
    q = HostTensor(DType::kBF16, {1, 8, 64});
    k = HostTensor(DType::kBF16, {1, 2, 4096, 64});
    v = HostTensor(DType::kBF16, {1, 2, 4096, 64});
    lengths = HostTensor(DType::kI32, {1});
    out = HostTensor(DType::kBF16, {1, 8, 64});
    lse = HostTensor(DType::kF32, {1, 8});
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
    lengths.i32()[0] = 4000;
    poison(out);
    poison(lse);
  }
};

// Runs `call`, expects an Error whose message holds "Fix:", and checks `out` was not written.
template <class Call>
void expect_rejected(Call call, DeviceTensor& out, const HostTensor& before, const char* what) {
  try {
    call();
    ADD_FAILURE() << what << ": no Error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << what << ": " << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  HostTensor after(before.view.dtype, {before.view.shape[0], before.view.shape[1], before.view.shape[2]});
  out.copy_to(after);
  EXPECT_EQ(std::memcmp(after.bytes.data(), before.bytes.data(), before.bytes.size()), 0) << what << ": out was written";
}

TEST(DecodeCudaRejects, BadInputsThrowBeforeWriting) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  Fixture f;
  const DecodePlan plan = plan_decode(f.problem, cuda::target());
  ASSERT_GT(plan.partition.sequence_splits, 1u) << to_table(plan);
  DeviceTensor q(f.q), k(f.k), v(f.v), lengths(f.lengths), out(f.out), lse(f.lse);
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  const DecodeTensors good{q.view, k.view, v.view, lengths.view, out.view, lse.view};

  // A host pointer where a device pointer is needed (the view claims cuda).
  DecodeTensors host_q = good;
  host_q.q.data = f.q.bytes.data();
  expect_rejected([&] { cuda::decode(plan, host_q, ws.view()); }, out, f.out, "host q");
  DecodeTensors host_k = good;
  host_k.k_cache.data = f.k.bytes.data();
  expect_rejected([&] { cuda::decode(plan, host_k, ws.view()); }, out, f.out, "host k_cache");
  // A view marked as CPU memory.
  DecodeTensors cpu_out = good;
  cpu_out.out.device = DeviceKind::kCpu;
  expect_rejected([&] { cuda::decode(plan, cpu_out, ws.view()); }, out, f.out, "cpu view");
  // Workspace smaller than the plan's, or none.
  expect_rejected([&] { cuda::decode(plan, good, Workspace{ws.data, ws.bytes - 4, DeviceKind::kCuda}); }, out, f.out,
                  "small workspace");
  expect_rejected([&] { cuda::decode(plan, good, Workspace{}); }, out, f.out, "no workspace");
  // Host memory as the workspace.
  std::vector<std::uint8_t> host_ws(ws.bytes);
  expect_rejected([&] { cuda::decode(plan, good, Workspace{host_ws.data(), host_ws.size(), DeviceKind::kCuda}); }, out,
                  f.out, "host workspace");
  // Wrong shape and dtype.
  DecodeTensors wrong_dtype = good;
  wrong_dtype.k_cache.dtype = DType::kF16;
  expect_rejected([&] { cuda::decode(plan, wrong_dtype, ws.view()); }, out, f.out, "dtype");
  DecodeTensors wrong_shape = good;
  wrong_shape.q.shape[1] = 4;
  expect_rejected([&] { cuda::decode(plan, wrong_shape, ws.view()); }, out, f.out, "shape");
  // K rows not 16-byte aligned (an element offset of 1).
  DecodeTensors misaligned = good;
  misaligned.k_cache.data = static_cast<std::uint16_t*>(k.data) + 1;
  misaligned.k_cache.shape[2] = 4095;
  misaligned.v_cache.shape[2] = 4095;
  DecodeProblem shorter = f.problem;
  shorter.max_seq = 4095, shorter.kv_len = 4095;
  const DecodePlan shorter_plan = plan_decode(shorter, cuda::target());
  DeviceWorkspace ws2(shorter_plan.evidence.workspace_bytes);
  expect_rejected([&] { cuda::decode(shorter_plan, misaligned, ws2.view()); }, out, f.out, "misaligned k");
  // Left padding: key_starts in host memory, of the wrong dtype or shape.
  HostTensor starts(DType::kI32, {1});
  starts.i32()[0] = 10;
  DeviceTensor device_starts(starts);
  DecodeTensors host_starts = good;
  host_starts.key_starts = device_starts.view;
  host_starts.key_starts.data = starts.bytes.data();
  expect_rejected([&] { cuda::decode(plan, host_starts, ws.view()); }, out, f.out, "host key_starts");
  DecodeTensors starts_dtype = good;
  starts_dtype.key_starts = device_starts.view;
  starts_dtype.key_starts.dtype = DType::kF32;
  expect_rejected([&] { cuda::decode(plan, starts_dtype, ws.view()); }, out, f.out, "key_starts dtype");
  DecodeTensors starts_shape = good;
  starts_shape.key_starts = device_starts.view;
  starts_shape.key_starts.shape[0] = 2;
  expect_rejected([&] { cuda::decode(plan, starts_shape, ws.view()); }, out, f.out, "key_starts shape");
  // A plan made for the CPU.
  const DecodePlan cpu_plan = plan_decode(f.problem, cpu_target(1));
  expect_rejected([&] { cuda::decode(cpu_plan, good, ws.view()); }, out, f.out, "cpu plan");

  // The good call still works after all of that.
  cuda::decode(plan, good, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.copy_to(f.out);
  const reference::Result golden = reference::decode(f.problem, DecodeTensors{f.q.view, f.k.view, f.v.view, f.lengths.view, {}, {}});
  expect_matches_golden(f.out, golden.out, DType::kBF16, DType::kBF16, DType::kBF16, "after rejects");
}

// Memory of another GPU (Python's DLPack capsules no longer pass through torch's own device check,
// so the library's is the one that counts).
TEST(DecodeCudaRejects, AnotherDevicesMemoryIsRejected) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda::device_count();
  Fixture f;
  const DecodePlan plan = plan_decode(f.problem, cuda::target(0));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceTensor q(f.q), k(f.k), v(f.v), lengths(f.lengths), out(f.out), lse(f.lse);
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  DeviceTensor k_elsewhere(f.k);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DecodeTensors other = {q.view, k_elsewhere.view, v.view, lengths.view, out.view, lse.view};
  try {
    cuda::decode(plan, other, ws.view());
    ADD_FAILURE() << "no Error for k_cache on device 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostTensor after(f.out.view.dtype, {1, 8, 64});
  out.copy_to(after);
  EXPECT_EQ(std::memcmp(after.bytes.data(), f.out.bytes.data(), f.out.bytes.size()), 0) << "out was written";
}

TEST(DecodeCudaRejects, HostPointersInAppendAndFusedLeaveCacheUntouched) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  Fixture f;
  HostTensor k_new(DType::kBF16, {1, 2, 64}), v_new(DType::kBF16, {1, 2, 64}), pos(DType::kI32, {1});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  pos.i32()[0] = 10;
  DeviceTensor k(f.k), v(f.v), kn(k_new), vn(v_new), positions(pos), q(f.q), out(f.out);
  AppendTensors append{kn.view, vn.view, k.view, v.view, positions.view};
  append.k_new.data = k_new.bytes.data();  // host memory
  EXPECT_THROW(cuda::append_kv(append), Error);
  DecodeProblem fp = f.problem;
  const DecodePlan plan = plan_decode(fp, cuda::target());
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  FusedDecodeTensors fused{q.view, kn.view, vn.view, k.view, v.view, positions.view, out.view, {}};
  fused.positions.data = pos.bytes.data();  // host memory
  EXPECT_THROW(cuda::fused_rope_append_decode(plan, fused, RopeSpec{}, ws.view()), Error);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostTensor k_after(DType::kBF16, {1, 2, 4096, 64});
  k.copy_to(k_after);
  EXPECT_EQ(std::memcmp(k_after.bytes.data(), f.k.bytes.data(), f.k.bytes.size()), 0) << "k cache was written";
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
