// Bad paged inputs are rejected with an Error that says how to fix them, before anything is
// written: the page pools, outputs and LSE stay byte-for-byte unchanged. Also the plans' bounds.
#include <gtest/gtest.h>

#include <functional>

#include "paged_case.hpp"

namespace attnkit::testing {
namespace {

// Runs `call`, expects an Error whose message contains `needle` and "Fix:", and every buffer unchanged.
void expect_rejected(const std::function<void()>& call, const std::string& needle,
                     const std::vector<const HostTensor*>& buffers, const std::string& what) {
  std::vector<std::vector<std::uint8_t>> before;
  for (const HostTensor* b : buffers) before.push_back(b->bytes);
  try {
    call();
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << what << ": message was: " << m;
    EXPECT_NE(m.find("Fix:"), std::string::npos) << what << ": message was: " << m;
  }
  std::size_t i = 0;
  for (const HostTensor* b : buffers) EXPECT_TRUE(b->bytes == before[i++]) << what << ": a buffer changed";
}

PagedSetup small_setup() {
  PagedSetup s;
  s.page_size = 16;
  s.batch = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.lengths = {40, 20};
  return s;
}

TEST(PagedRejects, DecodeIndexErrorsLeaveEverythingUnchanged) {
  std::mt19937_64 rng(fresh_seed());
  PagedCase c(small_setup(), rng);
  const auto plan = plan_paged_decode(paged_decode_problem(c, 40), cpu_target(1));
  HostTensor q(DType::kF32, {2, 4, 16}), out(DType::kF32, {2, 4, 16}), lse(DType::kF32, {2, 4});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  auto call = [&] { cpu::paged_decode(plan, {q.view, c.cache(), out.view, lse.view}, {}); };
  const std::vector<const HostTensor*> all = {&c.k_pages, &c.v_pages, &out, &lse};
  std::int32_t* table = c.table.i32();
  const std::int64_t W = c.spec.max_pages_per_seq;
  auto mutate = [&](std::int32_t* cell, std::int32_t value, const std::string& needle, const std::string& what) {
    const std::int32_t old = *cell;
    *cell = value;
    expect_rejected(call, needle, all, what);
    *cell = old;
  };
  mutate(&table[0 * W + 1], static_cast<std::int32_t>(c.spec.num_pages), "out of range", "page index = num_pages");
  mutate(&table[1 * W + 0], -7, "longer than its pages", "negative page index (any negative: unassigned)");
  mutate(&table[0 * W + 2], -1, "longer than its pages", "a used entry unassigned");
  mutate(&c.lengths.i32()[0], static_cast<std::int32_t>(c.spec.capacity() + 1), "page table is shorter",
         "length beyond the table");
  mutate(&c.lengths.i32()[0], 41, "above the plan's kv_len", "length beyond the plan");
  mutate(&c.lengths.i32()[1], -1, "negative", "negative length");
  // Sanity: the unmutated call is accepted and writes.
  call();
  EXPECT_FALSE(std::isnan(out.get(0)));
}

TEST(PagedRejects, ExtendOffsetErrorsLeaveEverythingUnchanged) {
  std::mt19937_64 rng(fresh_seed());
  PagedCase c(small_setup(), rng);
  const auto plan = plan_extend(extend_problem(c, 8, 40), cpu_target(1));
  HostTensor q(DType::kF32, {10, 4, 16}), out(DType::kF32, {10, 4, 16}), lse(DType::kF32, {10, 4});
  HostTensor cu(DType::kI32, {3});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  auto call = [&] { cpu::extend(plan, {q.view, cu.view, c.cache(), out.view, lse.view}, {}); };
  const std::vector<const HostTensor*> all = {&c.k_pages, &c.v_pages, &out, &lse};
  auto try_offsets = [&](std::array<std::int32_t, 3> v, const std::string& needle, const std::string& what) {
    std::copy(v.begin(), v.end(), cu.i32());
    expect_rejected(call, needle, all, what);
  };
  try_offsets({0, -2, 4}, "negative", "negative offset");
  try_offsets({0, 6, 4}, "decreases", "decreasing offsets");
  try_offsets({1, 2, 4}, "is not 0", "offsets not starting at 0");
  try_offsets({0, 4, 11}, "beyond the 10 rows", "offsets past the rows");
  try_offsets({0, 9, 10}, "above the plan's max_q_len", "q_len above the plan");
  c.lengths.i32()[1] = 3;
  try_offsets({0, 2, 6}, "query rows but only 3 keys", "more queries than keys");
  c.lengths.i32()[1] = 20;
  c.table.i32()[c.spec.max_pages_per_seq + 1] = static_cast<std::int32_t>(c.spec.num_pages + 5);
  try_offsets({0, 2, 6}, "out of range", "page out of range");
  c.table.i32()[c.spec.max_pages_per_seq + 1] = 0;
  std::array<std::int32_t, 3> ok{0, 2, 6};
  std::copy(ok.begin(), ok.end(), cu.i32());
  call();  // accepted
  EXPECT_FALSE(std::isnan(out.get(0)));
  EXPECT_TRUE(std::isnan(out.get(static_cast<std::size_t>(6 * 4 * 16))));  // row 6 is past the offsets
}

// A step whose every sequence is idle (q_len_b = 0) has no query rows, and its q / out may come
// without memory (torch.empty(0, ...) has a null data pointer): accepted, nothing read or written.
// With rows to compute, a null q is still rejected. (Found by the differential fuzzer's extend.)
TEST(PagedRejects, AnIdleExtendStepTakesRowlessTensorsWithoutMemory) {
  std::mt19937_64 rng(fresh_seed());
  PagedCase c(small_setup(), rng);
  const PagedSetup& s = c.setup;
  ExtendProblem problem = extend_problem(c, 4, 40);
  problem.max_total_q = 8;
  const ExtendPlan plan = plan_extend(problem, cpu_target(2));
  HostTensor cu(DType::kI32, {3});
  cu.i32()[0] = cu.i32()[1] = cu.i32()[2] = 0;
  const TensorView rowless = TensorView::contiguous(nullptr, s.dtype, {0, s.heads, s.head_dim});
  const std::vector<std::uint8_t> k_before = c.k_pages.bytes, v_before = c.v_pages.bytes;
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  EXPECT_NO_THROW(cpu::extend(plan, {rowless, cu.view, c.cache(), rowless, {}}, ws.get()));
  EXPECT_TRUE(reference::extend(problem, {rowless, cu.view, c.cache(), rowless, {}}).out.empty());
  EXPECT_TRUE(c.k_pages.bytes == k_before && c.v_pages.bytes == v_before);

  cu.i32()[1] = cu.i32()[2] = 1;  // one row of sequence 0
  HostTensor out(s.dtype, {1, s.heads, s.head_dim});
  poison(out);
  const TensorView null_q = TensorView::contiguous(nullptr, s.dtype, {1, s.heads, s.head_dim});
  expect_rejected([&] { cpu::extend(plan, {null_q, cu.view, c.cache(), out.view, {}}, ws.get()); }, "null data pointer",
                  {&c.k_pages, &c.v_pages, &out}, "a null q with a row to compute");
}

TEST(PagedRejects, AppendErrorsLeaveThePoolsUnchanged) {
  std::mt19937_64 rng(fresh_seed());
  PagedSetup s = small_setup();
  PagedCase c(s, rng);
  HostTensor k_new(DType::kF32, {6, 2, 16}), v_new(DType::kF32, {6, 2, 16});
  HostTensor cu(DType::kI32, {3}), start(DType::kI32, {2});
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  const PagedAppendTensors t{k_new.view, v_new.view, cu.view, start.view, c.k_pages.view, c.v_pages.view, c.table.view};
  auto call = [&] { cpu::paged_append_kv(c.spec, t); };
  const std::vector<const HostTensor*> pools = {&c.k_pages, &c.v_pages};
  auto attempt = [&](std::array<std::int32_t, 3> offsets, std::array<std::int32_t, 2> starts, const std::string& needle,
                     const std::string& what) {
    std::copy(offsets.begin(), offsets.end(), cu.i32());
    std::copy(starts.begin(), starts.end(), start.i32());
    expect_rejected(call, needle, pools, what);
  };
  const std::int32_t cap = static_cast<std::int32_t>(c.spec.capacity());
  attempt({0, 3, 6}, {-1, 0}, "negative", "negative start");
  attempt({0, 3, 6}, {cap - 2, 0}, "page table is shorter", "append past the table");
  attempt({0, 4, 3}, {0, 0}, "decreases", "decreasing offsets");
  attempt({0, 3, 7}, {0, 0}, "beyond the 6 rows", "offsets past the rows");
  attempt({0, -1, 6}, {0, 0}, "negative", "negative offset");
  attempt({0, 3, 6}, {37, 40}, "longer than its pages", "append into an unassigned page (entry -1)");
  // Two sequences writing one slot: point sequence 1's first page at sequence 0's first page.
  const std::int64_t W = c.spec.max_pages_per_seq;
  const std::int32_t saved = c.table.i32()[W];
  c.table.i32()[W] = c.table.i32()[0];
  attempt({0, 3, 6}, {2, 0}, "same slot", "duplicate write slot");
  c.table.i32()[W] = saved;
  c.table.i32()[1] = static_cast<std::int32_t>(c.spec.num_pages);
  attempt({0, 3, 6}, {14, 0}, "out of range", "append crossing into an out-of-range page");
}

TEST(PagedPlans, StateBoundsWorkspaceAndRejectBadProblems) {
  PagedDecodeProblem p;
  p.batch = 64;
  p.num_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.cache = {4096, 16, 2048, PageLayout::kHND};
  p.kv_len = 32768;
  const auto plan = plan_paged_decode(p, cpu_target(4));
  EXPECT_EQ(plan.bounds.batch, 64);
  EXPECT_EQ(plan.bounds.max_kv_len, 32768);
  EXPECT_EQ(plan.bounds.workspace_bytes, plan.evidence.workspace_bytes);
  // Power-of-two pages of 8 keys or more are read in place on every host, with a window too (the
  // kernel copies the keys before a window's first tile boundary): pages holding whole tiles, or from
  // 16 keys whole pages making a tile (a longer tile shrinks to pages of 8); pages of fewer keys or
  // of a size that is not a power of two need the gathered chunks.
  auto windowed = p;
  windowed.options.window = 100;
  for (const auto& q : {p, windowed}) {
    for (std::int64_t page : {8, 16, 32}) {
      auto paged = q;
      paged.cache = {65536, page, 32768 / page, PageLayout::kHND};
      const auto in_place = plan_paged_decode(paged, cpu_target(4));
      EXPECT_EQ(in_place.gather_keys, 0u) << "window " << q.options.window << ", page " << page;
      const std::int64_t tile = in_place.partition.tile_size;
      EXPECT_TRUE(page % tile == 0 || (page >= 16 && tile % page == 0)) << "page " << page << ", tile " << tile;
      EXPECT_NE(to_table(in_place).find("in place:"), std::string::npos);
    }
  }
  for (std::int64_t page : {1, 4, 24}) {
    auto gathered = p;
    gathered.cache = {65536, page, 32768 / page + 1, PageLayout::kHND};
    const auto g = plan_paged_decode(gathered, cpu_target(4));
    EXPECT_GE(g.gather_keys, g.partition.tile_size) << "page " << page;
    EXPECT_NE(to_table(g).find("gather:"), std::string::npos);
  }
  EXPECT_NE(to_table(plan).find("HND"), std::string::npos);
  // An NHD pool's plan says what the layout costs the CPU decode; HND's and the GPU's say nothing.
  auto nhd = p;
  nhd.cache.layout = PageLayout::kNHD;
  EXPECT_NE(to_table(plan_paged_decode(nhd, cpu_target(4))).find("layout: NHD"), std::string::npos);
  EXPECT_EQ(to_table(plan).find("layout: NHD"), std::string::npos);
  EXPECT_EQ(to_table(plan_paged_decode(nhd, known_target("h200"))).find("layout: NHD"), std::string::npos);
  // The paged plan reads what the contiguous one does, plus the page table.
  const auto flat = plan_decode(p.as_decode(), cpu_target(4));
  EXPECT_EQ(plan.evidence.traffic.global_read_bytes, flat.evidence.traffic.global_read_bytes + 64ull * 2048 * 4);
  // The same plan for the GPU (what the CUDA kernels will read), made without a device.
  const auto gpu = plan_paged_decode(p, known_target("h200"));
  EXPECT_EQ(gpu.target.backend, Backend::kCuda);
  EXPECT_EQ(gpu.gather_keys, 0u);

  auto bad = p;
  bad.kv_len = p.cache.capacity() + 1;
  EXPECT_THROW(plan_paged_decode(bad, cpu_target(1)), Error);
  bad = p;
  bad.cache.page_size = 0;
  EXPECT_THROW(plan_paged_decode(bad, cpu_target(1)), Error);

  ExtendProblem e;
  e.batch = 8;
  e.num_heads = 32;
  e.kv_heads = 8;
  e.head_dim = 128;
  e.cache = {4096, 16, 256, PageLayout::kNHD};
  e.max_q_len = 17;
  e.max_total_q = 40;
  e.kv_len = 4096;
  const auto eplan = plan_extend(e, cpu_target(16));
  EXPECT_EQ(eplan.bounds.max_total_q, 40);
  EXPECT_EQ(eplan.bounds.max_q_len, 17);
  if (eplan.partition.sequence_splits > 1) {
    // Exact: splits x rows x heads x (head_dim + 2) f32, rounded up to 256 bytes.
    const std::uint64_t raw = std::uint64_t{eplan.partition.sequence_splits} * 40 * 32 * (128 + 2) * 4;
    EXPECT_EQ(eplan.bounds.workspace_bytes, (raw + 255) / 256 * 256);
  }
  auto bad_e = e;
  bad_e.max_total_q = 8 * 17 + 1;
  EXPECT_THROW(plan_extend(bad_e, cpu_target(1)), Error);
  bad_e = e;
  bad_e.max_q_len = 5000;
  EXPECT_THROW(plan_extend(bad_e, cpu_target(1)), Error);
}

}  // namespace
}  // namespace attnkit::testing
