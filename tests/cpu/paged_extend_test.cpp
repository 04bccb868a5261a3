// Extend (multi-token queries against a paged cache) on the CPU against the float64 golden:
// q_len 0..17 per sequence in one ragged batch, causal bottom-right against prefixes of any length
// (including q_len == length: a whole prefill), both layouts, page sizes 1/16/32/64, GQA 1/4/8,
// windows, split-KV plans; rows past cu_seqlens_q[batch] stay untouched; q_len = 1 equals decode.
#include <gtest/gtest.h>

#include "paged_case.hpp"

namespace attnkit::testing {
namespace {

struct ExtendRun {
  HostTensor q, cu, out, lse;
  std::int64_t rows = 0;
};

ExtendRun run_extend(const PagedCase& c, const ExtendPlan& plan, const std::vector<std::int32_t>& q_lens,
                     std::int64_t pad_rows, std::mt19937_64& rng) {
  const auto& s = c.setup;
  ExtendRun r;
  r.cu = HostTensor(DType::kI32, {s.batch + 1});
  r.cu.i32()[0] = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) r.cu.i32()[b + 1] = r.cu.i32()[b] + q_lens[static_cast<std::size_t>(b)];
  r.rows = r.cu.i32()[s.batch];
  const std::int64_t rows = r.rows + pad_rows;
  r.q = HostTensor(s.dtype, {rows, s.heads, s.head_dim});
  r.out = HostTensor(s.dtype, {rows, s.heads, s.head_dim});
  r.lse = HostTensor(DType::kF32, {rows, s.heads});
  fill_normal(r.q, rng);
  poison(r.out);
  poison(r.lse);
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  cpu::extend(plan, {r.q.view, r.cu.view, c.cache(), r.out.view, r.lse.view}, ws.get());
  return r;
}

void check_extend(const PagedCase& c, const ExtendPlan& plan, const ExtendRun& r, const std::string& what) {
  const auto golden = reference::extend(plan.problem, {r.q.view, r.cu.view, c.cache(), r.out.view, r.lse.view});
  // Compare the packed rows; the padding rows after them must still hold the poison.
  const std::size_t n = golden.out.size();
  HostTensor head(c.setup.dtype, {r.rows, c.setup.heads, c.setup.head_dim});
  HostTensor head_lse(DType::kF32, {r.rows, c.setup.heads});
  std::copy(r.out.bytes.begin(), r.out.bytes.begin() + static_cast<std::ptrdiff_t>(head.bytes.size()), head.bytes.begin());
  std::copy(r.lse.bytes.begin(), r.lse.bytes.begin() + static_cast<std::ptrdiff_t>(head_lse.bytes.size()),
            head_lse.bytes.begin());
  expect_matches_golden(head, golden.out, c.setup.dtype, what);
  expect_lse_matches(head_lse, golden.lse, what);
  for (std::size_t i = n; i < r.out.numel(); ++i) {
    ASSERT_TRUE(std::isnan(r.out.get(i))) << what << ": padding row element " << i << " was written";
  }
}

TEST(Extend, RaggedMultiTokenQueriesMatchGoldenOnEveryLayoutAndPageSize) {
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16, 32, 64}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = layout;
        s.page_size = page;
        s.batch = 5;
        s.heads = heads;
        s.kv_heads = kv_heads;
        s.head_dim = 40;
        s.lengths = {40, 17, 150, 9, 1};
        const std::vector<std::int32_t> q_lens = {1, 17, 5, 0, 1};  // 17 == its length: a whole prefill
        PagedCase c(s, rng);
        const auto plan = plan_extend(extend_problem(c, 17, c.spec.capacity()), cpu_target(2));
        const ExtendRun r = run_extend(c, plan, q_lens, 2, rng);
        check_extend(c, plan, r,
                     to_string(layout) + " page=" + std::to_string(page) + " H=" + std::to_string(heads) + " KH=" +
                         std::to_string(kv_heads) + seed_note(seed));
      }
    }
  }
}

TEST(Extend, EveryQueryLengthFrom1To17AgainstPrefixesWithWindowsSplitsAndDtypes) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (std::int64_t window : {0, 6, 50}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      PagedSetup s;
      s.layout = window == 6 ? PageLayout::kNHD : PageLayout::kHND;
      s.page_size = 16;
      s.batch = 17;
      s.heads = 4;
      s.kv_heads = 1;
      s.head_dim = 64;
      s.dtype = dtype;
      std::vector<std::int32_t> q_lens;
      std::uniform_int_distribution<int> prefix(0, 120);
      for (int q = 1; q <= 17; ++q) {
        q_lens.push_back(q);
        s.lengths.push_back(q + prefix(rng));
      }
      PagedCase c(s, rng);
      auto problem = extend_problem(c, 17, c.max_length());
      problem.options.window = window;
      const auto plan = plan_extend(problem, cpu_target(2));
      const ExtendRun r = run_extend(c, plan, q_lens, 0, rng);
      check_extend(c, plan, r, std::string(dtype_name(dtype)) + " window=" + std::to_string(window) + seed_note(seed));
    }
  }
  // One long sequence, few rows, many threads: the planner splits the keys (speculative verification).
  // Long enough for splits of >= kTargetTilesPerSplit tiles at the largest CPU tile (512 keys, AMX).
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.page_size = 32;
  s.batch = 1;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.lengths = {6000};
  PagedCase c(s, rng);
  const auto plan = plan_extend(extend_problem(c, 6, 6000), cpu_target(8));  // 5 rows + 1 padding row
  ASSERT_GT(plan.partition.sequence_splits, 1u);
  ASSERT_GT(plan.bounds.workspace_bytes, 0u);
  const ExtendRun r = run_extend(c, plan, {5}, 1, rng);
  check_extend(c, plan, r, "split-KV extend" + seed_note(seed));
}

// The chunk merge: a plan's gather cut to one tile per kernel call, so every row block walks its keys
// in many chunks and merges their states (the planner's chunks of up to 4 MiB hold these keys in one).
TEST(Extend, OneTilePerGatherChunkMergesToTheGolden) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (std::int64_t window : {0, 50}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      PagedSetup s;
      s.layout = window > 0 ? PageLayout::kNHD : PageLayout::kHND;
      s.page_size = 16;
      s.batch = 3;
      s.heads = 8;
      s.kv_heads = 2;
      s.head_dim = 64;
      s.dtype = dtype;
      s.lengths = {700, 300, 129};
      PagedCase c(s, rng);
      auto problem = extend_problem(c, 40, 700);
      problem.options.window = window;
      ExtendPlan plan = plan_extend(problem, cpu_target(2));
      plan.gather_keys = plan.partition.tile_size;
      ASSERT_LT(plan.gather_keys, 300u);
      const ExtendRun r = run_extend(c, plan, {40, 1, 33}, 1, rng);
      check_extend(c, plan, r,
                   std::string(dtype_name(dtype)) + " window=" + std::to_string(window) + " chunk=" +
                       std::to_string(plan.gather_keys) + seed_note(seed));
    }
  }
}

TEST(Extend, SingleTokenQueriesEqualPagedDecode) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = PageLayout::kNHD;
  s.page_size = 16;
  s.batch = 3;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.lengths = {100, 1, 47};
  PagedCase c(s, rng);
  const auto eplan = plan_extend(extend_problem(c, 1, 100), cpu_target(2));
  const ExtendRun r = run_extend(c, eplan, {1, 1, 1}, 0, rng);
  const auto dplan = plan_paged_decode(paged_decode_problem(c, 100), cpu_target(2));
  HostTensor out(s.dtype, {3, 8, 64}), lse(DType::kF32, {3, 8});
  poison(out);
  OwnedWorkspace ws(dplan.bounds.workspace_bytes);
  cpu::paged_decode(dplan, {r.q.view, c.cache(), out.view, lse.view}, ws.get());
  for (std::size_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.get(i), r.out.get(i), 1e-5) << i << seed_note(seed);
}

}  // namespace
}  // namespace attnkit::testing
