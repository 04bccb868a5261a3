// Internal: what the paged CPU kernels share. They reuse the fast kernels' task bodies
// (fast_body.hpp): paged decode, where every tile sits inside one page, hands the bodies the pool
// itself (PagedRows::in_place: a RowSource with the page-table row). Otherwise, and for extend, the
// bodies run on contiguous staging copies: a chunk of one sequence's K and V rows for one KV head is
// gathered from its pages (one memcpy per page run in HND, one per row in NHD), the body attends to
// the chunk, and the chunk's normalised partial state is merged into the running one. The chunk
// size is the plan's gather_keys (L2-resident).
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attnkit/paged.hpp"
#include "cpu/fast_isa.hpp"
#include "cpu/fast_tasks.hpp"

namespace attnkit::cpu::detail {

// The same bodies, at the same instruction-set level, as the contiguous fast kernels.
inline const FastBodies& paged_bodies() { return selected_fast_bodies(); }

// The rows (keys) of one sequence and one KV head in a page pool. Element offsets throughout.
struct PagedRows {
  const std::uint8_t* base = nullptr;
  std::size_t elem_bytes = 0;
  const std::int32_t* table_row = nullptr;  // page_table[b][0]
  std::int64_t table_stride = 1;            // between entries of the row
  std::int64_t page_size = 1;
  std::int64_t page_stride = 0;  // between pages
  std::int64_t slot_stride = 0;  // between the rows of one page
  std::int64_t head_offset = 0;  // of this KV head inside a page
  std::int64_t head_dim = 0;

  PagedRows(const TensorView& pool, PageLayout layout, const TensorView& table, std::int64_t b, std::int64_t kv_head)
      : base(static_cast<const std::uint8_t*>(pool.data)),
        elem_bytes(dtype_size(pool.dtype)),
        table_row(static_cast<const std::int32_t*>(table.data) + b * table.strides[0]),
        table_stride(table.strides[1]),
        page_size(layout == PageLayout::kHND ? pool.shape[2] : pool.shape[1]),
        page_stride(pool.strides[0]),
        slot_stride(layout == PageLayout::kHND ? pool.strides[2] : pool.strides[1]),
        head_offset(kv_head * (layout == PageLayout::kHND ? pool.strides[1] : pool.strides[2])),
        head_dim(pool.shape[3]) {}

  const std::uint8_t* row(std::int64_t j) const {
    const std::int64_t page = table_row[(j / page_size) * table_stride];
    return base + static_cast<std::size_t>(page * page_stride + head_offset + (j % page_size) * slot_stride) * elem_bytes;
  }
  std::uint8_t* mutable_row(std::int64_t j) const { return const_cast<std::uint8_t*>(row(j)); }

  // The rows as the decode bodies' source, read in place (page_size a power of two).
  RowSource in_place(DType dtype) const {
    RowSource s{base, dtype, head_offset, slot_stride, 0};
    s.pages = table_row;
    s.table_stride = table_stride;
    s.page_stride = page_stride;
    s.page_shift = std::countr_zero(static_cast<std::uint64_t>(page_size));
    return s;
  }

  // Keys [j0, j0 + n) into dst as n contiguous rows of head_dim elements: the pool's dtype, or for an
  // e4m3 pool (widen) f16, which holds every e4m3 value exactly (the prefill bodies read f16).
  void gather(std::int64_t j0, std::int64_t n, void* dst, bool widen = false) const {
    if (widen) return gather_e4m3_as_f16(j0, n, static_cast<std::uint16_t*>(dst));
    const std::size_t row_bytes = static_cast<std::size_t>(head_dim) * elem_bytes;
    auto* out = static_cast<std::uint8_t*>(dst);
    for (std::int64_t j = j0; j < j0 + n;) {
      const std::int64_t run = std::min(page_size - j % page_size, j0 + n - j);
      const std::uint8_t* src = row(j);
      if (slot_stride == head_dim) {
        std::memcpy(out, src, static_cast<std::size_t>(run) * row_bytes);  // HND: the page run is one block
      } else {
        for (std::int64_t r = 0; r < run; ++r) {
          std::memcpy(out + r * row_bytes, src + static_cast<std::size_t>(r * slot_stride) * elem_bytes, row_bytes);
        }
      }
      out += static_cast<std::size_t>(run) * row_bytes;
      j += run;
    }
  }

 private:
  void gather_e4m3_as_f16(std::int64_t j0, std::int64_t n, std::uint16_t* out) const {
    static const std::array<std::uint16_t, 256> kF16Bits = [] {
      std::array<std::uint16_t, 256> bits{};
      for (int code = 0; code < 256; ++code) {
        store_from_float(&bits[static_cast<std::size_t>(code)], DType::kF16, 0,
                         e4m3_bits_to_float(static_cast<std::uint8_t>(code)));
      }
      return bits;
    }();
    for (std::int64_t j = j0; j < j0 + n; ++j, out += head_dim) {
      const std::uint8_t* src = row(j);
      for (std::int64_t e = 0; e < head_dim; ++e) out[e] = kF16Bits[src[e]];
    }
  }
};

// Merges a normalised partial state (o, lse) of `rows` rows into the running one (run_o, run_lse).
inline void merge_partial(std::int64_t rows, std::int64_t head_dim, const float* o, std::int64_t o_stride,
                          const float* lse, float* run_o, std::int64_t run_stride, float* run_lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    if (lse[r] == kNegInf) continue;  // nothing visible in this chunk
    const float m = std::max(run_lse[r], lse[r]);
    const float w_run = run_lse[r] == kNegInf ? 0.0f : std::exp(run_lse[r] - m);
    const float w_new = std::exp(lse[r] - m);
    const float inv = 1.0f / (w_run + w_new);
    float* acc = run_o + r * run_stride;
    const float* src = o + r * o_stride;
    for (std::int64_t c = 0; c < head_dim; ++c) acc[c] = (w_run * acc[c] + w_new * src[c]) * inv;
    run_lse[r] = m + std::log(w_run + w_new);
  }
}

// This thread's scratch, grown (never shrunk) to `floats`: allocated on a thread's first call only.
inline float* paged_thread_scratch(std::size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

inline std::size_t floats_for_bytes(std::size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float) + 16; }

}  // namespace attnkit::cpu::detail
