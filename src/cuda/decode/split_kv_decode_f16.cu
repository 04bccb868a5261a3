// Split-KV decode kernels for f16 K/V caches: every instance of decode_instances.inc.
// (One file per dtype so the instances compile in parallel.)
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_split_kv_decode_f16(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<__half>(params, stream);
}
}  // namespace attnkit::cuda_decode
