// Serving-plan flags -> validated paged decode, extend and sharded decode problems.
#include "serving_flags.hpp"

#include <algorithm>

#include "attnkit/error.hpp"

namespace attnkit::cli {
namespace {

PagedCacheSpec cache_spec(const ShapeFlags& shape, std::int64_t batch, std::int64_t kv_len, const ServingFlags& s) {
  if (s.page_size <= 0)
    fail("attnkit plan", "--page-size " + std::to_string(s.page_size) + " is not positive",
         "pass --page-size N with N >= 1 (16 is common)");
  PagedCacheSpec c;
  c.page_size = s.page_size;
  c.layout = s.layout == "nhd" ? PageLayout::kNHD : PageLayout::kHND;
  const std::int64_t keys = shape.max_seq > 0 ? std::max(shape.max_seq, kv_len) : kv_len;
  c.max_pages_per_seq = (keys + s.page_size - 1) / s.page_size;
  c.num_pages = s.num_pages > 0 ? s.num_pages : batch * c.max_pages_per_seq;
  return c;
}

}  // namespace

void add_serving_flags(CLI::App& app, ServingFlags& f) {
  app.add_option("--page-size", f.page_size, "paged-decode/extend: keys per page")->capture_default_str();
  app.add_option("--layout", f.layout, "paged-decode/extend: page layout hnd or nhd")
      ->check(CLI::IsMember({"hnd", "nhd"}))
      ->capture_default_str();
  app.add_option("--num-pages", f.num_pages, "paged-decode/extend: pages in the pool (default: batch x kv_len)");
  app.add_option("--max-total-q", f.max_total_q, "extend: packed query rows covered (default: batch x --q-len)");
  app.add_option("--expected-total-keys", f.expected_total_keys,
                 "paged-decode: the sum of the lengths you expect (tunes the splits; 0 = unknown)");
  app.add_option("--gpus", f.gpus, "sharded-decode: GPUs the sequence is sharded over")->capture_default_str();
}

PagedDecodeProblem paged_decode_problem(const ShapeFlags& shape, const ServingFlags& s) {
  const DecodeProblem d = decode_problem(shape);  // the shape, dtypes and options, validated
  PagedDecodeProblem p;
  p.batch = d.batch;
  p.num_heads = d.num_heads;
  p.kv_heads = d.kv_heads;
  p.head_dim = d.head_dim;
  p.kv_len = d.kv_len;
  p.cache = cache_spec(shape, d.batch, d.kv_len, s);
  p.kv_dtype = d.kv_dtype;
  p.q_dtype = d.q_dtype;
  p.out_dtype = d.out_dtype;
  p.options = d.options;
  p.expected_total_keys = s.expected_total_keys;
  p.validate();
  return p;
}

ExtendProblem extend_problem(const ShapeFlags& shape, const ServingFlags& s) {
  ShapeFlags decode_shape = shape;
  decode_shape.q_len = 0;
  const DecodeProblem d = decode_problem(decode_shape);
  ExtendProblem e;
  e.batch = d.batch;
  e.num_heads = d.num_heads;
  e.kv_heads = d.kv_heads;
  e.head_dim = d.head_dim;
  e.kv_len = d.kv_len;
  e.max_q_len = shape.q_len > 0 ? shape.q_len : std::min<std::int64_t>(16, d.kv_len);
  e.max_total_q = s.max_total_q;
  e.cache = cache_spec(shape, d.batch, d.kv_len, s);
  e.kv_dtype = d.kv_dtype;
  e.q_dtype = d.q_dtype;
  e.out_dtype = d.out_dtype;
  e.options = d.options;
  e.validate();
  return e;
}

ShardedDecodeProblem sharded_decode_problem(const ShapeFlags& shape) {
  ShardedDecodeProblem p;
  p.decode = decode_problem(shape);
  return p;
}

std::vector<Target> sharded_targets(const TargetFlags& t, const ServingFlags& s) {
  if (!(s.gpus >= 1 && s.gpus <= 64))
    fail("attnkit plan --op sharded-decode", "--gpus " + std::to_string(s.gpus) + " is outside 1..64",
         "pass the GPUs of one host, e.g. --gpus 8");
  const Target target = resolve_target(t);
  if (target.backend != Backend::kCuda)
    fail("attnkit plan --op sharded-decode",
         "context-parallel decode shards over GPUs, and the target is " + to_string(target.backend),
         "pass --device h200 (or h100) to plan for GPUs without having them, or --backend cuda on a GPU host");
  return std::vector<Target>(static_cast<std::size_t>(s.gpus), target);
}

}  // namespace attnkit::cli
