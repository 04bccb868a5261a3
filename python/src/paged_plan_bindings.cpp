// Plans of the serving layouts (paged.hpp): paged decode and extend. They print as the planner's
// table (layout and bounds above the shared decode/prefill rows) and serialise to JSON shaped like
// the contiguous plans' ("kind", "problem", "target", "partition", "evidence", "reasons") plus the
// page pool ("problem"."cache") and what the plan covers ("bounds").
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;
using json = nlohmann::json;

std::string dt(DType t) { return std::string(dtype_name(t)); }

json cache_json(const PagedCacheSpec& c) {
  return {{"layout", to_string(c.layout)},
          {"num_pages", c.num_pages},
          {"page_size", c.page_size},
          {"max_pages_per_seq", c.max_pages_per_seq},
          {"capacity", c.capacity()}};
}

json bounds_json(const PlanBounds& b) {
  return {{"batch", b.batch},
          {"max_kv_len", b.max_kv_len},
          {"max_q_len", b.max_q_len},
          {"max_total_q", b.max_total_q},
          {"workspace_bytes", b.workspace_bytes}};
}

// The target/partition/evidence/reasons of the equivalent contiguous plan's JSON (plan.hpp), so
// the three plan kinds spell those parts alike; the problem is replaced by the paged one.
template <class FlatPlan>
json paged_json(const FlatPlan& flat, const char* kind, json problem, const PlanBounds& bounds,
                std::uint32_t gather_keys) {
  json j = json::parse(to_json(flat));
  j["kind"] = kind;
  j["problem"] = std::move(problem);
  j["bounds"] = bounds_json(bounds);
  j["gather_keys"] = gather_keys;
  return j;
}

json options_json(const AttentionOptions& o, float effective_scale) {
  return {{"window", o.window}, {"scale", o.scale}, {"effective_scale", effective_scale}, {"softcap", o.softcap}};
}

std::string to_json(const PagedDecodePlan& plan) {
  const PagedDecodeProblem& p = plan.problem;
  const DecodePlan flat{p.as_decode(), plan.target, plan.partition, plan.evidence, plan.reasons};
  json problem = {{"batch", p.batch},       {"num_heads", p.num_heads}, {"kv_heads", p.kv_heads},
                  {"head_dim", p.head_dim}, {"kv_len", p.kv_len},       {"kv_dtype", dt(p.kv_dtype)},
                  {"q_dtype", dt(p.q_dtype)}, {"out_dtype", dt(p.out_dtype)}, {"cache", cache_json(p.cache)},
                  {"options", options_json(p.options, p.effective_scale())},
                  {"expected_total_keys", p.expected_total_keys}};
  return paged_json(flat, "paged_decode", std::move(problem), plan.bounds, plan.gather_keys).dump();
}

std::string to_json(const ExtendPlan& plan) {
  const ExtendProblem& p = plan.problem;
  PrefillProblem pre;  // the causal prefill of max_q_len rows against kv_len keys it is planned as
  pre.batch = p.batch;
  pre.num_heads = p.num_heads;
  pre.kv_heads = p.kv_heads;
  pre.head_dim = p.head_dim;
  pre.q_len = p.max_q_len;
  pre.kv_len = p.kv_len;
  pre.causal = true;
  pre.dtype = p.kv_dtype;
  pre.out_dtype = p.out_dtype;
  pre.options = p.options;
  const PrefillPlan flat{pre, plan.target, plan.partition, plan.evidence, plan.reasons};
  json problem = {{"batch", p.batch},         {"num_heads", p.num_heads},       {"kv_heads", p.kv_heads},
                  {"head_dim", p.head_dim},   {"max_q_len", p.max_q_len},       {"max_total_q", p.total_q_bound()},
                  {"kv_len", p.kv_len},       {"kv_dtype", dt(p.kv_dtype)},     {"q_dtype", dt(p.q_dtype)},
                  {"out_dtype", dt(p.out_dtype)}, {"cache", cache_json(p.cache)},
                  {"options", options_json(p.options, p.effective_scale())}};
  return paged_json(flat, "extend", std::move(problem), plan.bounds, plan.gather_keys).dump();
}

template <class Plan>
void bind_paged_plan_class(nb::module_& m, const char* name) {
  nb::class_<Plan>(m, name)
      .def("table", [](const Plan& p) { return to_table(p); }, "The planner's aligned two-column table.")
      .def("to_json", [](const Plan& p) { return to_json(p); }, "The plan as JSON (one object).")
      .def("__repr__", [](const Plan& p) { return to_table(p); })
      .def_prop_ro("backend", [](const Plan& p) { return to_string(p.target.backend); })
      .def_prop_ro("family", [](const Plan& p) { return to_string(p.partition.family); })
      .def_prop_ro("workspace_bytes", [](const Plan& p) { return p.evidence.workspace_bytes; })
      .def_prop_ro("target", [](const Plan& p) { return p.target; })
      .def_prop_ro("layout", [](const Plan& p) { return to_string(p.problem.cache.layout); })
      .def_prop_ro("page_size", [](const Plan& p) { return p.problem.cache.page_size; })
      .def_prop_ro("num_pages", [](const Plan& p) { return p.problem.cache.num_pages; })
      .def_prop_ro("max_pages_per_seq", [](const Plan& p) { return p.problem.cache.max_pages_per_seq; })
      .def_ro("gather_keys", &Plan::gather_keys)
      .def_ro("reasons", &Plan::reasons);
}

AttentionOptions options_of(std::int64_t window, float scale, float softcap) {
  AttentionOptions o;
  o.window = window;
  o.scale = scale;
  o.softcap = softcap;
  return o;
}

}  // namespace

PageLayout parse_layout(const std::string& name, const char* context) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "HND") return PageLayout::kHND;
  if (upper == "NHD") return PageLayout::kNHD;
  fail(context, "unknown page layout '" + name + "'",
       "use 'HND' (pool [num_pages, kv_heads, page_size, head_dim]) or 'NHD' (pool [num_pages, page_size, kv_heads, "
       "head_dim])");
}

PagedCacheSpec cache_spec_of(const std::string& layout, std::int64_t num_pages, std::int64_t page_size,
                             std::int64_t max_pages_per_seq, const char* context) {
  PagedCacheSpec c;
  c.layout = parse_layout(layout, context);
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_pages_per_seq = max_pages_per_seq;
  return c;
}

void bind_paged_plans(nb::module_& m) {
  bind_paged_plan_class<PagedDecodePlan>(m, "PagedDecodePlan");
  bind_paged_plan_class<ExtendPlan>(m, "ExtendPlan");

  m.def(
      "plan_paged_decode",
      [](std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
         const std::string& layout, std::int64_t num_pages, std::int64_t page_size, std::int64_t max_pages_per_seq,
         std::int64_t kv_len, const std::string& kv_dtype, const std::string& q_dtype, const std::string& out_dtype,
         std::int64_t window, float scale, float softcap, const Target& target, std::int64_t expected_total_keys) {
        PagedDecodeProblem p;
        p.batch = batch;
        p.num_heads = num_heads;
        p.kv_heads = kv_heads;
        p.head_dim = head_dim;
        p.cache = cache_spec_of(layout, num_pages, page_size, max_pages_per_seq, "plan_paged_decode");
        p.kv_len = kv_len;
        p.kv_dtype = parse_dtype(kv_dtype);
        p.q_dtype = parse_dtype(q_dtype);
        p.out_dtype = parse_dtype(out_dtype);
        p.options = options_of(window, scale, softcap);
        p.expected_total_keys = expected_total_keys;
        return plan_paged_decode(p, target);
      },
      "batch"_a, "num_heads"_a, "kv_heads"_a, "head_dim"_a, "layout"_a, "num_pages"_a, "page_size"_a,
      "max_pages_per_seq"_a, "kv_len"_a, "kv_dtype"_a, "q_dtype"_a, "out_dtype"_a, "window"_a, "scale"_a,
      "softcap"_a, "target"_a, "expected_total_keys"_a = 0);

  m.def(
      "plan_extend",
      [](std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
         const std::string& layout, std::int64_t num_pages, std::int64_t page_size, std::int64_t max_pages_per_seq,
         std::int64_t max_q_len, std::int64_t max_total_q, std::int64_t kv_len, const std::string& kv_dtype,
         const std::string& q_dtype, const std::string& out_dtype, std::int64_t window, float scale, float softcap,
         const Target& target) {
        ExtendProblem p;
        p.batch = batch;
        p.num_heads = num_heads;
        p.kv_heads = kv_heads;
        p.head_dim = head_dim;
        p.cache = cache_spec_of(layout, num_pages, page_size, max_pages_per_seq, "plan_extend");
        p.max_q_len = max_q_len;
        p.max_total_q = max_total_q;
        p.kv_len = kv_len;
        p.kv_dtype = parse_dtype(kv_dtype);
        p.q_dtype = parse_dtype(q_dtype);
        p.out_dtype = parse_dtype(out_dtype);
        p.options = options_of(window, scale, softcap);
        return plan_extend(p, target);
      },
      "batch"_a, "num_heads"_a, "kv_heads"_a, "head_dim"_a, "layout"_a, "num_pages"_a, "page_size"_a,
      "max_pages_per_seq"_a, "max_q_len"_a, "max_total_q"_a, "kv_len"_a, "kv_dtype"_a, "q_dtype"_a, "out_dtype"_a,
      "window"_a, "scale"_a, "softcap"_a, "target"_a);
}

}  // namespace attnkit::python
