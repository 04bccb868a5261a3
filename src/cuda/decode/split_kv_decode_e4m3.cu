// Split-KV decode kernels for e4m3 (fp8) K/V caches: the 16-row tensor-core instances of
// decode_instances.inc (engine_mma_fp8.cuh). (One file per dtype so the instances compile in parallel.)
#include <cuda_fp8.h>

#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_split_kv_decode_e4m3(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__nv_fp8_e4m3>(params, stream);
}
}  // namespace attnkit::cuda_decode
