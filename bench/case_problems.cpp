// A benchmark case as the problem its planner takes: one definition for the CLI's flag validation
// and every driver (CPU and CUDA), so what is validated is what is timed.
#include <algorithm>

#include "bench.hpp"

namespace attnkit::bench {

DecodeProblem decode_problem(const Case& c) {
  DecodeProblem p;
  p.batch = c.batch;
  p.num_heads = c.num_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.max_seq = p.kv_len = c.kv_len;
  p.kv_dtype = c.dtype;
  p.q_dtype = p.out_dtype = decode_query_dtype(c.dtype);
  p.options.window = c.window;
  return p;
}

DecodeProblem real_keys_problem(const Case& c) {
  DecodeProblem p = decode_problem(c);
  p.max_seq = p.kv_len = std::max<std::int64_t>(1, c.kv_len - c.left_pad);
  return p;
}

PagedDecodeProblem paged_decode_problem(const Case& c) {
  PagedDecodeProblem p;
  p.batch = c.batch;
  p.num_heads = c.num_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.cache.page_size = c.page_size;
  p.cache.layout = c.page_layout;
  p.cache.max_pages_per_seq = c.page_size > 0 ? (c.kv_len + c.page_size - 1) / c.page_size : 1;
  p.cache.num_pages = c.batch * p.cache.max_pages_per_seq;
  p.kv_len = c.kv_len;
  p.kv_dtype = c.dtype;
  p.q_dtype = p.out_dtype = decode_query_dtype(c.dtype);
  p.options.window = c.window;
  p.expected_total_keys = c.batch * c.kv_len;
  return p;
}

ExtendProblem extend_problem(const Case& c) {
  const PagedDecodeProblem pool = paged_decode_problem(c);
  ExtendProblem p;
  p.batch = c.batch;
  p.num_heads = c.num_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.cache = pool.cache;
  p.max_q_len = c.q_len;
  p.kv_len = c.kv_len;
  p.kv_dtype = c.dtype;
  p.q_dtype = p.out_dtype = pool.q_dtype;
  p.options.window = c.window;
  return p;
}

PrefillProblem prefill_problem(const Case& c) {
  PrefillProblem p;
  p.batch = c.batch;
  p.num_heads = c.num_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.q_len = c.q_len;
  p.kv_len = c.kv_len;
  p.causal = c.causal;
  p.dtype = c.dtype;
  p.out_dtype = prefill_out_dtype(c.dtype);  // (the CPU plan rejects e4m3: the row says why)
  p.options.window = c.window;
  return p;
}

}  // namespace attnkit::bench
