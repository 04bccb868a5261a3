// CUDA KV append (label gpu): K only, V only and both in one launch write exactly the new rows at
// positions[b] and nothing else. Positions live on the device, so one outside [0, max_seq) cannot
// be rejected on the host: the kernel skips it and that sequence's cache stays untouched.
#include <cstring>
#include <limits>
#include <random>

#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct AppendSpec {
  DType dtype;
  std::int64_t head_dim;
  bool k, v;
};

class AppendCuda : public ::testing::TestWithParam<AppendSpec> {};

TEST_P(AppendCuda, WritesOnlyTheNewRowsAndSkipsOutOfRangePositions) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const AppendSpec s = GetParam();
  const std::int64_t batch = 6, kv_heads = 3, max_seq = 37, d = s.head_dim;
  std::mt19937_64 rng(fresh_seed());
  HostTensor k(s.dtype, {batch, kv_heads, max_seq, d}), v(s.dtype, {batch, kv_heads, max_seq, d});
  HostTensor k_new(s.dtype, {batch, kv_heads, d}), v_new(s.dtype, {batch, kv_heads, d});
  HostTensor pos(DType::kI32, {batch});
  fill_normal(k, rng);
  fill_normal(v, rng);
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  const std::int32_t positions[batch] = {3, static_cast<std::int32_t>(max_seq - 1), 0, static_cast<std::int32_t>(max_seq),
                                         -1, 1 << 30};
  std::memcpy(pos.i32(), positions, sizeof(positions));

  // Expected caches: the new rows at the valid positions.
  HostTensor k_expected(s.dtype, {batch, kv_heads, max_seq, d}), v_expected(s.dtype, {batch, kv_heads, max_seq, d});
  k_expected.bytes = k.bytes;
  v_expected.bytes = v.bytes;
  const std::size_t e = dtype_size(s.dtype);
  for (std::int64_t b = 0; b < batch; ++b) {
    if (positions[b] < 0 || positions[b] >= max_seq) continue;
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      const std::size_t dst = static_cast<std::size_t>(((b * kv_heads + h) * max_seq + positions[b]) * d) * e;
      const std::size_t src = static_cast<std::size_t>((b * kv_heads + h) * d) * e;
      if (s.k) std::memcpy(k_expected.bytes.data() + dst, k_new.bytes.data() + src, d * e);
      if (s.v) std::memcpy(v_expected.bytes.data() + dst, v_new.bytes.data() + src, d * e);
    }
  }

  DeviceTensor dk(k), dv(v), dkn(k_new), dvn(v_new), dpos(pos);
  AppendTensors t;
  if (s.k) t.k_new = dkn.view, t.k_cache = dk.view;
  if (s.v) t.v_new = dvn.view, t.v_cache = dv.view;
  t.positions = dpos.view;
  cuda::append_kv(t);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dk.copy_to(k);
  dv.copy_to(v);
  EXPECT_EQ(k.bytes, k_expected.bytes) << "k cache differs from the expected rows";
  EXPECT_EQ(v.bytes, v_expected.bytes) << "v cache differs from the expected rows";
}

INSTANTIATE_TEST_SUITE_P(Kinds, AppendCuda,
                         ::testing::Values(AppendSpec{DType::kF32, 128, true, true}, AppendSpec{DType::kBF16, 64, true, false},
                                           AppendSpec{DType::kF16, 256, false, true}, AppendSpec{DType::kBF16, 80, true, true},
                                           AppendSpec{DType::kF32, 8, true, true}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype)) + "_d" + std::to_string(info.param.head_dim) +
                                  (info.param.k ? "_k" : "") + (info.param.v ? "_v" : "");
                         });

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests

namespace attnkit::testing::cuda_decode_tests {
namespace {

// An e4m3 cache takes rows of any storage dtype and stores float_to_e4m3_bits(x / scale): the
// device's conversion must give the host rule's bytes exactly, saturation (|x / scale| > 448, an
// infinity) and subnormals included, K and V with their own scales, only at valid positions.
class AppendFp8Cuda : public ::testing::TestWithParam<DType> {};

TEST_P(AppendFp8Cuda, QuantizesExactlyAsTheHostRule) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DType row_dtype = GetParam();
  const std::int64_t batch = 4, kv_heads = 3, max_seq = 19, d = 48;
  const KvScales scales{0.03f, 5.0f};
  std::mt19937_64 rng(fresh_seed());
  HostTensor k(DType::kE4M3, {batch, kv_heads, max_seq, d}), v(DType::kE4M3, {batch, kv_heads, max_seq, d});
  HostTensor k_new(row_dtype, {batch, kv_heads, d}), v_new(row_dtype, {batch, kv_heads, d});
  HostTensor pos(DType::kI32, {batch});
  fill_normal(k, rng);
  fill_normal(v, rng);
  fill_normal(k_new, rng, 8.0f);   // / 0.03: many beyond 448, saturated
  fill_normal(v_new, rng, 0.05f);  // / 5: many below 2^-6, subnormal
  k_new.set(0, std::numeric_limits<float>::infinity());
  v_new.set(1, -std::numeric_limits<float>::infinity());
  const std::int32_t positions[batch] = {0, static_cast<std::int32_t>(max_seq - 1), -3, 7};
  std::memcpy(pos.i32(), positions, sizeof(positions));

  HostTensor k_expected(DType::kE4M3, {batch, kv_heads, max_seq, d}), v_expected(DType::kE4M3, {batch, kv_heads, max_seq, d});
  k_expected.bytes = k.bytes;
  v_expected.bytes = v.bytes;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (positions[b] < 0 || positions[b] >= max_seq) continue;
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      for (std::int64_t i = 0; i < d; ++i) {
        const std::size_t dst = static_cast<std::size_t>(((b * kv_heads + h) * max_seq + positions[b]) * d + i);
        const std::size_t src = static_cast<std::size_t>((b * kv_heads + h) * d + i);
        k_expected.bytes[dst] = float_to_e4m3_bits(static_cast<float>(k_new.get(src)) / scales.k);
        v_expected.bytes[dst] = float_to_e4m3_bits(static_cast<float>(v_new.get(src)) / scales.v);
      }
    }
  }
  DeviceTensor dk(k), dv(v), dkn(k_new), dvn(v_new), dpos(pos);
  AppendTensors t;
  t.k_new = dkn.view, t.k_cache = dk.view, t.v_new = dvn.view, t.v_cache = dv.view, t.positions = dpos.view;
  t.kv_scales = scales;
  cuda::append_kv(t);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dk.copy_to(k);
  dv.copy_to(v);
  EXPECT_EQ(k.bytes, k_expected.bytes) << "k cache differs from the host quantization";
  EXPECT_EQ(v.bytes, v_expected.bytes) << "v cache differs from the host quantization";
}

INSTANTIATE_TEST_SUITE_P(RowDtypes, AppendFp8Cuda, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
