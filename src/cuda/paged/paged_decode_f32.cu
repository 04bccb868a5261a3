// Paged split-KV decode kernels for f32 K/V pools: the contiguous decode body (split_kv_decode.cuh)
// instantiated with page-table row addressing, every instance of decode_instances.inc.
// (One file per dtype and call so the instances compile in parallel.)
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_paged_decode_f32(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<float, /*kPaged=*/true, /*kExtend=*/false>(params, stream);
}
}  // namespace attnkit::cuda_decode
