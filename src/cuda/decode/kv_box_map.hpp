// Host: the TMA descriptor through which the decode producer copies K or V tiles (split_kv_decode.cuh).
// A cache is seen as a 4-D tensor (head_dim, rows, kv_heads, outer): rows are a sequence's keys and
// outer its batch index (contiguous caches), or a page's slots and the page (paged pools, either
// layout). A box is one 128-byte row segment, swizzled (decode_geometry.hpp), by box_rows rows;
// coordinates outside the tensor (columns past head_dim, rows past the cache, pages outside the
// pool) read as zeros.
#pragma once
#include <cstdint>

#include "attnkit/dtype.hpp"

namespace attnkit::cuda_decode {

struct KvBoxTensor {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  std::int64_t head_dim = 0, rows = 0, kv_heads = 0, outer = 0;   // extents
  std::int64_t row_stride = 0, head_stride = 0, outer_stride = 0;  // elements
};

// Writes the CUtensorMap (128 opaque bytes) into dst; throws attnkit::Error with ctx and name when
// the TMA unit cannot address the tensor.
void make_kv_box_map(unsigned char (&dst)[128], const KvBoxTensor& kv, int box_rows, const char* ctx, const char* name);

}  // namespace attnkit::cuda_decode
