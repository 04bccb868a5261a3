// The launch of the split merge (split_merge.cuh) after a prefill kernel that split keys: defined in
// prefill.cu, also called by the Hopper extend (prefill_hopper/hopper_extend.cu).
#pragma once
#include <cuda_runtime.h>

#include "attnkit/dtype.hpp"
#include "cuda/prefill/prefill_params.cuh"

namespace attnkit::cuda_prefill {

// Merges p.splits partial states per row into p.out (f16 or bf16, the input's type; nothing when
// p.splits == 1). Sequences come from sequence_extent, so ragged batches and extends merge alike.
void merge_split_states(const PrefillParams& p, DType dtype, cudaStream_t stream);

}  // namespace attnkit::cuda_prefill
