// Paged plans as text and JSON. Both are the equivalent contiguous plan's (print.cpp): the table
// under lines naming the paged layout and the bounds the plan covers; the JSON with its problem
// replaced by the paged one ("problem"."cache" is the page pool) plus "bounds" and "gather_keys", so
// the plan kinds spell target, partition, evidence and reasons alike.
#include <nlohmann/json.hpp>
#include <string>

#include "attnkit/paged.hpp"
#include "plan/rules.hpp"

namespace attnkit {
namespace {

using json = nlohmann::json;

std::string header(const char* job, const PagedCacheSpec& c, const PlanBounds& b) {
  return std::string(job) + " over a paged cache: " + to_string(c.layout) + ", page_size " +
         std::to_string(c.page_size) + ", " + std::to_string(c.num_pages) + " pages, table width " +
         std::to_string(c.max_pages_per_seq) + "\ncovers: batch " + std::to_string(b.batch) + ", kv_len <= " +
         std::to_string(b.max_kv_len) + ", q_len <= " + std::to_string(b.max_q_len) + ", rows <= " +
         std::to_string(b.max_total_q) + ", workspace " + std::to_string(b.workspace_bytes) + " bytes\n";
}

DecodePlan flat_plan(const PagedDecodePlan& plan) {
  return {plan.problem.as_decode(), plan.target, plan.partition, plan.evidence, plan.reasons};
}

PrefillPlan flat_plan(const ExtendPlan& plan) {
  return {detail::extend_as_prefill(plan.problem), plan.target, plan.partition, plan.evidence, plan.reasons};
}

std::string dt(DType t) { return std::string(dtype_name(t)); }

json cache_json(const PagedCacheSpec& c) {
  return {{"layout", to_string(c.layout)},
          {"num_pages", c.num_pages},
          {"page_size", c.page_size},
          {"max_pages_per_seq", c.max_pages_per_seq},
          {"capacity", c.capacity()}};
}

template <class Plan>
json paged_json(const Plan& plan, const char* kind, json problem) {
  json j = json::parse(to_json(flat_plan(plan)));
  problem["options"] = j["problem"]["options"];  // the same options and effective scale
  problem["cache"] = cache_json(plan.problem.cache);
  j["kind"] = kind;
  j["problem"] = std::move(problem);
  const PlanBounds& b = plan.bounds;
  j["bounds"] = {{"batch", b.batch},
                 {"max_kv_len", b.max_kv_len},
                 {"max_q_len", b.max_q_len},
                 {"max_total_q", b.max_total_q},
                 {"workspace_bytes", b.workspace_bytes}};
  j["gather_keys"] = plan.gather_keys;
  return j;
}

}  // namespace

std::string to_table(const PagedDecodePlan& plan) {
  return header("paged decode", plan.problem.cache, plan.bounds) + to_table(flat_plan(plan));
}

std::string to_table(const ExtendPlan& plan) {
  // The padded prefill's table names one q/k/v dtype; extend's q and pool may differ (an e4m3 pool
  // with bf16 q), so its dtypes row is the extend problem's own.
  const ExtendProblem& p = plan.problem;
  std::string text = to_table(flat_plan(plan));
  const std::string flat = "q/k/v " + dt(p.kv_dtype) + ", out " + dt(p.out_dtype);
  const std::size_t at = text.find(flat);
  if (at != std::string::npos)
    text.replace(at, flat.size(), "q " + dt(p.q_dtype) + ", k/v " + dt(p.kv_dtype) + ", out " + dt(p.out_dtype));
  return header("extend", p.cache, plan.bounds) + text;
}

std::string to_json(const PagedDecodePlan& plan) {
  const PagedDecodeProblem& p = plan.problem;
  json j = paged_json(plan, "paged_decode",
                      {{"batch", p.batch},
                       {"num_heads", p.num_heads},
                       {"kv_heads", p.kv_heads},
                       {"head_dim", p.head_dim},
                       {"kv_len", p.kv_len},
                       {"kv_dtype", dt(p.kv_dtype)},
                       {"q_dtype", dt(p.q_dtype)},
                       {"out_dtype", dt(p.out_dtype)},
                       {"expected_total_keys", p.expected_total_keys}});
  j["page_boxes"] = plan.page_boxes;
  return j.dump();
}

std::string to_json(const ExtendPlan& plan) {
  const ExtendProblem& p = plan.problem;
  return paged_json(plan, "extend",
                    {{"batch", p.batch},
                     {"num_heads", p.num_heads},
                     {"kv_heads", p.kv_heads},
                     {"head_dim", p.head_dim},
                     {"max_q_len", p.max_q_len},
                     {"max_total_q", p.total_q_bound()},
                     {"kv_len", p.kv_len},
                     {"kv_dtype", dt(p.kv_dtype)},
                     {"q_dtype", dt(p.q_dtype)},
                     {"out_dtype", dt(p.out_dtype)}})
      .dump();
}

}  // namespace attnkit
