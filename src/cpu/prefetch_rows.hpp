// Internal: software prefetch of a task's K/V rows for the fast decode bodies, from a contiguous
// cache or in place from a paged one (fast_tasks.hpp's RowSource). Compiled once per instruction
// set like the bodies (the including unit defines ATTNKIT_ISA_NS): no vector code, but inline
// functions built under different target flags must not be merged across units.
#ifndef ATTNKIT_ISA_NS
#error "define ATTNKIT_ISA_NS before including prefetch_rows.hpp"
#endif
#pragma once

#include <cstdint>

#include "cpu/fast_tasks.hpp"

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// Prefetch of kRows consecutive rows of a source, `bytes` of each from byte `from`. Rows past
// `last` are skipped (they were prefetched already or are not the task's). Issued per key step,
// so the addressing is one multiply and adds: written per row with a clamp, the prefetches'
// instructions were a quarter of the bf16 body's time. kBytes > 0: the bytes per row known at
// compile time (head_dim 128), so each line is one instruction; with a run-time byte count every
// line also cost an add, a compare and a branch (on Zen 5 a third of the bf16 body's
// instructions; docs/perf-notes.md, CPU round 8). kLocality 3: into L1 (rows about to be used);
// 2: into L2 (the other stream's rows for the next phase: V during Q K^T, the next tile's K during
// P V, so both streams stay in flight instead of restarting at every phase).
// Paged rows: the page holding the tile's first row (`first`) and the page after it are looked up
// once, when the prefetcher is made (per tile); a step's rows inside one of them are a strided run
// from there. A step past both (a tile spanning several pages) moves the pair of pages to its own
// page, one lookup per two pages walked; only rows straddling a page are looked up one by one. A
// table lookup per step cost the paged bf16 group-4 decode 27% (docs/perf-notes.md, "Paged decode
// on the CPU: two lookups per tile").
struct PrefetchRows {
  const char* base;  // row 0, byte `from` (rows of one strided run)
  std::int64_t stride, bytes, last;
  const RowSource* paged;  // the source when its rows are paged, else null
  std::int64_t elem, from;
  std::int64_t page_rows = 0;  // paged: rows per page
  // Paged, the window of two pages (moved along the tile by `rows`): the first page's first row;
  // row r of the first page at here + r * stride, of the next at next + r * stride (as integers:
  // the bases themselves may lie outside the pool). Without a next page (it starts past `last`)
  // both are the first page's: rows past `last` are never fetched.
  mutable std::int64_t page_first = 0;
  mutable std::uintptr_t here = 0, next = 0;

  PrefetchRows(const RowSource& s, std::int64_t elem_, std::int64_t from_, std::int64_t bytes_, std::int64_t last_,
               std::int64_t first)
      : base(static_cast<const char*>(s.data) + s.offset * elem_ + from_), stride(s.row_stride * elem_), bytes(bytes_),
        last(last_), paged(s.pages != nullptr ? &s : nullptr), elem(elem_), from(from_) {
    if (paged != nullptr) {
      page_rows = std::int64_t{1} << paged->page_shift;
      find_pages(first);
    }
  }

  // Row r's address (byte `from`), looked up in the page table where the rows are paged.
  const char* row_address(std::int64_t r) const {
    if (paged == nullptr) return base + r * stride;
    return static_cast<const char*>(paged->data) + row_offset(*paged, r) * elem + from;
  }

  // Paged: the address of row `row` when rows [row, row + kRows) lie in the first page or in the
  // next (one strided run from there), else null (they straddle a page or lie beyond both).
  template <int kRows>
  inline __attribute__((always_inline)) const char* paged_run(std::int64_t row) const {
    const auto in_page = [&](std::int64_t first_row) { return row >= first_row && row - first_row <= page_rows - kRows; };
    if (in_page(page_first)) return reinterpret_cast<const char*>(here + static_cast<std::uintptr_t>(row * stride));
    if (in_page(page_first + page_rows))
      return reinterpret_cast<const char*>(next + static_cast<std::uintptr_t>(row * stride));
    return nullptr;
  }

  template <int kLocality, int kRows, std::int64_t kBytes = 0>
  inline __attribute__((always_inline)) void rows(std::int64_t row) const {
    const std::int64_t n = kBytes > 0 ? kBytes : bytes;
    const char* p = base + row * stride;
    if (paged != nullptr) {
      p = paged_run<kRows>(row);
      if (p == nullptr && row >= page_first + 2 * page_rows && row <= last) {
        find_pages(row);
        p = paged_run<kRows>(row);
      }
      if (p == nullptr) {
        each_row<kLocality>(row, kRows, n);
        return;
      }
    }
    if (row + kRows - 1 <= last) {
      if constexpr (kBytes > 0) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r, p += stride)
#pragma GCC unroll 8
          for (std::int64_t b = 0; b < kBytes; b += 64) __builtin_prefetch(p + b, 0, kLocality);
      } else {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r, p += stride)
          for (std::int64_t b = 0; b < n; b += 64) __builtin_prefetch(p + b, 0, kLocality);
      }
    } else {
      for (std::int64_t r = row; r <= last; ++r, p += stride)
        for (std::int64_t b = 0; b < n; b += 64) __builtin_prefetch(p + b, 0, kLocality);
    }
  }

 private:
  // Out of line: the contiguous bodies' loops keep the code they had before pages existed.
  __attribute__((noinline)) void find_pages(std::int64_t first) const {
    page_first = first & ~(page_rows - 1);
    here = page_base(page_first);
    next = page_first + page_rows <= last ? page_base(page_first + page_rows) : here;
  }
  template <int kLocality>
  __attribute__((noinline)) void each_row(std::int64_t row, std::int64_t count, std::int64_t n) const {
    for (std::int64_t r = row; r < row + count && r <= last; ++r) {
      const char* q = row_address(r);
      for (std::int64_t b = 0; b < n; b += 64) __builtin_prefetch(q + b, 0, kLocality);
    }
  }
  // The integer address of the row-0 base of the page whose first row is r.
  std::uintptr_t page_base(std::int64_t r) const {
    return reinterpret_cast<std::uintptr_t>(row_address(r)) - static_cast<std::uintptr_t>(r * stride);
  }
};

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
