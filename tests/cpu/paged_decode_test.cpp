// Paged decode on the CPU against the float64 golden: both layouts, page sizes 1/16/32/64, random
// page permutations, mixed lengths (including 0 and exact page multiples), GQA 1/4/8, windows,
// soft-cap, split-KV plans, every dtype; plus the paged golden against the contiguous golden.
#include <gtest/gtest.h>

#include <tuple>

#include "paged_case.hpp"

namespace attnkit::testing {
namespace {

struct DecodeRun {
  HostTensor q, out, lse;
};

DecodeRun run_paged_decode(const PagedCase& c, const PagedDecodePlan& plan, std::mt19937_64& rng) {
  const auto& s = c.setup;
  DecodeRun r{HostTensor(s.dtype, {s.batch, s.heads, s.head_dim}), HostTensor(s.dtype, {s.batch, s.heads, s.head_dim}),
              HostTensor(DType::kF32, {s.batch, s.heads})};
  fill_normal(r.q, rng);
  poison(r.out);
  poison(r.lse);
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  EXPECT_EQ(plan.bounds.workspace_bytes, plan.evidence.workspace_bytes);
  cpu::paged_decode(plan, {r.q.view, c.cache(), r.out.view, r.lse.view}, ws.get());
  return r;
}

void check_against_golden(const PagedCase& c, const PagedDecodePlan& plan, const DecodeRun& r, const std::string& what) {
  const auto golden = reference::paged_decode(plan.problem, {r.q.view, c.cache(), r.out.view, r.lse.view});
  expect_matches_golden(r.out, golden.out, c.setup.dtype, what);
  expect_lse_matches(r.lse, golden.lse, what);
}

std::string describe_setup(const PagedSetup& s, std::uint64_t seed) {
  return to_string(s.layout) + " page=" + std::to_string(s.page_size) + " H=" + std::to_string(s.heads) +
         " KH=" + std::to_string(s.kv_heads) + " D=" + std::to_string(s.head_dim) + " " +
         std::string(dtype_name(s.dtype)) + seed_note(seed);
}

TEST(PagedDecode, EveryLayoutPageSizeAndGroupMatchesGolden) {
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16, 32, 64}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = layout;
        s.page_size = page;
        s.batch = 4;
        s.heads = heads;
        s.kv_heads = kv_heads;
        s.head_dim = 40;
        s.lengths = {static_cast<std::int32_t>(page), 1, 131, static_cast<std::int32_t>(3 * page + 5)};
        PagedCase c(s, rng);
        for (int threads : {1, 3}) {
          const auto plan = plan_paged_decode(paged_decode_problem(c, c.spec.capacity()), cpu_target(threads));
          const DecodeRun r = run_paged_decode(c, plan, rng);
          check_against_golden(c, plan, r, describe_setup(s, seed) + " threads=" + std::to_string(threads));
        }
      }
    }
  }
}

// Pages read in place (the plan's gather_keys 0): each dtype, head_dim instances 64 / 128 / 256 and
// a generic 72, groups 1 / 2 / 4 / 8 (the row-block and tile-unit bodies take groups of 4k), both
// layouts, pages of 8, 16, 64 and 256 keys (tiles shrunk to the page where this host's are longer),
// lengths ending mid-page and on a page boundary, one thread and split plans. A body that stepped past a tile as if the cache were contiguous would read another
// sequence's pages or the spare pages, which hold NaN.
TEST(PagedDecode, TilesReadInPlaceFromTheirPagesMatchGolden) {
  int split_plans = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::int64_t head_dim : {64, 128, 256, 72}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 4}, std::pair{8, 2}, std::pair{16, 2}}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = heads == 8 ? PageLayout::kNHD : PageLayout::kHND;
        // 256 keys: at least every host's tile (the tile unshrunk); 8 to 64: tiles of the page where
        // the host's are longer.
        s.page_size = head_dim == 64 ? 256 : head_dim == 128 ? 64 : head_dim == 256 ? 8 : 16;
        s.batch = 3;
        s.heads = heads;
        s.kv_heads = kv_heads;
        s.head_dim = head_dim;
        s.dtype = dtype;
        s.lengths = {1999, static_cast<std::int32_t>(4 * s.page_size), 37};
        PagedCase c(s, rng);
        for (int threads : {1, 8}) {
          const auto plan = plan_paged_decode(paged_decode_problem(c, 2000), cpu_target(threads));
          ASSERT_EQ(plan.gather_keys, 0u) << "tile " << plan.partition.tile_size << ", page " << s.page_size;
          split_plans += plan.partition.sequence_splits > 1 ? 1 : 0;
          const DecodeRun r = run_paged_decode(c, plan, rng);
          check_against_golden(c, plan, r, describe_setup(s, seed) + " threads=" + std::to_string(threads));
        }
      }
    }
  }
  EXPECT_GT(split_plans, 0) << "no case exercised split-KV in place";
}

// Tiles of whole pages walked page by page, on any host: the plan is made for a core with 256-key
// tiles (16 lanes, neither Intel's nor AMX), and the host's bodies run it. Every dtype (the
// row-block bodies of groups of 4k heads, the generic and vdpbf16ps ones of the others), head_dim
// 128 and a generic 72, pages of 16 and 64 dealt at random (NaN in the spare pages), lengths ending
// mid-page, mid-tile and on a tile boundary, a window starting mid-page, split and unsplit plans.
TEST(PagedDecode, TilesSpanningPagesMatchGolden) {
  int spanning = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (auto [heads, kv_heads, head_dim] : {std::tuple{8, 2, 128}, std::tuple{4, 4, 72}, std::tuple{16, 2, 72},
                                             std::tuple{8, 4, 128}}) {
      for (std::int64_t page : {16, 64}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = heads == 4 ? PageLayout::kNHD : PageLayout::kHND;
        s.page_size = page;
        s.batch = 3;
        s.heads = heads;
        s.kv_heads = kv_heads;
        s.head_dim = head_dim;
        s.dtype = dtype;
        s.lengths = {1999, 512, 37};
        PagedCase c(s, rng);
        for (int threads : {1, 8}) {
          Target target = cpu_target(threads);
          target.cpu_intel_cores = false;
          target.cpu_matrix_tiles = false;
          target.cpu_vector_lanes = 16;
          auto problem = paged_decode_problem(c, 2000);
          if (threads == 8) problem.options.window = 700;
          const auto plan = plan_paged_decode(problem, target);
          ASSERT_EQ(plan.gather_keys, 0u);
          ASSERT_GT(plan.partition.tile_size, page) << "the case should walk tiles across pages";
          spanning += 1;
          const DecodeRun r = run_paged_decode(c, plan, rng);
          check_against_golden(c, plan, r, describe_setup(s, seed) + " threads=" + std::to_string(threads) +
                                               " tile=" + std::to_string(plan.partition.tile_size));
        }
      }
    }
  }
  EXPECT_GT(spanning, 0);
}

TEST(PagedDecode, SplitKvWindowsSoftcapEmptySequencesAndDtypes) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::int64_t window : {0, 1, 37}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      PagedSetup s;
      s.layout = window == 37 ? PageLayout::kNHD : PageLayout::kHND;
      s.page_size = 16;
      s.batch = 3;
      s.heads = 8;
      s.kv_heads = 2;
      s.head_dim = 72;
      s.dtype = dtype;
      s.lengths = {0, 5000, 33};
      PagedCase c(s, rng);
      auto problem = paged_decode_problem(c, 5000);
      problem.options.window = window;
      problem.options.softcap = window == 1 ? 0.0f : 20.0f;
      // Few (sequence, KV head) units for 8 threads: the planner splits the keys. Windows start
      // mid-tile: in place, the keys before the first tile boundary are gathered.
      const auto plan = plan_paged_decode(problem, cpu_target(8));
      ASSERT_EQ(plan.gather_keys, 0u);
      if (window == 0) {  // a window of a few keys is too short to split (>= 4 tiles per split)
        ASSERT_GT(plan.partition.sequence_splits, 1u) << "the case should exercise split-KV";
        ASSERT_GT(plan.bounds.workspace_bytes, 0u);
      }
      const DecodeRun r = run_paged_decode(c, plan, rng);
      check_against_golden(c, plan, r, describe_setup(s, seed) + " window=" + std::to_string(window));
      // The empty sequence writes zeros and -inf (never NaN).
      for (std::int64_t i = 0; i < s.heads * s.head_dim; ++i) EXPECT_EQ(r.out.get(static_cast<std::size_t>(i)), 0.0f);
      for (std::int64_t h = 0; h < s.heads; ++h) EXPECT_TRUE(std::isinf(r.lse.get(static_cast<std::size_t>(h))));
    }
  }
}

// Plan once, run many times: lengths, tables and page placement change within the plan's bounds
// (the CPU analogue of replaying a captured graph), each run checked against the golden.
TEST(PagedDecode, OnePlanServesChangingCompositionsWithinItsBounds) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = PageLayout::kNHD;
  s.page_size = 32;
  s.batch = 3;
  s.heads = 4;
  s.kv_heads = 1;
  s.head_dim = 64;
  s.lengths = {300, 300, 300};
  s.table_width = 10;  // 10 pages of 32 keys: 320 >= 300
  s.pool_pages = 40;
  PagedCase bound_case(s, rng);
  const auto plan = plan_paged_decode(paged_decode_problem(bound_case, 300), cpu_target(2));
  EXPECT_EQ(plan.bounds.batch, 3);
  EXPECT_EQ(plan.bounds.max_kv_len, 300);
  std::uniform_int_distribution<int> length(0, 300);
  for (int step = 0; step < 4; ++step) {
    s.lengths = {length(rng), length(rng), step == 0 ? 300 : length(rng)};
    PagedCase c(s, rng);  // new lengths, new page placement, same shapes
    const DecodeRun r = run_paged_decode(c, plan, rng);
    check_against_golden(c, plan, r, "step " + std::to_string(step) + seed_note(seed));
  }
}

// The paged golden itself, against the contiguous golden on the same keys.
TEST(PagedDecode, PagedGoldenEqualsContiguousGolden) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = PageLayout::kHND;
  s.page_size = 16;
  s.batch = 2;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 32;
  s.lengths = {70, 17};
  PagedCase c(s, rng);
  const std::int64_t S = 80;
  DecodeProblem flat = decode_problem(2, 8, 2, 32, S);
  flat.options.window = 20;
  DecodeCase dc(flat, {70, 17}, 1.0f, seed);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t j = 0; j < s.lengths[static_cast<std::size_t>(b)]; ++j) {
        for (std::int64_t d = 0; d < 32; ++d) {
          const std::size_t flat_i = static_cast<std::size_t>(((b * 2 + h) * S + j) * 32 + d);
          dc.k_cache.set(flat_i, c.k_pages.get(c.row(b, h, j) + static_cast<std::size_t>(d)));
          dc.v_cache.set(flat_i, c.v_pages.get(c.row(b, h, j) + static_cast<std::size_t>(d)));
        }
      }
    }
  }
  auto problem = paged_decode_problem(c, 70);
  problem.options.window = 20;
  const auto paged = reference::paged_decode(problem, {dc.q.view, c.cache(), dc.out.view, dc.lse.view});
  const auto contiguous = reference::decode(flat, dc.tensors());
  ASSERT_EQ(paged.out.size(), contiguous.out.size());
  for (std::size_t i = 0; i < paged.out.size(); ++i) EXPECT_NEAR(paged.out[i], contiguous.out[i], 1e-12) << i;
  for (std::size_t i = 0; i < paged.lse.size(); ++i) EXPECT_NEAR(paged.lse[i], contiguous.lse[i], 1e-12) << i;
}

}  // namespace
}  // namespace attnkit::testing
