// Paged decode on the GPU against the float64 golden: both layouts, page sizes 1/16/32/64, GQA
// ratios 1/4/8, mixed lengths (0, 1, page and tile multiples and not), split and unsplit plans,
// window, soft-cap, f32/f16/bf16, head dims 64/128/256; pools whose unowned slots and spare pages
// are NaN (a read outside the table or past a length fails), pages randomly permuted.
#include <gtest/gtest.h>

#include "paged_support.hpp"

namespace attnkit::testing::paged_cuda {
namespace {

TEST(PagedDecodeCuda, EveryLayoutPageSizeAndGroupMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
      for (std::int64_t page : {1, 16, 32, 64}) {
        for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{16, 2}}) {
          const std::uint64_t seed = fresh_seed();
          std::mt19937_64 rng(seed);
          PagedSetup s;
          s.layout = layout;
          s.page_size = page;
          s.batch = 6;
          s.heads = heads;
          s.kv_heads = kv_heads;
          s.head_dim = 64;
          s.dtype = dtype;
          s.lengths = {0, 1, 37, 300, 64, 129};
          PagedCase c(s, rng);
          const auto plan = plan_paged_decode(paged_decode_problem(c, 300), cuda::target());
          run_and_check_paged_decode(c, plan, rng, describe_case(s, seed) + " splits=" +
                                                       std::to_string(plan.partition.sequence_splits));
        }
      }
    }
  }
}

TEST(PagedDecodeCuda, UnsplitAndSplitPlansAgree) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  // kv_len at one tile: no split; a long kv_len with a small batch: many splits.
  for (std::int64_t kv_len : {48, 3000}) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    PagedSetup s;
    s.page_size = 16;
    s.batch = 3;
    s.heads = 8;
    s.kv_heads = 1;
    s.head_dim = 128;
    s.dtype = DType::kBF16;
    s.lengths = {static_cast<std::int32_t>(kv_len), static_cast<std::int32_t>(kv_len / 2 + 3), 17};
    PagedCase c(s, rng);
    const auto plan = plan_paged_decode(paged_decode_problem(c, kv_len), cuda::target());
    if (kv_len == 48) {
      EXPECT_EQ(plan.partition.sequence_splits, 1u);
    } else {
      EXPECT_GT(plan.partition.sequence_splits, 1u);
    }
    EXPECT_EQ(plan.bounds.workspace_bytes, plan.evidence.workspace_bytes);
    run_and_check_paged_decode(c, plan, rng, describe_case(s, seed) + " kv_len=" + std::to_string(kv_len));
  }
}

// Page boxes of a full-wave long stream take the two-tile ring (paged_plan.cpp,
// ring_for_full_wave_streams): 33 sequences x 8 KV heads fill the H200's two slots per SM, the
// hint says the lengths are near-uniform (4100 keys, the last one 4033), pages of 16 rows.
TEST(PagedDecodeCuda, TwoTileRingOfPageBoxesMatchesGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const Target gpu = cuda::target();
  if (gpu.sm_count * 2 > 33 * 8) GTEST_SKIP() << gpu.sm_count << " SMs: 264 blocks do not fill two per SM here";
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.page_size = 16;
  s.batch = 33;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.dtype = DType::kBF16;
  s.lengths.assign(33, 4100);
  s.lengths.back() = 4033;
  PagedCase c(s, rng);
  PagedDecodeProblem problem = paged_decode_problem(c, 4100);
  for (std::int32_t len : s.lengths) problem.expected_total_keys += len;
  const auto plan = plan_paged_decode(problem, gpu);
  ASSERT_TRUE(plan.page_boxes) << to_table(plan);
  ASSERT_EQ(plan.partition.pipeline_stages, 2u) << "the case is meant to take the two-tile ring\n" << to_table(plan);
  run_and_check_paged_decode(c, plan, rng, describe_case(s, seed) + " two tiles");
}

TEST(PagedDecodeCuda, WindowSoftcapAndEveryDtypeAndHeadDim) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  struct Variant {
    DType dtype;
    std::int64_t head_dim, window;
    float softcap;
  };
  for (const Variant& v : {Variant{DType::kF32, 128, 100, 0.0f}, Variant{DType::kF16, 128, 0, 30.0f},
                           Variant{DType::kBF16, 256, 77, 20.0f}, Variant{DType::kF32, 256, 0, 0.0f},
                           Variant{DType::kF16, 64, 33, 0.0f}}) {
    for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      PagedSetup s;
      s.layout = layout;
      s.page_size = 32;
      s.batch = 4;
      s.heads = 8;
      s.kv_heads = 2;
      s.head_dim = v.head_dim;
      s.dtype = v.dtype;
      s.lengths = {500, 1, 0, 257};
      PagedCase c(s, rng);
      auto problem = paged_decode_problem(c, 500);
      problem.options.window = v.window;
      problem.options.softcap = v.softcap;
      const auto plan = plan_paged_decode(problem, cuda::target());
      run_and_check_paged_decode(c, plan, rng,
                                 describe_case(s, seed) + " window=" + std::to_string(v.window) +
                                     " softcap=" + std::to_string(v.softcap));
    }
  }
}

TEST(PagedDecodeCuda, ReusesOnePlanWhileLengthsAndTablesChange) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  // One planned shape (table width, pool, batch, kv_len bound); three compositions under it.
  const std::vector<std::vector<std::int32_t>> compositions = {{200, 0, 5}, {1, 256, 64}, {0, 0, 255}};
  PagedDecodePlan plan;
  for (std::size_t i = 0; i < compositions.size(); ++i) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    PagedSetup s;
    s.layout = PageLayout::kNHD;
    s.page_size = 16;
    s.batch = 3;
    s.heads = 4;
    s.kv_heads = 1;
    s.head_dim = 64;
    s.dtype = DType::kBF16;
    s.lengths = compositions[i];
    s.table_width = 16;
    s.pool_pages = 40;
    PagedCase c(s, rng);
    if (i == 0) plan = plan_paged_decode(paged_decode_problem(c, 256), cuda::target());
    run_and_check_paged_decode(c, plan, rng, describe_case(s, seed) + " composition " + std::to_string(i));
  }
}

}  // namespace
}  // namespace attnkit::testing::paged_cuda
