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

// RoPE in place on x [batch, heads, head_dim] at positions[b] (device i32; cpu.hpp's apply_rope on
// the GPU, tables in device memory). A device-side position that is negative or past the tables
// fills its rows with NaN: the host cannot see it to reject it.
void apply_rope(TensorView x, TensorView positions, const RopeSpec& rope, Stream stream = nullptr);

// Merges partial (output, LSE) states, as cpu.hpp's merge_states does: key splits the caller ran
// itself, e.g. a shared prefix and each sequence's own suffix (cascade attention), or shards.
void merge_states(const MergeTensors& tensors, Stream stream = nullptr);

}  // namespace attnkit::cuda
