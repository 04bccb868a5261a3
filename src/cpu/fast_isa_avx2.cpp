// The fast CPU kernel bodies (fast_body.hpp, and fast_body_rows4.hpp for groups of 4k heads)
// compiled for AVX2 + FMA + F16C.
// Only this translation unit is compiled for that target, and only fast_isa.cpp's runtime
// check decides whether it runs, so the library still starts on CPUs without it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "attnkit/problem.hpp"
#include "cpu/fast_tasks.hpp"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "cpu/simd/vec_avx2.hpp"

#define ATTNKIT_ISA_NS isa_avx2
#define ATTNKIT_VEC ::attnkit::cpu::simd::VecAvx2
#include "cpu/fast_body.hpp"
// The row-block body's steps inlined into its tile loop: called, each of a 16-key tile's nine steps
// ended in a vzeroupper, whose stall took 17% of the P V passes' time on a Zen 2 (CPU round 25).
#define ATTNKIT_ROWS4_STEP __attribute__((always_inline)) inline
#include "cpu/fast_body_rows4.hpp"
#undef ATTNKIT_ROWS4_STEP

namespace attnkit::cpu::detail {

const FastBodies& fast_bodies_avx2() {
  static const FastBodies bodies{"avx2", isa_avx2::W, isa_avx2::decode_scratch_floats_or_rows4, isa_avx2::decode_or_rows4,
                                 isa_avx2::prefill_scratch_floats, isa_avx2::prefill};
  return bodies;
}

}  // namespace attnkit::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
