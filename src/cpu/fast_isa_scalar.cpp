// The fast CPU kernel bodies (fast_body.hpp) compiled for no vector extension (the fallback).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "attnkit/problem.hpp"
#include "cpu/fast_tasks.hpp"
#include "cpu/simd/vec_scalar.hpp"

#define ATTNKIT_ISA_NS isa_scalar
#define ATTNKIT_VEC ::attnkit::cpu::simd::VecScalar
#include "cpu/fast_body.hpp"

namespace attnkit::cpu::detail {

const FastBodies& fast_bodies_scalar() {
  static const FastBodies bodies{"scalar", isa_scalar::W, isa_scalar::decode_scratch_floats, isa_scalar::decode,
                                 isa_scalar::prefill_scratch_floats, isa_scalar::prefill};
  return bodies;
}

}  // namespace attnkit::cpu::detail
