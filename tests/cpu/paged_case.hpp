// Test support for the paged calls: a page pool filled so that only the keys a sequence owns are
// finite (every other slot, and every spare page, is NaN: a kernel that reads outside the table or
// past a length produces NaN and fails), a randomly permuted page assignment, and a table padded
// with -1 past each sequence's pages.
#pragma once
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "cpu_case.hpp"

namespace attnkit::testing {

struct PagedSetup {
  PageLayout layout = PageLayout::kHND;
  std::int64_t page_size = 16;
  std::int64_t batch = 1, heads = 4, kv_heads = 1, head_dim = 64;
  DType dtype = DType::kF32;
  std::vector<std::int32_t> lengths;
  std::int64_t spare_pages = 3;  // pages no sequence owns (NaN)
  std::int64_t extra_table = 1;  // table entries past the longest sequence's pages (-1)
  std::int64_t table_width = 0;  // fixed table width and pool size (0: from the two above), so
  std::int64_t pool_pages = 0;   // cases of one planned shape can differ in lengths
};

struct PagedCase {
  PagedSetup setup;
  PagedCacheSpec spec;
  HostTensor k_pages, v_pages, table, lengths;

  PagedCase(const PagedSetup& s, std::mt19937_64& rng) : setup(s) {
    const std::int64_t P = s.page_size;
    std::int64_t widest = 0, owned = 0;
    for (std::int32_t len : s.lengths) {
      widest = std::max<std::int64_t>(widest, (len + P - 1) / P);
      owned += (len + P - 1) / P;
    }
    spec.page_size = P;
    spec.layout = s.layout;
    spec.max_pages_per_seq = s.table_width > 0 ? s.table_width : std::max<std::int64_t>(1, widest + s.extra_table);
    spec.num_pages = s.pool_pages > 0 ? s.pool_pages : std::max<std::int64_t>(1, owned + s.spare_pages);
    const std::int64_t N = spec.num_pages, G = s.kv_heads, D = s.head_dim, B = s.batch;
    if (s.layout == PageLayout::kHND) {
      k_pages = HostTensor(s.dtype, {N, G, P, D});
      v_pages = HostTensor(s.dtype, {N, G, P, D});
    } else {
      k_pages = HostTensor(s.dtype, {N, P, G, D});
      v_pages = HostTensor(s.dtype, {N, P, G, D});
    }
    poison(k_pages);
    poison(v_pages);
    table = HostTensor(DType::kI32, {B, spec.max_pages_per_seq});
    lengths = HostTensor(DType::kI32, {B});
    std::fill(table.i32(), table.i32() + table.numel(), -1);
    std::vector<std::int32_t> pages(static_cast<std::size_t>(N));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::size_t next = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t len = s.lengths[static_cast<std::size_t>(b)];
      lengths.i32()[b] = static_cast<std::int32_t>(len);
      for (std::int64_t i = 0; i < (len + P - 1) / P; ++i) table.i32()[b * spec.max_pages_per_seq + i] = pages[next++];
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (std::int64_t j = 0; j < len; ++j) {
        for (std::int64_t h = 0; h < G; ++h) {
          for (std::int64_t d = 0; d < D; ++d) {
            k_pages.set(row(b, h, j) + static_cast<std::size_t>(d), normal(rng));
            v_pages.set(row(b, h, j) + static_cast<std::size_t>(d), normal(rng));
          }
        }
      }
    }
  }

  // Element index of key j of sequence b, KV head h, dim 0 (contiguous pools).
  std::size_t row(std::int64_t b, std::int64_t h, std::int64_t j) const {
    const std::int64_t page = table.view.as<std::int32_t>()[b * spec.max_pages_per_seq + j / spec.page_size];
    const std::int64_t slot = j % spec.page_size, G = setup.kv_heads, D = setup.head_dim, P = spec.page_size;
    const std::int64_t i = spec.layout == PageLayout::kHND ? ((page * G + h) * P + slot) * D
                                                             : ((page * P + slot) * G + h) * D;
    return static_cast<std::size_t>(i);
  }

  PagedKvCache cache() const { return {k_pages.view, v_pages.view, table.view, lengths.view}; }
  std::int32_t max_length() const {
    return setup.lengths.empty() ? 1 : std::max<std::int32_t>(1, *std::max_element(setup.lengths.begin(), setup.lengths.end()));
  }
};

// e4m3 pools: re-stores every owned key and value as e4m3(x / scale) of fresh normal draws x, so the
// real values (stored x scale) are ~N(0, 1) whatever the scales (spare slots keep e4m3's NaN code).
inline void quantize_owned_rows(PagedCase& c, KvScales scales, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const PagedSetup& s = c.setup;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t j = 0; j < s.lengths[static_cast<std::size_t>(b)]; ++j) {
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          const std::size_t at = c.row(b, h, j) + static_cast<std::size_t>(d);
          c.k_pages.bytes[at] = float_to_e4m3_bits(normal(rng) / scales.k);
          c.v_pages.bytes[at] = float_to_e4m3_bits(normal(rng) / scales.v);
        }
      }
    }
  }
}

inline PagedDecodeProblem paged_decode_problem(const PagedCase& c, std::int64_t kv_len) {
  PagedDecodeProblem p;
  p.batch = c.setup.batch;
  p.num_heads = c.setup.heads;
  p.kv_heads = c.setup.kv_heads;
  p.head_dim = c.setup.head_dim;
  p.cache = c.spec;
  p.kv_len = kv_len;
  p.kv_dtype = p.q_dtype = p.out_dtype = c.setup.dtype;
  return p;
}

inline ExtendProblem extend_problem(const PagedCase& c, std::int64_t max_q_len, std::int64_t kv_len) {
  ExtendProblem p;
  p.batch = c.setup.batch;
  p.num_heads = c.setup.heads;
  p.kv_heads = c.setup.kv_heads;
  p.head_dim = c.setup.head_dim;
  p.cache = c.spec;
  p.max_q_len = max_q_len;
  p.kv_len = kv_len;
  p.kv_dtype = p.q_dtype = p.out_dtype = c.setup.dtype;
  return p;
}

// Workspace of a plan's exact size (empty when the plan needs none).
struct OwnedWorkspace {
  std::vector<std::uint8_t> bytes;
  explicit OwnedWorkspace(std::uint64_t n) : bytes(static_cast<std::size_t>(n)) {}
  Workspace get() { return bytes.empty() ? Workspace{} : Workspace{bytes.data(), bytes.size(), DeviceKind::kCpu}; }
};

}  // namespace attnkit::testing
