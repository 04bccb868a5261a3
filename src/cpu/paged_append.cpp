// Paged KV append on the CPU: n_b new K and/or V rows of sequence b written at positions
// start_positions[b] .. + n_b - 1, each into page page_table[b][pos / page_size], slot
// pos % page_size, so a run of new tokens crosses page boundaries freely.
// Inputs: k_new / v_new [rows, kv_heads, head_dim] token-major in the pool dtype (an e4m3 pool: f32,
//   f16 or bf16 rows, stored as e4m3(x / scale) like append.cpp's), HND or NHD pools,
//   i32 cu_seqlens_new [batch + 1], start_positions [batch], page_table [batch, max_pages_per_seq].
//   Every index is validated before the first write (validate_paged_append), so a bad call leaves
//   the pools byte-for-byte unchanged.
// Parallelism: none; one row copy per (token, KV head). Bound: memory (a few rows per sequence).
#include <cstring>
#include <vector>

#include "attnkit/cpu.hpp"
#include "cpu/paged_rows.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {
namespace {

void append_pool(const PagedCacheSpec& c, const TensorView& src, const TensorView& pool, const PagedAppendTensors& t,
                 float scale) {
  const std::int64_t batch = t.page_table.shape[0], kv_heads = src.shape[1], d = src.shape[2];
  const std::size_t row_bytes = static_cast<std::size_t>(d) * dtype_size(src.dtype);
  const bool quantize = is_fp8(pool.dtype);
  std::vector<float> row(quantize ? static_cast<std::size_t>(d) : 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t first = detail::index_at(t.cu_seqlens_new, b);
    const std::int64_t n = detail::index_at(t.cu_seqlens_new, b + 1) - first;
    const std::int64_t start = detail::index_at(t.start_positions, b);
    for (std::int64_t h = 0; h < kv_heads; ++h) {
      const detail::PagedRows rows(pool, c.layout, t.page_table, b, h);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = (first + i) * src.strides[0] + h * src.strides[1];
        if (quantize) {
          detail::load_row(src.data, src.dtype, at, d, row.data());
          std::uint8_t* to = rows.mutable_row(start + i);
          for (std::int64_t e = 0; e < d; ++e) to[e] = float_to_e4m3_bits(row[static_cast<std::size_t>(e)] / scale);
          continue;
        }
        // Same dtype on both sides (validated): a byte copy is exact.
        const auto* from = static_cast<const std::uint8_t*>(src.data) + static_cast<std::size_t>(at) * dtype_size(src.dtype);
        std::memcpy(rows.mutable_row(start + i), from, row_bytes);
      }
    }
  }
}

}  // namespace

void paged_append_kv(const PagedCacheSpec& cache, const PagedAppendTensors& t) {
  validate_paged_append(cache, t, DeviceKind::kCpu);
  if (!t.k_new.empty()) append_pool(cache, t.k_new, t.k_pages, t, t.kv_scales.k);
  if (!t.v_new.empty()) append_pool(cache, t.v_new, t.v_pages, t, t.kv_scales.v);
}

}  // namespace attnkit::cpu
