// Targets and plans: the planner's inputs and outputs as Python objects. A plan prints as the
// planner's table and serialises to the planner's JSON; the Python package wraps it (attnkit.Plan).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "bindings.hpp"

namespace attnkit::python {

constexpr KernelFamily kFamilies[] = {KernelFamily::kScalarOnline, KernelFamily::kCooperativeTiled,
                                      KernelFamily::kSplitKvDecode, KernelFamily::kWarpSpecializedWgmma};

KernelFamily parse_family(const std::string& name, const char* context) {
  std::string known;
  for (KernelFamily f : kFamilies) {
    if (to_string(f) == name) return f;
    known += (known.empty() ? "" : ", ") + to_string(f);
  }
  fail(context, "unknown kernel family '" + name + "'", "use one of: " + known + " (or None to let the planner choose)");
}

namespace {

using namespace nb::literals;

AttentionOptions options_of(std::int64_t window, float scale, float softcap) {
  AttentionOptions o;
  o.window = window;
  o.scale = scale;
  o.softcap = softcap;
  return o;
}

template <class Plan>
void bind_plan_class(nb::module_& m, const char* name) {
  nb::class_<Plan>(m, name)
      .def("table", [](const Plan& p) { return to_table(p); }, "The planner's aligned two-column table.")
      .def("to_json", [](const Plan& p) { return to_json(p); }, "The planner's JSON (one object).")
      .def("__repr__", [](const Plan& p) { return to_table(p); })
      .def_prop_ro("backend", [](const Plan& p) { return to_string(p.target.backend); })
      .def_prop_ro("family", [](const Plan& p) { return to_string(p.partition.family); })
      .def_prop_ro("workspace_bytes", [](const Plan& p) { return p.evidence.workspace_bytes; })
      .def_prop_ro("target", [](const Plan& p) { return p.target; })
      .def_ro("reasons", &Plan::reasons);
}

}  // namespace

void bind_plans(nb::module_& m) {
  nb::class_<Target>(m, "Target")
      .def_prop_ro("backend", [](const Target& t) { return to_string(t.backend); })
      .def_ro("name", &Target::name)
      .def_ro("threads", &Target::threads)
      .def_ro("cache_bytes", &Target::cache_bytes)
      .def_ro("sm_count", &Target::sm_count)
      .def_ro("cc_major", &Target::cc_major)
      .def_ro("cc_minor", &Target::cc_minor)
      .def_ro("shared_bytes_per_block", &Target::shared_bytes_per_block)
      .def_ro("shared_bytes_per_sm", &Target::shared_bytes_per_sm)
      .def_ro("max_threads_per_sm", &Target::max_threads_per_sm)
      .def_ro("peak_read_bytes_per_s", &Target::peak_read_bytes_per_s)
      .def_ro("peak_matmul_flops_per_s", &Target::peak_matmul_flops_per_s)
      .def_ro("cpu_matrix_tiles", &Target::cpu_matrix_tiles)
      .def_ro("cpu_intel_cores", &Target::cpu_intel_cores)
      .def_ro("cpu_vector_lanes", &Target::cpu_vector_lanes)
      .def("__repr__", [](const Target& t) {
        return "Target(backend='" + to_string(t.backend) + "', name='" + t.name + "', threads=" +
               std::to_string(t.threads) + ", sm_count=" + std::to_string(t.sm_count) + ")";
      });

  m.def("cpu_target", &cpu_target, "threads"_a = 0, "This host (threads=0: every hardware thread).");
  m.def("known_target", [](const std::string& name) { return known_target(name); }, "name"_a,
        "A datasheet target ('h200', 'h100', 'cpu') for planning without that device.");
  m.def("cuda_target", &cuda::target, "device"_a = -1, "The properties of a CUDA device (-1: the current one).");
  m.def("cuda_built", &cuda::built, "Whether this build has the CUDA backend.");
  m.def("cuda_device_count", &cuda::device_count, "CUDA devices visible (0 without a driver; never raises).");

  bind_plan_class<DecodePlan>(m, "DecodePlan");
  bind_plan_class<PrefillPlan>(m, "PrefillPlan");

  m.def(
      "plan_decode",
      [](std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
         std::int64_t max_seq, std::int64_t kv_len, const std::string& kv_dtype, const std::string& q_dtype,
         const std::string& out_dtype, std::int64_t window, float scale, float softcap, const Target& target,
         const std::optional<std::string>& family) {
        DecodeProblem p;
        p.batch = batch;
        p.num_heads = num_heads;
        p.kv_heads = kv_heads;
        p.head_dim = head_dim;
        p.max_seq = max_seq;
        p.kv_len = kv_len;
        p.kv_dtype = parse_dtype(kv_dtype);
        p.q_dtype = parse_dtype(q_dtype);
        p.out_dtype = parse_dtype(out_dtype);
        p.options = options_of(window, scale, softcap);
        return family ? plan_decode(p, target, parse_family(*family, "plan_decode")) : plan_decode(p, target);
      },
      "batch"_a, "num_heads"_a, "kv_heads"_a, "head_dim"_a, "max_seq"_a, "kv_len"_a, "kv_dtype"_a, "q_dtype"_a,
      "out_dtype"_a, "window"_a, "scale"_a, "softcap"_a, "target"_a, "family"_a.none());

  m.def(
      "plan_prefill",
      [](std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
         std::int64_t q_len, std::int64_t kv_len, bool causal, const std::string& dtype,
         const std::string& out_dtype, std::int64_t window, float scale, float softcap, const Target& target,
         const std::optional<std::string>& family) {
        PrefillProblem p;
        p.batch = batch;
        p.num_heads = num_heads;
        p.kv_heads = kv_heads;
        p.head_dim = head_dim;
        p.q_len = q_len;
        p.kv_len = kv_len;
        p.causal = causal;
        p.dtype = parse_dtype(dtype);
        p.out_dtype = parse_dtype(out_dtype);
        p.options = options_of(window, scale, softcap);
        return family ? plan_prefill(p, target, parse_family(*family, "plan_prefill")) : plan_prefill(p, target);
      },
      "batch"_a, "num_heads"_a, "kv_heads"_a, "head_dim"_a, "q_len"_a, "kv_len"_a, "causal"_a, "dtype"_a,
      "out_dtype"_a, "window"_a, "scale"_a, "softcap"_a, "target"_a, "family"_a.none());
}

}  // namespace attnkit::python
