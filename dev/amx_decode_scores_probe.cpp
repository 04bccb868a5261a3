// Q K^T of the group-4 decode (head_dim 128, bf16) on one core: the vector body's form (4 keys x
// 4 heads of vdpbf16ps accumulators, q from L1, one transpose-and-add tree per 4 keys) against the
// tiles' (16 keys x 4 heads per C tile: K rows straight from memory as A, q's column pairs as B;
// one accumulator tile, or two with the halves summed). docs/perf-notes.md, CPU round 15: 10.6-10.8
// ns per key on the vector unit, 4.1 on the tiles with K in L2 (1024 keys), 2.8 with K in L1 (64).
//   g++ -O2 -march=sapphirerapids -o /tmp/amx_decode_scores_probe dev/amx_decode_scores_probe.cpp
//   taskset -c 1 /tmp/amx_decode_scores_probe [keys]
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using V = __m512;
using P = __m512i;
constexpr int kD = 128;

V transpose_sum(const V* x) {
  V l1[8], l2[4], l3[2];
  for (int i = 0; i < 8; ++i) l1[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(l1[2 * i]), b = _mm512_castps_pd(l1[2 * i + 1]);
    l2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i) {
    l3[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], 0x88), _mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], 0xDD));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(l3[0], l3[1], 0x88), _mm512_shuffle_f32x4(l3[0], l3[1], 0xDD));
}

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

alignas(64) std::uint16_t q_rows[4 * kD];
alignas(64) std::uint32_t q_tiles[4][16][4];  // [chunk][column pair][head]

__attribute__((noinline)) void scores_vector(const std::uint16_t* k, int keys, float* s) {
  for (int j = 0; j < keys; j += 4) {
    const std::uint16_t* q = q_rows;
    __asm__ volatile("" : "+r"(q));  // keep q's loads in the loop (as the body's are)
    V acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < kD; c += 32) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        const P kv = _mm512_loadu_si512(k + (j + kk) * kD + c);
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          acc[kk * 4 + g] = _mm512_dpbf16_ps(acc[kk * 4 + g], (__m512bh)_mm512_load_si512(q + g * kD + c), (__m512bh)kv);
        }
      }
    }
    _mm512_storeu_ps(s + j * 4, transpose_sum(acc));
  }
}

__attribute__((noinline)) void scores_tiles(const std::uint16_t* k, int keys, float* s) {
  for (int j = 0; j < keys; j += 16) {
    _tile_zero(0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      _tile_loadd(1, k + j * kD + c * 32, kD * 2);
      _tile_loadd(2, &q_tiles[c][0][0], 16);
      _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, s + j * 4, 16);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int keys = argc > 1 ? std::atoi(argv[1]) / 16 * 16 : 1024;
  if (keys <= 0 || syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
    std::fprintf(stderr, "usage: amx_decode_scores_probe [keys >= 16]; needs AMX and the tile state\n");
    return 2;
  }
  std::vector<std::uint16_t> k(static_cast<std::size_t>(keys) * kD);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint16_t>(0x3f80 + (i % 7) * 3);
  for (int i = 0; i < 4 * kD; ++i) q_rows[i] = static_cast<std::uint16_t>(0x3c00 + i % 5);
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 4; ++n)
        q_tiles[c][r][n] = q_rows[n * kD + c * 32 + 2 * r] | static_cast<std::uint32_t>(q_rows[n * kD + c * 32 + 2 * r + 1]) << 16;
  TileConfig config;
  for (int t = 0; t < 3; ++t) config.rows[t] = 16;
  config.colsb[0] = 16;  // C: 16 keys x 4 heads f32
  config.colsb[1] = 64;  // A: 16 keys x 32 columns
  config.colsb[2] = 16;  // B: 16 column pairs x 4 heads
  _tile_loadconfig(&config);
  std::vector<float> s_tiles(static_cast<std::size_t>(keys) * 4), s_vector(s_tiles.size());
  scores_tiles(k.data(), keys, s_tiles.data());
  scores_vector(k.data(), keys, s_vector.data());
  double worst = 0;
  for (std::size_t i = 0; i < s_tiles.size(); ++i) {
    worst = std::max(worst, std::abs(double(s_tiles[i]) - s_vector[i]) / (std::abs(double(s_vector[i])) + 1e-3));
  }
  std::printf("%d keys (%d KiB of K); tiles against vector, largest relative difference %g\n", keys, keys * kD * 2 / 1024, worst);
  const int reps = std::max(1, 20'000'000 / keys);
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) scores_vector(k.data(), keys, s_vector.data());
    const auto t1 = Clock::now();
    for (int r = 0; r < reps; ++r) scores_tiles(k.data(), keys, s_tiles.data());
    const auto t2 = Clock::now();
    std::printf("ns per key: vdpbf16ps %.2f, tiles %.2f\n", std::chrono::duration<double>(t1 - t0).count() / reps / keys * 1e9,
                std::chrono::duration<double>(t2 - t1).count() / reps / keys * 1e9);
  }
  _tile_release();
}
