// Attention sinks folded into finished rows. A sink is one more key of a head's softmax whose
// value is zero, so it joins a row already normalised over its keys, (o, lse), the way merge_states
// joins two partial states: o' = o * w with w = e^lse / (e^lse + e^sink) = sigmoid(lse - sink),
// lse' = log(e^lse + e^sink). A row with no visible key (o = 0, lse = -inf) gets lse' = sink; a head
// without a sink (-inf) is unchanged. Every kernel applies this where it finishes a row (after the
// merge of key splits, never to a split's partial state), in f32. Natural-log units.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_SINK_FN __host__ __device__ __forceinline__
#else
#define ATTNKIT_SINK_FN inline
#endif

namespace attnkit::detail {

struct SinkFold {
  float weight;  // multiplies the row's outputs
  float lse;     // the row's LSE with the sink
};

ATTNKIT_SINK_FN SinkFold fold_sink(float lse, float sink) {
  const float m = fmaxf(lse, sink);
  if (m == -INFINITY) return {0.0f, -INFINITY};  // no key and no sink: the row stays zeros and -inf
  const float a = expf(lse - m), b = expf(sink - m);
  return {a / (a + b), m + logf(a + b)};
}

#if defined(__CUDACC__)
// CUDA kernels read a row's sink in their epilogue, after the key loop: the first threads start the
// (at most four) 128-byte lines of sinks[heads] on their way to L2 at kernel entry, so that read is
// not a DRAM round trip on the call's critical path (it was ~1 us under the bench's L2 flush).
__device__ __forceinline__ void prefetch_sinks(const float* sinks, int heads) {
  if (sinks != nullptr && static_cast<int>(threadIdx.x) * 32 < heads) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(sinks + 32 * threadIdx.x));
  }
}
#endif

// The CPU kernels' form: a finished row of d f32 outputs and its LSE, in place.
inline void fold_sink_into_row(float* row, std::int64_t d, float* lse, float sink) {
  const SinkFold f = fold_sink(*lse, sink);
  for (std::int64_t c = 0; c < d; ++c) row[c] *= f.weight;
  *lse = f.lse;
}

}  // namespace attnkit::detail
