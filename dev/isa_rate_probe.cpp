// Issue rate of vdpbf16ps against vfmadd231ps on one core (12 independent chains each, so latency
// is hidden), and the core clock from a dependent FMA chain (4 cycles per FMA assumed). On the
// AMX Xeon of docs/perf-notes.md CPU round 15: vdpbf16ps 0.53 ns, FMA 0.13 ns, ~3.85 GHz, i.e.
// vdpbf16ps issues at a quarter of the FMA rate there, which decides the decode's bodies.
//   g++ -O2 -mavx512f -mavx512bf16 -o /tmp/isa_rate_probe dev/isa_rate_probe.cpp
//   taskset -c 1 /tmp/isa_rate_probe
#include <immintrin.h>

#include <chrono>
#include <cstdio>

#define ATTNKIT_R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

int main() {
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::fprintf(stderr, "this probe needs AVX512_BF16\n");
    return 2;
  }
#define ATTNKIT_DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * i);
  ATTNKIT_R12(ATTNKIT_DECL)
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f80);
  const __m512 f = _mm512_set1_ps(0.999f), g = _mm512_set1_ps(0.0001f);
  constexpr long kN = 240'000'000;
  using Clock = std::chrono::steady_clock;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    for (long i = 0; i < kN / 12; ++i) {
#define ATTNKIT_DP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
      ATTNKIT_R12(ATTNKIT_DP)
    }
    const auto t1 = Clock::now();
    for (long i = 0; i < kN / 12; ++i) {
#define ATTNKIT_FMA(i) a##i = _mm512_fmadd_ps(a##i, f, g);
      ATTNKIT_R12(ATTNKIT_FMA)
    }
    const auto t2 = Clock::now();
    for (long i = 0; i < kN / 12; ++i) {
      a0 = _mm512_fmadd_ps(a0, f, g);
      a0 = _mm512_fmadd_ps(a0, f, g);
      a0 = _mm512_fmadd_ps(a0, f, g);
    }
    const auto t3 = Clock::now();
    const double dp = std::chrono::duration<double>(t1 - t0).count() / kN * 1e9;
    const double fma = std::chrono::duration<double>(t2 - t1).count() / kN * 1e9;
    const double chain = std::chrono::duration<double>(t3 - t2).count() / (kN / 4) * 1e9;
    float sum = 0;
#define ATTNKIT_SUM(i) sum += _mm512_reduce_add_ps(a##i);
    ATTNKIT_R12(ATTNKIT_SUM)
    std::printf("vdpbf16ps %.3f ns each, vfmadd231ps %.3f ns each, dependent FMA %.3f ns (%.2f GHz at 4 cycles)  [%g]\n",
                dp, fma, chain, 4 / chain, sum);
  }
}
