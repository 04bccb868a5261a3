// The decode's memory access pattern without its arithmetic, against plain read streams, on one
// thread (pin it: `taskset -c 1 cpu_pattern_probe`). docs/perf-notes.md, CPU round 9.
//
// Buffers: K and V as the decode reads them ([kv_heads][kv_len][head_dim], one contiguous region
// each), 8 KV heads x 65536 keys x 256-byte rows (bf16 head_dim 128) by default: 128 MiB each,
// far above the LLC. Every variant reads every byte of K and V once per pass (64-byte loads
// XOR-reduced, so nothing is skipped) and reports GB/s = (K + V bytes) / time; the median of the
// passes, variants run in rotation so a noisy moment hits all of them.
//
// Variants (the decode's = "decode": src/cpu/fast_body_bf16_rows4.hpp at head_dim 128, tile 256):
//   seq          K then V, one sequential stream, hardware prefetch only (the read probe's first
//                pattern, bench/cpu_ceilings.cpp)
//   decode       per KV head, per tile of 256 keys: K rows 4 per step with K prefetched 8 rows
//                ahead into L1 and the tile's V rows at the current key into L2; then V in two
//                passes of 128 bytes per row, 2 rows per step, V 8 rows ahead into L1 and the
//                next tile's K into L2 (one row per step and pass)
//   decode-nopf  the same loads, no software prefetch
//   decode-far   the L2 prefetches a whole tile further ahead (V of the next tile, K two ahead)
//   decode-nta   the L2 prefetches as prefetchnta
//   decode-vl1   the V prefetch during K's phase into L1 8 rows ahead (decode-vl1-0: at the key),
//                so V's phase reads L1/L2 (CPU round 13)
//   decode-1pass V in one pass of whole rows (not two 128-byte column passes)
//   decode-bN    decode-nopf's loads with V's two column passes taken per block of N rows (8, 16,
//                32, 64, 256) instead of per tile
//   paged        the decode's pattern over a pool of pages of --page-keys rows (16) dealt at
//                random; -nopf: no software prefetch; -kick: also the first line of the page
//                after next into L2 on entering a page; -far: the L2 prefetches a tile further ahead;
//                -hnd: pages of [heads][page keys][row] (an HND pool), -hnd-tiles: and a tile of every
//                head in turn
//   kv-inter     K row j and V row j of each key read side by side (two streams at once);
//                -pf4 / -pf8 / -pf16: both streams that many rows ahead into L1
//   k-then-v     a KV head's whole K, then its whole V (one stream at a time, hardware prefetch)
//   tile-rows    per tile, K rows then V rows in whole rows, no software prefetch; -l1: each
//                stream 8 rows ahead into L1 (-l1-16, -l1-32: 16 or 32 rows); -l1l2: and 64 rows
//                ahead into L2 (same stream only); -l1-x2 / -x4: each head's keys in 2 or 4 ranges
//                visited a tile at a time in turn (4 or 8 streams in flight); -kick1 / 2 / 4: no
//                per-line prefetch, one prefetch per 4 KiB page that many pages ahead
//   The rows' bytes (--row-bytes 512 for f32), kv_len, heads and the tile are options; --huge asks
//   for transparent huge pages (madvise) on both buffers.
//
// --work N adds N f32 FMAs per 64-byte line loaded (8 independent chains), so the loads share the
// core with arithmetic as in the decode body (8 per line is ~32 cycles per key and KV head at two
// FMAs per cycle; the bf16 body is ~39 cycles cache-resident on Zen 5).
//
// --threads N reads with N threads at once, each its own heads (N divides --heads).
//
// Not part of the build (a development probe, not a ceiling). AVX-512 hosts, or AVX2 ones:
//   g++ -O2 -std=c++20 -mavx512f -mavx512bf16 -pthread -o /tmp/cpu_pattern_probe dev/cpu_pattern_probe.cpp
//   g++ -O2 -std=c++20 -mavx2 -mfma -pthread -o /tmp/cpu_pattern_probe dev/cpu_pattern_probe.cpp
//   taskset -c 1 /tmp/cpu_pattern_probe --reps 11 --work 8
//   /tmp/cpu_pattern_probe --row-bytes 512 --huge --threads 2 --only seq,decode,tile-rows,kv-inter
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Shape {
  std::int64_t heads = 8, keys = 65536, row = 256, tile = 256;
};

// One 64-byte line as the host's vectors: one zmm where the probe is built with AVX-512 (-mavx512f
// -mavx512bf16), else two ymm (-mavx2 -mfma; the Zen 2 hosts, CPU round 32).
#ifdef __AVX512F__
using Acc = __m512i;
using Fv = __m512;
inline Acc acc_zero() { return _mm512_setzero_si512(); }
inline void acc_line(Acc& acc, const char* p) { acc = _mm512_xor_si512(acc, _mm512_load_si512(p)); }
inline Fv fv_set1(float x) { return _mm512_set1_ps(x); }
inline Fv fv_fma(Fv a, Fv b, Fv c) { return _mm512_fmadd_ps(a, b, c); }
inline Fv fv_add(Fv a, Fv b) { return _mm512_add_ps(a, b); }
inline std::uint64_t fold(Acc acc, Fv sum) {
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_xor_si512(acc, _mm512_castps_si512(sum)));
  return lanes[0] ^ lanes[3] ^ lanes[7];
}
#else
using Acc = __m256i;
using Fv = __m256;
inline Acc acc_zero() { return _mm256_setzero_si256(); }
inline void acc_line(Acc& acc, const char* p) {
  acc = _mm256_xor_si256(acc, _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)),
                                                 _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32))));
}
inline Fv fv_set1(float x) { return _mm256_set1_ps(x); }
inline Fv fv_fma(Fv a, Fv b, Fv c) { return _mm256_fmadd_ps(a, b, c); }
inline Fv fv_add(Fv a, Fv b) { return _mm256_add_ps(a, b); }
inline std::uint64_t fold(Acc acc, Fv sum) {
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_xor_si256(acc, _mm256_castps_si256(sum)));
  return lanes[0] ^ lanes[3];
}
#endif

// Arithmetic beside the loads: kWorkChains independent FMA chains, g_work FMAs per 64-byte line
// loaded (the decode body's throughput-bound work: ~39 cycles per key and KV head on Zen 5 is
// ~10 FMA slots per line at 2 per cycle). 0: loads only.
int g_work = 0;
constexpr int kWorkChains = 8;
// --dep (AVX-512 BF16 builds): the work consumes the loaded line (vdpbf16ps of the line with
// itself into the chains, as the decode's dots consume K and V), so it waits for the load in the
// scheduler; without it the work is independent of the loads (FMAs on constants).
bool g_dep = false;

struct Work {
  Fv f[kWorkChains];
  Work() {
    for (int c = 0; c < kWorkChains; ++c) f[c] = fv_set1(0.5f + 0.01f * c);
  }
  std::uint64_t done(Acc acc) const {
    Fv sum = f[0];
    for (int c = 1; c < kWorkChains; ++c) sum = fv_add(sum, f[c]);
    return fold(acc, sum);
  }
};

__attribute__((always_inline)) inline void load_row(Acc& acc, Work& work, const char* p, std::int64_t bytes) {
  const Fv a = fv_set1(0.9999f), k = fv_set1(0.0001f);
  for (std::int64_t b = 0; b < bytes; b += 64) {
    acc_line(acc, p + b);
#ifdef __AVX512BF16__
    if (g_dep) {
      const __m512i line = _mm512_load_si512(p + b);
      for (int w = 0; w < g_work; w += kWorkChains)
#pragma GCC unroll 8
        for (int c = 0; c < kWorkChains; ++c) work.f[c] = _mm512_dpbf16_ps(work.f[c], (__m512bh)line, (__m512bh)line);
      continue;
    }
#endif
    for (int w = 0; w < g_work; w += kWorkChains)
#pragma GCC unroll 8
      for (int c = 0; c < kWorkChains; ++c) work.f[c] = fv_fma(work.f[c], a, k);
  }
}

template <int kHint>
inline void prefetch_rows(const char* p, std::int64_t rows, std::int64_t row, std::int64_t bytes, const char* end) {
  for (std::int64_t r = 0; r < rows; ++r, p += row) {
    if (p >= end) return;
    for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, static_cast<_mm_hint>(kHint));
  }
}

// `rows` rows of `bytes` from p (a step's rows, inside one page).
template <int kHint>
inline void prefetch_lines(const char* p, std::int64_t rows, std::int64_t row, std::int64_t bytes) {
  for (std::int64_t r = 0; r < rows; ++r, p += row) {
    for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, static_cast<_mm_hint>(kHint));
  }
}

// The decode's pattern. l2_ahead: tiles between the L2 prefetch and its use (0: as the decode);
// kL2Hint: _MM_HINT_T1 as the decode, _MM_HINT_NTA for the variant; passes: V column passes.
template <int kL2Hint>
std::uint64_t decode_pattern(const char* k, const char* v, const Shape& s,
                                                                 bool prefetch, int l2_ahead, int passes,
                                                                 std::int64_t v_lead = 0) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, head_bytes = s.keys * row, pass_bytes = row / passes;
  constexpr std::int64_t kL1Rows = 8;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const char* kh = k + h * head_bytes;
    const char* vh = v + h * head_bytes;
    const char* kend = kh + head_bytes;
    const char* vend = vh + head_bytes;
    for (std::int64_t j0 = 0; j0 < s.keys; j0 += s.tile) {
      const std::int64_t n = std::min(s.tile, s.keys - j0);
      const std::int64_t ahead = l2_ahead * s.tile;
      for (std::int64_t j = 0; j < n; j += 4) {
        const char* kr = kh + (j0 + j) * row;
        if (prefetch) {
          prefetch_rows<_MM_HINT_T0>(kr + kL1Rows * row, 4, row, row, kend);
          prefetch_rows<kL2Hint>(vh + (j0 + j + ahead + v_lead) * row, 4, row, row, vend);
        }
        for (int r = 0; r < 4; ++r) load_row(acc, work, kr + r * row, row);
      }
      for (int pass = 0; pass < passes; ++pass) {
        const std::int64_t from = pass * pass_bytes;
        // The next tile's K rows, this pass's share, one row per step (n / 2 steps per pass).
        std::int64_t next = j0 + n + ahead + pass * n / passes;
        for (std::int64_t j = 0; j < n; j += 2) {
          const char* vr = vh + (j0 + j) * row + from;
          if (prefetch) {
            prefetch_rows<_MM_HINT_T0>(vr + kL1Rows * row, 2, row, pass_bytes, vend);
            // n / passes rows of the next tile per pass over n / 2 steps: passes == 2 -> 1 per step.
            const std::int64_t per = passes == 1 ? 2 : 1;
            prefetch_rows<kL2Hint>(kh + next * row, per, row, row, kend);
            next += per;
          }
          load_row(acc, work, vr, pass_bytes);
          load_row(acc, work, vr + row, pass_bytes);
        }
      }
    }
  }
  return work.done(acc);
}

// The decode's pattern (decode_pattern's loads and prefetches, two V passes) over a paged pool:
// each head's keys in pages of g_page_keys rows, the pages of a thread's heads dealt at random over
// its region (g_pages: a permutation of the region's pages; page i of head h is
// g_pages[h * pages_per_head + i]), so every page run of page_keys x row bytes starts somewhere new
// ("Paged decode on the CPU" rounds). kick: also touch the first line of the page after the next
// one into L2 when a step enters a new page, on top of the row-wise prefetches.
std::int64_t g_page_keys = 16;
std::vector<std::int64_t> g_pages, g_hnd_pages;  // g_hnd_pages: the HND pool's kv_len / page_keys pages
int g_kick_pages = 2, g_kick_lines = 1;
double g_fast = 0;  // --fast: the first variant's rate (GB/s) from which a rotation counts as fast  // paged-kick: that many lines of the page that many ahead

std::uint64_t paged_pattern(const char* k, const char* v, const Shape& s, bool prefetch, bool kick, int l2_ahead = 0,
                            bool hnd = false, bool heads_inner = false) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, pk = g_page_keys, per_head = s.keys / pk, run = pk * row, pass_bytes = row / 2;
  const int shift = __builtin_ctzll(static_cast<unsigned long long>(pk));  // pk: a power of two >= 4
  constexpr std::int64_t kL1Rows = 8;
  // hnd: pages of [heads][pk][row] (the thread's heads side by side in a page, as an HND pool),
  // the sequence's pages g_pages[0, per_head); else each head's own pages of [pk][row].
  // heads_inner: a tile of every head before the next tile (else a head's whole key range first).
  const std::int64_t tiles = (s.keys + s.tile - 1) / s.tile;
  for (std::int64_t outer = 0; outer < (heads_inner ? tiles : s.heads); ++outer)
  for (std::int64_t inner = 0; inner < (heads_inner ? s.heads : tiles); ++inner) {
    const std::int64_t h = heads_inner ? inner : outer, j0 = (heads_inner ? outer : inner) * s.tile;
    const std::int64_t* pages = hnd ? g_hnd_pages.data() : g_pages.data() + h * per_head;
    const std::int64_t page_bytes = hnd ? s.heads * run : run, head_at = hnd ? h * run : 0;
    // Steps of 2 or 4 rows never cross a page (pk >= 4, steps aligned), so one lookup per step.
    auto at = [&](const char* base, std::int64_t j) { return base + pages[j >> shift] * page_bytes + head_at + (j & (pk - 1)) * row; };
    const std::int64_t ahead = l2_ahead * s.tile;
    {
      const std::int64_t n = std::min(s.tile, s.keys - j0);
      for (std::int64_t j = 0; j < n; j += 4) {
        const std::int64_t key = j0 + j;
        if (prefetch) {
          if (key + kL1Rows < s.keys) prefetch_lines<_MM_HINT_T0>(at(k, key + kL1Rows), 4, row, row);
          if (key + ahead < s.keys) prefetch_lines<_MM_HINT_T1>(at(v, key + ahead), 4, row, row);
          if (kick && (key & (pk - 1)) == 0 && key + g_kick_pages * pk < s.keys) {
            const char* p = at(k, key + g_kick_pages * pk);
            for (int l = 0; l < g_kick_lines; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T1);
          }
        }
        const char* kr = at(k, key);
        for (int r = 0; r < 4; ++r) load_row(acc, work, kr + r * row, row);
      }
      for (int pass = 0; pass < 2; ++pass) {
        const std::int64_t from = pass * pass_bytes;
        std::int64_t next = j0 + n + ahead + pass * n / 2;
        for (std::int64_t j = 0; j < n; j += 2) {
          const std::int64_t key = j0 + j;
          if (prefetch) {
            if (key + kL1Rows < s.keys) prefetch_lines<_MM_HINT_T0>(at(v, key + kL1Rows) + from, 2, row, pass_bytes);
            if (next < s.keys) prefetch_lines<_MM_HINT_T1>(at(k, next), 1, row, row);
            next += 1;
            if (kick && (key & (pk - 1)) == 0 && key + g_kick_pages * pk < s.keys) {
              const char* p = at(v, key + g_kick_pages * pk) + from;
              for (int l = 0; l < g_kick_lines; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T1);
            }
          }
          const char* vr = at(v, key) + from;
          load_row(acc, work, vr, pass_bytes);
          load_row(acc, work, vr + row, pass_bytes);
        }
      }
    }
  }
  return work.done(acc);
}

// decode-nopf's loads with V's two column passes taken per block of `block` rows (pass 1 then pass
// 2 over the same rows) instead of per tile: the second half of each row follows its first within
// block x row bytes (CPU round 32).
std::uint64_t decode_blocked_passes(const char* k, const char* v, const Shape& s, std::int64_t block) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, head_bytes = s.keys * row, half = row / 2;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const char* kh = k + h * head_bytes;
    const char* vh = v + h * head_bytes;
    for (std::int64_t j0 = 0; j0 < s.keys; j0 += s.tile) {
      const std::int64_t n = std::min(s.tile, s.keys - j0);
      for (std::int64_t j = 0; j < n; ++j) load_row(acc, work, kh + (j0 + j) * row, row);
      for (std::int64_t b = 0; b < n; b += block) {
        for (std::int64_t from = 0; from < row; from += half) {
          for (std::int64_t j = b; j < std::min(n, b + block); ++j) load_row(acc, work, vh + (j0 + j) * row + from, half);
        }
      }
    }
  }
  return work.done(acc);
}

// Per tile: K rows, then V rows, whole rows, each stream prefetched ahead of itself only: `l1`
// rows into L1, `l2` rows into L2 (0: none). No prefetch across the K/V phases (CPU round 12).
// kick_pages > 0: instead one prefetch per 4 KiB page, the first line of the page that many ahead
// when a step's rows reach a page boundary (hardware prefetchers stop at page boundaries and relearn
// each page; one early touch restarts them without a software prefetch per line, CPU round 32).
std::uint64_t tile_rows(const char* k, const char* v, const Shape& s, int l1, int l2, int kick_pages = 0) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, head_bytes = s.keys * row, step = 4 * row, kick = kick_pages * 4096ll;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    for (std::int64_t j0 = 0; j0 < s.keys; j0 += s.tile) {
      const std::int64_t n = std::min(s.tile, s.keys - j0);
      for (const char* base : {k + h * head_bytes, v + h * head_bytes}) {
        const char* end = base + head_bytes;
        for (std::int64_t j = 0; j < n; j += 4) {
          const char* r0 = base + (j0 + j) * row;
          if (l1) prefetch_rows<_MM_HINT_T0>(r0 + l1 * row, 4, row, row, end);
          if (l2) prefetch_rows<_MM_HINT_T1>(r0 + l2 * row, 4, row, row, end);
          if (kick) {
            const auto a = reinterpret_cast<std::uintptr_t>(r0);
            for (std::uintptr_t b = (a + 4095) & ~std::uintptr_t{4095}; b < a + step; b += 4096) {
              if (reinterpret_cast<const char*>(b) + kick < end) _mm_prefetch(reinterpret_cast<const char*>(b) + kick, _MM_HINT_T0);
            }
          }
          for (int r = 0; r < 4; ++r) load_row(acc, work, r0 + r * row, row);
        }
      }
    }
  }
  return work.done(acc);
}

// tile_rows's pattern (`l1` rows ahead into L1) over `lanes` contiguous key ranges of each head,
// visited a tile at a time in turn: 2 x lanes streams in flight instead of 2 (CPU round 15).
std::uint64_t tile_rows_lanes(const char* k, const char* v, const Shape& s, int l1,
                                                                  int lanes) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, head_bytes = s.keys * row, span = s.keys / lanes;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    for (std::int64_t j0 = 0; j0 < span; j0 += s.tile) {
      const std::int64_t n = std::min(s.tile, span - j0);
      for (int lane = 0; lane < lanes; ++lane) {
        for (const char* base : {k + h * head_bytes, v + h * head_bytes}) {
          const char* end = base + (lane + 1) * span * row;
          for (std::int64_t j = 0; j < n; j += 4) {
            const char* r0 = base + (lane * span + j0 + j) * row;
            if (l1) prefetch_rows<_MM_HINT_T0>(r0 + l1 * row, 4, row, row, end);
            for (int r = 0; r < 4; ++r) load_row(acc, work, r0 + r * row, row);
          }
        }
      }
    }
  }
  return work.done(acc);
}

std::uint64_t sequential(const char* p, std::int64_t bytes) {
  Acc acc = acc_zero();
  Work work;
  for (std::int64_t i = 0; i < bytes; i += 256) load_row(acc, work, p + i, 256);
  return work.done(acc);
}

// K row j and V row j per step, both streams at once (hardware prefetch, plus software prefetch
// `ahead` rows ahead into L1 when ahead > 0).
std::uint64_t kv_interleaved(const char* k, const char* v, const Shape& s,
                                                                 std::int64_t ahead) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t head_bytes = s.keys * s.row;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const char* kh = k + h * head_bytes;
    const char* vh = v + h * head_bytes;
    for (std::int64_t j = 0; j < s.keys; ++j) {
      if (ahead > 0 && j + ahead < s.keys) {
        prefetch_rows<_MM_HINT_T0>(kh + (j + ahead) * s.row, 1, s.row, s.row, kh + head_bytes);
        prefetch_rows<_MM_HINT_T0>(vh + (j + ahead) * s.row, 1, s.row, s.row, vh + head_bytes);
      }
      load_row(acc, work, kh + j * s.row, s.row);
      load_row(acc, work, vh + j * s.row, s.row);
    }
  }
  return work.done(acc);
}

// A body that overlaps the two products: per block of `block` keys, line by line across the
// block's rows, K of block b beside V of block b - 1 (Q K^T of one block with P V of the one
// before, the softmax between blocks); no software prefetch (CPU round 32).
std::uint64_t kv_blocks(const char* k, const char* v, const Shape& s, std::int64_t block) {
  Acc acc = acc_zero();
  Work work;
  const std::int64_t row = s.row, head_bytes = s.keys * row;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const char* kh = k + h * head_bytes;
    const char* vh = v + h * head_bytes;
    for (std::int64_t j0 = 0; j0 <= s.keys; j0 += block) {
      const bool has_k = j0 < s.keys, has_v = j0 > 0;
      for (std::int64_t line = 0; line < row; line += 64) {
        for (std::int64_t kk = 0; kk < block; ++kk) {
          if (has_k) load_row(acc, work, kh + (j0 + kk) * row + line, 64);
          if (has_v) load_row(acc, work, vh + (j0 - block + kk) * row + line, 64);
        }
      }
    }
  }
  return work.done(acc);
}

char* allocate(std::int64_t bytes, bool huge) {
  void* p = std::aligned_alloc(2 << 20, static_cast<std::size_t>(bytes));
  if (p == nullptr) {
    std::fprintf(stderr, "cannot allocate %lld MiB\n", static_cast<long long>(bytes >> 20));
    std::exit(1);
  }
  if (huge) madvise(p, static_cast<std::size_t>(bytes), MADV_HUGEPAGE);
  auto* c = static_cast<char*>(p);
  for (std::int64_t i = 0; i < bytes; ++i) c[i] = static_cast<char>(i * 131 + 7);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef __AVX512F__
  if (!__builtin_cpu_supports("avx512f")) {
    std::fprintf(stderr, "this build needs AVX-512F; build with -mavx2 -mfma for this CPU\n");
    return 2;
  }
#endif
  Shape s;
  int passes_per_variant = 15, threads = 1;
  bool huge = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0ll; };
    if (a == "--row-bytes") s.row = next();
    else if (a == "--kv-len") s.keys = next();
    else if (a == "--heads") s.heads = next();
    else if (a == "--tile") s.tile = next();
    else if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--reps") passes_per_variant = static_cast<int>(next());
    else if (a == "--huge") huge = true;
    else if (a == "--work") g_work = static_cast<int>(next());
    else if (a == "--dep") g_dep = true;
    else if (a == "--page-keys") g_page_keys = next();
    else if (a == "--fast") g_fast = static_cast<double>(next());
    else if (a == "--kick") g_kick_pages = static_cast<int>(next()), g_kick_lines = static_cast<int>(next());
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--row-bytes 256] [--kv-len 65536] [--heads 8] [--tile 256] [--reps 15] [--huge] [--work 0] "
                   "[--dep] [--threads 1] [--page-keys 16] [--fast GB/s] [--only name,name]\n",
                   argv[0]);
      return 2;
    }
  }
#ifndef __AVX512BF16__
  if (g_dep) {
    std::fprintf(stderr, "--dep needs a build with -mavx512bf16\n");
    return 2;
  }
#endif
  if (g_dep && !__builtin_cpu_supports("avx512bf16")) {
    std::fprintf(stderr, "--dep needs AVX512_BF16\n");
    return 2;
  }
  if (s.row % 128 != 0 || s.tile % 4 != 0 || s.keys % s.tile != 0 || g_page_keys < 4 || (g_page_keys & (g_page_keys - 1)) != 0 || s.keys % g_page_keys != 0 || threads < 1 || s.heads % threads != 0) {
    std::fprintf(stderr, "Fix: row bytes a multiple of 128, tile a multiple of 4 dividing kv_len, page keys a power of two >= 4 dividing kv_len, threads dividing heads\n");
    return 2;
  }
  const std::int64_t bytes = s.heads * s.keys * s.row;
  char* k = allocate(bytes, huge);
  char* v = allocate(bytes, huge);
  const std::int64_t head_bytes = s.keys * s.row;

  // Each variant reads its slice of heads: with --threads N, thread t takes heads [t H/N, (t+1) H/N).
  using Run = std::function<std::uint64_t(const char* k, const char* v, const Shape& s)>;
  struct Variant {
    const char* name;
    Run run;
  };
  auto seq = [](const char* k, const char* v, const Shape& s) {
    const std::int64_t b = s.heads * s.keys * s.row;
    return sequential(k, b) ^ sequential(v, b);
  };
  std::vector<Variant> all = {
      {"seq", seq},
      {"decode", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T1>(k, v, s, true, 0, 2); }},
      {"decode-nopf", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T1>(k, v, s, false, 0, 2); }},
      {"decode-far", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T1>(k, v, s, true, 1, 2); }},
      {"decode-nta", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_NTA>(k, v, s, true, 0, 2); }},
      {"decode-vl1", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T0>(k, v, s, true, 0, 2, 8); }},
      {"decode-vl1-0", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T0>(k, v, s, true, 0, 2, 0); }},
      {"decode-1pass", [](const char* k, const char* v, const Shape& s) { return decode_pattern<_MM_HINT_T1>(k, v, s, true, 0, 1); }},
      {"decode-b8", [](const char* k, const char* v, const Shape& s) { return decode_blocked_passes(k, v, s, 8); }},
      {"decode-b16", [](const char* k, const char* v, const Shape& s) { return decode_blocked_passes(k, v, s, 16); }},
      {"decode-b32", [](const char* k, const char* v, const Shape& s) { return decode_blocked_passes(k, v, s, 32); }},
      {"decode-b64", [](const char* k, const char* v, const Shape& s) { return decode_blocked_passes(k, v, s, 64); }},
      {"decode-b256", [](const char* k, const char* v, const Shape& s) { return decode_blocked_passes(k, v, s, 256); }},
      {"paged", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, true, false); }},
      {"paged-nopf", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, false, false); }},
      {"paged-far", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, true, false, 1); }},
      {"paged-hnd", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, true, false, 0, true, false); }},
      {"paged-hnd-tiles", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, true, false, 0, true, true); }},
      {"paged-kick", [](const char* k, const char* v, const Shape& s) { return paged_pattern(k, v, s, true, true); }},
      {"tile-rows", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 0, 0); }},
      {"tile-rows-l1", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 8, 0); }},
      {"tile-rows-l1l2", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 8, 64); }},
      {"tile-rows-l1-16", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 16, 0); }},
      {"tile-rows-l1-32", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 32, 0); }},
      {"tile-rows-kick1", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 0, 0, 1); }},
      {"tile-rows-kick2", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 0, 0, 2); }},
      {"tile-rows-kick4", [](const char* k, const char* v, const Shape& s) { return tile_rows(k, v, s, 0, 0, 4); }},
      {"kv-inter-pf4", [](const char* k, const char* v, const Shape& s) { return kv_interleaved(k, v, s, 4); }},
      {"kv-inter-pf16", [](const char* k, const char* v, const Shape& s) { return kv_interleaved(k, v, s, 16); }},
      {"tile-rows-l1-x2", [](const char* k, const char* v, const Shape& s) { return tile_rows_lanes(k, v, s, 8, 2); }},
      {"tile-rows-l1-x4", [](const char* k, const char* v, const Shape& s) { return tile_rows_lanes(k, v, s, 8, 4); }},
      {"kv-block4", [](const char* k, const char* v, const Shape& s) { return kv_blocks(k, v, s, 4); }},
      {"kv-block8", [](const char* k, const char* v, const Shape& s) { return kv_blocks(k, v, s, 8); }},
      {"kv-block16", [](const char* k, const char* v, const Shape& s) { return kv_blocks(k, v, s, 16); }},
      {"kv-inter", [](const char* k, const char* v, const Shape& s) { return kv_interleaved(k, v, s, 0); }},
      {"kv-inter-pf8", [](const char* k, const char* v, const Shape& s) { return kv_interleaved(k, v, s, 8); }},
      {"k-then-v",
       [](const char* k, const char* v, const Shape& s) {
         std::uint64_t x = 0;
         const std::int64_t head_bytes = s.keys * s.row;
         for (std::int64_t h = 0; h < s.heads; ++h) x ^= sequential(k + h * head_bytes, head_bytes) ^ sequential(v + h * head_bytes, head_bytes);
         return x;
       }},
  };
  std::vector<Variant> variants;
  for (auto& v : all) {
    if (only.empty() || ("," + only + ",").find(std::string(",") + v.name + ",") != std::string::npos) variants.push_back(v);
  }
  Shape slice = s;
  slice.heads = s.heads / threads;
  // Each thread's region of heads as pages dealt at random (the paged variants).
  auto deal = [](std::vector<std::int64_t>& pages, std::int64_t count) {
    pages.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) pages[i] = i;
    std::uint64_t x = 88172645463325252ull;
    for (std::int64_t i = count - 1; i > 0; --i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::swap(pages[i], pages[static_cast<std::int64_t>(x % static_cast<std::uint64_t>(i + 1))]);
    }
  };
  deal(g_pages, slice.heads * s.keys / g_page_keys);
  deal(g_hnd_pages, s.keys / g_page_keys);
  auto run_all = [&](const Run& run) {
    std::vector<std::uint64_t> out(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { out[t] = run(k + t * slice.heads * head_bytes, v + t * slice.heads * head_bytes, slice); });
    }
    std::uint64_t x = 0;
    for (int t = 0; t < threads; ++t) pool[t].join(), x ^= out[t];
    return x;
  };
  std::vector<std::vector<double>> rates(variants.size());
  volatile std::uint64_t sink = 0;
  for (auto& v : variants) sink = sink ^ run_all(v.run);  // warm-up: page tables, frequency
  for (int r = 0; r < passes_per_variant; ++r) {
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      sink = sink ^ run_all(variants[i].run);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rates[i].push_back(2.0 * static_cast<double>(bytes) / sec / 1e9);
    }
  }
  std::printf("# %lld heads x %lld keys x %lld-byte rows, tile %lld, K+V %lld MiB, %s pages, %d passes each, %d thread(s), %d %s per line\n",
              static_cast<long long>(s.heads), static_cast<long long>(s.keys), static_cast<long long>(s.row),
              static_cast<long long>(s.tile), static_cast<long long>(2 * bytes >> 20), huge ? "huge (madvise)" : "4 KiB",
              passes_per_variant, threads, g_work, g_dep ? "vdpbf16ps on the loaded line" : "independent FMAs");
  // Ratios to the first variant of the same rotation, split by that variant's rate: a shared VM's
  // DRAM rate moves between regimes (30-67 GB/s on 2 Zen 4 vCPUs), and a pattern's share of the
  // fast one can differ from its share of the slow one. --fast G: the split (GB/s, 0: none).
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%-16s %8s %8s %8s  (GB/s)  ratio to %s: all / fast / slow passes\n", "variant", "median", "min", "max",
              variants[0].name);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    std::vector<double> all, fast, slow;
    for (std::size_t r = 0; r < rates[i].size(); ++r) {
      const double x = rates[i][r] / rates[0][r];
      all.push_back(x);
      (g_fast > 0 && rates[0][r] >= g_fast ? fast : slow).push_back(x);
    }
    auto r = rates[i];
    std::sort(r.begin(), r.end());
    std::printf("%-16s %8.1f %8.1f %8.1f  %.2f / %.2f (%zu) / %.2f (%zu)\n", variants[i].name, r[r.size() / 2], r.front(),
                r.back(), med(all), med(fast), fast.size(), med(slow), slow.size());
  }
  std::free(k);
  std::free(v);
  return 0;
}
