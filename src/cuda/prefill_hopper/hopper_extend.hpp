// Extend (chunked prefill) over a paged KV cache on the Hopper prefill kernel: the launcher's entry
// point (hopper_extend.cu), called by cuda::extend (src/cuda/paged/paged_backend.cpp) when the plan
// names KernelFamily::kWarpSpecializedWgmma.
#pragma once
#include "attnkit/paged.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::cuda_prefill_hopper {

// Runs the plan's Hopper instance with its K / V tiles read from the pages (page_boxes.hpp): q and
// out [rows, heads, head_dim] packed by cu_seqlens_q, sequence b's keys its cache.lengths[b], the
// new rows its last q_len_b (causal, bottom-right), key splits merged after (the workspace holds
// their states). The caller has validated the call; throws Error before any launch when a tensor
// cannot be described to TMA or the plan names no compiled instance.
void launch_hopper_extend(const ExtendPlan& plan, const ExtendTensors& t, Workspace workspace, void* stream);

}  // namespace attnkit::cuda_prefill_hopper
