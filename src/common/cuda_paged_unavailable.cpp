// The paged CUDA entry points until their kernels exist (issue 6): each says how to get the work
// done today. Without nvcc the whole CUDA backend is missing; with it, only the paged kernels are.
// (This file lives in src/common/, which is always compiled; delete the CUDA branch when
// src/cuda/paged/ defines these functions.)
#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"

namespace attnkit::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
#ifndef ATTNKIT_WITH_CUDA
  fail(what, "attnkit was built without CUDA", "install the CUDA toolkit (nvcc) and rebuild with -DATTNKIT_CUDA=ON");
#else
  fail(what, "the paged and extend CUDA kernels are not implemented yet",
       "run this step with the CPU backend (cpu::paged_decode, cpu::extend, cpu::paged_append_kv), "
       "or use the contiguous cache with cuda::decode");
#endif
}
}  // namespace

void paged_decode(const PagedDecodePlan&, const PagedDecodeTensors&, Workspace, Stream) {
  unavailable("cuda::paged_decode");
}
void extend(const ExtendPlan&, const ExtendTensors&, Workspace, Stream) { unavailable("cuda::extend"); }
void paged_append_kv(const PagedCacheSpec&, const PagedAppendTensors&, Stream) { unavailable("cuda::paged_append_kv"); }

}  // namespace attnkit::cuda
