// KV append: writes one new token's K and/or V row per (sequence, KV head) at positions[b]
// (seed 000's append and append-both, in one launch for both).
//
// Inputs: k_new / v_new [batch, kv_heads, head_dim], caches [batch, kv_heads, max_seq, head_dim],
//   positions i32 [batch] on the device. Positions live on the device, so the host cannot check
//   them: a position outside [0, max_seq) is skipped (that sequence's cache is left untouched).
//   An e4m3 cache takes f32/f16/bf16 rows and stores e4m3(x / scale) (round to nearest even,
//   saturating at +-448: float_to_e4m3_bits's rule); other caches get the rows' bytes.
// Parallelism: one block per (sequence, KV head), threads over head_dim, K and V in the same pass
//   (an e4m3 side: one launch of its own).
// Bound: launch latency (a few KB moved).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/convert.cuh"
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

// One side (K or V) into an e4m3 cache: each element converted to f32, divided by the scale (IEEE
// division, as the host rule) and rounded to e4m3 with saturation.
struct QuantizeParams {
  const void* src = nullptr;
  DType src_dtype = DType::kF32;
  __nv_fp8_storage_t* cache = nullptr;
  const std::int32_t* positions = nullptr;
  float scale = 1.0f;
  int kv_heads = 0, head_dim = 0, max_seq = 0;
  std::int64_t src_b = 0, src_h = 0, c_b = 0, c_h = 0, c_s = 0;  // elements
};

__global__ void append_quantized_kernel(const __grid_constant__ QuantizeParams p) {
  const int b = blockIdx.x / p.kv_heads, h = blockIdx.x % p.kv_heads;
  const int pos = p.positions[b];
  if (pos < 0 || pos >= p.max_seq) return;  // out of range: skipped, cache untouched
  __nv_fp8_storage_t* dst = p.cache + b * p.c_b + h * p.c_h + pos * p.c_s;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    const float x = cuda_common::load_as_f32(p.src, p.src_dtype, b * p.src_b + h * p.src_h + d);
    dst[d] = __nv_cvt_float_to_fp8(__fdiv_rn(x, p.scale), __NV_SATFINITE, __NV_E4M3);
  }
}

void launch_quantized(const TensorView& src, const TensorView& cache, const TensorView& positions, float scale,
                      cudaStream_t stream, const char* ctx) {
  QuantizeParams p;
  p.src = src.data, p.src_dtype = src.dtype;
  p.cache = static_cast<__nv_fp8_storage_t*>(cache.data);
  p.positions = positions.as<const std::int32_t>();
  p.scale = scale;
  p.kv_heads = static_cast<int>(cache.shape[1]), p.max_seq = static_cast<int>(cache.shape[2]);
  p.head_dim = static_cast<int>(cache.shape[3]);
  p.src_b = src.strides[0], p.src_h = src.strides[1];
  p.c_b = cache.strides[0], p.c_h = cache.strides[1], p.c_s = cache.strides[2];
  const std::int64_t blocks = cache.shape[0] * cache.shape[1];
  if (blocks == 0) return;
  append_quantized_kernel<<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  cuda_common::check_launch(ctx, "append_quantized_kernel");
}

}  // namespace

void append_kv(const AppendTensors& t, Stream stream) {
  const char* ctx = "cuda::append_kv";
  validate_append(t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.k_new, "k_new"}, {&t.v_new, "v_new"}, {&t.k_cache, "k_cache"},
                            {&t.v_cache, "v_cache"}, {&t.positions, "positions"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  // e4m3 sides are quantized by their own launch; what is left is copied below.
  const bool k_fp8 = !t.k_new.empty() && is_fp8(t.k_cache.dtype);
  const bool v_fp8 = !t.v_new.empty() && is_fp8(t.v_cache.dtype);
  auto s = static_cast<cudaStream_t>(stream);
  if (k_fp8) launch_quantized(t.k_new, t.k_cache, t.positions, t.kv_scales.k, s, ctx);
  if (v_fp8) launch_quantized(t.v_new, t.v_cache, t.positions, t.kv_scales.v, s, ctx);
  const bool copy_k = !t.k_new.empty() && !k_fp8, copy_v = !t.v_new.empty() && !v_fp8;
  if (!copy_k && !copy_v) return;
  const TensorView& cache = copy_k ? t.k_cache : t.v_cache;
  AppendParams p;
  p.k_new = copy_k ? static_cast<const unsigned char*>(t.k_new.data) : nullptr;
  p.v_new = copy_v ? static_cast<const unsigned char*>(t.v_new.data) : nullptr;
  p.k_cache = copy_k ? static_cast<unsigned char*>(t.k_cache.data) : nullptr;
  p.v_cache = copy_v ? static_cast<unsigned char*>(t.v_cache.data) : nullptr;
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
  const std::int64_t blocks = static_cast<std::int64_t>(batch) * p.kv_heads;
  if (blocks == 0) return;
  auto rows_aligned = [](bool used, const TensorView& x) { return !used || cuda_common::aligned_rows(x, 16); };
  const bool wide = rows_aligned(copy_k, t.k_new) && rows_aligned(copy_v, t.v_new) && rows_aligned(copy_k, t.k_cache) &&
                    rows_aligned(copy_v, t.v_cache) && (p.head_dim * p.elem_bytes) % 16 == 0;
  if (wide) {
    append_kv_kernel<uint4><<<static_cast<unsigned>(blocks), 32, 0, s>>>(p);
  } else {
    append_kv_kernel<unsigned short><<<static_cast<unsigned>(blocks), 128, 0, s>>>(p);
  }
  cuda_common::check_launch(ctx, "append_kv_kernel");
}

}  // namespace attnkit::cuda
