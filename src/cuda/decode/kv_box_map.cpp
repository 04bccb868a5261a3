// Host: K/V tile descriptors for the decode producer (kv_box_map.hpp).
#include "cuda/decode/kv_box_map.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/decode/decode_geometry.hpp"

namespace attnkit::cuda_decode {

void make_kv_box_map(unsigned char (&dst)[128], const KvBoxTensor& kv, int box_rows, const char* ctx, const char* name) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(kv.dtype));
  cuda_common::TensorMapSpec spec;
  spec.dtype = kv.dtype == DType::kF32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
               : kv.dtype == DType::kF16  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
               : kv.dtype == DType::kE4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8  // bytes: TMA only moves them
                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  spec.data = kv.data;
  spec.dims = {static_cast<std::uint64_t>(kv.head_dim), static_cast<std::uint64_t>(kv.rows),
               static_cast<std::uint64_t>(kv.kv_heads), static_cast<std::uint64_t>(kv.outer)};
  // A size-1 dimension may carry any stride; TMA wants multiples of 16 bytes below 2^40, so it gets
  // the span of the dimensions before it (its stride is never used).
  const std::array<std::int64_t, 3> extents = {kv.rows, kv.kv_heads, kv.outer};
  const std::array<std::int64_t, 3> strides = {kv.row_stride, kv.head_stride, kv.outer_stride};
  std::int64_t span = kv.head_dim;
  for (std::size_t d = 0; d < 3; ++d) {
    const std::int64_t stride = extents[d] == 1 ? span : strides[d];
    if (!(stride > 0 && stride * elem < (std::int64_t{1} << 40)))
      fail(ctx, std::string(name) + " has a stride the TMA unit cannot use (" + std::to_string(stride) + " elements)",
           "pass a cache whose row, head and outer strides are positive and below 2^40 bytes");
    spec.byte_strides[d] = static_cast<std::uint64_t>(stride * elem);
    span = std::max<std::int64_t>(span, stride * extents[d]);
  }
  // One row segment per box: 128 bytes swizzled (16-bit and e4m3), or padded by 16 bytes whose columns lie
  // past the row and read as zeros (f32), as the engines read it (decode_geometry.hpp).
  const int capacity = head_dim_capacity(kv.head_dim);
  spec.box = {static_cast<std::uint32_t>(segment_pitch(capacity, elem)), static_cast<std::uint32_t>(box_rows), 1, 1};
  spec.swizzle = swizzled_tiles(elem) ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE;
  // 128-byte promotion: with 256 B, ncu counted half the box's L2 sector reads as hits and DRAM ran
  // at 87% of peak (cuDNN: no hits, 94%); with 128 B the large points read 3-5% faster.
  spec.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  const CUtensorMap map = cuda_common::make_tensor_map_4d(spec, ctx, name);
  static_assert(sizeof(map) == sizeof(dst), "DecodeParams holds one CUtensorMap per cache");
  std::memcpy(dst, &map, sizeof(map));
}

}  // namespace attnkit::cuda_decode
