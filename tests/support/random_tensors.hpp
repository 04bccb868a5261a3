// Test support: owned host buffers of any dtype filled with fresh random values, poisoning,
// and comparison against the float64 golden with the tolerances of DESIGN.md.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::testing {

// A fresh seed per call unless ATTNKIT_TEST_SEED is set (printed on failure for replay).
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("ATTNKIT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Host buffer owning its bytes, viewable as a contiguous tensor.
struct HostTensor {
  std::vector<std::uint8_t> bytes;
  TensorView view;

  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<std::int64_t> shape) {
    view = TensorView::contiguous(nullptr, dtype, shape);
    bytes.resize(static_cast<std::size_t>(view.numel()) * dtype_size(dtype));
    view.data = bytes.data();
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&& o) noexcept { *this = std::move(o); }
  HostTensor& operator=(HostTensor&& o) noexcept {
    bytes = std::move(o.bytes);
    view = o.view;
    view.data = bytes.data();
    return *this;
  }

  std::size_t numel() const { return static_cast<std::size_t>(view.numel()); }
  float get(std::size_t i) const { return load_as_float(bytes.data(), view.dtype, i); }
  void set(std::size_t i, float x) { store_from_float(bytes.data(), view.dtype, i, x); }
  std::int32_t* i32() { return reinterpret_cast<std::int32_t*>(bytes.data()); }
};

inline void fill_normal(HostTensor& t, std::mt19937_64& rng, float stddev = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  for (std::size_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

// e4m3 inputs quantized the way an fp8 pipeline does it: normal draws x, a per-tensor scale
// s = max|x| / 448 (so the largest draw lands on e4m3's largest value), stored bits
// float_to_e4m3_bits(x / s). Returns s, the dequantization scale (real value = stored value * s):
// pass the same bytes and s (PrefillTensors::scales) to the golden and to the backend.
inline float fill_normal_e4m3(HostTensor& t, std::mt19937_64& rng, float stddev = 1.0f, float mean = 0.0f) {
  if (t.view.dtype != DType::kE4M3) throw std::logic_error("fill_normal_e4m3: the tensor is not e4m3");
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> x(t.numel());
  float largest = 0.0f;
  for (float& value : x) {
    value = dist(rng);
    largest = std::max(largest, std::abs(value));
  }
  const float scale = largest > 0.0f ? largest / 448.0f : 1.0f;
  for (std::size_t i = 0; i < x.size(); ++i) t.bytes[i] = float_to_e4m3_bits(x[i] / scale);
  return scale;
}

// Attention-sink logits f32 [heads] (DecodeTensors::sinks): normal(2, 1.5), near a short row's LSE
// so they change the result; head 0 has none (-inf) and head 2 (12) takes most of its rows.
inline HostTensor random_sinks(std::int64_t heads, std::mt19937_64& rng) {
  HostTensor sinks(DType::kF32, {heads});
  fill_normal(sinks, rng, 1.5f, 2.0f);
  if (heads > 0) sinks.set(0, -std::numeric_limits<float>::infinity());
  if (heads > 2) sinks.set(2, 12.0f);
  return sinks;
}

// Poison: NaN in every element, so an element the kernel forgot to write fails the check.
inline void poison(HostTensor& t) {
  for (std::size_t i = 0; i < t.numel(); ++i) t.set(i, std::numeric_limits<float>::quiet_NaN());
}

struct Comparison {
  double max_abs = 0;
  double rel_l2 = 0;
  std::size_t nan_count = 0;
  std::size_t worst_index = 0;
};

// actual (any storage dtype) against the float64 golden.
inline Comparison compare(const HostTensor& actual, const std::vector<double>& golden) {
  Comparison c;
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = actual.get(i);
    if (std::isnan(a) && !std::isnan(golden[i])) {
      ++c.nan_count;
      continue;
    }
    const double d = std::abs(a - golden[i]);
    if (d > c.max_abs) {
      c.max_abs = d;
      c.worst_index = i;
    }
    err2 += d * d;
    ref2 += golden[i] * golden[i];
  }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

inline std::string describe(const Comparison& c) {
  return "max_abs=" + std::to_string(c.max_abs) + " rel_l2=" + std::to_string(c.rel_l2) +
         " nan=" + std::to_string(c.nan_count) + " worst_index=" + std::to_string(c.worst_index);
}

}  // namespace attnkit::testing
