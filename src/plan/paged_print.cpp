// Paged plans as text: the shared decode/prefill table of the equivalent plan (print.cpp), under
// lines naming the paged layout and the bounds the plan covers.
#include <string>

#include "attnkit/paged.hpp"

namespace attnkit {
namespace {

std::string header(const char* job, const PagedCacheSpec& c, const PlanBounds& b) {
  return std::string(job) + " over a paged cache: " + to_string(c.layout) + ", page_size " +
         std::to_string(c.page_size) + ", " + std::to_string(c.num_pages) + " pages, table width " +
         std::to_string(c.max_pages_per_seq) + "\ncovers: batch " + std::to_string(b.batch) + ", kv_len <= " +
         std::to_string(b.max_kv_len) + ", q_len <= " + std::to_string(b.max_q_len) + ", rows <= " +
         std::to_string(b.max_total_q) + ", workspace " + std::to_string(b.workspace_bytes) + " bytes\n";
}

}  // namespace

std::string to_table(const PagedDecodePlan& plan) {
  DecodePlan flat{plan.problem.as_decode(), plan.target, plan.partition, plan.evidence, plan.reasons};
  return header("paged decode", plan.problem.cache, plan.bounds) + to_table(flat);
}

std::string to_table(const ExtendPlan& plan) {
  const ExtendProblem& e = plan.problem;
  PrefillProblem pre;
  pre.batch = e.batch;
  pre.num_heads = e.num_heads;
  pre.kv_heads = e.kv_heads;
  pre.head_dim = e.head_dim;
  pre.q_len = e.max_q_len;
  pre.kv_len = e.kv_len;
  pre.causal = true;
  pre.dtype = e.kv_dtype;
  pre.out_dtype = e.out_dtype;
  pre.options = e.options;
  PrefillPlan flat{pre, plan.target, plan.partition, plan.evidence, plan.reasons};
  return header("extend", e.cache, plan.bounds) + to_table(flat);
}

}  // namespace attnkit
