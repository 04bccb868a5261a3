// The fast CPU kernel bodies for CPUs with AMX-BF16 tiles (ISA level `amx`): prefill on the tiles
// (fast_body_amx.hpp; f16 and f32 inputs as 2 or 3 bf16 parts per value); bf16 decode of groups of
// 4k heads with its scores on the tiles (fast_body_amx_decode.hpp: a 16-key tile of K against a
// block of 4 heads' q; P V on FMAs, not on the tiles, since four query rows would fill a quarter of
// a tile); the other decodes are the avx512bf16 level's bodies, compiled here too. Only this
// translation unit is compiled for AMX, and fast_isa.cpp's runtime check (cpuid and the kernel's
// permission for the tile state) decides whether it runs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "attnkit/problem.hpp"
#include "cpu/fast_tasks.hpp"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2,amx-tile,amx-bf16"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2,amx-tile,amx-bf16")
// GCC 12 warns about the deliberately undefined pass-through operand inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "cpu/simd/vec_avx512bf16.hpp"

#define ATTNKIT_ISA_NS isa_amx
#define ATTNKIT_VEC ::attnkit::cpu::simd::VecAvx512
#include "cpu/fast_body.hpp"
#include "cpu/fast_body_bf16.hpp"
#include "cpu/fast_body_amx.hpp"
#include "cpu/fast_body_rows4.hpp"
#include "cpu/fast_body_bf16_rows4.hpp"
#include "cpu/fast_body_amx_decode.hpp"

namespace attnkit::cpu::detail {
namespace {

// bf16, f16 and f32 K/V on the tiles as one, two or three bf16 parts per value; q as one part
// (bf16), three beside f32 K/V, else two.
void prefill_amx(const PrefillTask& t) {
  const DType kv = t.k.dtype;
  const bool q_bf16 = t.q.dtype == DType::kBF16;
  if (kv == DType::kBF16) {
    q_bf16 ? isa_amx::prefill_amx_typed<1, 1>(t) : isa_amx::prefill_amx_typed<2, 1>(t);
  } else if (kv == DType::kF16) {
    q_bf16 ? isa_amx::prefill_amx_typed<1, 2>(t) : isa_amx::prefill_amx_typed<2, 2>(t);
  } else {
    q_bf16 ? isa_amx::prefill_amx_typed<1, 3>(t) : isa_amx::prefill_amx_typed<3, 3>(t);
  }
}

}  // namespace

const FastBodies& fast_bodies_amx() {
  static const FastBodies bodies = [] {
    FastBodies b = fast_bodies_avx512bf16();
    b.name = "amx";
    b.decode_scratch_floats = isa_amx::decode_scratch_floats_with_rows4;
    b.decode = isa_amx::decode_amx;
    b.prefill_scratch_floats = isa_amx::prefill_scratch_floats_amx;
    b.prefill = prefill_amx;
    return b;
  }();
  return bodies;
}

}  // namespace attnkit::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
