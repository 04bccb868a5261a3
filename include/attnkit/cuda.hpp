// The CUDA backend. Present when attnkit was built with nvcc (attnkit::cuda::built() says so).
// Streams are passed as cudaStream_t cast to void* so this header needs no CUDA include.
// Runs never allocate and never synchronise with the host; split states live in the caller's
// workspace, whose exact size the plan reports.
#pragma once
#include "attnkit/plan.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::cuda {

using Stream = void*;  // cudaStream_t

bool built();              // compiled with CUDA support
int device_count();        // 0 without a driver or a GPU (never throws)
Target target(int device = -1);  // -1 = current device; reads properties, does not synchronise

void decode(const DecodePlan& plan, const DecodeTensors& tensors, Workspace workspace,
            Stream stream = nullptr);
void prefill(const PrefillPlan& plan, const PrefillTensors& tensors, Workspace workspace,
             Stream stream = nullptr);
void append_kv(const AppendTensors& tensors, Stream stream = nullptr);
void fused_rope_append_decode(const DecodePlan& plan, const FusedDecodeTensors& tensors,
                              const RopeSpec& rope, Workspace workspace, Stream stream = nullptr);

}  // namespace attnkit::cuda
