// What every CUDA benchmark driver needs, once: checked CUDA calls, device buffers, random-looking
// device data (never zeros), and DESIGN.md's timing protocol (warm-up, L2 flushed before every
// repetition, CUDA events, median).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "bench.hpp"

namespace attnkit::bench::device {

// A buffer larger than the H200's L2 (50 MiB), written before every timed repetition.
inline constexpr std::size_t kFlushBytes = std::size_t{256} << 20;
inline constexpr double kWarmupSeconds = 0.25;  // minimum warm-up per timed call (time_events)

inline void check(cudaError_t err, const char* context, const char* what) {
  if (err != cudaSuccess)
    fail(context, std::string(what) + ": " + cudaGetErrorString(err),
         "check that a CUDA device is present and has enough free memory");
}

// Device memory freed on scope exit.
struct Buffer {
  void* data = nullptr;
  explicit Buffer(std::size_t bytes) {
    check(cudaMalloc(&data, std::max<std::size_t>(bytes, 256)), "bench", "cudaMalloc");
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { cudaFree(data); }
};

// Hash-based values in [-2, 2): random-looking data without a host round trip.
template <class T>
__global__ void fill_random_kernel(T* x, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ (seed * 0x9e3779b9u) ^ static_cast<std::uint32_t>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = static_cast<float>(h & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
    if constexpr (std::is_same_v<T, float>) {
      x[i] = u;
    } else if constexpr (std::is_same_v<T, __half>) {
      x[i] = __float2half_rn(u);
    } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      x[i] = __nv_fp8_e4m3(u);
    } else {
      x[i] = __float2bfloat16_rn(u);
    }
  }
}

inline void fill_random(void* data, DType t, std::int64_t n, std::uint32_t seed) {
  switch (t) {
    case DType::kF32: fill_random_kernel<<<2048, 256>>>(static_cast<float*>(data), n, seed); break;
    case DType::kF16: fill_random_kernel<<<2048, 256>>>(static_cast<__half*>(data), n, seed); break;
    case DType::kE4M3: fill_random_kernel<<<2048, 256>>>(static_cast<__nv_fp8_e4m3*>(data), n, seed); break;
    default: fill_random_kernel<<<2048, 256>>>(static_cast<__nv_bfloat16*>(data), n, seed); break;
  }
  check(cudaGetLastError(), "bench", "fill_random");
}

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  int repetitions = 0;
};

// Times `run` (which enqueues its work on `stream`) under the protocol.
template <class Run>
Timing time_events(const Options& options, cudaStream_t stream, void* flush, Run&& run) {
  // Warm-up: at least options.warmup runs and at least kWarmupSeconds of them (each after a flush,
  // as timed), so the first timed run finds the device in its steady state: with five runs (or
  // 50 ms) of warm-up, the paged bench's first variant of a case read up to 11% slower than the
  // same call timed again last; with 0.25 s the two agree (docs/perf-notes.md, "Paged decode round 2").
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    check(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream), "bench", "L2 flush");
    run();
    if (i + 1 < std::max(1, options.warmup)) continue;
    check(cudaStreamSynchronize(stream), "bench", "warm-up");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count() >= kWarmupSeconds) break;
  }
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "bench", "cudaEventCreate");
  check(cudaEventCreate(&stop), "bench", "cudaEventCreate");
  std::vector<double> times;
  const int reps = std::max(1, options.repetitions);
  for (int i = 0; i < reps; ++i) {
    check(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream), "bench", "L2 flush");
    check(cudaEventRecord(start, stream), "bench", "cudaEventRecord");
    run();
    check(cudaEventRecord(stop, stream), "bench", "cudaEventRecord");
    check(cudaEventSynchronize(stop), "bench", "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "bench", "cudaEventElapsedTime");
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return Timing{times[times.size() / 2], times.front(), times.back(), reps};
}

}  // namespace attnkit::bench::device
