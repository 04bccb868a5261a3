// The run entry points of the serving layouts (paged.hpp): paged decode, extend and the paged
// append. As for the contiguous calls, the backend follows the tensors (CPU arrays run cpu::*,
// CUDA arrays cuda::* on the caller's stream) and validation is the C++ library's: a rejected call
// raises attnkit.Error with its Fix before anything is written. The GIL is released while kernels run.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "attnkit/cpu.hpp"
#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace nb::literals;

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

void bind_paged_runs(nb::module_& m) {
  m.def(
      "paged_decode",
      [](const PagedDecodePlan& plan, const InArray& q, const InArray& k_pages, const InArray& v_pages,
         const InArray& page_table, const InArray& lengths, const OutArray& out, const OptOut& lse,
         const OptOut& workspace, std::uintptr_t stream, const OptIn& sinks, float k_scale, float v_scale) {
        PagedDecodeTensors t;
        t.q = view_of(q, "q");
        t.cache = cache_of(k_pages, v_pages, page_table, lengths, plan.problem.kv_dtype);
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        t.sinks = view_of(sinks, "sinks");
        t.kv_scales = {k_scale, v_scale};
        const Workspace ws = workspace_of(workspace);
        nb::gil_scoped_release release;
        if (t.q.device == DeviceKind::kCuda) {
          cuda::paged_decode(plan, t, ws, stream_of(stream));
        } else {
          cpu::paged_decode(plan, t, ws);
        }
      },
      "plan"_a, "q"_a, "k_pages"_a, "v_pages"_a, "page_table"_a, "lengths"_a, "out"_a, "lse"_a.none(),
      "workspace"_a.none(), "stream"_a = 0, "sinks"_a.none() = nb::none(), "k_scale"_a = 1.0f, "v_scale"_a = 1.0f);

  m.def(
      "extend",
      [](const ExtendPlan& plan, const InArray& q, const InArray& cu_seqlens_q, const InArray& k_pages,
         const InArray& v_pages, const InArray& page_table, const InArray& lengths, const OutArray& out,
         const OptOut& lse, const OptOut& workspace, std::uintptr_t stream, const OptIn& sinks, float k_scale,
         float v_scale) {
        ExtendTensors t;
        t.q = view_of(q, "q");
        t.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
        t.cache = cache_of(k_pages, v_pages, page_table, lengths, plan.problem.kv_dtype);
        t.out = view_of(out, "out");
        t.lse = view_of(lse, "lse");
        t.sinks = view_of(sinks, "sinks");
        t.kv_scales = {k_scale, v_scale};
        const Workspace ws = workspace_of(workspace);
        nb::gil_scoped_release release;
        if (t.q.device == DeviceKind::kCuda) {
          cuda::extend(plan, t, ws, stream_of(stream));
        } else {
          cpu::extend(plan, t, ws);
        }
      },
      "plan"_a, "q"_a, "cu_seqlens_q"_a, "k_pages"_a, "v_pages"_a, "page_table"_a, "lengths"_a, "out"_a,
      "lse"_a.none(), "workspace"_a.none(), "stream"_a = 0, "sinks"_a.none() = nb::none(), "k_scale"_a = 1.0f,
      "v_scale"_a = 1.0f);

  m.def(
      "paged_append_kv",
      [](const std::string& layout, std::int64_t num_pages, std::int64_t page_size, std::int64_t max_pages_per_seq,
         const OptIn& k_new, const OptIn& v_new, const InArray& cu_seqlens_new, const InArray& start_positions,
         const OptOut& k_pages, const OptOut& v_pages, const InArray& page_table, std::uintptr_t stream,
         float k_scale, float v_scale) {
        const PagedCacheSpec spec = cache_spec_of(layout, num_pages, page_size, max_pages_per_seq, "paged_append_kv");
        PagedAppendTensors t;
        // One-byte rows are viewed as e4m3 too, so that the library's validation rejects them with its
        // Fix (an e4m3 pool takes f32/f16/bf16 rows; other pools rows of their own dtype).
        t.k_new = k_new ? input_view_of(*k_new, "k_new", DType::kE4M3) : TensorView{};
        t.v_new = v_new ? input_view_of(*v_new, "v_new", DType::kE4M3) : TensorView{};
        t.cu_seqlens_new = view_of(cu_seqlens_new, "cu_seqlens_new");
        t.start_positions = view_of(start_positions, "start_positions");
        // uint8 pools are e4m3 pools (as append_kv's caches): the library then quantizes the rows.
        t.k_pages = cache_view_of(k_pages, "k_pages");
        t.v_pages = cache_view_of(v_pages, "v_pages");
        t.page_table = view_of(page_table, "page_table");
        t.kv_scales = {k_scale, v_scale};
        const TensorView& rows = t.k_new.empty() ? t.v_new : t.k_new;
        nb::gil_scoped_release release;
        if (rows.device == DeviceKind::kCuda) {
          cuda::paged_append_kv(spec, t, stream_of(stream));
        } else {
          cpu::paged_append_kv(spec, t);
        }
      },
      "layout"_a, "num_pages"_a, "page_size"_a, "max_pages_per_seq"_a, "k_new"_a.none(), "v_new"_a.none(),
      "cu_seqlens_new"_a, "start_positions"_a, "k_pages"_a.none(), "v_pages"_a.none(), "page_table"_a,
      "stream"_a = 0, "k_scale"_a = 1.0f, "v_scale"_a = 1.0f);
}

}  // namespace attnkit::python
