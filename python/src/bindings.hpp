// The parts of the attnkit._attnkit module, each bound in its own file, and the conversion of
// DLPack arrays (numpy, torch, cupy) into attnkit's non-owning tensor views.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>

#include <string>

#include "attnkit/paged.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::python {

namespace nb = nanobind;

// Inputs may be read-only (a numpy array with writeable=False); outputs must be writable.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;
using OptIn = std::optional<InArray>;    // None allowed
using OptOut = std::optional<OutArray>;

// The caller's CUDA stream, passed from Python as an integer handle (0 = the default stream).
inline void* stream_of(std::uintptr_t handle) { return reinterpret_cast<void*>(handle); }

// A view of the array's own memory (no copy): data pointer, dtype, shape, strides in elements
// and device. `name` is the argument's name, for the error message when the array cannot be viewed.
TensorView view_of(const InArray& array, const char* name);
TensorView view_of(const OutArray& array, const char* name);
TensorView view_of(const std::optional<InArray>& array, const char* name);   // empty view for None
TensorView view_of(const std::optional<OutArray>& array, const char* name);  // empty view for None
// A prefill input (q, k or v), a decode KV cache or a paged decode pool. With an e4m3 plan dtype,
// one-byte arrays are e4m3 bytes: DLPack's float8_e4m3fn, or uint8 (torch float8 tensors arrive as
// uint8 views of the same memory, since not every torch exports float8 through DLPack; numpy has
// no float8 dtype).
TensorView input_view_of(const InArray& array, const char* name, DType plan_dtype);
// A KV cache or page pool (paged) append writes (None: empty view): uint8 arrays are e4m3 caches.
TensorView cache_view_of(const std::optional<OutArray>& array, const char* name);

// A byte buffer of any dtype as the kernels' scratch.
Workspace workspace_of(const std::optional<OutArray>& array);

// The page pool's description from its Python spelling ("HND" / "NHD", any case).
PageLayout parse_layout(const std::string& name, const char* context);
// A kernel family by its name (to_string's), or an Error listing the names.
KernelFamily parse_family(const std::string& name, const char* context);
PagedCacheSpec cache_spec_of(const std::string& layout, std::int64_t num_pages, std::int64_t page_size,
                             std::int64_t max_pages_per_seq, const char* context);

void bind_errors(nb::module_& m);
void bind_plans(nb::module_& m);
void bind_runs(nb::module_& m);
void bind_reference(nb::module_& m);
void bind_paged_plans(nb::module_& m);
void bind_paged_runs(nb::module_& m);
void bind_paged_reference(nb::module_& m);

}  // namespace attnkit::python
