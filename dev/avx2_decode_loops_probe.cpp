// What the group-4 decode's two loops can reach on an AVX2 core (16 ymm registers), cache-resident:
// the core clock (a dependent integer add chain), the FMA rate against the number of independent
// accumulator chains, and per key (4 heads, head_dim 128, bf16 K/V as even / odd columns, 16-key
// tiles) variants of Q K^T (2 keys x 4 heads = 8 accumulators, the library's shape) and of P V
// (4 heads x 2 vectors = 8 accumulators per pass). Each variant takes away one cost (the widening,
// q's loads, the accumulator chains) to see which one holds the loop, and two 12-chain shapes (key
// triples for Q K^T, head pairs x 6 vectors for P V). docs/perf-notes.md, CPU rounds 26 and 28,
// have the Zen 2 figures.
//   g++ -O2 -mavx2 -mfma -o /tmp/avx2_loops dev/avx2_decode_loops_probe.cpp && taskset -c 1 /tmp/avx2_loops
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using V = __m256;
using Clock = std::chrono::steady_clock;
constexpr int kD = 128, kTile = 16, kHeads = 4;

double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

// GHz from 4 dependent adds per iteration (one cycle each).
double clock_ghz() {
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const long n = 400'000'000;
    long x = 0;
    const auto t0 = Clock::now();
    asm volatile(
        "mov %1, %%rcx\n"
        "1:\n"
        "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"
        "sub $4, %%rcx\n jnz 1b\n"
        : "+r"(x)
        : "r"(n)
        : "rcx");
    best = std::max(best, n / ns_since(t0));
  }
  return best;
}

// FMAs per cycle with K independent chains (latency x throughput = the chains needed).
template <int K>
double fma_per_cycle(double ghz) {
  V a[K];
  V x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(0.0001f);
  for (int i = 0; i < K; ++i) a[i] = _mm256_set1_ps(0.5f + 0.01f * i);
  const long n = 50'000'000;
  const auto t0 = Clock::now();
  for (long it = 0; it < n; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < K; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
    asm volatile("" : "+x"(x));
  }
  const double ns = ns_since(t0);
  float sink = 0;
  for (int i = 0; i < K; ++i) sink += a[i][0];
  asm volatile("" ::"x"(sink));
  return n * K / (ns * ghz);
}

// Even / odd columns of 16 bf16 (one 32-byte load, a shift and an and), as VecAvx2::load_bf16_even_odd.
inline void even_odd(__m256i x, V& even, V& odd) {
  even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

enum class Qk { kLibrary, kNoWiden, kQInRegisters, kMulThenAdd };

// Scores of one 16-key tile, two keys at a time: 8 accumulators, each 16 FMAs deep per key pair.
template <Qk kMode>
__attribute__((noinline)) void scores(const std::uint16_t* k, const float* q, float* s) {
  for (int j = 0; j < kTile; j += 2) {
    V acc[8];
    for (V& a : acc) a = _mm256_setzero_ps();
#pragma GCC unroll 1
    for (int c = 0; c < kD; c += 16) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + j * kD + c));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + (j + 1) * kD + c));
      V e0, o0, e1, o1;
      if constexpr (kMode == Qk::kNoWiden) {
        e0 = o0 = _mm256_castsi256_ps(x0);
        e1 = o1 = _mm256_castsi256_ps(x1);
      } else {
        even_odd(x0, e0, o0);
        even_odd(x1, e1, o1);
      }
#pragma GCC unroll 4
      for (int g = 0; g < kHeads; ++g) {
        const bool regs = kMode == Qk::kQInRegisters;
        const V qe = regs ? _mm256_set1_ps(0.5f + g) : _mm256_load_ps(q + g * kD + c);
        const V qo = regs ? _mm256_set1_ps(0.25f + g) : _mm256_load_ps(q + g * kD + c + 8);
        if constexpr (kMode == Qk::kMulThenAdd) {  // the chain through acc is one add per chunk
          acc[g] = _mm256_add_ps(acc[g], _mm256_fmadd_ps(qo, o0, _mm256_mul_ps(qe, e0)));
          acc[4 + g] = _mm256_add_ps(acc[4 + g], _mm256_fmadd_ps(qo, o1, _mm256_mul_ps(qe, e1)));
        } else {
          acc[g] = _mm256_fmadd_ps(qo, o0, _mm256_fmadd_ps(qe, e0, acc[g]));
          acc[4 + g] = _mm256_fmadd_ps(qo, o1, _mm256_fmadd_ps(qe, e1, acc[4 + g]));
        }
      }
    }
    // A cheap fold instead of the library's transpose (measured at ~3 cycles per key apart).
    const V x = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
                              _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]), _mm256_add_ps(acc[6], acc[7])));
    _mm256_store_ps(s + j * 4, x);
  }
}

// Three keys x 4 heads = 12 accumulators (12 chains: both FMA pipes busy), each chunk's even then
// odd columns, scores stored per key ([key][head], 4 floats). kTriples triples per call (18 keys
// for a 16-key tile: the last triple reads two rows of the next tile, as a clamped tail would).
template <bool kShiftOdd>
__attribute__((noinline)) void scores_triples(const std::uint16_t* k, const float* q, float* s) {
  alignas(32) static const std::uint32_t kMask[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                     0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};
  const __m256i& mask = *reinterpret_cast<const __m256i*>(kMask);
#pragma GCC unroll 1
  for (int j = 0; j < kTile; j += 3) {
    const std::uint16_t* k0 = k + j * kD;
    V a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0, c0 = a0, c1 = a0,
      c2 = a0, c3 = a0;
#pragma GCC unroll 1
    for (int c = 0; c < kD; c += 16) {
      const __m256i* p0 = reinterpret_cast<const __m256i*>(k0 + c);
      const __m256i* p1 = reinterpret_cast<const __m256i*>(k0 + kD + c);
      const __m256i* p2 = reinterpret_cast<const __m256i*>(k0 + 2 * kD + c);
      V x0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(p0), 16));
      V x1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(p1), 16));
      V x2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(p2), 16));
      V qv = _mm256_load_ps(q + c);
      a0 = _mm256_fmadd_ps(qv, x0, a0), b0 = _mm256_fmadd_ps(qv, x1, b0), c0 = _mm256_fmadd_ps(qv, x2, c0);
      qv = _mm256_load_ps(q + kD + c);
      a1 = _mm256_fmadd_ps(qv, x0, a1), b1 = _mm256_fmadd_ps(qv, x1, b1), c1 = _mm256_fmadd_ps(qv, x2, c1);
      qv = _mm256_load_ps(q + 2 * kD + c);
      a2 = _mm256_fmadd_ps(qv, x0, a2), b2 = _mm256_fmadd_ps(qv, x1, b2), c2 = _mm256_fmadd_ps(qv, x2, c2);
      qv = _mm256_load_ps(q + 3 * kD + c);
      a3 = _mm256_fmadd_ps(qv, x0, a3), b3 = _mm256_fmadd_ps(qv, x1, b3), c3 = _mm256_fmadd_ps(qv, x2, c3);
      if constexpr (kShiftOdd) {
        x0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(_mm256_loadu_si256(p0), 16), 16));
        x1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(_mm256_loadu_si256(p1), 16), 16));
        x2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(_mm256_loadu_si256(p2), 16), 16));
      } else {  // the mask as a memory operand (GCC would keep it in a 17th register)
        __m256i y0 = _mm256_loadu_si256(p0), y1 = _mm256_loadu_si256(p1), y2 = _mm256_loadu_si256(p2);
        asm("vpand %1, %0, %0" : "+x"(y0) : "m"(mask));
        asm("vpand %1, %0, %0" : "+x"(y1) : "m"(mask));
        asm("vpand %1, %0, %0" : "+x"(y2) : "m"(mask));
        x0 = _mm256_castsi256_ps(y0), x1 = _mm256_castsi256_ps(y1), x2 = _mm256_castsi256_ps(y2);
      }
      qv = _mm256_load_ps(q + c + 8);
      a0 = _mm256_fmadd_ps(qv, x0, a0), b0 = _mm256_fmadd_ps(qv, x1, b0), c0 = _mm256_fmadd_ps(qv, x2, c0);
      qv = _mm256_load_ps(q + kD + c + 8);
      a1 = _mm256_fmadd_ps(qv, x0, a1), b1 = _mm256_fmadd_ps(qv, x1, b1), c1 = _mm256_fmadd_ps(qv, x2, c1);
      qv = _mm256_load_ps(q + 2 * kD + c + 8);
      a2 = _mm256_fmadd_ps(qv, x0, a2), b2 = _mm256_fmadd_ps(qv, x1, b2), c2 = _mm256_fmadd_ps(qv, x2, c2);
      qv = _mm256_load_ps(q + 3 * kD + c + 8);
      a3 = _mm256_fmadd_ps(qv, x0, a3), b3 = _mm256_fmadd_ps(qv, x1, b3), c3 = _mm256_fmadd_ps(qv, x2, c3);
    }
    // Per key: the 4 heads' sums as one 128-bit [head] vector.
    const auto store4 = [](float* out, V h0, V h1, V h2, V h3) {
      const V h = _mm256_hadd_ps(_mm256_hadd_ps(h0, h1), _mm256_hadd_ps(h2, h3));
      _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    };
    store4(s + j * 4, a0, a1, a2, a3);
    store4(s + j * 4 + 4, b0, b1, b2, b3);
    store4(s + j * 4 + 8, c0, c1, c2, c3);
  }
}

enum class Pv { kLibrary, kKeyPairs, kNoVLoads };

// P V with 12 accumulators: 2 heads x 6 vectors (three 16-column chunks) per pass, head pairs in
// two passes (each V chunk widened once per head pair); passes of 3, 3 and 2 chunks over 128 columns.
template <int kChunks>
inline void pv_pass(const std::uint16_t* v, const float* p, float* out, int h, int c0) {
  V a[2][2 * kChunks];
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g)
#pragma GCC unroll 6
    for (int i = 0; i < 2 * kChunks; ++i) a[g][i] = _mm256_load_ps(out + (h + g) * kD + c0 + 8 * i);
#pragma GCC unroll 1
  for (int j = 0; j < kTile; ++j) {
    const V p0 = _mm256_set1_ps(p[j * 4 + h]), p1 = _mm256_set1_ps(p[j * 4 + h + 1]);
#pragma GCC unroll 3
    for (int cc = 0; cc < kChunks; ++cc) {
      V e, o;
      even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * kD + c0 + 16 * cc)), e, o);
      a[0][2 * cc] = _mm256_fmadd_ps(p0, e, a[0][2 * cc]);
      a[0][2 * cc + 1] = _mm256_fmadd_ps(p0, o, a[0][2 * cc + 1]);
      a[1][2 * cc] = _mm256_fmadd_ps(p1, e, a[1][2 * cc]);
      a[1][2 * cc + 1] = _mm256_fmadd_ps(p1, o, a[1][2 * cc + 1]);
    }
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g)
#pragma GCC unroll 6
    for (int i = 0; i < 2 * kChunks; ++i) _mm256_store_ps(out + (h + g) * kD + c0 + 8 * i, a[g][i]);
}
__attribute__((noinline)) void pv_wide(const std::uint16_t* v, const float* p, float* out) {
  for (int h = 0; h < kHeads; h += 2) {
    pv_pass<3>(v, p, out, h, 0);
    pv_pass<3>(v, p, out, h, 48);
    pv_pass<2>(v, p, out, h, 96);
  }
}

// acc[4 heads][head_dim] += P V over one 16-key tile, passes of 2 vectors (16 columns).
template <Pv kMode>
__attribute__((noinline)) void pv(const std::uint16_t* v, const float* p, float* out) {
  V fake_even = _mm256_set1_ps(1.0f), fake_odd = _mm256_set1_ps(2.0f);
  asm volatile("" : "+x"(fake_even), "+x"(fake_odd));
  for (int c0 = 0; c0 < kD; c0 += 16) {
    V a[kHeads][2];
    for (int g = 0; g < kHeads; ++g) {
      a[g][0] = _mm256_load_ps(out + g * kD + c0);
      a[g][1] = _mm256_load_ps(out + g * kD + c0 + 8);
    }
    if constexpr (kMode == Pv::kKeyPairs) {  // mul + fma off the chain, one add on it per key pair
      for (int j = 0; j < kTile; j += 2) {
        V e0, o0, e1, o1;
        even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * kD + c0)), e0, o0);
        even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + (j + 1) * kD + c0)), e1, o1);
#pragma GCC unroll 4
        for (int g = 0; g < kHeads; ++g) {
          const V p0 = _mm256_set1_ps(p[j * 4 + g]), p1 = _mm256_set1_ps(p[j * 4 + 4 + g]);
          a[g][0] = _mm256_add_ps(a[g][0], _mm256_fmadd_ps(p1, e1, _mm256_mul_ps(p0, e0)));
          a[g][1] = _mm256_add_ps(a[g][1], _mm256_fmadd_ps(p1, o1, _mm256_mul_ps(p0, o0)));
        }
      }
    } else {
      for (int j = 0; j < kTile; ++j) {
        V e = fake_even, o = fake_odd;
        if constexpr (kMode == Pv::kLibrary) {
          even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * kD + c0)), e, o);
        }
#pragma GCC unroll 4
        for (int g = 0; g < kHeads; ++g) {
          const V pb = _mm256_set1_ps(p[j * 4 + g]);
          a[g][0] = _mm256_fmadd_ps(pb, e, a[g][0]);
          a[g][1] = _mm256_fmadd_ps(pb, o, a[g][1]);
        }
      }
    }
    for (int g = 0; g < kHeads; ++g) {
      _mm256_store_ps(out + g * kD + c0, a[g][0]);
      _mm256_store_ps(out + g * kD + c0 + 8, a[g][1]);
    }
  }
}

// Best of `passes` over 64 tiles (256 KiB of K or V: L2), in cycles per key.
template <class F>
double cycles_per_key(F f, double ghz) {
  constexpr int kTiles = 64, kPasses = 300;
  double best = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto t0 = Clock::now();
    for (int t = 0; t < kTiles; ++t) f(t);
    best = std::min(best, ns_since(t0));
  }
  return best / (kTiles * kTile) * ghz;
}

}  // namespace

int main() {
  const double ghz = clock_ghz();
  std::printf("clock %.2f GHz\n", ghz);
  std::printf("FMA per cycle: 4 chains %.2f, 8 chains %.2f, 10 chains %.2f, 12 chains %.2f\n", fma_per_cycle<4>(ghz),
              fma_per_cycle<8>(ghz), fma_per_cycle<10>(ghz), fma_per_cycle<12>(ghz));
  std::vector<std::uint16_t> kv(64 * kTile * kD + 2 * kD);
  std::uint32_t r = 1;
  for (auto& x : kv) x = static_cast<std::uint16_t>(0x3f80 + ((r = r * 1664525u + 1013904223u) >> 25));
  alignas(64) static float q[kHeads * kD], s[(kTile + 2) * 4], acc[kHeads * kD];
  std::fill(q, q + kHeads * kD, 0.01f);
  std::fill(s, s + kTile * 4, 0.01f);
  const auto* k = kv.data();
  const int floor_cycles = kHeads * kD / 8 / 2;  // 64 FMAs per key at 2 per cycle
  for (int round = 0; round < 2; ++round) {  // the first round warms the clock and caches
    const double qk[] = {
        cycles_per_key([&](int t) { scores<Qk::kLibrary>(k + t * kTile * kD, q, s); }, ghz),
        cycles_per_key([&](int t) { scores<Qk::kNoWiden>(k + t * kTile * kD, q, s); }, ghz),
        cycles_per_key([&](int t) { scores<Qk::kQInRegisters>(k + t * kTile * kD, q, s); }, ghz),
        cycles_per_key([&](int t) { scores<Qk::kMulThenAdd>(k + t * kTile * kD, q, s); }, ghz)};
    const double pvs[] = {cycles_per_key([&](int t) { pv<Pv::kLibrary>(k + t * kTile * kD, s, acc); }, ghz),
                          cycles_per_key([&](int t) { pv<Pv::kKeyPairs>(k + t * kTile * kD, s, acc); }, ghz),
                          cycles_per_key([&](int t) { pv<Pv::kNoVLoads>(k + t * kTile * kD, s, acc); }, ghz)};
    const double qk3 = cycles_per_key([&](int t) { scores_triples<false>(k + t * kTile * kD, q, s); }, ghz);
    const double qk3s = cycles_per_key([&](int t) { scores_triples<true>(k + t * kTile * kD, q, s); }, ghz);
    const double pvw = cycles_per_key([&](int t) { pv_wide(k + t * kTile * kD, s, acc); }, ghz);
    if (round == 0) continue;
    std::printf("Q K^T key triples (12 accumulators; 18 keys per 16-key tile) and-mask %.1f shift-odd %.1f; P V head pairs x 6 vectors (12 accumulators) %.1f\n", qk3, qk3s,
                pvw);
    std::printf("Q K^T cycles per key (FMA floor %d): library shape %.1f, no widening %.1f, q in registers %.1f, "
                "mul then add %.1f\n",
                floor_cycles, qk[0], qk[1], qk[2], qk[3]);
    std::printf("P V cycles per key (FMA floor %d): library shape %.1f, key pairs (mul, fma, add) %.1f, "
                "no V loads %.1f\n",
                floor_cycles, pvs[0], pvs[1], pvs[2]);
  }
  return acc[0] > 1e30f;
}
