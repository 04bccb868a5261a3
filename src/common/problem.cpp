#include "attnkit/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/error.hpp"
#include "common/size_checks.hpp"
#include "common/window_begin.hpp"

namespace attnkit {
namespace {

using detail::require_positive;

void checked_product(const char* context, std::initializer_list<std::int64_t> factors) {
  detail::checked_product(context, "tensor sizes overflow (more than 2^62 elements)",
                          "split the call into smaller batches or shorter sequences", factors);
}

constexpr std::int64_t kMaxHeadDim = 256;
// Key and query counts index 32-bit partition fields and kernel loops.
constexpr std::int64_t kMaxSequence = (std::int64_t{1} << 31) - 1;

void require_sequence_fits(const char* context, const char* name, std::int64_t value) {
  if (value > kMaxSequence)
    fail(context, std::string(name) + "=" + std::to_string(value) + " is above the 2^31-1 tokens one sequence may hold",
         "shard longer contexts across calls (split the keys and merge the partial states with their LSE)");
}

void validate_common(const char* context, std::int64_t num_heads, std::int64_t kv_heads,
                     std::int64_t head_dim, const AttentionOptions& options) {
  require_positive(context, "num_heads", num_heads);
  require_positive(context, "kv_heads", kv_heads);
  require_positive(context, "head_dim", head_dim);
  if (num_heads % kv_heads != 0)
    fail(context,
         "num_heads=" + std::to_string(num_heads) + " is not divisible by kv_heads=" + std::to_string(kv_heads),
         "choose kv_heads as a divisor of num_heads (grouped-query: num_heads / kv_heads query heads share a KV head)");
  if (!(head_dim % 8 == 0 && head_dim <= kMaxHeadDim))
    fail(context, "head_dim=" + std::to_string(head_dim) + " is not a multiple of 8 in 8..256",
         "use a head_dim that is a multiple of 8, at most 256 (e.g. 64, 128)");
  if (options.window < 0)
    fail(context, "window=" + std::to_string(options.window) + " is negative",
         "pass window=0 for no sliding window, or the number of keys each query sees");
  if (!(std::isfinite(options.scale) && options.scale >= 0.0f))
    fail(context, "scale is negative or not finite", "pass scale > 0, or 0 for 1/sqrt(head_dim)");
  if (!(std::isfinite(options.softcap) && options.softcap >= 0.0f))
    fail(context, "softcap is negative or not finite", "pass softcap > 0, or 0 for no soft-cap");
}

void require_storage(const char* context, const char* name, DType t) {
  if (!is_storage_dtype(t))
    fail(context, std::string(name) + " is " + std::string(dtype_name(t)), "use f32, f16 or bf16");
}

}  // namespace

float DecodeProblem::effective_scale() const {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float PrefillProblem::effective_scale() const {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

void DecodeProblem::validate() const {
  const char* ctx = "decode";
  require_positive(ctx, "batch", batch);
  validate_common(ctx, num_heads, kv_heads, head_dim, options);
  require_positive(ctx, "max_seq", max_seq);
  require_positive(ctx, "kv_len", kv_len);
  require_sequence_fits(ctx, "max_seq", max_seq);
  if (kv_len > max_seq)
    fail(ctx, "kv_len=" + std::to_string(kv_len) + " is above max_seq=" + std::to_string(max_seq),
         "plan for kv_len <= max_seq (the cache holds max_seq keys per sequence)");
  // An e4m3 KV cache holds stored values with per-tensor scales (DecodeTensors::kv_scales).
  if (!(is_storage_dtype(kv_dtype) || is_fp8(kv_dtype)))
    fail(ctx, "kv_dtype is " + std::string(dtype_name(kv_dtype)), "use f32, f16, bf16 or e4m3");
  if (is_fp8(q_dtype) || is_fp8(out_dtype))
    fail(ctx, std::string(is_fp8(q_dtype) ? "q_dtype" : "out_dtype") + " is e4m3, which only a KV cache may be",
         "pass q and out in f32, f16 or bf16 (an e4m3 cache is read with its scales, q is not quantized)");
  require_storage(ctx, "q_dtype", q_dtype);
  require_storage(ctx, "out_dtype", out_dtype);
  checked_product(ctx, {batch, kv_heads, max_seq, head_dim});
  checked_product(ctx, {batch, num_heads, head_dim});
}

void PrefillProblem::validate() const {
  const char* ctx = "prefill";
  require_positive(ctx, "batch", batch);
  validate_common(ctx, num_heads, kv_heads, head_dim, options);
  require_positive(ctx, "q_len", q_len);
  require_positive(ctx, "kv_len", kv_len);
  require_sequence_fits(ctx, "q_len", q_len);
  require_sequence_fits(ctx, "kv_len", kv_len);
  if (causal && q_len > kv_len)
    fail(ctx, "causal with q_len=" + std::to_string(q_len) + " > kv_len=" + std::to_string(kv_len),
         "causal attention is bottom-right aligned and needs q_len <= kv_len; pass causal=false or more keys");
  // e4m3 is a prefill input dtype (per-tensor scales in PrefillTensors::scales), never an output.
  if (!(is_storage_dtype(dtype) || is_fp8(dtype)))
    fail(ctx, "dtype is " + std::string(dtype_name(dtype)), "use f32, f16, bf16 or e4m3");
  if (is_fp8(out_dtype))
    fail(ctx, "out_dtype is e4m3, which is an input-only dtype",
         "use out_dtype f32, f16 or bf16 (bf16 is the usual choice for e4m3 inputs)");
  require_storage(ctx, "out_dtype", out_dtype);
  checked_product(ctx, {batch, num_heads, q_len, head_dim});
  checked_product(ctx, {batch, kv_heads, kv_len, head_dim});
  checked_product(ctx, {batch, num_heads, q_len, kv_len});
}

KeyRange visible_keys(std::int64_t query_pos, std::int64_t kv_len, bool causal, std::int64_t window) {
  KeyRange r{0, kv_len};
  if (causal) r.end = std::min(kv_len, query_pos + 1);
  r.begin = detail::window_begin(query_pos, window);
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

KeyRange decode_keys(std::int64_t len, std::int64_t window, std::int64_t key_start) {
  KeyRange r = visible_keys(len - 1, len, true, window);
  r.begin = std::max(r.begin, std::min(key_start, r.end));
  return r;
}

std::string to_string(RopeStyle style) { return style == RopeStyle::kHalf ? "half" : "interleaved"; }

}  // namespace attnkit
