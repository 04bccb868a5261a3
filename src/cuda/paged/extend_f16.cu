// Extend kernels for f16 K/V pools: the decode body (split_kv_decode.cuh) with page-table row
// addressing and packed (query row, head) rows, every instance of decode_instances.inc.
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_extend_f16(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__half, /*kPaged=*/true, /*kExtend=*/true>(params, stream);
}
}  // namespace attnkit::cuda_decode
