// Extend kernels for e4m3 (fp8) K/V pools: the decode body (split_kv_decode.cuh) with page-table row
// addressing, packed (query row, head) rows and the fp8 tensor-core engine (engine_mma_fp8.cuh),
// every instance of decode_instances.inc.
#include <cuda_fp8.h>

#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_extend_e4m3(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__nv_fp8_e4m3, /*kPaged=*/true, /*kExtend=*/true>(params, stream);
}
}  // namespace attnkit::cuda_decode
