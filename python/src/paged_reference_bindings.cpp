// The float64 golden of the paged calls (attnkit::reference::paged_decode / extend) for Python
// tests: host arrays in, float64 numpy arrays out. paged decode: out [batch, num_heads, head_dim],
// lse [batch, num_heads]; extend: out [cu_seqlens_q[batch], num_heads, head_dim], lse
// [cu_seqlens_q[batch], num_heads] (rows past the last offset are not part of the answer).
#include <nanobind/stl/pair.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/reference.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;
using F64Array = nb::ndarray<nb::numpy, double>;

F64Array numpy_f64(std::vector<double>&& values, std::initializer_list<std::int64_t> shape_list) {
  auto* owned = new std::vector<double>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  std::size_t shape[TensorView::kMaxRank];
  std::size_t expected = 1;
  std::size_t rank = 0;
  for (std::int64_t s : shape_list) {
    shape[rank++] = static_cast<std::size_t>(s);
    expected *= static_cast<std::size_t>(s);
  }
  if (expected != owned->size())
    fail("reference",
         "the golden returned " + std::to_string(owned->size()) + " values for a shape of " + std::to_string(expected),
         "report this as a bug in attnkit::reference");
  return F64Array(owned->data(), rank, shape, owner);
}

void require_host(const TensorView& v, const char* name) {
  if (v.device != DeviceKind::kCpu)
    fail("reference", std::string(name) + " is on CUDA",
         "the golden reads host memory: copy the inputs to the CPU first");
}

void require_host_cache(const PagedKvCache& c) {
  require_host(c.k_pages, "k_pages");
  require_host(c.v_pages, "v_pages");
  require_host(c.page_table, "page_table");
  require_host(c.lengths, "lengths");
}

// kv_dtype: the plan's; an e4m3 plan's pools may be uint8 arrays of e4m3 bytes (input_view_of).
PagedKvCache cache_of(const InArray& k_pages, const InArray& v_pages, const InArray& page_table,
                      const InArray& lengths, DType kv_dtype) {
  PagedKvCache c;
  c.k_pages = input_view_of(k_pages, "k_pages", kv_dtype);
  c.v_pages = input_view_of(v_pages, "v_pages", kv_dtype);
  c.page_table = view_of(page_table, "page_table");
  c.lengths = view_of(lengths, "lengths");
  return c;
}

}  // namespace

void bind_paged_reference(nb::module_& m) {
  m.def(
      "reference_paged_decode",
      [](const PagedDecodePlan& plan, const InArray& q, const InArray& k_pages, const InArray& v_pages,
         const InArray& page_table, const InArray& lengths, float k_scale, float v_scale) {
        PagedDecodeTensors t;
        t.q = view_of(q, "q");
        t.cache = cache_of(k_pages, v_pages, page_table, lengths, plan.problem.kv_dtype);
        t.kv_scales = {k_scale, v_scale};
        require_host(t.q, "q");
        require_host_cache(t.cache);
        reference::Result r;
        {
          nb::gil_scoped_release release;
          r = reference::paged_decode(plan.problem, t);
        }
        const PagedDecodeProblem& p = plan.problem;
        return std::make_pair(numpy_f64(std::move(r.out), {p.batch, p.num_heads, p.head_dim}),
                              numpy_f64(std::move(r.lse), {p.batch, p.num_heads}));
      },
      "plan"_a, "q"_a, "k_pages"_a, "v_pages"_a, "page_table"_a, "lengths"_a, "k_scale"_a = 1.0f, "v_scale"_a = 1.0f,
      "The float64 golden of paged decode: (out, lse) as float64 numpy arrays; an e4m3 pool's elements are read as "
      "stored value x k_scale (v_scale).");

  m.def(
      "reference_extend",
      [](const ExtendPlan& plan, const InArray& q, const InArray& cu_seqlens_q, const InArray& k_pages,
         const InArray& v_pages, const InArray& page_table, const InArray& lengths, float k_scale, float v_scale) {
        ExtendTensors t;
        t.q = view_of(q, "q");
        t.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
        t.cache = cache_of(k_pages, v_pages, page_table, lengths, plan.problem.kv_dtype);
        t.kv_scales = {k_scale, v_scale};
        require_host(t.q, "q");
        require_host(t.cu_seqlens_q, "cu_seqlens_q");
        require_host_cache(t.cache);
        reference::Result r;
        {
          nb::gil_scoped_release release;
          r = reference::extend(plan.problem, t);
        }
        const ExtendProblem& p = plan.problem;
        const auto rows = static_cast<std::int64_t>(r.lse.size()) / p.num_heads;  // cu_seqlens_q[batch]
        return std::make_pair(numpy_f64(std::move(r.out), {rows, p.num_heads, p.head_dim}),
                              numpy_f64(std::move(r.lse), {rows, p.num_heads}));
      },
      "plan"_a, "q"_a, "cu_seqlens_q"_a, "k_pages"_a, "v_pages"_a, "page_table"_a, "lengths"_a, "k_scale"_a = 1.0f,
      "v_scale"_a = 1.0f,
      "The float64 golden of extend: (out, lse) over the cu_seqlens_q[batch] packed rows, float64 numpy arrays.");
}

}  // namespace attnkit::python
