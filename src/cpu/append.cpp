// Seed 000's KV append (K, V, or both in one call) on the CPU.
// Inputs: k_new / v_new [batch, kv_heads, head_dim] in the cache dtype (an e4m3 cache: f32, f16 or
//   bf16, quantized here), caches [batch, kv_heads, max_seq, head_dim], i32 positions[batch].
//   Every position and scale is validated before the first write, so a bad one leaves both caches
//   untouched.
// Parallelism: none; one row per (sequence, KV head). Bound: memory (a few rows).
#include <cstring>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/validate.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {
namespace {

// Row b, h of the new rows and the cache slot it goes to, in elements.
std::int64_t new_row_offset(const TensorView& src, std::int64_t b, std::int64_t h) {
  return b * src.strides[0] + h * src.strides[1];
}
std::int64_t slot_offset(const TensorView& cache, std::int64_t b, std::int64_t h, std::int64_t pos) {
  return b * cache.strides[0] + h * cache.strides[1] + pos * cache.strides[2];
}

// Same dtype on both sides (validated): a byte copy is exact.
void copy_rows(const TensorView& src, const TensorView& cache, const TensorView& positions) {
  const std::int64_t B = cache.shape[0], G = cache.shape[1], D = cache.shape[3];
  const std::size_t elem = dtype_size(cache.dtype), row_bytes = static_cast<std::size_t>(D) * elem;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pos = detail::index_at(positions, b);
    for (std::int64_t h = 0; h < G; ++h) {
      const auto* from = static_cast<const std::uint8_t*>(src.data) + new_row_offset(src, b, h) * elem;
      auto* to = static_cast<std::uint8_t*>(cache.data) + slot_offset(cache, b, h, pos) * elem;
      std::memmove(to, from, row_bytes);
    }
  }
}

// An e4m3 cache stores e4m3(x / scale) of each new element x (as f32): the IEEE quotient, then
// round to nearest even saturating at +-448 (float_to_e4m3_bits), as AppendTensors states.
void quantize_rows(const TensorView& src, const TensorView& cache, const TensorView& positions, float scale) {
  const std::int64_t B = cache.shape[0], G = cache.shape[1], D = cache.shape[3];
  std::vector<float> row(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pos = detail::index_at(positions, b);
    for (std::int64_t h = 0; h < G; ++h) {
      detail::load_row(src.data, src.dtype, new_row_offset(src, b, h), D, row.data());
      auto* to = static_cast<std::uint8_t*>(cache.data) + slot_offset(cache, b, h, pos);
      for (std::int64_t d = 0; d < D; ++d) to[d] = float_to_e4m3_bits(row[static_cast<std::size_t>(d)] / scale);
    }
  }
}

void append_one(const TensorView& src, const TensorView& cache, const TensorView& positions, float scale) {
  if (is_fp8(cache.dtype)) {
    quantize_rows(src, cache, positions, scale);
  } else {
    copy_rows(src, cache, positions);
  }
}

}  // namespace

void append_kv(const AppendTensors& tensors) {
  validate_append(tensors, DeviceKind::kCpu);
  const KvScales& scales = tensors.kv_scales;
  if (!tensors.k_new.empty()) append_one(tensors.k_new, tensors.k_cache, tensors.positions, scales.k);
  if (!tensors.v_new.empty()) append_one(tensors.v_new, tensors.v_cache, tensors.positions, scales.v);
}

}  // namespace attnkit::cpu
