// Plans of the serving layouts (paged.hpp): paged decode and extend. They print as the planner's
// table and JSON (to_table / to_json of paged.hpp: shaped like the contiguous plans', plus the page
// pool and the bounds the plan covers).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cctype>
#include <optional>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;

template <class Plan>
nb::class_<Plan> bind_paged_plan_class(nb::module_& m, const char* name) {
  return nb::class_<Plan>(m, name)
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
  bind_paged_plan_class<PagedDecodePlan>(m, "PagedDecodePlan")
      .def_ro("page_boxes", &PagedDecodePlan::page_boxes,
              "CUDA: tiles are page-aligned, so page runs are copied as TMA boxes (docs/paged.md).");
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
         const Target& target, const std::optional<std::string>& family) {
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
        return family ? plan_extend(p, target, parse_family(*family, "plan_extend")) : plan_extend(p, target);
      },
      "batch"_a, "num_heads"_a, "kv_heads"_a, "head_dim"_a, "layout"_a, "num_pages"_a, "page_size"_a,
      "max_pages_per_seq"_a, "max_q_len"_a, "max_total_q"_a, "kv_len"_a, "kv_dtype"_a, "q_dtype"_a, "out_dtype"_a,
      "window"_a, "scale"_a, "softcap"_a, "target"_a, "family"_a.none());
}

}  // namespace attnkit::python
