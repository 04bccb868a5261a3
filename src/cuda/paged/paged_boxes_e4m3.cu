// Paged split-KV decode kernels for e4m3 (fp8) K/V pools whose tiles are page-aligned (the plan's
// page_boxes): the contiguous decode body copying page runs as TMA boxes of bytes, every instance of
// decode_instances.inc. A file of its own so the instances compile in parallel, and an instance of
// its own so it holds one pipeline's registers (split_kv_decode.cuh).
#include <cuda_fp8.h>

#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_paged_boxes_e4m3(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__nv_fp8_e4m3, /*kPaged=*/true, /*kExtend=*/false, /*kPageBoxes=*/true>(params, stream);
}
}  // namespace attnkit::cuda_decode
