// Stand-alone CUDA RoPE (label gpu): x [batch, heads, head_dim] rotated in place at positions[b]
// against the float64 golden (reference::rope), every storage dtype, both styles, theta and caller
// tables, a strided view (padding between heads must stay untouched), positions up to 10^5.
// Positions live on the device: a negative one, or one past the tables, fills its rows with NaN.
#include <cstring>
#include <random>

#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct RopeCase {
  DType dtype;
  std::int64_t head_dim;
  RopeStyle style;
  bool tables;
};

// Rounding of one value to the dtype (relative), the golden's own error aside.
double dtype_eps(DType d) { return d == DType::kF32 ? 0x1p-23 : d == DType::kF16 ? 0x1p-10 : 0x1p-7; }

class ApplyRopeCuda : public ::testing::TestWithParam<RopeCase> {};

TEST_P(ApplyRopeCuda, MatchesTheGoldenAndMarksInvalidPositions) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const RopeCase c = GetParam();
  const std::int64_t B = 7, H = 3, D = c.head_dim, pad = 8, half = D / 2, table_rows = 4096;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  HostTensor x(c.dtype, {B, H, D + pad});  // viewed as [B, H, D]: the pad columns must not change
  fill_normal(x, rng);
  HostTensor pos(DType::kI32, {B});
  const std::int32_t positions[B] = {0, 1, 17, 4095, c.tables ? 4096 : 100000, -1, 333};
  std::memcpy(pos.i32(), positions, sizeof(positions));
  std::vector<float> cos_table(static_cast<std::size_t>(table_rows * half)), sin_table(cos_table.size());
  std::uniform_real_distribution<double> angle(-3.2, 3.2);
  for (std::size_t i = 0; i < cos_table.size(); ++i) {
    const double a = angle(rng);
    cos_table[i] = static_cast<float>(std::cos(a));
    sin_table[i] = static_cast<float>(std::sin(a));
  }

  RopeSpec host_spec;
  host_spec.style = c.style;
  host_spec.theta = 500000.0f;
  if (c.tables) {
    host_spec.cos_table = cos_table.data(), host_spec.sin_table = sin_table.data();
    host_spec.table_positions = table_rows;
  }
  const std::int64_t row_stride = D + pad;
  std::vector<double> expected(x.numel());
  for (std::size_t i = 0; i < x.numel(); ++i) expected[i] = x.get(i);
  std::vector<bool> invalid(B);
  for (std::int64_t b = 0; b < B; ++b) {
    invalid[b] = positions[b] < 0 || (c.tables && positions[b] >= table_rows);
    if (invalid[b]) continue;
    for (std::int64_t h = 0; h < H; ++h) reference::rope(&expected[(b * H + h) * row_stride], D, positions[b], host_spec);
  }

  DeviceTensor dx(x), dpos(pos);
  float *dcos = nullptr, *dsin = nullptr;
  ASSERT_EQ(cudaMalloc(&dcos, cos_table.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dsin, sin_table.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dcos, cos_table.data(), cos_table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsin, sin_table.data(), sin_table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  RopeSpec device_spec = host_spec;
  if (c.tables) device_spec.cos_table = dcos, device_spec.sin_table = dsin;
  TensorView view = dx.view;
  view.shape[2] = D;
  cuda::apply_rope(view, dpos.view, device_spec);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostTensor got(c.dtype, {B, H, D + pad});
  dx.copy_to(got);
  cudaFree(dcos);
  cudaFree(dsin);

  const std::string note = std::string(dtype_name(c.dtype)) + " d" + std::to_string(D) + " seed " + std::to_string(seed);
  int mismatches = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      double row_max = 0.0;
      for (std::int64_t d = 0; d < D; ++d) row_max = std::max<double>(row_max, std::abs(x.get((b * H + h) * row_stride + d)));
      for (std::int64_t d = 0; d < row_stride; ++d) {
        const std::size_t i = static_cast<std::size_t>((b * H + h) * row_stride + d);
        const double g = got.get(i);
        if (d >= D) {  // padding: bit-for-bit as it was
          if (std::memcmp(&got.bytes[i * dtype_size(c.dtype)], &x.bytes[i * dtype_size(c.dtype)], dtype_size(c.dtype)) != 0)
            ++mismatches;
        } else if (invalid[b]) {
          if (!std::isnan(g)) ++mismatches;
        } else {
          const double tol = 2 * dtype_eps(c.dtype) * std::abs(expected[i]) + 1e-9 * row_max + 1e-7;
          if (!(std::abs(g - expected[i]) <= tol)) {
            if (++mismatches <= 5) ADD_FAILURE() << note << " b" << b << " h" << h << " d" << d << ": " << g << " vs " << expected[i];
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << note;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, ApplyRopeCuda,
    ::testing::Values(RopeCase{DType::kF32, 128, RopeStyle::kHalf, false}, RopeCase{DType::kF32, 64, RopeStyle::kInterleaved, true},
                      RopeCase{DType::kBF16, 128, RopeStyle::kInterleaved, false}, RopeCase{DType::kBF16, 256, RopeStyle::kHalf, true},
                      RopeCase{DType::kF16, 80, RopeStyle::kHalf, false}, RopeCase{DType::kF16, 2, RopeStyle::kInterleaved, true},
                      RopeCase{DType::kF32, 6, RopeStyle::kHalf, true}),
    [](const auto& info) {
      const RopeCase& c = info.param;
      return std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) +
             (c.style == RopeStyle::kHalf ? "_half" : "_interleaved") + (c.tables ? "_tables" : "_theta");
    });

// Host positions, host tables or a host x are rejected before any launch; x stays as it was.
TEST(ApplyRopeCudaRejects, HostPointersThrowBeforeWriting) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  HostTensor x(DType::kBF16, {2, 4, 64}), pos(DType::kI32, {2});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(x, rng);
  pos.i32()[0] = 5, pos.i32()[1] = 9;
  DeviceTensor dx(x), dpos(pos);
  std::vector<float> table(10 * 32, 0.5f);
  RopeSpec host_tables;
  host_tables.cos_table = host_tables.sin_table = table.data();
  host_tables.table_positions = 10;
  TensorView host_pos = pos.view;
  TensorView claims_cuda = dpos.view;
  claims_cuda.data = pos.bytes.data();  // a host pointer in a view that says cuda
  auto expect_rejected = [&](auto call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << needle << ": no Error thrown";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    HostTensor after(DType::kBF16, {2, 4, 64});
    dx.copy_to(after);
    EXPECT_EQ(after.bytes, x.bytes) << needle << ": x was written";
  };
  expect_rejected([&] { cuda::apply_rope(dx.view, host_pos, RopeSpec{}); }, "positions lives on");
  expect_rejected([&] { cuda::apply_rope(dx.view, claims_cuda, RopeSpec{}); }, "positions points to host memory");
  expect_rejected([&] { cuda::apply_rope(dx.view, dpos.view, host_tables); }, "rope.cos_table");
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
