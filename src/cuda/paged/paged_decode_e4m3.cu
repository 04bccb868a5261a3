// Paged split-KV decode kernels for e4m3 (fp8) K/V pools: the contiguous decode body
// (split_kv_decode.cuh) instantiated with page-table row addressing and the fp8 tensor-core engine
// (engine_mma_fp8.cuh), every instance of decode_instances.inc. (One file per dtype and call so the
// instances compile in parallel.)
#include <cuda_fp8.h>

#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_paged_decode_e4m3(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__nv_fp8_e4m3, /*kPaged=*/true, /*kExtend=*/false>(params, stream);
}
}  // namespace attnkit::cuda_decode
