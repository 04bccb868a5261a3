// The decode bodies' prefetch addresses (src/cpu/prefetch_rows.hpp). A prefetch of a wrong address
// changes no result, so the kernel tests cannot see it: here every strided run the prefetcher
// takes without a table lookup is checked row by row against the page table, and the runs it must
// take without a lookup (inside the tile's page or the next one) are checked to be taken.
#define ATTNKIT_ISA_NS isa_prefetch_test
#include "cpu/prefetch_rows.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace attnkit::cpu::detail {
namespace {

using isa_prefetch_test::PrefetchRows;

// One KV head's rows in an HND pool of 2^shift-row pages: pages dealt in a random order.
struct PagedPool {
  std::int64_t page_rows, head_dim, kv_heads, pages;
  std::vector<std::uint16_t> data;
  std::vector<std::int32_t> table;
  RowSource source(std::int64_t kv_head) const {
    RowSource s{data.data(), DType::kBF16, kv_head * page_rows * head_dim, head_dim, 0};
    s.pages = table.data();
    s.page_stride = kv_heads * page_rows * head_dim;
    s.page_shift = __builtin_ctzll(static_cast<unsigned long long>(page_rows));
    return s;
  }
};

PagedPool make_pool(std::int64_t page_rows, std::int64_t keys, std::uint32_t seed) {
  PagedPool p{page_rows, 72, 3, (keys + page_rows - 1) / page_rows, {}, {}};
  p.data.resize(static_cast<std::size_t>(p.pages * p.kv_heads * page_rows * p.head_dim));
  p.table.resize(static_cast<std::size_t>(p.pages));
  std::iota(p.table.begin(), p.table.end(), 0);
  std::shuffle(p.table.begin(), p.table.end(), std::mt19937(seed));
  return p;
}

// Every k-row run from `row` the prefetcher takes in one piece matches the table row by row; runs
// inside the tile's page or the next (and not past `last`) are taken in one piece.
template <int kRows>
void expect_runs(const PrefetchRows& pf, const RowSource& s, std::int64_t first, std::int64_t last, int from) {
  const std::int64_t page_rows = std::int64_t{1} << s.page_shift, page_first = first / page_rows * page_rows;
  for (std::int64_t row = first; row <= std::min(last, page_first + 3 * page_rows); ++row) {
    const char* run = pf.paged_run<kRows>(row);
    const bool one_page = row / page_rows == (row + kRows - 1) / page_rows;
    const bool near = (row - page_first) / page_rows <= 1;
    if (one_page && near && row + kRows - 1 <= last) {
      EXPECT_NE(run, nullptr) << "rows " << row << ".." << row + kRows - 1 << " of pages of " << page_rows << " from "
                              << first << ": looked up though the prefetcher holds their page";
    }
    if (run == nullptr) continue;
    for (std::int64_t r = row; r < row + kRows && r <= last; ++r) {
      const char* expected = static_cast<const char*>(s.data) + row_offset(s, r) * 2 + from;
      ASSERT_EQ(run + (r - row) * pf.stride, expected)
          << "row " << r << " of the run from " << row << " (pages of " << page_rows << ", tile from " << first << ")";
    }
  }
}

TEST(PrefetchRows, PagedRunsMatchThePageTable) {
  for (const std::int64_t page_rows : {1, 2, 4, 16, 64}) {
    const std::int64_t keys = 7 * page_rows + 3;
    const PagedPool pool = make_pool(page_rows, keys, static_cast<std::uint32_t>(page_rows));
    for (std::int64_t kv_head = 0; kv_head < pool.kv_heads; ++kv_head) {
      const RowSource s = pool.source(kv_head);
      for (const std::int64_t last : {keys - 1, 2 * page_rows, page_rows + 1}) {
        for (std::int64_t first = 0; first <= last; first += std::max<std::int64_t>(1, page_rows / 4)) {
          for (const int from : {0, 64}) {
            const PrefetchRows pf(s, 2, from, 64, last, first);
            expect_runs<1>(pf, s, first, last, from);
            expect_runs<2>(pf, s, first, last, from);
            expect_runs<4>(pf, s, first, last, from);
          }
        }
      }
    }
  }
}

TEST(PrefetchRows, ContiguousRowsNeedNoTable) {
  std::vector<float> rows(64 * 40);
  const RowSource s{rows.data(), DType::kF32, 3 * 40, 40, 0};
  const PrefetchRows pf(s, 4, 32, 128, 50, 16);
  for (std::int64_t r = 0; r < 60; ++r)
    EXPECT_EQ(pf.row_address(r), reinterpret_cast<const char*>(rows.data() + 3 * 40 + r * 40) + 32);
}

}  // namespace
}  // namespace attnkit::cpu::detail
