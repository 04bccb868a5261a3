// CUDA fused RoPE + KV append + decode in one launch (label gpu), against the float64 golden:
// q and k_new rotated in float64 (reference::rope), the rotated k rounded to the cache dtype and
// appended with v_new at positions[b], then decode over positions[b] + 1 keys. Both RoPE styles,
// theta and caller tables; cache rows past each position hold NaN (never read); the appended rows
// are checked; a position outside the cache appends nothing and yields NaN rows; attention sinks.
#include <cmath>
#include <cstring>
#include <random>

#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct FusedSpec {
  std::string name;
  std::int64_t heads, kv_heads, head_dim;
  DType kv;
  RopeStyle style;
  bool tables;
  std::vector<int> positions;
  std::int64_t window = 0;
  bool one_invalid = false;  // append an out-of-range position as an extra sequence
  bool sinks = false;        // attention-sink logits (random_sinks)
};

std::ostream& operator<<(std::ostream& os, const FusedSpec& s) { return os << s.name; }

std::vector<FusedSpec> fused_specs() {
  using enum DType;
  using enum RopeStyle;
  return {
      {"half_theta_bf16_gqa4_d128", 32, 8, 128, kBF16, kHalf, false, {0, 17, 4000}},
      {"interleaved_theta_f32_gqa4_d64", 8, 2, 64, kF32, kInterleaved, false, {1, 3001}},
      {"half_tables_f16_mqa_d256", 8, 1, 256, kF16, kHalf, true, {2500, 5}},
      {"interleaved_tables_bf16_mha_d80", 4, 4, 80, kBF16, kInterleaved, true, {100, 0}},
      {"half_theta_f32_window_gqa8_d128", 16, 2, 128, kF32, kHalf, false, {6000, 10}, 257},
      {"half_theta_bf16_invalid_position", 8, 2, 64, kBF16, kHalf, false, {33, 700}, 0, true},
      // 3 x 8 blocks: few enough splits to merge in clusters, one sequence of them with no valid key.
      {"half_theta_bf16_invalid_position_cluster_merge", 32, 8, 128, kBF16, kHalf, false, {33, 700}, 0, true},
      {"half_theta_bf16_sinks", 32, 8, 128, kBF16, kHalf, false, {0, 17, 4000}, 0, false, true},
      {"interleaved_tables_f16_sinks_cluster_merge", 16, 4, 64, kF16, kInterleaved, true, {2, 1500}, 0, true, true},
  };
}

class FusedCuda : public ::testing::TestWithParam<FusedSpec> {};

TEST_P(FusedCuda, MatchesRopeThenAppendThenGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const FusedSpec& s = GetParam();
  std::vector<int> positions = s.positions;
  const int longest = *std::max_element(positions.begin(), positions.end());
  const std::int64_t max_seq = longest + 4;
  if (s.one_invalid) positions.push_back(static_cast<int>(max_seq));
  const std::int64_t batch = static_cast<std::int64_t>(positions.size()), D = s.head_dim, H = s.heads, G = s.kv_heads;

  DecodeProblem p;
  p.batch = batch, p.num_heads = H, p.kv_heads = G, p.head_dim = D;
  p.max_seq = max_seq, p.kv_len = longest + 1;
  p.kv_dtype = p.q_dtype = p.out_dtype = s.kv;
  p.options.window = s.window;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  HostTensor q(s.kv, {batch, H, D}), k_new(s.kv, {batch, G, D}), v_new(s.kv, {batch, G, D});
  HostTensor k(s.kv, {batch, G, max_seq, D}), v(s.kv, {batch, G, max_seq, D}), pos(DType::kI32, {batch});
  HostTensor out(s.kv, {batch, H, D}), lse(DType::kF32, {batch, H});
  fill_normal(q, rng);
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  poison(k);
  poison(v);
  poison(out);
  poison(lse);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::int64_t b = 0; b < batch; ++b) {
    pos.i32()[b] = positions[b];
    const std::int64_t filled = std::min<std::int64_t>(positions[b], max_seq);
    for (std::int64_t i = 0; i < G * filled * D; ++i) {
      const std::int64_t h = i / (filled * D), rest = i % (filled * D);
      k.set(static_cast<std::size_t>((b * G + h) * max_seq * D + rest), nd(rng));
      v.set(static_cast<std::size_t>((b * G + h) * max_seq * D + rest), nd(rng));
    }
  }

  // RoPE spec: theta, or tables (theta 500000) on the host and the device.
  RopeSpec host_rope;
  host_rope.style = s.style;
  std::vector<float> cos_t, sin_t;
  void* dev_tables = nullptr;
  RopeSpec dev_rope = host_rope;
  if (s.tables) {
    const std::int64_t P = max_seq, half = D / 2;
    cos_t.resize(P * half);
    sin_t.resize(P * half);
    for (std::int64_t t = 0; t < P; ++t) {
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = t * std::pow(500000.0, -2.0 * i / D);
        cos_t[t * half + i] = static_cast<float>(std::cos(angle));
        sin_t[t * half + i] = static_cast<float>(std::sin(angle));
      }
    }
    host_rope.cos_table = cos_t.data(), host_rope.sin_table = sin_t.data(), host_rope.table_positions = P;
    ASSERT_EQ(cudaMalloc(&dev_tables, 2 * cos_t.size() * sizeof(float)), cudaSuccess);
    float* dc = static_cast<float*>(dev_tables);
    ASSERT_EQ(cudaMemcpy(dc, cos_t.data(), cos_t.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dc + cos_t.size(), sin_t.data(), sin_t.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    dev_rope.cos_table = dc, dev_rope.sin_table = dc + cos_t.size(), dev_rope.table_positions = P;
  }

  const DecodePlan plan = plan_decode(p, cuda::target());
  HostTensor k_after(s.kv, {batch, G, max_seq, D}), v_after(s.kv, {batch, G, max_seq, D});
  const HostTensor sinks = random_sinks(s.sinks ? H : 0, rng);
  {
    DeviceTensor dq(q), dkn(k_new), dvn(v_new), dk(k), dv(v), dpos(pos), dout(out), dlse(lse), dsinks(sinks);
    DeviceWorkspace ws(plan.evidence.workspace_bytes);
    FusedDecodeTensors t{dq.view, dkn.view, dvn.view, dk.view, dv.view, dpos.view, dout.view, dlse.view};
    if (s.sinks) t.sinks = dsinks.view;
    cuda::fused_rope_append_decode(plan, t, dev_rope, ws.view());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.copy_to(out);
    dlse.copy_to(lse);
    dk.copy_to(k_after);
    dv.copy_to(v_after);
  }
  if (dev_tables != nullptr) cudaFree(dev_tables);

  // The golden: rotate in float64, append (rounded to the cache dtype), decode with q in f32.
  HostTensor q_rot(DType::kF32, {batch, H, D}), lengths(DType::kI32, {batch});
  std::vector<double> row(static_cast<std::size_t>(D));
  const std::string note = s.name + " seed=" + std::to_string(seed);
  for (std::int64_t b = 0; b < batch; ++b) {
    const bool valid = positions[b] >= 0 && positions[b] < max_seq;
    lengths.i32()[b] = valid ? positions[b] + 1 : 0;
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) row[d] = q.get(static_cast<std::size_t>((b * H + h) * D + d));
      if (valid) reference::rope(row.data(), D, positions[b], host_rope);
      for (std::int64_t d = 0; d < D; ++d) q_rot.set(static_cast<std::size_t>((b * H + h) * D + d), static_cast<float>(row[d]));
    }
    for (std::int64_t h = 0; h < G; ++h) {
      const std::size_t src = static_cast<std::size_t>((b * G + h) * D);
      if (!valid) continue;
      const std::size_t dst = static_cast<std::size_t>(((b * G + h) * max_seq + positions[b]) * D);
      for (std::int64_t d = 0; d < D; ++d) row[d] = k_new.get(src + d);
      reference::rope(row.data(), D, positions[b], host_rope);
      for (std::int64_t d = 0; d < D; ++d) {
        k.set(dst + d, static_cast<float>(row[d]));
        v.set(dst + d, v_new.get(src + d));
        // The appended row: the rotated k within one rounding of the cache dtype, v exact.
        const double ulp = s.kv == DType::kF32 ? 1.2e-7 : s.kv == DType::kF16 ? 9.8e-4 : 7.9e-3;
        EXPECT_NEAR(k_after.get(dst + d), row[d], ulp * std::abs(row[d]) + 1e-6) << note << " k row b=" << b << " d=" << d;
        EXPECT_EQ(v_after.get(dst + d), v_new.get(src + d)) << note << " v row b=" << b << " d=" << d;
      }
    }
  }
  // Every other cache row is exactly as it was (NaN rows stay NaN: compare bytes).
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < G; ++h) {
      for (std::int64_t j = 0; j < max_seq; ++j) {
        if (j == positions[b]) continue;
        const std::size_t off = static_cast<std::size_t>(((b * G + h) * max_seq + j) * D) * dtype_size(s.kv);
        ASSERT_EQ(std::memcmp(k_after.bytes.data() + off, k.bytes.data() + off, D * dtype_size(s.kv)), 0)
            << note << " k row " << j << " of b=" << b << " changed";
      }
    }
  }
  DecodeProblem golden_problem = p;
  golden_problem.q_dtype = DType::kF32;
  const reference::Result golden =
      reference::decode(golden_problem,
                        DecodeTensors{q_rot.view, k.view, v.view, lengths.view, {}, {}, s.sinks ? sinks.view : TensorView{}});
  if (s.one_invalid) {
    // The invalid sequence (last) must be NaN; compare the valid ones only.
    const std::size_t valid_rows = static_cast<std::size_t>((batch - 1) * H);
    for (std::size_t i = valid_rows * D; i < out.numel(); ++i) EXPECT_TRUE(std::isnan(out.get(i))) << note << " out " << i;
    for (std::size_t i = valid_rows; i < lse.numel(); ++i) EXPECT_TRUE(std::isnan(lse.get(i))) << note << " lse " << i;
    HostTensor out_valid(s.kv, {batch - 1, H, D}), lse_valid(DType::kF32, {batch - 1, H});
    std::memcpy(out_valid.bytes.data(), out.bytes.data(), out_valid.bytes.size());
    std::memcpy(lse_valid.bytes.data(), lse.bytes.data(), lse_valid.bytes.size());
    expect_matches_golden(out_valid, std::vector<double>(golden.out.begin(), golden.out.begin() + valid_rows * D), s.kv,
                          s.kv, s.kv, note);
    expect_lse_matches(lse_valid, std::vector<double>(golden.lse.begin(), golden.lse.begin() + valid_rows), note,
                       rel_l2_limit(s.kv, s.kv, s.kv));
  } else {
    expect_matches_golden(out, golden.out, s.kv, s.kv, s.kv, note);
    expect_lse_matches(lse, golden.lse, note, rel_l2_limit(s.kv, s.kv, s.kv));
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, FusedCuda, ::testing::ValuesIn(fused_specs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
