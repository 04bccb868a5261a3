// Key splits of the prefill kernels, host side: the partial states bound to the caller's workspace
// before the launch, and the split merge (split_merge.cuh) after it. Defined in prefill.cu, also
// called by the Hopper extend (prefill_hopper/hopper_extend.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "attnkit/plan.hpp"
#include "attnkit/tensors.hpp"
#include "cuda/prefill/prefill_params.cuh"

namespace attnkit::cuda_prefill {

// Sets p.splits / p.tiles_per_split from the plan and, when it splits keys, points p.partial_out /
// p.partial_lse at the workspace (p.batch and p.workspace_rows set first); throws Error (with
// `context`) before any launch when the workspace is too small or misaligned.
void bind_split_states(PrefillParams& p, const WorkPartition& part, std::int64_t num_heads, std::int64_t head_dim,
                       Workspace workspace, const char* context);

// Merges p.splits partial states per row into p.out (f16 or bf16, the input's type; nothing when
// p.splits == 1). Sequences come from sequence_extent, so ragged batches and extends merge alike.
void merge_split_states(const PrefillParams& p, DType dtype, cudaStream_t stream);

}  // namespace attnkit::cuda_prefill
