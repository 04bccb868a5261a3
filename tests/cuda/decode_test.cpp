// CUDA split-KV decode against the float64 golden (label gpu). Awkward shapes on purpose: head_dim
// 64 / 80 / 96 / 128 / 256, GQA 1 / 4 / 8 / 16 / 6 / MQA, windows of 1, mid and longer than the
// sequence, lengths 0, 1, odd, thousands, and batches mixing lengths from 1 to 70000. Cache rows a
// sequence must not read (past its length, before its window) hold NaN, so a kernel that touches
// them fails (e4m3 caches: the NaN code 0xFF); outputs are poisoned (NaN) before every run. e4m3
// caches hold values quantized with per-tensor scales the decode is given. Skips, visibly, without a GPU.
#include <algorithm>
#include <random>

#include "cuda/decode_support.hpp"
#include "plan/evidence.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

struct DecodeSpec {
  std::string name;
  std::int64_t heads, kv_heads, head_dim;
  DType kv, q, out;
  std::vector<int> lengths;  // one per sequence
  std::int64_t window = 0;
  float softcap = 0.0f;
  float stddev = 1.0f;       // q and k; large values make peaked softmaxes
  std::int64_t plan_kv_len = 0;  // 0 = the longest length (a smaller one checks the kernel's clamp)
  KvScales scales = {};          // e4m3 caches: stored values are x / scale
  std::vector<int> starts = {};  // left padding: each sequence's first real key (none: empty)
};

// s with left padding: keys before starts[b] are padding (NaN in the cache, never read).
DecodeSpec left_padded(DecodeSpec s, std::vector<int> starts) {
  s.name = "left_padded_" + s.name;
  s.starts = std::move(starts);
  return s;
}

std::ostream& operator<<(std::ostream& os, const DecodeSpec& s) { return os << s.name; }

struct DecodeRun {
  DecodeProblem problem;
  HostTensor q, k, v, lengths, out, lse, starts;  // starts: i32 [batch], or empty
  KvScales scales;
  std::uint64_t seed = 0;
};

// Host tensors of a spec: caches NaN except the rows each sequence may read.
DecodeRun make_run(const DecodeSpec& s) {
  DecodeRun r;
  const std::int64_t batch = static_cast<std::int64_t>(s.lengths.size());
  const std::int64_t longest = std::max<std::int64_t>(1, *std::max_element(s.lengths.begin(), s.lengths.end()));
  DecodeProblem& p = r.problem;
  p.batch = batch, p.num_heads = s.heads, p.kv_heads = s.kv_heads, p.head_dim = s.head_dim;
  p.kv_len = s.plan_kv_len > 0 ? s.plan_kv_len : longest;
  p.max_seq = longest + 5;
  p.kv_dtype = s.kv, p.q_dtype = s.q, p.out_dtype = s.out;
  p.options.window = s.window;
  p.options.softcap = s.softcap;
  r.seed = fresh_seed();
  r.scales = s.scales;
  std::mt19937_64 rng(r.seed);
  r.q = HostTensor(s.q, {batch, s.heads, s.head_dim});
  r.k = HostTensor(s.kv, {batch, s.kv_heads, p.max_seq, s.head_dim});
  r.v = HostTensor(s.kv, {batch, s.kv_heads, p.max_seq, s.head_dim});
  r.lengths = HostTensor(DType::kI32, {batch});
  r.out = HostTensor(s.out, {batch, s.heads, s.head_dim});
  r.lse = HostTensor(DType::kF32, {batch, s.heads});
  if (!s.starts.empty()) {
    r.starts = HostTensor(DType::kI32, {batch});
    for (std::int64_t b = 0; b < batch; ++b) r.starts.i32()[b] = s.starts[static_cast<std::size_t>(b)];
  }
  fill_normal(r.q, rng, s.stddev);
  poison(r.k);
  poison(r.v);
  poison(r.out);
  poison(r.lse);
  std::normal_distribution<float> kd(0.0f, s.stddev), vd(0.0f, 1.0f);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = std::min<std::int64_t>(s.lengths[b], p.kv_len);
    r.lengths.i32()[b] = s.lengths[b];
    const std::int64_t start = s.starts.empty() ? 0 : s.starts[static_cast<std::size_t>(b)];
    const std::int64_t first = decode_keys(len, s.window, start).begin;
    for (std::int64_t h = 0; h < s.kv_heads; ++h) {
      for (std::int64_t j = first; j < len; ++j) {
        const std::size_t row = static_cast<std::size_t>(((b * s.kv_heads + h) * p.max_seq + j) * s.head_dim);
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          r.k.set(row + d, kd(rng) / s.scales.k);  // scales are 1 but for e4m3 caches
          r.v.set(row + d, vd(rng) / s.scales.v);
        }
      }
    }
  }
  return r;
}

// Runs the planned kernel; returns the golden (computed with lengths clamped to the plan's kv_len).
reference::Result run_and_golden(DecodeRun& r, const DecodePlan& plan) {
  {
    DeviceTensor q(r.q), k(r.k), v(r.v), lengths(r.lengths), out(r.out), lse(r.lse), starts(r.starts);
    DeviceWorkspace ws(plan.evidence.workspace_bytes);
    DecodeTensors t{q.view, k.view, v.view, lengths.view, out.view, lse.view};
    t.kv_scales = r.scales;
    if (!r.starts.bytes.empty()) t.key_starts = starts.view;
    cuda::decode(plan, t, ws.view());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.copy_to(r.out);
    lse.copy_to(r.lse);
  }
  HostTensor clamped(DType::kI32, {r.problem.batch});
  for (std::int64_t b = 0; b < r.problem.batch; ++b) {
    clamped.i32()[b] = std::clamp<std::int32_t>(r.lengths.i32()[b], 0, static_cast<std::int32_t>(r.problem.kv_len));
  }
  DecodeTensors golden{r.q.view, r.k.view, r.v.view, clamped.view, {}, {}};
  golden.kv_scales = r.scales;
  golden.key_starts = r.starts.view;
  return reference::decode(r.problem, golden);
}

// A q wider than 16-bit K/V enters the tensor cores rounded to the K/V dtype (engine_mma.cuh; f16
// for e4m3 K/V, engine_mma_fp8.cuh), so each score may move by up to 2 * u * |score| (u the unit
// roundoff; a soft-cap only shrinks it): the LSE bound of such rows grows by 2 * u * max |score|
// of the row. Zero for other cases.
std::vector<double> q_rounding_slack(const DecodeRun& r) {
  const DecodeProblem& p = r.problem;
  std::vector<double> slack(static_cast<std::size_t>(p.batch * p.num_heads), 0.0);
  const DType mma = is_fp8(p.kv_dtype) ? DType::kF16 : p.kv_dtype;
  if (dtype_size(mma) != 2 || p.q_dtype == mma) return slack;
  const double u = mma == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
  const double scale = p.effective_scale();
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = std::clamp<std::int64_t>(r.lengths.view.as<const std::int32_t>()[b], 0, p.kv_len);
    const KeyRange keys = decode_keys(len, p.options.window, r.starts.bytes.empty() ? 0 : r.starts.view.as<const std::int32_t>()[b]);
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      double worst = 0;
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          dot += static_cast<double>(r.q.get(static_cast<std::size_t>((b * p.num_heads + h) * p.head_dim + d))) *
                 r.k.get(static_cast<std::size_t>(((b * p.kv_heads + h / p.group_size()) * p.max_seq + j) * p.head_dim + d)) *
                 r.scales.k;
        }
        worst = std::max(worst, std::abs(dot * scale));
      }
      slack[static_cast<std::size_t>(b * p.num_heads + h)] = 2 * u * worst;
    }
  }
  return slack;
}

std::vector<DecodeSpec> decode_specs() {
  using enum DType;
  const KvScales e4m3_scales{0.5f, 0.25f};
  return {
      // Left padding (key_starts): a start inside the sequence, at 0, one key before the end, at
      // the end (no key: zeros, LSE -inf), before and inside a window; split and unsplit, e4m3.
      left_padded({"d128_gqa4_bf16", 32, 8, 128, kBF16, kBF16, kBF16, {4093, 17, 300, 5}}, {100, 0, 299, 5}),
      left_padded({"d64_gqa4_window_f32", 8, 2, 64, kF32, kF32, kF32, {2000, 150, 900}, 300}, {1800, 10, 0}),
      left_padded({"d256_mqa_f16_out_f32", 16, 1, 256, kF16, kF16, kF32, {2500, 3}}, {1234, 1}),
      left_padded({"d80_gqa8_odd_bf16_q_f32", 16, 2, 80, kBF16, kF32, kBF16, {37, 129, 1}}, {36, 64, 0}),
      left_padded({"e4m3_d128_gqa4", 32, 8, 128, kE4M3, kBF16, kBF16, {4093, 17}, 0, 0.0f, 1.0f, 0, e4m3_scales}, {4000, 3}),
      left_padded({"mixed_lengths_1_to_70000_bf16", 8, 2, 128, kBF16, kBF16, kBF16, {1, 0, 70000, 333, 12345}},
                  {0, 0, 69000, 100, 12344}),
      left_padded({"d128_mha_f32", 8, 8, 128, kF32, kF32, kF32, {300, 1, 0}}, {299, 1, 0}),
      left_padded({"length_above_plan_is_clamped_f32", 8, 2, 64, kF32, kF32, kF32, {500, 50}, 0, 0.0f, 1.0f, 100},
                  {60, 49}),
      {"d64_mha_len1_bf16", 8, 8, 64, kBF16, kBF16, kBF16, {1, 1}},
      {"d80_gqa4_odd_f32", 16, 4, 80, kF32, kF32, kF32, {37, 1, 129}},
      {"d96_gqa8_thousands_f16", 16, 2, 96, kF16, kF16, kF16, {3001, 2999}},
      {"d128_gqa4_thousands_bf16_out_f32", 32, 8, 128, kBF16, kBF16, kF32, {4093, 17}},
      {"d128_gqa4_f32_q_bf16_kv", 32, 8, 128, kBF16, kF32, kBF16, {2048, 5}},
      {"d256_mqa_bf16", 16, 1, 256, kBF16, kBF16, kBF16, {2500, 3}},
      {"d256_gqa8_f32_large_scores", 8, 1, 256, kF32, kF32, kF32, {1500}, 0, 0.0f, 4.0f},
      {"d128_gqa8_window1_bf16", 16, 2, 128, kBF16, kBF16, kBF16, {1000, 1}, 1},
      {"d128_gqa4_window_mid_f32", 8, 2, 128, kF32, kF32, kF32, {2000, 150, 301}, 300},
      {"d64_gqa4_window_longer_f16", 8, 2, 64, kF16, kF16, kF16, {1234, 7}, 5000},
      {"d128_softcap_f16_q_f32", 8, 2, 128, kF16, kF32, kF16, {777, 2}, 0, 30.0f, 3.0f},
      {"d64_softcap_window_bf16", 4, 1, 64, kBF16, kBF16, kF32, {999}, 100, 20.0f, 2.0f},
      {"mixed_lengths_1_to_70000_bf16", 8, 2, 128, kBF16, kBF16, kBF16, {1, 0, 70000, 333, 12345, 69999}},
      {"mixed_lengths_f32_gqa4", 32, 8, 128, kF32, kF32, kF32, {5, 40000, 0, 1}},
      {"gqa16_two_head_chunks_bf16", 32, 2, 128, kBF16, kBF16, kBF16, {2000, 64}},
      {"gqa6_partial_chunk_f16", 12, 2, 64, kF16, kF16, kF16, {500, 9}},
      {"mqa128_two_passes_bf16", 128, 1, 64, kBF16, kBF16, kBF16, {300, 1}},
      {"d256_gqa8_window_mid_bf16", 16, 2, 256, kBF16, kBF16, kBF16, {5000, 40}, 999},
      {"length_above_plan_is_clamped_f32", 8, 2, 64, kF32, kF32, kF32, {500, 50}, 0, 0.0f, 1.0f, 100},
      // The f32 engine's reduce-scatter at its edges: one thread per head (8 heads per warp, 8
      // threads per key), a warp with fewer heads than it holds, one head, and the soft-cap.
      {"d64_gqa8_f32_one_thread_per_head", 16, 2, 64, kF32, kF32, kF32, {700, 33}},
      {"d128_gqa6_f32_softcap_partial_warp", 12, 2, 128, kF32, kF32, kF32, {901, 64}, 0, 25.0f, 2.0f},
      {"d128_mha_f32", 8, 8, 128, kF32, kF32, kF32, {300, 1, 0}},
      {"d256_gqa3_f32_window", 6, 2, 256, kF32, kF32, kF32, {1000, 7}, 250},
      // e4m3 caches (f16 tensor cores after an in-register conversion; q and out in any 16/32-bit
      // dtype), with scales: every head_dim capacity (64 fills half a 128-byte segment), GQA 4 /
      // 8 / 16 / 6 / MHA / MQA, windows, soft-cap, lengths 0 / 1 / odd / 70000, split and unsplit.
      {"e4m3_d64_mha_len1", 8, 8, 64, kE4M3, kBF16, kBF16, {1, 1}, 0, 0.0f, 1.0f, 0, {0.02f, 3.5f}},
      {"e4m3_d128_gqa4_thousands_q_f16_out_f32", 32, 8, 128, kE4M3, kF16, kF32, {4093, 17}, 0, 0.0f, 1.0f, 0, {0.5f, 0.25f}},
      {"e4m3_d128_gqa4_q_f32", 32, 8, 128, kE4M3, kF32, kBF16, {2048, 5}, 0, 0.0f, 1.0f, 0, {1.0f, 1.0f}},
      {"e4m3_d256_mqa", 16, 1, 256, kE4M3, kBF16, kBF16, {2500, 3}, 0, 0.0f, 1.0f, 0, {0.01f, 0.01f}},
      {"e4m3_d80_gqa8_odd", 16, 2, 80, kE4M3, kBF16, kF16, {37, 1, 129}, 0, 0.0f, 1.0f, 0, {0.125f, 2.0f}},
      {"e4m3_d128_gqa8_window1", 16, 2, 128, kE4M3, kBF16, kBF16, {1000, 1}, 1, 0.0f, 1.0f, 0, {1.0f, 1.0f}},
      {"e4m3_d64_softcap_window", 8, 2, 64, kE4M3, kF16, kF16, {999, 0, 150}, 100, 20.0f, 2.0f, 0, {0.05f, 0.05f}},
      {"e4m3_mixed_lengths_1_to_70000", 8, 2, 128, kE4M3, kBF16, kBF16, {1, 0, 70000, 333, 12345, 69999}, 0, 0.0f, 1.0f, 0, {0.02f, 0.02f}},
      {"e4m3_gqa16_two_head_chunks", 32, 2, 128, kE4M3, kBF16, kBF16, {2000, 64}, 0, 0.0f, 1.0f, 0, {1.0f, 1.0f}},
      {"e4m3_gqa6_partial_chunk_d256_window", 12, 2, 256, kE4M3, kBF16, kF32, {5000, 40}, 999, 0.0f, 1.0f, 0, {0.3f, 0.7f}},
      {"e4m3_mqa128_two_passes", 128, 1, 64, kE4M3, kBF16, kBF16, {300, 1}, 0, 0.0f, 1.0f, 0, {1.0f, 1.0f}},
      {"e4m3_length_above_plan_is_clamped", 8, 2, 64, kE4M3, kBF16, kBF16, {500, 50}, 0, 0.0f, 1.0f, 100, {1.0f, 1.0f}},
  };
}

class DecodeCuda : public ::testing::TestWithParam<DecodeSpec> {};

TEST_P(DecodeCuda, PlannedKernelMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DecodeSpec& s = GetParam();
  DecodeRun r = make_run(s);
  const DecodePlan plan = plan_decode(r.problem, cuda::target());
  ASSERT_EQ(plan.partition.family, KernelFamily::kSplitKvDecode);
  const reference::Result golden = run_and_golden(r, plan);
  const std::string note = s.name + " seed=" + std::to_string(r.seed) + " splits=" +
                           std::to_string(plan.partition.sequence_splits);
  expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note);
  expect_lse_matches(r.lse, golden.lse, note, rel_l2_limit(s.kv, s.q, s.out), q_rounding_slack(r));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeCuda, ::testing::ValuesIn(decode_specs()),
                         [](const auto& info) { return info.param.name; });

// 264 sequences of random lengths (some zero, the longest 300) x 8 KV heads = 2112 blocks against
// the golden, optionally left-padded at random (starts 0..length); `check` looks at the plan first.
template <class CheckPlan>
void expect_large_batch_matches(const std::string& name, DType dtype, CheckPlan check, bool left_padded = false) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<int> len(0, 300);
  DecodeSpec s{name, 32, 8, 64, dtype, dtype, dtype, {}};
  for (int b = 0; b < 264; ++b) s.lengths.push_back(len(rng));
  s.lengths[0] = 300;
  if (left_padded) {
    for (int length : s.lengths) s.starts.push_back(std::uniform_int_distribution<int>(0, length)(rng));
  }
  DecodeRun r = make_run(s);
  const DecodePlan plan = plan_decode(r.problem, cuda::target());
  check(plan);
  const reference::Result golden = run_and_golden(r, plan);
  expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, s.name + " seed=" + std::to_string(r.seed));
  expect_lse_matches(r.lse, golden.lse, s.name, rel_l2_limit(s.kv, s.q, s.out));
}

// Large batches give enough (sequence, KV head) blocks that the planner does not split bf16: the
// unsplit path writes out and LSE directly (2112 blocks: four waves of up to 4 resident per SM).
TEST(DecodeCudaPaths, UnsplitLargeBatchMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  auto unsplit = [](const DecodePlan& plan) {
    EXPECT_EQ(plan.partition.sequence_splits, 1u) << to_table(plan);
    EXPECT_EQ(plan.evidence.workspace_bytes, 0u);
  };
  expect_large_batch_matches("unsplit_batch264_bf16", DType::kBF16, unsplit);
  // Left padding: the first tiles wait for the start (no tile issued before the length is read).
  expect_large_batch_matches("unsplit_batch264_bf16_left_padded", DType::kBF16, unsplit, true);
}

// f32 (CUDA-core) blocks that would make several waves unsplit (2112 on 396 resident: 5.3) split
// anyway to fill the last wave (decode round 20).
TEST(DecodeCudaPaths, ManyWaveF32SplitMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  expect_large_batch_matches("many_wave_split_batch264_f32", DType::kF32, [](const DecodePlan& plan) {
    EXPECT_GT(plan.partition.sequence_splits, 1u) << to_table(plan);
  });
}

// The same call twice gives bit-identical results (no race, no dependence on block order).
TEST(DecodeCudaPaths, SplitRunIsDeterministic) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  DecodeSpec s{"deterministic", 32, 8, 128, DType::kBF16, DType::kBF16, DType::kBF16, {9000, 3}};
  DecodeRun r = make_run(s);
  const DecodePlan plan = plan_decode(r.problem, cuda::target());
  ASSERT_GT(plan.partition.sequence_splits, 1u);
  DeviceTensor q(r.q), k(r.k), v(r.v), lengths(r.lengths), out(r.out), lse(r.lse);
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  HostTensor first(DType::kBF16, {2, 32, 128}), second(DType::kBF16, {2, 32, 128});
  cuda::decode(plan, DecodeTensors{q.view, k.view, v.view, lengths.view, out.view, lse.view}, ws.view());
  out.copy_to(first);
  cuda::decode(plan, DecodeTensors{q.view, k.view, v.view, lengths.view, out.view, lse.view}, ws.view());
  out.copy_to(second);
  EXPECT_EQ(first.bytes, second.bytes);
}

// A plan whose splits merge in clusters (distributed shared memory) and the same partition merged
// through the workspace by the merge kernel: both against the golden, at mixed lengths (0 and 1:
// clusters with empty splits; 5 and 6 splits: cluster sizes that are not powers of two; group 8 at
// head_dim 256: the largest states a cluster merges).
TEST(DecodeCudaPaths, ClusterMergeAndMergeKernelMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (const DecodeSpec& s :
       {DecodeSpec{"cluster_merge_mixed", 16, 4, 128, DType::kBF16, DType::kBF16, DType::kF32, {640, 0, 1, 333}},
        left_padded({"cluster_merge_mixed", 16, 4, 128, DType::kBF16, DType::kBF16, DType::kF32, {640, 0, 1, 333}},
                    {600, 0, 0, 17}),
        DecodeSpec{"cluster_merge_group8_d256", 16, 2, 256, DType::kF16, DType::kF16, DType::kF32, {1000, 2}}}) {
    DecodeRun r = make_run(s);
    const DecodePlan plan = plan_decode(r.problem, cuda::target());
    ASSERT_GT(plan.partition.merge_cluster, 1u) << "the case is meant to merge in clusters\n" << to_table(plan);
    EXPECT_EQ(plan.evidence.workspace_bytes, 0u);
    const reference::Result golden = run_and_golden(r, plan);
    const std::string note = s.name + " seed=" + std::to_string(r.seed);
    expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " cluster merge");
    expect_lse_matches(r.lse, golden.lse, note + " cluster merge", rel_l2_limit(s.kv, s.q, s.out));

    DecodePlan kernel_merge = plan;
    kernel_merge.partition.merge_cluster = 0;
    kernel_merge.evidence = detail::compute_decode_evidence(r.problem, kernel_merge.partition, kernel_merge.target);
    ASSERT_GT(kernel_merge.evidence.workspace_bytes, 0u);
    poison(r.out);
    poison(r.lse);
    run_and_golden(r, kernel_merge);
    expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " merge kernel");
    expect_lse_matches(r.lse, golden.lse, note + " merge kernel", rel_l2_limit(s.kv, s.q, s.out));
  }
}

// The K/V loads' L2 policy changes where the lines go, never the result: the plan's evict-first
// policy and the same partition with evict-normal loads, bf16 (TMA tiles and the first tile's
// copies) and f32 (TMA tiles), both against the golden.
TEST(DecodeCudaPaths, BothL2PoliciesMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (const DecodeSpec& s : {DecodeSpec{"l2_policy_bf16", 16, 4, 128, DType::kBF16, DType::kBF16, DType::kF32, {3001, 77, 1}},
                              DecodeSpec{"l2_policy_f32", 8, 2, 64, DType::kF32, DType::kF32, DType::kF32, {1500, 5}}}) {
    DecodeRun r = make_run(s);
    const DecodePlan plan = plan_decode(r.problem, cuda::target());
    ASSERT_TRUE(plan.partition.kv_evict_first) << "the case is meant to load evict-first\n" << to_table(plan);
    const std::string note = s.name + " seed=" + std::to_string(r.seed);
    const reference::Result golden = run_and_golden(r, plan);
    expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " evict first");
    DecodePlan normal = plan;
    normal.partition.kv_evict_first = false;
    poison(r.out);
    poison(r.lse);
    run_and_golden(r, normal);
    expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " evict normal");
    expect_lse_matches(r.lse, golden.lse, note + " evict normal", rel_l2_limit(s.kv, s.q, s.out));
  }
}

// Full-wave long streams take a two-tile ring (cuda_decode_rules.cpp, kMinTilesForTwoStages): 33
// sequences x 8 KV heads fill the H200's 132 SMs twice over, the longest 4100 keys (65 tiles), the
// others of mixed lengths down to 1. The same plan with the budget's three tiles must agree.
TEST(DecodeCudaPaths, TwoTileRingOfFullWaveStreamsMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  std::vector<int> lengths{4100};
  for (int i = 1; i < 33; ++i) lengths.push_back(1 + (i * 997) % 4100);
  const DecodeSpec s{"two_tile_ring_bf16", 32, 8, 128, DType::kBF16, DType::kBF16, DType::kBF16, lengths};
  const Target gpu = cuda::target();
  if (gpu.sm_count * 2 > 33 * 8) GTEST_SKIP() << gpu.sm_count << " SMs: 264 blocks do not fill two per SM here";
  DecodeRun r = make_run(s);
  const DecodePlan plan = plan_decode(r.problem, gpu);
  ASSERT_EQ(plan.partition.pipeline_stages, 2u) << "the case is meant to take the two-tile ring\n" << to_table(plan);
  const std::string note = s.name + " seed=" + std::to_string(r.seed);
  const reference::Result golden = run_and_golden(r, plan);
  expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " two tiles");
  expect_lse_matches(r.lse, golden.lse, note + " two tiles", rel_l2_limit(s.kv, s.q, s.out));
  DecodePlan three = plan;
  three.partition.pipeline_stages = 3;
  poison(r.out);
  poison(r.lse);
  run_and_golden(r, three);
  expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, note + " three tiles");
  expect_lse_matches(r.lse, golden.lse, note + " three tiles", rel_l2_limit(s.kv, s.q, s.out));
}

// Small cases for compute-sanitizer (memcheck, racecheck): each checks that its plan takes the path
// it is meant for (`what`), then runs it against the golden.
template <class TakesPath>
void expect_small_case(const DecodeSpec& s, TakesPath takes_path, const char* what) {
  DecodeRun r = make_run(s);
  const DecodePlan plan = plan_decode(r.problem, cuda::target());
  ASSERT_TRUE(takes_path(plan.partition)) << "the case is meant to " << what << "\n" << to_table(plan);
  const reference::Result golden = run_and_golden(r, plan);
  expect_matches_golden(r.out, golden.out, s.kv, s.q, s.out, s.name);
  expect_lse_matches(r.lse, golden.lse, s.name, rel_l2_limit(s.kv, s.q, s.out));
}

// The merge kernel's path: more splits than a cluster merges (16), window, GQA 4, LSE.
TEST(DecodeCudaSmall, SanitizerCase) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DecodeSpec s{"sanitizer_small", 8, 2, 64, DType::kBF16, DType::kBF16, DType::kBF16, {4000, 0, 1}, 3000};
  expect_small_case(s, [](const WorkPartition& w) { return w.sequence_splits > 1 && w.merge_cluster == 0; },
                    "split and merge through the workspace");
}

// The cluster merge: 2 x 8 blocks, one empty sequence.
TEST(DecodeCudaSmall, ClusterMergeSanitizerCase) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DecodeSpec s{"sanitizer_cluster", 32, 8, 64, DType::kBF16, DType::kBF16, DType::kBF16, {700, 0}};
  expect_small_case(s, [](const WorkPartition& w) { return w.merge_cluster > 1; }, "merge its splits in clusters");
}

// An e4m3 cache through the merge kernel (window, many splits) and a partial last tile.
TEST(DecodeCudaSmall, Fp8SanitizerCase) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  DecodeSpec s{"sanitizer_e4m3", 8, 2, 128, DType::kE4M3, DType::kBF16, DType::kBF16, {4001, 0, 1}, 3000};
  s.scales = {0.05f, 2.0f};
  expect_small_case(s, [](const WorkPartition& w) { return w.sequence_splits > 1; }, "split an e4m3 cache");
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
