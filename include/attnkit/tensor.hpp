// A non-owning view of a strided tensor in host or device memory.
// Shapes are logical (the problem fixes their order); strides are in elements and free,
// except that the last dimension (head_dim) must be contiguous for attention tensors.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnkit/dtype.hpp"

namespace attnkit {

enum class DeviceKind : std::uint8_t { kCpu, kCuda };

struct TensorView {
  static constexpr int kMaxRank = 5;

  void* data = nullptr;
  DType dtype = DType::kF32;
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // elements, not bytes

  // Row-major contiguous view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               DeviceKind device = DeviceKind::kCpu, int device_index = 0);

  bool empty() const { return data == nullptr; }  // "not given" for optional tensors
  std::int64_t numel() const;
  bool is_contiguous() const;
  // Largest element offset reachable + 1 (the span the view touches), in elements.
  std::int64_t span_elements() const;
  std::string describe() const;  // "bf16[2, 8, 4096, 128] cuda:0"

  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

}  // namespace attnkit
