// Extend over a paged cache on the Hopper prefill kernel: how a K or V tile is cut into TMA boxes
// that each lie inside one page. Plain C++ (host and device): the planner asks whether a pool's
// pages fit (hopper_pages_fit), the launcher sizes the pool's TMA boxes, the kernel's producer warp
// walks them (hopper_prefill.cuh), the host tests check the arithmetic.
//
// A tile of Bc keys is Bc / box_rows boxes of box_rows consecutive keys (16, or 8 for pages of an
// odd multiple of 8), one per producer lane. box_rows divides the page size and the tile, so a box
// starts at a multiple of box_rows and never crosses a page; its destination starts at a multiple of
// 8 rows of the tile, i.e. on a 1024-byte swizzle atom, so the boxes land exactly as one contiguous
// tile's box would.
#pragma once
#include <cstdint>

#include "cuda/common/fast_divider.hpp"

#if defined(__CUDACC__)
#define ATTNKIT_PAGE_BOX_FN __host__ __device__ inline
#else
#define ATTNKIT_PAGE_BOX_FN inline
#endif

namespace attnkit::cuda_prefill_hopper {

// Rows per TMA box of a page pool, or 0: no box fits (pages that are not a multiple of 8 keys).
constexpr int hopper_page_box_rows(std::int64_t page_size) {
  return page_size % 16 == 0 ? 16 : page_size % 8 == 0 ? 8 : 0;
}

// Whether the producer warp can cut a tile of keys_per_tile keys into page boxes: a lane per box.
constexpr bool hopper_pages_fit(std::int64_t page_size, std::int64_t keys_per_tile) {
  const int box = hopper_page_box_rows(page_size);
  return box > 0 && keys_per_tile % box == 0 && keys_per_tile / box <= 32;
}

// The kernel's view of the pool: the page table, the pool's page count (a box of an absent page
// reads the page index num_pages, which TMA fills with zeros), and V's raw layout for the one box
// of a tile that the sequence's end cuts (copied by hand so that its stale rows read as zeros: a
// stale NaN times a zero probability would poison the output).
struct HopperPages {
  const int* table = nullptr;  // i32 [batch, table_stride]
  std::int64_t table_stride = 0;
  int num_pages = 0;
  int box_rows = 16;
  cuda_common::FastDivider page_size;
  const void* v_pool = nullptr;  // elements: page, head, row strides (head_dim contiguous)
  std::int64_t v_page_stride = 0, v_head_stride = 0, v_row_stride = 0;
};

// Box `box` of the tile starting at key `tile_key0` of a sequence of `kv_len` keys: its page and
// first slot, and how many of its rows the sequence holds (box_rows: whole; 1 .. box_rows - 1: cut;
// <= 0: none, page = num_pages). `page_of(i)` reads entry i of the sequence's table row; an entry
// outside the pool reads as an absent page.
struct PageBox {
  int page, slot, rows;
};
template <class PageOf>
ATTNKIT_PAGE_BOX_FN PageBox page_box(const HopperPages& pages, int tile_key0, int box, int kv_len, PageOf page_of) {
  const int key0 = tile_key0 + box * pages.box_rows;
  PageBox pb{pages.num_pages, 0, kv_len - key0};
  if (pb.rows <= 0) return pb;
  if (pb.rows > pages.box_rows) pb.rows = pages.box_rows;
  const int index = pages.page_size.quotient(key0);
  const int page = page_of(index);
  if (page >= 0 && page < pages.num_pages) {
    pb.page = page;
    pb.slot = key0 - index * pages.page_size.divisor;
  } else {
    pb.rows = 0;  // a corrupt entry: zeros, never memory outside the pool
  }
  return pb;
}

}  // namespace attnkit::cuda_prefill_hopper

#undef ATTNKIT_PAGE_BOX_FN
