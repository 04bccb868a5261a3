// Stand-alone CUDA merge of partial (output, LSE) states (label gpu): random states against a
// float64 merge of the same stored values (any split count, head_dims past one 128-value chunk,
// 16-bit partials, strided rows, splits that saw no key with NaN outputs that must not leak, rows
// with no key at all), and a cascade: each sequence's keys attended as two ranges by cuda::decode
// and merged equal the golden decode over all of them.
#include <cstring>
#include <random>

#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct MergeCase {
  std::int64_t splits, rows, head_dim;
  DType partial_dtype, out_dtype;
  bool padded_rows;  // out_partial rows padded by 5 values (a strided view)
};

class MergeStatesCuda : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeStatesCuda, MatchesTheFloat64Merge) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const MergeCase c = GetParam();
  const std::int64_t S = c.splits, R = c.rows, D = c.head_dim, Dp = D + (c.padded_rows ? 5 : 0);
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  HostTensor out_partial(c.partial_dtype, {S, R, Dp}), lse_partial(DType::kF32, {S, R});
  fill_normal(out_partial, rng);
  std::uniform_real_distribution<float> lse_draw(-6.0f, 6.0f);
  std::bernoulli_distribution empty_split(0.25);
  for (std::int64_t s = 0; s < S; ++s) {
    for (std::int64_t r = 0; r < R; ++r) {
      float l = lse_draw(rng) + (r % 3 == 1 ? 80.0f : 0.0f);  // large LSEs: the max must be taken out
      const bool no_keys = (R > 1 && r == R - 1) || empty_split(rng);  // the last row: no split saw a key
      if (no_keys) {
        l = -INFINITY;
        for (std::int64_t d = 0; d < Dp; ++d) out_partial.set(static_cast<std::size_t>((s * R + r) * Dp + d), NAN);
      }
      lse_partial.set(static_cast<std::size_t>(s * R + r), l);
    }
  }
  TensorView partial_view = out_partial.view;
  partial_view.shape[2] = D;
  const reference::Result merged = reference::merge_states({partial_view, lse_partial.view, {}, {}});
  const std::vector<double>& golden = merged.out;
  const std::vector<double>& golden_lse = merged.lse;

  HostTensor out(c.out_dtype, {R, D}), lse(DType::kF32, {R});
  poison(out), poison(lse);
  DeviceTensor d_partial(out_partial), d_lse_partial(lse_partial), d_out(out), d_lse(lse);
  MergeTensors t{d_partial.view, d_lse_partial.view, d_out.view, d_lse.view};
  t.out_partial.shape[2] = D;
  cuda::merge_states(t);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  const std::string note = "S" + std::to_string(S) + " R" + std::to_string(R) + " D" + std::to_string(D) + " seed " +
                           std::to_string(seed);
  expect_matches_golden(out, golden, c.partial_dtype, c.partial_dtype, c.out_dtype, note);
  for (std::int64_t r = 0; r < R; ++r) {
    const double g = golden_lse[static_cast<std::size_t>(r)], a = lse.get(static_cast<std::size_t>(r));
    if (std::isinf(g)) {
      EXPECT_TRUE(std::isinf(a) && a < 0) << note << " lse[" << r << "]=" << a;
      for (std::int64_t d = 0; d < D; ++d) EXPECT_EQ(out.get(static_cast<std::size_t>(r * D + d)), 0.0f) << note << " row " << r;
    } else {
      EXPECT_NEAR(a, g, 2e-6 * std::max(1.0, std::abs(g))) << note << " lse[" << r << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MergeStatesCuda,
    ::testing::Values(MergeCase{1, 5, 64, DType::kF32, DType::kF32, false}, MergeCase{2, 300, 128, DType::kBF16, DType::kBF16, false},
                      MergeCase{3, 17, 200, DType::kF16, DType::kF32, true}, MergeCase{37, 9, 8, DType::kF32, DType::kBF16, false},
                      MergeCase{300, 3, 520, DType::kF32, DType::kF32, true}, MergeCase{5, 1, 1, DType::kF32, DType::kF16, false},
                      MergeCase{4, 70001, 16, DType::kBF16, DType::kF32, false}),
    [](const auto& info) {
      const MergeCase& c = info.param;
      return "s" + std::to_string(c.splits) + "_r" + std::to_string(c.rows) + "_d" + std::to_string(c.head_dim) + "_" +
             std::string(dtype_name(c.partial_dtype)) + "_to_" + std::string(dtype_name(c.out_dtype)) +
             (c.padded_rows ? "_padded" : "");
    });

// Cascade: every sequence's keys split into a first range (a prefix) and the rest, each attended by
// cuda::decode with its LSE into one [2, batch, heads, head_dim] f32 buffer, then merged. Lengths are
// mixed, with an empty prefix and an empty rest among them.
TEST(MergeStatesCuda, KeyRangesAttendedApartMergeToTheWhole) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::int64_t B = 4, H = 8, G = 2, D = 128, P = 700, Q = 1300;
  const std::int32_t prefix[B] = {700, 0, 333, 513}, rest[B] = {1300, 1, 0, 977};
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  HostTensor q(DType::kBF16, {B, H, D}), kp(DType::kBF16, {B, G, P, D}), vp(DType::kBF16, {B, G, P, D});
  HostTensor kr(DType::kBF16, {B, G, Q, D}), vr(DType::kBF16, {B, G, Q, D});
  HostTensor k_all(DType::kBF16, {B, G, P + Q, D}), v_all(DType::kBF16, {B, G, P + Q, D});
  for (HostTensor* t : {&q, &kp, &vp, &kr, &vr}) fill_normal(*t, rng);
  poison(k_all), poison(v_all);
  const std::size_t row_bytes = D * 2;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t i = 0; i < prefix[b] + rest[b]; ++i) {
        const bool first = i < prefix[b];
        const std::int64_t src_row = ((b * G + g) * (first ? P : Q) + (first ? i : i - prefix[b]));
        const std::int64_t dst_row = (b * G + g) * (P + Q) + i;
        std::memcpy(&k_all.bytes[dst_row * row_bytes], &(first ? kp : kr).bytes[src_row * row_bytes], row_bytes);
        std::memcpy(&v_all.bytes[dst_row * row_bytes], &(first ? vp : vr).bytes[src_row * row_bytes], row_bytes);
      }
    }
  }
  HostTensor len_p(DType::kI32, {B}), len_r(DType::kI32, {B}), len_all(DType::kI32, {B});
  for (std::int64_t b = 0; b < B; ++b) len_p.i32()[b] = prefix[b], len_r.i32()[b] = rest[b], len_all.i32()[b] = prefix[b] + rest[b];

  auto problem = [&](std::int64_t keys) {
    DecodeProblem p;
    p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.max_seq = keys, p.kv_len = keys;
    p.kv_dtype = p.q_dtype = DType::kBF16;
    p.out_dtype = DType::kF32;
    return p;
  };
  HostTensor states(DType::kF32, {2, B * H, D}), lses(DType::kF32, {2, B * H}), out(DType::kBF16, {B * H, D}),
      lse(DType::kF32, {B * H});
  poison(states), poison(lses), poison(out), poison(lse);
  DeviceTensor dq(q), dkp(kp), dvp(vp), dkr(kr), dvr(vr), dlp(len_p), dlr(len_r), dstates(states), dlses(lses), dout(out),
      dlse(lse);
  for (int part = 0; part < 2; ++part) {
    const DecodePlan plan = plan_decode(problem(part == 0 ? P : Q), cuda::target());
    DeviceWorkspace ws(plan.evidence.workspace_bytes);
    DecodeTensors t;
    t.q = dq.view;
    t.k_cache = part == 0 ? dkp.view : dkr.view;
    t.v_cache = part == 0 ? dvp.view : dvr.view;
    t.lengths = part == 0 ? dlp.view : dlr.view;
    t.out = TensorView::contiguous(static_cast<float*>(dstates.data) + part * B * H * D, DType::kF32, {B, H, D});
    t.lse = TensorView::contiguous(static_cast<float*>(dlses.data) + part * B * H, DType::kF32, {B, H});
    t.out.device = t.lse.device = DeviceKind::kCuda;
    cuda::decode(plan, t, ws.view());
  }
  cuda::merge_states({dstates.view, dlses.view, dout.view, dlse.view});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(out);
  dlse.copy_to(lse);

  DecodeTensors whole{q.view, k_all.view, v_all.view, len_all.view, {}, {}};
  const reference::Result golden = reference::decode(problem(P + Q), whole);
  const std::string note = "cascade seed " + std::to_string(seed);
  expect_matches_golden(out, golden.out, DType::kBF16, DType::kBF16, DType::kBF16, note);
  expect_lse_matches(lse, golden.lse, note, rel_l2_limit(DType::kBF16, DType::kBF16, DType::kF32));
}

// A NaN LSE is not "no key": its row comes out NaN on both backends (not zeros), the other rows
// as usual.
TEST(MergeStatesCuda, ANanLseGivesANanRowAsOnTheCpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  HostTensor op(DType::kF32, {3, 4, 16}), lp(DType::kF32, {3, 4});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(op, rng), fill_normal(lp, rng);
  lp.set(1 * 4 + 2, NAN);  // split 1 of row 2
  HostTensor cpu_out(DType::kF32, {4, 16}), gpu_out(DType::kF32, {4, 16});
  cpu::merge_states({op.view, lp.view, cpu_out.view, {}});
  DeviceTensor dop(op), dlp(lp), dout(gpu_out);
  cuda::merge_states({dop.view, dlp.view, dout.view, {}});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(gpu_out);
  for (std::size_t i = 0; i < 64; ++i) {
    const bool nan_row = i / 16 == 2;
    EXPECT_EQ(std::isnan(cpu_out.get(i)), nan_row) << i;
    EXPECT_EQ(std::isnan(gpu_out.get(i)), nan_row) << i;
    if (!nan_row) EXPECT_NEAR(gpu_out.get(i), cpu_out.get(i), 1e-5) << i;
  }
}

// Host memory where device memory is needed is rejected before any launch; out stays as it was.
TEST(MergeStatesCudaRejects, HostPointersThrowBeforeWriting) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  HostTensor op(DType::kF32, {2, 3, 16}), lp(DType::kF32, {2, 3}), out(DType::kF32, {3, 16});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(op, rng), fill_normal(lp, rng), poison(out);
  DeviceTensor dop(op), dlp(lp), dout(out);
  MergeTensors host_partial{dop.view, dlp.view, dout.view, {}};
  host_partial.out_partial.data = op.bytes.data();  // a host pointer in a view that says cuda
  MergeTensors cpu_lse{dop.view, lp.view, dout.view, {}};
  for (auto [t, needle] : {std::pair{&host_partial, "out_partial points to host memory"}, {&cpu_lse, "lse_partial lives on"}}) {
    try {
      cuda::merge_states(*t);
      ADD_FAILURE() << needle << ": no Error thrown";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor after(DType::kF32, {3, 16});
    dout.copy_to(after);
    EXPECT_EQ(after.bytes, out.bytes) << needle << ": out was written";
  }
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
