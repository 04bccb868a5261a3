// The examples' owned host buffer: bytes of any attnkit dtype with a contiguous view, element
// access as float, and fresh normal values.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"

namespace examples {

struct Buffer {
  std::vector<std::uint8_t> bytes;
  attnkit::TensorView view;
  Buffer(attnkit::DType dtype, std::initializer_list<std::int64_t> shape) {
    view = attnkit::TensorView::contiguous(nullptr, dtype, shape);
    bytes.resize(static_cast<std::size_t>(view.numel()) * attnkit::dtype_size(dtype));
    view.data = bytes.data();
  }
  std::size_t size() const { return static_cast<std::size_t>(view.numel()); }
  float get(std::size_t i) const { return attnkit::load_as_float(bytes.data(), view.dtype, i); }
  void set(std::size_t i, float x) { attnkit::store_from_float(bytes.data(), view.dtype, i, x); }
  std::int32_t* i32() { return reinterpret_cast<std::int32_t*>(bytes.data()); }
  void fill(std::mt19937_64& rng) {
    std::normal_distribution<float> dist;
    for (std::size_t i = 0; i < size(); ++i) set(i, dist(rng));
  }
};

}  // namespace examples
