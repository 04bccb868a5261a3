// CUDA prefill against the float64 golden (label gpu): every shape of prefill_shapes.hpp through
// the planner's choice, the tiled kernel forced with a key split, and strided (BSHD) views.
// Skips, visibly, where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_shapes.hpp"

namespace attnkit::testing {
namespace {

#define SKIP_WITHOUT_GPU()                                                                     \
  if (!cuda::built() || cuda::device_count() == 0) {                                           \
    GTEST_SKIP() << "no CUDA device: the CUDA prefill kernels were compiled but not run here"; \
  }

// A device copy of a host tensor (same shape and strides), freed on destruction.
struct DeviceCopy {
  void* data = nullptr;
  std::size_t bytes = 0;
  TensorView view;

  DeviceCopy() = default;
  explicit DeviceCopy(const HostTensor& h) : bytes(h.bytes.size()), view(h.view) {
    if (bytes == 0) bytes = 16;  // a valid pointer for empty tensors
    EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
    if (!h.bytes.empty()) EXPECT_EQ(cudaMemcpy(data, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    view.data = data;
    view.device = DeviceKind::kCuda;
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    if (data != nullptr) cudaFree(data);
  }
  void copy_to(HostTensor& h) const {
    if (!h.bytes.empty()) ASSERT_EQ(cudaMemcpy(h.bytes.data(), data, h.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

// Runs `plan` on the device over the case's tensors and copies out/lse back (poisoned first).
void run_on_device(PrefillCase& c, const PrefillPlan& plan) {
  DeviceCopy q(c.q), k(c.k), v(c.v), out(c.out), lse(c.lse);
  PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
  DeviceCopy cu_q, cu_k;
  std::vector<std::unique_ptr<DeviceCopy>> keep;
  if (!c.shape.ragged.empty()) {
    keep.push_back(std::make_unique<DeviceCopy>(c.cu_q));
    keep.push_back(std::make_unique<DeviceCopy>(c.cu_k));
    t.cu_seqlens_q = keep[0]->view;
    t.cu_seqlens_k = keep[1]->view;
  }
  void* ws = nullptr;
  const std::size_t ws_bytes = plan.evidence.workspace_bytes;
  if (ws_bytes > 0) ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  cuda::prefill(plan, t, Workspace{ws, ws_bytes, DeviceKind::kCuda});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.note();
  if (ws != nullptr) cudaFree(ws);
  out.copy_to(c.out);
  lse.copy_to(c.lse);
}

class PrefillShapesCuda : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(PrefillShapesCuda, PlannedKernelMatchesGolden) {
  SKIP_WITHOUT_GPU();
  PrefillCase c(GetParam());
  const reference::Result golden = reference::prefill(c.problem, c.tensors());
  const PrefillPlan plan = plan_prefill(c.problem, cuda::target());
  const bool half = c.problem.dtype != DType::kF32;
  const bool has_tiles = c.problem.head_dim == 64 || c.problem.head_dim == 96 || c.problem.head_dim == 128 ||
                         c.problem.head_dim == 256;
  // On Hopper the planner may pick the warp-specialized wgmma kernel (prefill_hopper_test.cpp checks
  // when); otherwise tensor-core tiles (whole m16 tiles per warp) for f16/bf16 at the instantiated
  // head dims, else SIMT tiles (one row per warp).
  if (plan.partition.family == KernelFamily::kWarpSpecializedWgmma) {
    EXPECT_TRUE(half && has_tiles && c.problem.options.softcap == 0.0f) << to_table(plan);
  } else {
    EXPECT_EQ(plan.partition.family, KernelFamily::kCooperativeTiled);
    EXPECT_EQ(plan.partition.rows_per_block % (16 * plan.partition.warps_per_block) == 0, half && has_tiles)
        << to_table(plan);
  }
  run_on_device(c, plan);
  EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note() << "\n" << to_table(plan);
  EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note();
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillShapesCuda, ::testing::ValuesIn(prefill_shapes()),
                         [](const ::testing::TestParamInfo<PrefillShape>& info) { return info.param.name; });

// The shapes that plan a key split must really split (else the merge path goes untested).
TEST(PrefillCuda, LongKeyShapesPlanASplit) {
  const Target h200 = known_target("h200");
  int split_shapes = 0;
  for (const PrefillShape& s : prefill_shapes()) {
    if (s.name.find("split") == std::string::npos) continue;
    PrefillCase c(s);
    const PrefillPlan plan = plan_prefill(c.problem, h200);
    EXPECT_GT(plan.partition.sequence_splits, 1u) << s.name << "\n" << to_table(plan);
    EXPECT_GE(plan.partition.tiles_per_split, kTargetTilesPerSplit) << s.name;
    ++split_shapes;
  }
  EXPECT_GE(split_shapes, 2);
}

// Strided views: q/k/v/out as [batch, seq, heads, D] memory (BSHD) seen through BHSD strides.
TEST(PrefillCuda, BshdStridedViewsMatchGolden) {
  SKIP_WITHOUT_GPU();
  const std::int64_t B = 2, H = 8, G = 2, D = 128, S = 97;
  PrefillProblem p;
  p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.q_len = S, p.kv_len = S;
  p.causal = true, p.dtype = p.out_dtype = DType::kBF16;
  auto bshd = [](HostTensor& t, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    t = HostTensor(DType::kBF16, {b, s, h, d});
    TensorView v = t.view;
    v.shape = {b, h, s, d, 0};
    v.strides = {s * h * d, d, h * d, 1, 0};
    t.view = v;
  };
  HostTensor q, k, v, out;
  bshd(q, B, S, H, D);
  bshd(k, B, S, G, D);
  bshd(v, B, S, G, D);
  bshd(out, B, S, H, D);
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  fill_normal(q, rng);
  fill_normal(k, rng);
  fill_normal(v, rng);
  poison(out);
  const reference::Result golden = reference::prefill(p, PrefillTensors{q.view, k.view, v.view, out.view, {}, {}, {}});
  DeviceCopy dq(q), dk(k), dv(v), dout(out);
  const PrefillPlan plan = plan_prefill(p, cuda::target());
  cuda::prefill(plan, PrefillTensors{dq.view, dk.view, dv.view, dout.view, {}, {}, {}}, Workspace{});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(out);
  // The golden is in logical [B, H, S, D] order; read `out` through its view.
  std::vector<double> actual(golden.out.size());
  std::size_t i = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d)
          actual[i++] = load_as_float(out.bytes.data(), DType::kBF16,
                                      static_cast<std::size_t>(b * out.view.strides[0] + h * out.view.strides[1] +
                                                               s * out.view.strides[2] + d));
  HostTensor flat(DType::kF32, {static_cast<std::int64_t>(actual.size())});
  for (std::size_t j = 0; j < actual.size(); ++j) flat.set(j, static_cast<float>(actual[j]));
  EXPECT_EQ(prefill_parity_failure(flat, golden.out, DType::kBF16), "") << "seed " << seed;
}

// A host pointer passed as device memory, or a misaligned view, is rejected before any launch.
TEST(PrefillCuda, RejectsHostPointersAndMisalignedRows) {
  SKIP_WITHOUT_GPU();
  PrefillCase c(prefill_shapes()[0]);
  const PrefillPlan plan = plan_prefill(c.problem, cuda::target());
  PrefillTensors host = c.tensors();
  for (TensorView* tv : {&host.q, &host.k, &host.v, &host.out, &host.lse}) tv->device = DeviceKind::kCuda;
  EXPECT_THROW(cuda::prefill(plan, host, Workspace{}), Error);

  DeviceCopy q(c.q), k(c.k), v(c.v), out(c.out);
  PrefillTensors t{q.view, k.view, v.view, out.view, {}, {}, {}};
  t.q.data = static_cast<char*>(t.q.data) + 2;  // one element off: rows no longer 16-byte aligned
  t.q.shape[2] -= 1;
  PrefillProblem shorter = c.problem;
  shorter.q_len -= 1;
  shorter.causal = false;
  const PrefillPlan plan2 = plan_prefill(shorter, cuda::target());
  EXPECT_THROW(cuda::prefill(plan2, t, Workspace{}), Error);
}

}  // namespace
}  // namespace attnkit::testing
