// The paged problems' own checks (shapes and bounds, no data), and their contiguous equivalent.
#include <cmath>
#include <limits>
#include <string>

#include "attnkit/error.hpp"
#include "common/size_checks.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/validate.hpp"

namespace attnkit {
namespace {

using detail::require_positive;

std::int64_t checked_product(const char* context, std::initializer_list<std::int64_t> factors) {
  return detail::checked_product(context, "tensor sizes overflow (more than 2^62 elements)",
                          "use fewer pages, a smaller page table or a smaller batch", factors);
}

constexpr std::int64_t kMaxI32 = std::numeric_limits<std::int32_t>::max();

void validate_spec(const char* ctx, const PagedCacheSpec& c, std::int64_t kv_heads, std::int64_t head_dim) {
  require_positive(ctx, "num_pages", c.num_pages);
  require_positive(ctx, "page_size", c.page_size);
  require_positive(ctx, "max_pages_per_seq", c.max_pages_per_seq);
  if (!(c.layout == PageLayout::kHND || c.layout == PageLayout::kNHD))
    fail(ctx, "the page layout is unknown", "pass PageLayout::kHND or PageLayout::kNHD");
  // Page indices and positions are i32 in the tensors.
  if (c.num_pages > kMaxI32)
    fail(ctx, "num_pages=" + std::to_string(c.num_pages) + " does not fit in i32",
         "use at most 2^31-1 pages (larger pages, or several pools)");
  if (c.max_pages_per_seq > kMaxI32 / c.page_size)
    fail(ctx,
         "max_pages_per_seq * page_size = " + std::to_string(c.max_pages_per_seq) + " * " +
             std::to_string(c.page_size) + " does not fit in i32 positions",
         "address at most 2^31-1 keys per sequence");
  checked_product(ctx, {c.num_pages, c.page_size, kv_heads, head_dim});
}

// The parts PagedDecodeProblem and ExtendProblem share with a contiguous decode problem.
DecodeProblem base_decode(std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
                          const PagedCacheSpec& c, std::int64_t kv_len, DType kv, DType q, DType out,
                          const AttentionOptions& options) {
  DecodeProblem d;
  d.batch = batch;
  d.num_heads = num_heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.max_seq = c.capacity();
  d.kv_len = kv_len;
  d.kv_dtype = kv;
  d.q_dtype = q;
  d.out_dtype = out;
  d.options = options;
  return d;
}

void validate_kv_len(const char* ctx, std::int64_t kv_len, const PagedCacheSpec& c) {
  require_positive(ctx, "kv_len", kv_len);
  if (kv_len > c.capacity())
    fail(ctx,
         "kv_len=" + std::to_string(kv_len) +
             " is above what a page-table row addresses (max_pages_per_seq * "
             "page_size = " +
             std::to_string(c.capacity()) + ")",
         "widen the page table (max_pages_per_seq >= ceil(kv_len / page_size)) or plan a shorter kv_len");
}

}  // namespace

std::string to_string(PageLayout layout) { return layout == PageLayout::kHND ? "HND" : "NHD"; }

float PagedDecodeProblem::effective_scale() const { return as_decode().effective_scale(); }
float ExtendProblem::effective_scale() const {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

DecodeProblem PagedDecodeProblem::as_decode() const {
  return base_decode(batch, num_heads, kv_heads, head_dim, cache, kv_len, kv_dtype, q_dtype, out_dtype, options);
}

void PagedDecodeProblem::validate() const {
  const char* ctx = "paged_decode";
  require_positive(ctx, "batch", batch);
  require_positive(ctx, "num_heads", num_heads);
  require_positive(ctx, "kv_heads", kv_heads);
  require_positive(ctx, "head_dim", head_dim);
  validate_spec(ctx, cache, kv_heads, head_dim);
  validate_kv_len(ctx, kv_len, cache);
  as_decode().validate();  // heads, head_dim, dtypes, options (an e4m3 pool too): the decode rules
  checked_product(ctx, {batch, cache.max_pages_per_seq});
  if (!(expected_total_keys >= 0 && expected_total_keys <= checked_product(ctx, {batch, kv_len})))
    fail(ctx,
         "expected_total_keys=" + std::to_string(expected_total_keys) +
             " is outside 0..batch*kv_len=" + std::to_string(batch * kv_len),
         "pass the sum of the lengths you expect to run with, or 0 when unknown");
}

void ExtendProblem::validate() const {
  const char* ctx = "extend";
  require_positive(ctx, "batch", batch);
  require_positive(ctx, "num_heads", num_heads);
  require_positive(ctx, "kv_heads", kv_heads);
  require_positive(ctx, "head_dim", head_dim);
  validate_spec(ctx, cache, kv_heads, head_dim);
  validate_kv_len(ctx, kv_len, cache);
  require_positive(ctx, "max_q_len", max_q_len);
  if (max_q_len > kv_len)
    fail(ctx, "max_q_len=" + std::to_string(max_q_len) + " is above kv_len=" + std::to_string(kv_len),
         "new query rows are the last keys of their sequence: plan max_q_len <= kv_len");
  if (max_total_q < 0)
    fail(ctx, "max_total_q=" + std::to_string(max_total_q) + " is negative",
         "pass the packed query rows the plan covers, or 0 for batch * max_q_len");
  checked_product(ctx, {batch, max_q_len});
  if (!(total_q_bound() <= batch * max_q_len && total_q_bound() <= kMaxI32))
    fail(ctx,
         "max_total_q=" + std::to_string(max_total_q) +
             " is above batch * max_q_len = " + std::to_string(batch * max_q_len) + " (or 2^31-1)",
         "pass max_total_q <= batch * max_q_len");
  base_decode(batch, num_heads, kv_heads, head_dim, cache, kv_len, kv_dtype, q_dtype, out_dtype, options).validate();
  checked_product(ctx, {total_q_bound(), num_heads, head_dim});
  checked_product(ctx, {batch, cache.max_pages_per_seq});
}

}  // namespace attnkit
