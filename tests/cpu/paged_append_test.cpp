// Paged KV append on the CPU: n new tokens per sequence written exactly into their (page, slot)s,
// across page boundaries, in both layouts and every page size, K only / V only / both, nothing else
// touched; then append + extend as a serving step (chunked prefill of the new tokens) vs the golden.
#include <gtest/gtest.h>

#include "paged_case.hpp"

namespace attnkit::testing {
namespace {

struct AppendInputs {
  HostTensor k_new, v_new, cu, start;
};

// New tokens: sequence b gets n[b] rows, starting at its final length minus n[b].
AppendInputs make_append(const PagedCase& c, const std::vector<std::int32_t>& n, std::mt19937_64& rng) {
  const auto& s = c.setup;
  AppendInputs a;
  a.cu = HostTensor(DType::kI32, {s.batch + 1});
  a.start = HostTensor(DType::kI32, {s.batch});
  a.cu.i32()[0] = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    a.cu.i32()[b + 1] = a.cu.i32()[b] + n[static_cast<std::size_t>(b)];
    a.start.i32()[b] = s.lengths[static_cast<std::size_t>(b)] - n[static_cast<std::size_t>(b)];
  }
  const std::int64_t rows = a.cu.i32()[s.batch];
  a.k_new = HostTensor(s.dtype, {rows, s.kv_heads, s.head_dim});
  a.v_new = HostTensor(s.dtype, {rows, s.kv_heads, s.head_dim});
  fill_normal(a.k_new, rng);
  fill_normal(a.v_new, rng);
  return a;
}

// The pool bytes an exact append must produce.
std::vector<std::uint8_t> expected_pool(const PagedCase& c, const HostTensor& pool, const HostTensor& src,
                                        const AppendInputs& a) {
  std::vector<std::uint8_t> bytes = pool.bytes;
  const auto& s = c.setup;
  const std::size_t elem = dtype_size(s.dtype), row_bytes = static_cast<std::size_t>(s.head_dim) * elem;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t i = a.cu.view.as<std::int32_t>()[b]; i < a.cu.view.as<std::int32_t>()[b + 1]; ++i) {
      const std::int64_t pos = a.start.view.as<std::int32_t>()[b] + (i - a.cu.view.as<std::int32_t>()[b]);
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        std::memcpy(bytes.data() + c.row(b, h, pos) * elem,
                    src.bytes.data() + static_cast<std::size_t>((i * s.kv_heads + h) * s.head_dim) * elem, row_bytes);
      }
    }
  }
  return bytes;
}

TEST(PagedAppend, WritesExactlyTheNewSlotsAcrossPageBoundaries) {
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16, 32, 64}) {
      for (int mode = 0; mode < 3; ++mode) {  // 0: K only, 1: V only, 2: both
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = layout;
        s.page_size = page;
        s.batch = 4;
        s.kv_heads = 2;
        s.heads = 4;
        s.head_dim = 24;
        s.dtype = mode == 2 ? DType::kBF16 : DType::kF32;
        // Appends that start mid-page and cross one or several boundaries, fill a page exactly, or add nothing.
        const auto p = static_cast<std::int32_t>(page);
        s.lengths = {p + 3, 2 * p + 1, 70, 5};
        const std::vector<std::int32_t> n = {p / 2 + 2 <= p + 3 ? p / 2 + 2 : 1, p + 1, 0, 5};
        PagedCase c(s, rng);
        AppendInputs a = make_append(c, n, rng);
        PagedAppendTensors t;
        if (mode != 1) t.k_new = a.k_new.view, t.k_pages = c.k_pages.view;
        if (mode != 0) t.v_new = a.v_new.view, t.v_pages = c.v_pages.view;
        t.cu_seqlens_new = a.cu.view;
        t.start_positions = a.start.view;
        t.page_table = c.table.view;
        const auto k_expected = mode != 1 ? expected_pool(c, c.k_pages, a.k_new, a) : c.k_pages.bytes;
        const auto v_expected = mode != 0 ? expected_pool(c, c.v_pages, a.v_new, a) : c.v_pages.bytes;
        cpu::paged_append_kv(c.spec, t);
        const std::string what = to_string(layout) + " page=" + std::to_string(page) + " mode=" + std::to_string(mode) +
                                 seed_note(seed);
        EXPECT_TRUE(c.k_pages.bytes == k_expected) << what;
        EXPECT_TRUE(c.v_pages.bytes == v_expected) << what;
      }
    }
  }
}

// A serving step: append each sequence's new tokens, then attend with them as queries (extend).
TEST(PagedAppend, AppendThenExtendMatchesGolden) {
  for (std::int64_t page : {1, 16}) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    PagedSetup s;
    s.layout = page == 1 ? PageLayout::kNHD : PageLayout::kHND;
    s.page_size = page;
    s.batch = 3;
    s.heads = 8;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.lengths = {45, 7, 300};
    const std::vector<std::int32_t> n = {13, 7, 1};
    PagedCase c(s, rng);
    AppendInputs a = make_append(c, n, rng);
    cpu::paged_append_kv(c.spec, {a.k_new.view, a.v_new.view, a.cu.view, a.start.view, c.k_pages.view, c.v_pages.view,
                                  c.table.view});
    const auto plan = plan_extend(extend_problem(c, 13, 300), cpu_target(2));
    HostTensor q(s.dtype, {21, 8, 64}), out(s.dtype, {21, 8, 64}), lse(DType::kF32, {21, 8});
    fill_normal(q, rng);
    poison(out);
    poison(lse);
    OwnedWorkspace ws(plan.bounds.workspace_bytes);
    const ExtendTensors t{q.view, a.cu.view, c.cache(), out.view, lse.view};
    cpu::extend(plan, t, ws.get());
    const auto golden = reference::extend(plan.problem, t);
    expect_matches_golden(out, golden.out, s.dtype, "page=" + std::to_string(page) + seed_note(seed));
    expect_lse_matches(lse, golden.lse, "page=" + std::to_string(page) + seed_note(seed));
  }
}

}  // namespace
}  // namespace attnkit::testing
