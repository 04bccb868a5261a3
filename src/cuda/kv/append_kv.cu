// KV append: writes one new token's K and/or V row per (sequence, KV head) at positions[b]
// (seed 000's append and append-both, in one launch for both).
//
// Inputs: k_new / v_new [batch, kv_heads, head_dim], caches [batch, kv_heads, max_seq, head_dim],
//   positions i32 [batch] on the device. Positions live on the device, so the host cannot check
//   them: a position outside [0, max_seq) is skipped (that sequence's cache is left untouched).
// Parallelism: one block per (sequence, KV head), threads over head_dim, K and V in the same pass.
// Bound: launch latency (a few KB moved).
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/common/row_alignment.hpp"

namespace attnkit::cuda {
namespace {

struct AppendParams {
  const unsigned char* k_new = nullptr;
  const unsigned char* v_new = nullptr;
  unsigned char* k_cache = nullptr;
  unsigned char* v_cache = nullptr;
  const std::int32_t* positions = nullptr;
  int elem_bytes = 0, kv_heads = 0, head_dim = 0, max_seq = 0;
  std::int64_t kn_b = 0, kn_h = 0, vn_b = 0, vn_h = 0;       // elements
  std::int64_t kc_b = 0, kc_h = 0, kc_s = 0, vc_b = 0, vc_h = 0, vc_s = 0;
};

template <class Word>
__global__ void append_kv_kernel(const __grid_constant__ AppendParams p) {
  const int b = blockIdx.x / p.kv_heads, h = blockIdx.x % p.kv_heads;
  const int pos = p.positions[b];
  if (pos < 0 || pos >= p.max_seq) return;  // out of range: skipped, cache untouched
  const int words = p.head_dim * p.elem_bytes / static_cast<int>(sizeof(Word));
  const std::int64_t e = p.elem_bytes;
  for (int i = threadIdx.x; i < words; i += blockDim.x) {
    if (p.k_new != nullptr) {
      const Word* src = reinterpret_cast<const Word*>(p.k_new + (b * p.kn_b + h * p.kn_h) * e);
      Word* dst = reinterpret_cast<Word*>(p.k_cache + (b * p.kc_b + h * p.kc_h + pos * p.kc_s) * e);
      dst[i] = src[i];
    }
    if (p.v_new != nullptr) {
      const Word* src = reinterpret_cast<const Word*>(p.v_new + (b * p.vn_b + h * p.vn_h) * e);
      Word* dst = reinterpret_cast<Word*>(p.v_cache + (b * p.vc_b + h * p.vc_h + pos * p.vc_s) * e);
      dst[i] = src[i];
    }
  }
}

}  // namespace

void append_kv(const AppendTensors& t, Stream stream) {
  const char* ctx = "cuda::append_kv";
  validate_append(t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.k_new, "k_new"}, {&t.v_new, "v_new"}, {&t.k_cache, "k_cache"},
                            {&t.v_cache, "v_cache"}, {&t.positions, "positions"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  const TensorView& cache = t.k_new.empty() ? t.v_cache : t.k_cache;
  const TensorView& row = t.k_new.empty() ? t.v_new : t.k_new;
  AppendParams p;
  p.k_new = static_cast<const unsigned char*>(t.k_new.data);
  p.v_new = static_cast<const unsigned char*>(t.v_new.data);
  p.k_cache = t.k_new.empty() ? nullptr : static_cast<unsigned char*>(t.k_cache.data);
  p.v_cache = t.v_new.empty() ? nullptr : static_cast<unsigned char*>(t.v_cache.data);
  p.positions = t.positions.as<const std::int32_t>();
  p.elem_bytes = static_cast<int>(dtype_size(cache.dtype));
  const int batch = static_cast<int>(cache.shape[0]);
  p.kv_heads = static_cast<int>(cache.shape[1]);
  p.max_seq = static_cast<int>(cache.shape[2]);
  p.head_dim = static_cast<int>(cache.shape[3]);
  p.kn_b = t.k_new.strides[0], p.kn_h = t.k_new.strides[1];
  p.vn_b = t.v_new.strides[0], p.vn_h = t.v_new.strides[1];
  p.kc_b = t.k_cache.strides[0], p.kc_h = t.k_cache.strides[1], p.kc_s = t.k_cache.strides[2];
  p.vc_b = t.v_cache.strides[0], p.vc_h = t.v_cache.strides[1], p.vc_s = t.v_cache.strides[2];
  (void)row;
  const std::int64_t blocks = static_cast<std::int64_t>(batch) * p.kv_heads;
  if (blocks == 0) return;
  const bool wide = cuda_common::aligned_rows(t.k_new, 16) && cuda_common::aligned_rows(t.v_new, 16) && cuda_common::aligned_rows(t.k_cache, 16) &&
                    cuda_common::aligned_rows(t.v_cache, 16) && (p.head_dim * p.elem_bytes) % 16 == 0;
  auto s = static_cast<cudaStream_t>(stream);
  if (wide) {
    append_kv_kernel<uint4><<<static_cast<unsigned>(blocks), 32, 0, s>>>(p);
  } else {
    append_kv_kernel<unsigned short><<<static_cast<unsigned>(blocks), 128, 0, s>>>(p);
  }
  cuda_common::check_launch(ctx, "append_kv_kernel");
}

}  // namespace attnkit::cuda
