// Seed 000's KV append (K, V, or both in one call) on the CPU.
// Inputs: k_new / v_new [batch, kv_heads, head_dim] in the cache dtype, caches
//   [batch, kv_heads, max_seq, head_dim], i32 positions[batch]. Every position is validated
//   before the first write, so a bad position leaves both caches untouched.
// Parallelism: none; one row copy per (sequence, KV head). Bound: memory (a few rows).
#include <cstring>

#include "attnkit/cpu.hpp"
#include "attnkit/validate.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {
namespace {

void append_one(const TensorView& src, const TensorView& cache, const TensorView& positions) {
  const std::int64_t B = cache.shape[0], G = cache.shape[1], D = cache.shape[3];
  const std::size_t row_bytes = static_cast<std::size_t>(D) * dtype_size(cache.dtype);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pos = detail::index_at(positions, b);
    for (std::int64_t h = 0; h < G; ++h) {
      // Same dtype on both sides (validated): a byte copy is exact.
      const auto* from = static_cast<const std::uint8_t*>(src.data) +
                         (b * src.strides[0] + h * src.strides[1]) * dtype_size(src.dtype);
      auto* to = static_cast<std::uint8_t*>(cache.data) +
                 (b * cache.strides[0] + h * cache.strides[1] + pos * cache.strides[2]) * dtype_size(cache.dtype);
      std::memmove(to, from, row_bytes);
    }
  }
}

}  // namespace

void append_kv(const AppendTensors& tensors) {
  validate_append(tensors, DeviceKind::kCpu);
  if (!tensors.k_new.empty()) append_one(tensors.k_new, tensors.k_cache, tensors.positions);
  if (!tensors.v_new.empty()) append_one(tensors.v_new, tensors.v_cache, tensors.positions);
}

}  // namespace attnkit::cpu
