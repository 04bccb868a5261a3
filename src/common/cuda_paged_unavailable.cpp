// The paged CUDA entry points of a build without nvcc: each says how to get the real backend.
// (src/cuda_unavailable.cpp is compiled only without CUDA by the top-level CMake; this file lives in
// src/common/, which is always compiled, hence the guard.)
#ifndef ATTNKIT_WITH_CUDA
#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"

namespace attnkit::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "attnkit was built without CUDA", "install the CUDA toolkit (nvcc) and rebuild with -DATTNKIT_CUDA=ON");
}
}  // namespace

void paged_decode(const PagedDecodePlan&, const PagedDecodeTensors&, Workspace, Stream) {
  unavailable("cuda::paged_decode");
}
void extend(const ExtendPlan&, const ExtendTensors&, Workspace, Stream) { unavailable("cuda::extend"); }
void paged_append_kv(const PagedCacheSpec&, const PagedAppendTensors&, Stream) { unavailable("cuda::paged_append_kv"); }

}  // namespace attnkit::cuda
#endif  // ATTNKIT_WITH_CUDA
