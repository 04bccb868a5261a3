// Paged KV append: writes n_b = cu_seqlens_new[b+1] - cu_seqlens_new[b] new K and/or V rows of
// sequence b at positions start_positions[b] .. + n_b - 1 of its pages (paged.hpp), crossing page
// boundaries as the table says.
//
// Inputs: k_new / v_new [rows, kv_heads, head_dim] (token-major, pool dtype; an e4m3 pool takes
//   f32/f16/bf16 rows and stores e4m3(x / scale), append_kv.cu's rule), cu_seqlens_new i32
//   [batch + 1], start_positions i32 [batch], page_table i32 [batch, max_pages_per_seq], pools in
//   HND or NHD. Index tensors live on the device: the host cannot check them without a
//   synchronisation, so the kernel clamps offsets to the rows of k_new and skips (leaves the pool
//   untouched for) any token whose position is negative, past the table, or whose page is outside
//   [0, num_pages). Callers with host mirrors run validate_paged_indices_host / the CPU checks.
// Parallelism: one warp per (token row, KV head): the token's sequence is found by a binary search
//   over cu_seqlens_new, its page with one table load; the warp copies the row with 16-byte words
//   (2-byte words when a row or stride is not 16-byte aligned), or quantizes it element by element
//   into an e4m3 pool. The grid is rows x kv_heads / 4 blocks of 4 warps, fixed by the tensors'
//   shapes, so the launch is graph-capturable.
// Bound: launch latency (a few KB per step).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/common/ragged_rows.cuh"
#include "cuda/common/row_alignment.hpp"

namespace attnkit::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

struct PagedAppendParams {
  const unsigned char* k_new = nullptr;
  const unsigned char* v_new = nullptr;
  unsigned char* k_pages = nullptr;
  unsigned char* v_pages = nullptr;
  const std::int32_t* cu = nullptr;
  const std::int32_t* starts = nullptr;
  const std::int32_t* table = nullptr;
  std::int64_t table_b = 0, table_p = 0;
  int batch = 0, rows = 0, kv_heads = 0, head_dim = 0, elem_bytes = 0;
  int page_size = 1, num_pages = 0, max_pages = 0;
  std::int64_t kn_t = 0, kn_h = 0, vn_t = 0, vn_h = 0;  // new rows: token, head strides (elements)
  std::int64_t kp_page = 0, kp_head = 0, kp_slot = 0;   // pools: page, KV head, slot strides
  std::int64_t vp_page = 0, vp_head = 0, vp_slot = 0;
  // e4m3 pools: the new rows' dtypes and the dequantization scales they are divided by.
  DType k_dtype = DType::kF32, v_dtype = DType::kF32;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// Where this warp's (token row, KV head) goes: false when the row is past the last sequence's rows
// or its position, table entry or page is out of range (skipped: the pool is left untouched).
struct Destination {
  int token = 0, h = 0, page = 0;
  std::int64_t slot = 0;
};
__device__ bool find_destination(const PagedAppendParams& p, Destination& d) {
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (item >= static_cast<std::int64_t>(p.rows) * p.kv_heads) return false;
  d.token = static_cast<int>(item / p.kv_heads), d.h = static_cast<int>(item % p.kv_heads);
  auto offset = [&](int b) { return min(max(p.cu[b], 0), p.rows); };
  const int b = cuda_common::sequence_of_row(p.cu, p.batch, p.rows, d.token);
  const int first = offset(b), end = max(offset(b + 1), first);
  if (d.token < first || d.token >= end) return false;
  const std::int64_t pos = static_cast<std::int64_t>(p.starts[b]) + (d.token - first);
  if (pos < 0) return false;
  const std::int64_t index = pos / p.page_size;
  if (index >= p.max_pages) return false;
  d.page = p.table[b * p.table_b + index * p.table_p];
  if (d.page < 0 || d.page >= p.num_pages) return false;
  d.slot = pos - index * p.page_size;
  return true;
}

template <class Word>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) paged_append_kernel(const __grid_constant__ PagedAppendParams p) {
  Destination dest;
  if (!find_destination(p, dest)) return;
  const int lane = threadIdx.x % 32, token = dest.token, h = dest.h, page = dest.page;
  const std::int64_t slot = dest.slot;
  const std::int64_t e = p.elem_bytes;
  const int words = p.head_dim * p.elem_bytes / static_cast<int>(sizeof(Word));
  for (int i = lane; i < words; i += 32) {
    if (p.k_new != nullptr) {
      const Word* src = reinterpret_cast<const Word*>(p.k_new + (token * p.kn_t + h * p.kn_h) * e);
      Word* dst = reinterpret_cast<Word*>(p.k_pages + (page * p.kp_page + h * p.kp_head + slot * p.kp_slot) * e);
      dst[i] = src[i];
    }
    if (p.v_new != nullptr) {
      const Word* src = reinterpret_cast<const Word*>(p.v_new + (token * p.vn_t + h * p.vn_h) * e);
      Word* dst = reinterpret_cast<Word*>(p.v_pages + (page * p.vp_page + h * p.vp_head + slot * p.vp_slot) * e);
      dst[i] = src[i];
    }
  }
}

// Into e4m3 pools: each element converted to f32, divided by its side's scale (IEEE division, as
// the host rule) and rounded to e4m3 with saturation.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    paged_append_quantized_kernel(const __grid_constant__ PagedAppendParams p) {
  Destination dest;
  if (!find_destination(p, dest)) return;
  const int lane = threadIdx.x % 32, token = dest.token, h = dest.h, page = dest.page;
  const std::int64_t slot = dest.slot;
  for (int d = lane; d < p.head_dim; d += 32) {
    if (p.k_new != nullptr) {
      const float x = cuda_common::load_as_f32(p.k_new, p.k_dtype, token * p.kn_t + h * p.kn_h + d);
      p.k_pages[page * p.kp_page + h * p.kp_head + slot * p.kp_slot + d] =
          __nv_cvt_float_to_fp8(__fdiv_rn(x, p.k_scale), __NV_SATFINITE, __NV_E4M3);
    }
    if (p.v_new != nullptr) {
      const float x = cuda_common::load_as_f32(p.v_new, p.v_dtype, token * p.vn_t + h * p.vn_h + d);
      p.v_pages[page * p.vp_page + h * p.vp_head + slot * p.vp_slot + d] =
          __nv_cvt_float_to_fp8(__fdiv_rn(x, p.v_scale), __NV_SATFINITE, __NV_E4M3);
    }
  }
}

}  // namespace

void paged_append_kv(const PagedCacheSpec& cache, const PagedAppendTensors& t, Stream stream) {
  const char* ctx = "cuda::paged_append_kv";
  validate_paged_append(cache, t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.k_new, "k_new"}, {&t.v_new, "v_new"}, {&t.k_pages, "k_pages"},
                            {&t.v_pages, "v_pages"}, {&t.page_table, "page_table"},
                            {&t.cu_seqlens_new, "cu_seqlens_new"}, {&t.start_positions, "start_positions"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  const bool hnd = cache.layout == PageLayout::kHND;
  const TensorView& row = t.k_new.empty() ? t.v_new : t.k_new;
  PagedAppendParams p;
  p.k_new = t.k_new.empty() ? nullptr : static_cast<const unsigned char*>(t.k_new.data);
  p.v_new = t.v_new.empty() ? nullptr : static_cast<const unsigned char*>(t.v_new.data);
  p.k_pages = t.k_new.empty() ? nullptr : static_cast<unsigned char*>(t.k_pages.data);
  p.v_pages = t.v_new.empty() ? nullptr : static_cast<unsigned char*>(t.v_pages.data);
  p.cu = t.cu_seqlens_new.as<const std::int32_t>();
  p.starts = t.start_positions.as<const std::int32_t>();
  p.table = t.page_table.as<const std::int32_t>();
  p.table_b = t.page_table.strides[0];
  p.table_p = t.page_table.strides[1];
  p.batch = static_cast<int>(t.start_positions.shape[0]);
  p.rows = static_cast<int>(row.shape[0]);
  p.kv_heads = static_cast<int>(row.shape[1]);
  p.head_dim = static_cast<int>(row.shape[2]);
  p.elem_bytes = static_cast<int>(dtype_size(row.dtype));
  p.page_size = static_cast<int>(cache.page_size);
  p.num_pages = static_cast<int>(cache.num_pages);
  p.max_pages = static_cast<int>(cache.max_pages_per_seq);
  if (!t.k_new.empty()) {
    p.kn_t = t.k_new.strides[0], p.kn_h = t.k_new.strides[1];
    p.kp_page = t.k_pages.strides[0];
    p.kp_head = hnd ? t.k_pages.strides[1] : t.k_pages.strides[2];
    p.kp_slot = hnd ? t.k_pages.strides[2] : t.k_pages.strides[1];
  }
  if (!t.v_new.empty()) {
    p.vn_t = t.v_new.strides[0], p.vn_h = t.v_new.strides[1];
    p.vp_page = t.v_pages.strides[0];
    p.vp_head = hnd ? t.v_pages.strides[1] : t.v_pages.strides[2];
    p.vp_slot = hnd ? t.v_pages.strides[2] : t.v_pages.strides[1];
  }
  if (!(cache.num_pages < (1ll << 31) && static_cast<std::int64_t>(p.rows) * p.kv_heads < (1ll << 31)))
    fail(ctx, "the pool or the new rows exceed the kernel's 32-bit indices", "append in smaller calls");
  const std::int64_t items = static_cast<std::int64_t>(p.rows) * p.kv_heads;
  if (items == 0 || p.batch == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (is_fp8((t.k_new.empty() ? t.v_pages : t.k_pages).dtype)) {  // both pools share the dtype (validated)
    p.k_dtype = t.k_new.dtype, p.v_dtype = t.v_new.dtype;
    p.k_scale = t.kv_scales.k, p.v_scale = t.kv_scales.v;
    paged_append_quantized_kernel<<<blocks, 32 * kWarpsPerBlock, 0, s>>>(p);
    cuda_common::check_launch(ctx, "paged_append_quantized_kernel");
    return;
  }
  const bool wide = cuda_common::aligned_rows(t.k_new, 16) && cuda_common::aligned_rows(t.v_new, 16) &&
                    (t.k_new.empty() || cuda_common::aligned_rows(t.k_pages, 16)) && (t.v_new.empty() || cuda_common::aligned_rows(t.v_pages, 16)) &&
                    (p.head_dim * p.elem_bytes) % 16 == 0;
  const bool even = (p.head_dim * p.elem_bytes) % 2 == 0;
  if (wide) {
    paged_append_kernel<uint4><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(p);
  } else if (even) {
    paged_append_kernel<unsigned short><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(p);
  } else {
    paged_append_kernel<unsigned char><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(p);
  }
  cuda_common::check_launch(ctx, "paged_append_kernel");
}

}  // namespace attnkit::cuda
