// Paged split-KV decode kernels for bf16 K/V pools: the contiguous decode body (split_kv_decode.cuh)
// instantiated with page-table row addressing, every instance of decode_instances.inc.
// (One file per dtype and call so the instances compile in parallel.)
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_paged_decode_bf16(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__nv_bfloat16, /*kPaged=*/true, /*kExtend=*/false>(params, stream);
}
}  // namespace attnkit::cuda_decode
