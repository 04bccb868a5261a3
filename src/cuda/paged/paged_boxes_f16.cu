// Paged split-KV decode kernels for f16 K/V pools whose tiles are page-aligned (the plan's
// page_boxes): the contiguous decode body copying page runs as TMA boxes, every instance of
// decode_instances.inc. A file of its own so the instances compile in parallel, and an instance
// of its own so it holds one pipeline's registers (split_kv_decode.cuh).
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_paged_boxes_f16(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__half, /*kPaged=*/true, /*kExtend=*/false, /*kPageBoxes=*/true>(params, stream);
}
}  // namespace attnkit::cuda_decode
