// The run entry points. The backend follows the tensors: CPU arrays run cpu::*, CUDA arrays run
// cuda::* on the stream the caller passes (the Python package passes torch's current stream).
// Validation (shapes, dtypes, devices, plan backend) is the C++ library's, so a mismatch raises
// attnkit.Error with its Fix before anything is written. The GIL is released while kernels run.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "attnkit/cpu.hpp"
#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;

RopeStyle parse_rope_style(const std::string& style) {
  if (style == "half" || style == "neox" || style == "llama") return RopeStyle::kHalf;
  if (style == "interleaved" || style == "gptj") return RopeStyle::kInterleaved;
  fail("rope", "unknown style '" + style + "'", "use 'half' (Llama/NeoX pairs d, d + head_dim/2) or 'interleaved' (GPT-J pairs 2i, 2i + 1)");
}

// Caller cos/sin tables, f32 [positions, head_dim/2] each, C-contiguous; both or neither.
RopeSpec rope_spec(const std::string& style, float theta, const OptIn& cos_table, const OptIn& sin_table) {
  RopeSpec spec;
  spec.style = parse_rope_style(style);
  spec.theta = theta;
  if (cos_table.has_value() != sin_table.has_value())
    fail("rope", "only one of cos_table / sin_table was given", "pass both tables or neither");
  if (cos_table) {
    const TensorView c = view_of(*cos_table, "cos_table");
    const TensorView s = view_of(*sin_table, "sin_table");
    for (const TensorView* t : {&c, &s}) {
      if (!(t->dtype == DType::kF32 && t->rank == 2 && t->is_contiguous()))
        fail("rope", "a table is " + t->describe() + ", not a contiguous f32 [positions, head_dim/2] array",
             "pass contiguous float32 tables of shape [positions, head_dim/2]");
    }
    if (c.shape != s.shape) fail("rope", "cos_table and sin_table differ in shape", "pass tables of one shape");
    spec.cos_table = c.as<const float>();
    spec.sin_table = s.as<const float>();
    spec.table_positions = c.shape[0];
  }
  return spec;
}

bool on_cuda(const TensorView& v) { return v.device == DeviceKind::kCuda; }

}  // namespace

void bind_runs(nb::module_& m) {
  m.def(
      "decode",
      [](const DecodePlan& plan, const InArray& q, const InArray& k_cache, const InArray& v_cache,
         const InArray& lengths, const OutArray& out, const OptOut& lse, const OptOut& workspace,
         std::uintptr_t stream, const OptIn& sinks, float k_scale, float v_scale, const OptIn& key_starts) {
        DecodeTensors t;
        t.q = view_of(q, "q");
        t.k_cache = input_view_of(k_cache, "k_cache", plan.problem.kv_dtype);
        t.v_cache = input_view_of(v_cache, "v_cache", plan.problem.kv_dtype);
        t.lengths = view_of(lengths, "lengths");
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        t.sinks = view_of(sinks, "sinks");
        t.kv_scales = {k_scale, v_scale};
        t.key_starts = view_of(key_starts, "key_starts");
        const Workspace ws = workspace_of(workspace);
        nb::gil_scoped_release release;
        if (on_cuda(t.q)) {
          cuda::decode(plan, t, ws, stream_of(stream));
        } else {
          cpu::decode(plan, t, ws);
        }
      },
      "plan"_a, "q"_a, "k_cache"_a, "v_cache"_a, "lengths"_a, "out"_a, "lse"_a.none(), "workspace"_a.none(),
      "stream"_a = 0, "sinks"_a.none() = nb::none(), "k_scale"_a = 1.0f, "v_scale"_a = 1.0f,
      "key_starts"_a.none() = nb::none());

  m.def(
      "prefill",
      [](const PrefillPlan& plan, const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
         const OptOut& lse, const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_k, const OptOut& workspace,
         std::uintptr_t stream, float q_scale, float k_scale, float v_scale, const OptIn& sinks) {
        PrefillTensors t;
        t.q = input_view_of(q, "q", plan.problem.dtype);
        t.k = input_view_of(k, "k", plan.problem.dtype);
        t.v = input_view_of(v, "v", plan.problem.dtype);
        t.scales = {q_scale, k_scale, v_scale};
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        t.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
        t.cu_seqlens_k = view_of(cu_seqlens_k, "cu_seqlens_k");
        t.sinks = view_of(sinks, "sinks");
        const Workspace ws = workspace_of(workspace);
        nb::gil_scoped_release release;
        if (on_cuda(t.q)) {
          cuda::prefill(plan, t, ws, stream_of(stream));
        } else {
          cpu::prefill(plan, t, ws);
        }
      },
      "plan"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(),
      "workspace"_a.none(), "stream"_a = 0, "q_scale"_a = 1.0f, "k_scale"_a = 1.0f, "v_scale"_a = 1.0f,
      "sinks"_a.none() = nb::none());

  m.def(
      "append_kv",
      [](const OptIn& k_new, const OptIn& v_new, const OptOut& k_cache, const OptOut& v_cache,
         const InArray& positions, std::uintptr_t stream, float k_scale, float v_scale) {
        AppendTensors t;
        t.k_new = view_of(k_new, "k_new");
        t.v_new = view_of(v_new, "v_new");
        t.k_cache = cache_view_of(k_cache, "k_cache");
        t.v_cache = cache_view_of(v_cache, "v_cache");
        t.positions = view_of(positions, "positions");
        t.kv_scales = {k_scale, v_scale};
        nb::gil_scoped_release release;
        if (on_cuda(t.positions)) {
          cuda::append_kv(t, stream_of(stream));
        } else {
          cpu::append_kv(t);
        }
      },
      "k_new"_a.none(), "v_new"_a.none(), "k_cache"_a.none(), "v_cache"_a.none(), "positions"_a, "stream"_a = 0,
      "k_scale"_a = 1.0f, "v_scale"_a = 1.0f);

  m.def(
      "apply_rope",
      [](const OutArray& x, const InArray& positions, const std::string& style, float theta, const OptIn& cos_table,
         const OptIn& sin_table, std::uintptr_t stream) {
        const TensorView xv = view_of(x, "x");
        const TensorView pv = view_of(positions, "positions");
        const RopeSpec spec = rope_spec(style, theta, cos_table, sin_table);
        nb::gil_scoped_release release;
        if (on_cuda(xv)) {
          cuda::apply_rope(xv, pv, spec, stream_of(stream));
        } else {
          cpu::apply_rope(xv, pv, spec);
        }
      },
      "x"_a, "positions"_a, "style"_a = "half", "theta"_a = 10000.0f, "cos_table"_a.none() = nb::none(),
      "sin_table"_a.none() = nb::none(), "stream"_a = 0);

  m.def(
      "fused_rope_append_decode",
      [](const DecodePlan& plan, const InArray& q, const InArray& k_new, const InArray& v_new, const OutArray& k_cache,
         const OutArray& v_cache, const InArray& positions, const OutArray& out, const OptOut& lse,
         const std::string& style, float theta, const OptIn& cos_table, const OptIn& sin_table,
         const OptOut& workspace, std::uintptr_t stream, const OptIn& sinks) {
        FusedDecodeTensors t;
        t.q = view_of(q, "q");
        t.k_new = view_of(k_new, "k_new");
        t.v_new = view_of(v_new, "v_new");
        t.k_cache = view_of(k_cache, "k_cache");
        t.v_cache = view_of(v_cache, "v_cache");
        t.positions = view_of(positions, "positions");
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        t.sinks = view_of(sinks, "sinks");
        const RopeSpec spec = rope_spec(style, theta, cos_table, sin_table);
        const Workspace ws = workspace_of(workspace);
        nb::gil_scoped_release release;
        if (on_cuda(t.q)) {
          cuda::fused_rope_append_decode(plan, t, spec, ws, stream_of(stream));
        } else {
          cpu::fused_rope_append_decode(plan, t, spec, ws);
        }
      },
      "plan"_a, "q"_a, "k_new"_a, "v_new"_a, "k_cache"_a, "v_cache"_a, "positions"_a, "out"_a, "lse"_a.none(),
      "style"_a, "theta"_a, "cos_table"_a.none(), "sin_table"_a.none(), "workspace"_a.none(), "stream"_a = 0,
      "sinks"_a.none() = nb::none());

  m.def(
      "merge_states",
      [](const InArray& out_partial, const InArray& lse_partial, const OutArray& out, const OptOut& lse,
         std::uintptr_t stream) {
        MergeTensors t;
        t.out_partial = view_of(out_partial, "out_partial");
        t.lse_partial = view_of(lse_partial, "lse_partial");
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        nb::gil_scoped_release release;
        if (on_cuda(t.out)) {
          cuda::merge_states(t, stream_of(stream));
        } else {
          cpu::merge_states(t);
        }
      },
      "out_partial"_a, "lse_partial"_a, "out"_a, "lse"_a.none() = nb::none(), "stream"_a = 0);

  m.def(
      "advise_huge_pages",
      [](const OutArray& x) {
        if (x.device_type() != nb::device::cpu::value)
          fail("advise_huge_pages", "the array is not in host memory",
               "pass a CPU tensor (a KV cache the CPU backend reads)");
        return cpu::advise_huge_pages(x.data(), x.nbytes());
      },
      "x"_a);
}

}  // namespace attnkit::python
