// The float64 golden (attnkit::reference) for Python tests: host arrays in, float64 numpy
// arrays out, shaped like the call's out (out) and out without head_dim (lse).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>

#include <string>

#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "attnkit/reference.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;
using F64Array = nb::ndarray<nb::numpy, double>;

F64Array numpy_f64(std::vector<double>&& values, const TensorView& like, int rank) {
  auto* owned = new std::vector<double>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  std::size_t shape[TensorView::kMaxRank];
  std::size_t expected = 1;
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<std::size_t>(like.shape[i]);
    expected *= shape[i];
  }
  if (expected != owned->size())
    fail("reference",
         "the golden returned " + std::to_string(owned->size()) + " values for a shape of " + std::to_string(expected),
         "report this as a bug in attnkit::reference");
  return F64Array(owned->data(), static_cast<std::size_t>(rank), shape, owner);
}

void require_host(const TensorView& v, const char* name) {
  if (v.device != DeviceKind::kCpu)
    fail("reference", std::string(name) + " is on CUDA",
         "the golden reads host memory: copy the inputs to the CPU first");
}

}  // namespace

void bind_reference(nb::module_& m) {
  m.def(
      "reference_decode",
      [](const DecodePlan& plan, const InArray& q, const InArray& k_cache, const InArray& v_cache,
         const InArray& lengths, const OptIn& sinks, float k_scale, float v_scale, const OptIn& key_starts) {
        DecodeTensors t;
        t.q = view_of(q, "q");
        t.k_cache = input_view_of(k_cache, "k_cache", plan.problem.kv_dtype);
        t.v_cache = input_view_of(v_cache, "v_cache", plan.problem.kv_dtype);
        t.lengths = view_of(lengths, "lengths");
        t.sinks = view_of(sinks, "sinks");
        t.kv_scales = {k_scale, v_scale};
        t.key_starts = view_of(key_starts, "key_starts");
        for (auto [v, name] : {std::pair{&t.q, "q"}, {&t.k_cache, "k_cache"}, {&t.v_cache, "v_cache"},
                               {&t.lengths, "lengths"}}) {
          require_host(*v, name);
        }
        if (!t.sinks.empty()) require_host(t.sinks, "sinks");
        if (!t.key_starts.empty()) require_host(t.key_starts, "key_starts");
        reference::Result r;
        {
          nb::gil_scoped_release release;
          r = reference::decode(plan.problem, t);
        }
        return std::make_pair(numpy_f64(std::move(r.out), t.q, t.q.rank), numpy_f64(std::move(r.lse), t.q, t.q.rank - 1));
      },
      "plan"_a, "q"_a, "k_cache"_a, "v_cache"_a, "lengths"_a, "sinks"_a.none() = nb::none(), "k_scale"_a = 1.0f,
      "v_scale"_a = 1.0f, "key_starts"_a.none() = nb::none(),
      "The float64 golden of decode: (out, lse) as float64 numpy arrays.");

  m.def(
      "reference_prefill",
      [](const PrefillPlan& plan, const InArray& q, const InArray& k, const InArray& v, const OptIn& cu_seqlens_q,
         const OptIn& cu_seqlens_k, float q_scale, float k_scale, float v_scale, const OptIn& sinks) {
        PrefillTensors t;
        t.q = input_view_of(q, "q", plan.problem.dtype);
        t.k = input_view_of(k, "k", plan.problem.dtype);
        t.v = input_view_of(v, "v", plan.problem.dtype);
        t.scales = {q_scale, k_scale, v_scale};
        t.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
        t.cu_seqlens_k = view_of(cu_seqlens_k, "cu_seqlens_k");
        t.sinks = view_of(sinks, "sinks");
        for (auto [v, name] : {std::pair{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}}) require_host(*v, name);
        if (!t.sinks.empty()) require_host(t.sinks, "sinks");
        reference::Result r;
        {
          nb::gil_scoped_release release;
          r = reference::prefill(plan.problem, t);
        }
        return std::make_pair(numpy_f64(std::move(r.out), t.q, t.q.rank), numpy_f64(std::move(r.lse), t.q, t.q.rank - 1));
      },
      "plan"_a, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a.none() = nb::none(), "cu_seqlens_k"_a.none() = nb::none(),
      "q_scale"_a = 1.0f, "k_scale"_a = 1.0f, "v_scale"_a = 1.0f, "sinks"_a.none() = nb::none(),
      "The float64 golden of prefill: (out, lse) as float64 numpy arrays (e4m3 inputs: stored value x scale).");
}

}  // namespace attnkit::python
