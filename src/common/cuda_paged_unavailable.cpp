// The paged CUDA entry points in a build without CUDA: each says how to get the work done.
// (This file lives in src/common/, which is always compiled; in CUDA builds src/cuda/paged/ and
// src/cuda/kv/ define these functions and this file is empty.)
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
#endif
