// e4m3 (fp8) prefill on the Hopper warp-specialized kernel (label gpu) against the float64 golden
// computed from the same quantized bytes and per-tensor scales (docs/architecture.md: rel-L2 <=
// 5e-2; LSE within 1e-3). Inputs are normal draws quantized with scale = max|x| / 448 (a different
// spread per tensor, so no scale is 1); out and LSE are poisoned with NaN, and so is the workspace
// (0xFF is e4m3's NaN), so an element the kernel forgot to write, or a V^T byte it reads before
// staging it (the padding past a sequence's last key included), fails. Awkward sizes: q_len and
// kv_len 1, 17, 127, 129, 1000, 4097, causal or not, windows, GQA groups 1/4/8, ragged batches with
// empty and keyless sequences, head_dim 128 and 256, out bf16/f16/f32. Rejected calls (bad scales,
// a short or missing workspace) leave the outputs untouched. Skips, visibly, without a Hopper GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/hopper_support.hpp"
#include "cuda/prefill_shapes.hpp"

namespace attnkit::testing {
namespace {

// The case's buffers (prefill_shapes.hpp) with q, k and v re-drawn as e4m3 with per-tensor scales:
// q at the shape's stddev, k at twice it, v at 0.5, so the three scales differ and none is 1.
struct Fp8Case {
  PrefillCase c;
  Fp8Scales scales;
  explicit Fp8Case(const PrefillShape& s) : c(s) {
    std::mt19937_64 rng(c.seed ^ 0x9E3779B97F4A7C15ull);
    scales.q = fill_normal_e4m3(c.q, rng, s.stddev);
    scales.k = fill_normal_e4m3(c.k, rng, 2.0f * s.stddev);
    scales.v = fill_normal_e4m3(c.v, rng, 0.5f);
  }
  PrefillTensors host() const {
    PrefillTensors t = c.tensors();
    t.scales = scales;
    return t;
  }
};

std::vector<PrefillShape> fp8_shapes() {
  using enum DType;
  const DType e = kE4M3;
  return {
      {"fp8_causal_q1_kv1_gqa1_d128_bf16", 1, 4, 4, 128, 1, 1, true, e, kBF16},
      {"fp8_noncausal_q1_kv4097_gqa8_d256_f32", 2, 8, 1, 256, 1, 4097, false, e, kF32},
      {"fp8_noncausal_q17_kv129_gqa4_d128_f16", 2, 8, 2, 128, 17, 129, false, e, kF16},
      {"fp8_causal_q127_kv127_gqa8_d256_f32", 1, 8, 1, 256, 127, 127, true, e, kF32},
      {"fp8_causal_q129_kv1000_gqa4_d128_bf16", 1, 8, 2, 128, 129, 1000, true, e, kBF16},
      {"fp8_noncausal_q1000_kv17_gqa1_d256_bf16", 1, 2, 2, 256, 1000, 17, false, e, kBF16},
      {"fp8_causal_q4097_kv4097_gqa2_d128_bf16", 1, 2, 1, 128, 4097, 4097, true, e, kBF16},
      {"fp8_causal_q17_kv4097_gqa4_d256_f16", 1, 4, 1, 256, 17, 4097, true, e, kF16},
      {"fp8_causal_window37_q1000_kv1000_gqa1_d128_f16", 1, 4, 4, 128, 1000, 1000, true, e, kF16, 37},
      {"fp8_noncausal_window200_q300_kv4097_gqa4_d256_f32", 1, 4, 1, 256, 300, 4097, false, e, kF32, 200},
      {"fp8_causal_window129_q129_kv1000_gqa8_d128_bf16", 2, 8, 1, 128, 129, 1000, true, e, kBF16, 129},
      {"fp8_causal_large_scores_gqa4_d128_bf16", 1, 8, 2, 128, 200, 260, true, e, kBF16, 0, 0.0f, 4.0f},
      {"fp8_ragged_causal_empty_len1_gqa4_d128_bf16", 5, 8, 2, 128, 1000, 1000, true, e, kBF16, 0, 0.0f, 1.0f,
       {{1000, 1000}, {0, 0}, {1, 1}, {17, 129}, {4, 127}}},
      {"fp8_ragged_noncausal_keyless_gqa1_d256_f32", 4, 4, 4, 256, 129, 4097, false, e, kF32, 0, 0.0f, 1.0f,
       {{129, 4097}, {5, 0}, {0, 0}, {17, 1}}},
      {"fp8_ragged_causal_window_gqa8_d256_f16", 3, 8, 1, 256, 129, 1000, true, e, kF16, 40, 0.0f, 1.0f,
       {{129, 1000}, {0, 17}, {127, 127}}},
  };
}

// Runs `plan` on the device (outputs and workspace poisoned) and copies out and LSE back.
void run_fp8(Fp8Case& f, const PrefillPlan& plan) {
  PrefillCase& c = f.c;
  DeviceTensor q(c.q), k(c.k), v(c.v), out(c.out), lse(c.lse);
  PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
  t.scales = f.scales;
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  if (!c.shape.ragged.empty()) {
    keep.push_back(std::make_unique<DeviceTensor>(c.cu_q));
    keep.push_back(std::make_unique<DeviceTensor>(c.cu_k));
    t.cu_seqlens_q = keep[0]->view;
    t.cu_seqlens_k = keep[1]->view;
  }
  DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xFF);  // NaN as e4m3 and f32
  cuda::prefill(plan, t, ws.view(ws.bytes));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.note();
  out.copy_to(c.out);
  lse.copy_to(c.lse);
}

class PrefillFp8 : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(PrefillFp8, MatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("e4m3 prefill kernel");
  Fp8Case f(GetParam());
  const PrefillProblem& p = f.c.problem;
  const PrefillPlan plan = plan_prefill(p, cuda::target());
  ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma) << to_table(plan);
  ASSERT_EQ(plan.evidence.workspace_bytes,
            static_cast<std::uint64_t>(cuda_prefill_hopper::hopper_fp8_vt_bytes(p.batch, p.kv_heads, p.head_dim, p.kv_len)));
  const reference::Result golden = reference::prefill(p, f.host());
  run_fp8(f, plan);
  EXPECT_EQ(prefill_parity_failure(f.c.out, golden.out, DType::kE4M3), "")
      << f.c.note() << " scales " << f.scales.q << " " << f.scales.k << " " << f.scales.v << "\n" << to_table(plan);
  // fp8 wgmma keeps fewer accumulator bits than f32, so the scores (and the LSE) carry ~1e-3 of
  // error at d256: the e4m3 LSE rule.
  EXPECT_EQ(prefill_lse_failure(f.c.lse, golden.lse, kE4m3LseRel), "") << f.c.note();
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillFp8, ::testing::ValuesIn(fp8_shapes()),
                         [](const ::testing::TestParamInfo<PrefillShape>& info) { return info.param.name; });

// The scales are applied, not assumed: the same bytes with every scale doubled give the golden of
// doubled inputs (scores x4, values x2), and the kernel follows it.
TEST(PrefillFp8Checks, ScalesChangeTheResultAsTheGoldenSays) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("e4m3 prefill kernel");
  Fp8Case f({"fp8_scales_doubled", 1, 4, 2, 128, 129, 300, true, DType::kE4M3, DType::kF32});
  f.scales = {2.0f * f.scales.q, 2.0f * f.scales.k, 2.0f * f.scales.v};
  const PrefillPlan plan = plan_prefill(f.c.problem, cuda::target());
  const reference::Result golden = reference::prefill(f.c.problem, f.host());
  run_fp8(f, plan);
  EXPECT_EQ(prefill_parity_failure(f.c.out, golden.out, DType::kE4M3), "") << f.c.note();
  EXPECT_EQ(prefill_lse_failure(f.c.lse, golden.lse, kE4m3LseRel), "") << f.c.note();
}

// BSHD memory ([batch, seq, heads, D]) seen through BHSD strides, e4m3 inputs.
TEST(PrefillFp8Checks, BshdStridedViewsMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("e4m3 prefill kernel");
  const std::int64_t B = 2, H = 8, G = 2, D = 128, S = 301;
  PrefillProblem p;
  p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.q_len = S, p.kv_len = S;
  p.causal = true, p.dtype = DType::kE4M3, p.out_dtype = DType::kBF16;
  auto bshd = [](HostTensor& t, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    t = HostTensor(dtype, {b, s, h, d});
    TensorView v = t.view;
    v.shape = {b, h, s, d, 0};
    v.strides = {s * h * d, d, h * d, 1, 0};
    t.view = v;
  };
  HostTensor q, k, v, out;
  bshd(q, DType::kE4M3, B, S, H, D);
  bshd(k, DType::kE4M3, B, S, G, D);
  bshd(v, DType::kE4M3, B, S, G, D);
  bshd(out, DType::kBF16, B, S, H, D);
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  Fp8Scales scales{fill_normal_e4m3(q, rng), fill_normal_e4m3(k, rng), fill_normal_e4m3(v, rng)};
  poison(out);
  PrefillTensors host{q.view, k.view, v.view, out.view, {}, {}, {}};
  host.scales = scales;
  const reference::Result golden = reference::prefill(p, host);
  DeviceTensor dq(q), dk(k), dv(v), dout(out);
  const PrefillPlan plan = plan_prefill(p, cuda::target());
  DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xFF);  // NaN as e4m3 and f32
  PrefillTensors t{dq.view, dk.view, dv.view, dout.view, {}, {}, {}};
  t.scales = scales;
  cuda::prefill(plan, t, ws.view(ws.bytes));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(out);
  HostTensor flat(DType::kF32, {B * H * S * D});
  std::size_t i = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d)
          flat.set(i++, load_as_float(out.bytes.data(), DType::kBF16,
                                      static_cast<std::size_t>(b * out.view.strides[0] + h * out.view.strides[1] +
                                                               s * out.view.strides[2] + d)));
  EXPECT_EQ(prefill_parity_failure(flat, golden.out, DType::kE4M3), "") << "seed " << seed;
}

// Rejected calls throw before any launch: out and LSE keep their poison, bit for bit.
TEST(PrefillFp8Checks, RejectedCallsLeaveOutputsUntouched) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("e4m3 prefill kernel");
  Fp8Case f({"fp8_rejects", 2, 8, 2, 128, 129, 300, true, DType::kE4M3, DType::kBF16});
  const PrefillPlan plan = plan_prefill(f.c.problem, cuda::target());
  ASSERT_GT(plan.evidence.workspace_bytes, 0u);
  PrefillCase& c = f.c;
  DeviceTensor q(c.q), k(c.k), v(c.v), out(c.out), lse(c.lse);
  DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xFF);  // NaN as e4m3 and f32
  const PrefillTensors good = [&] {
    PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
    t.scales = f.scales;
    return t;
  }();
  auto expect_rejected = [&](const PrefillTensors& t, const Workspace& w, const std::string& needle) {
    try {
      cuda::prefill(plan, t, w);
      ADD_FAILURE() << "no Error for: " << needle;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
      EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor out_after(c.out.view.dtype, {2, 8, 129, 128}), lse_after(DType::kF32, {2, 8, 129});
    out.copy_to(out_after);
    lse.copy_to(lse_after);
    EXPECT_EQ(out_after.bytes, c.out.bytes) << needle;
    EXPECT_EQ(lse_after.bytes, c.lse.bytes) << needle;
  };
  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    PrefillTensors t = good;
    t.scales.k = bad;
    expect_rejected(t, ws.view(ws.bytes), "scales.k=");
  }
  // A workspace too small by one byte, none at all, or in host memory.
  expect_rejected(good, ws.view(ws.bytes - 1), "workspace");
  expect_rejected(good, Workspace{}, "workspace");
  std::vector<std::uint8_t> host_ws(ws.bytes);
  expect_rejected(good, Workspace{host_ws.data(), host_ws.size(), DeviceKind::kCpu}, "workspace");
  // Inputs of another dtype than the plan's.
  HostTensor k16(DType::kBF16, {2, 2, 300, 128});
  DeviceTensor dk16(k16);
  PrefillTensors wrong_k = good;
  wrong_k.k = dk16.view;
  expect_rejected(wrong_k, ws.view(ws.bytes), "k has dtype bf16, expected e4m3");
  // Finally the good call runs (the rejections did not leave the device in a bad state).
  const reference::Result golden = reference::prefill(c.problem, f.host());
  cuda::prefill(plan, good, ws.view(ws.bytes));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.copy_to(c.out);
  EXPECT_EQ(prefill_parity_failure(c.out, golden.out, DType::kE4M3), "") << c.note();
}

}  // namespace
}  // namespace attnkit::testing
