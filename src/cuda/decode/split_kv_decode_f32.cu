// Split-KV decode kernels for f32 K/V caches: every instance of decode_instances.inc.
// (One file per dtype so the instances compile in parallel.)
#include "cuda/decode/split_kv_decode.cuh"

namespace attnkit::cuda_decode {
void launch_split_kv_decode_f32(const DecodeParams& params, cudaStream_t stream) {
  launch_decode_typed<float>(params, stream);
}
}  // namespace attnkit::cuda_decode
