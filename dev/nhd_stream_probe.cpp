// Read-bandwidth probe for an NHD paged pool's access pattern (docs/perf-notes.md, "Paged decode on
// the CPU: the NHD layout"): rows of kv_heads x 256 B (head_dim 128, 16-bit), a decode task reading
// one head's 256 B of every row, against the same bytes read as one contiguous stream, and against
// a thread reading every head of a chunk of rows before the next chunk.
//
// Not part of the build (a development probe):
//   g++ -O2 -std=c++20 -fopenmp -mavx512f dev/nhd_stream_probe.cpp -o /tmp/nhd_stream_probe
//   /tmp/nhd_stream_probe [MiB=512] [kv_heads=8] [rounds=5]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kHeadBytes = 256;

// Sum of 256 B (four lines) so the loads cannot be dropped.
inline __m512 read_head(const char* p, __m512 acc) {
  for (int b = 0; b < 256; b += 64) acc = _mm512_add_ps(acc, _mm512_load_ps(reinterpret_cast<const float*>(p + b)));
  return acc;
}

double seconds_of(const std::function<float()>& f, float& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  sink += f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::stoul(argv[1]) : 512;
  const std::size_t heads = argc > 2 ? std::stoul(argv[2]) : 8;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 5;
  const std::size_t row = heads * kHeadBytes, bytes = mib << 20, rows = bytes / row;
  char* buf = static_cast<char*>(std::aligned_alloc(2u << 20, bytes));
  std::memset(buf, 1, bytes);
  const int threads = omp_get_max_threads();

  // The decode's tasks: (head, one of `splits` row ranges), a head's ranges dealt to threads first;
  // each task reads its head's 256 B of every row, optionally prefetching rows ahead into L2.
  auto by_head = [&](std::size_t splits, int prefetch_rows) {
    return [=]() {
      float total = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : total)
      for (std::size_t task = 0; task < splits * heads; ++task) {
        const std::size_t h = task / splits, r0 = task % splits * (rows / splits), r1 = r0 + rows / splits;
        __m512 acc = _mm512_setzero_ps();
        for (std::size_t r = r0; r < r1; ++r) {
          const char* p = buf + r * row + h * kHeadBytes;
          if (prefetch_rows > 0 && r + prefetch_rows < r1)
            for (int b = 0; b < 256; b += 64) _mm_prefetch(p + prefetch_rows * row + b, _MM_HINT_T1);
          acc = read_head(p, acc);
        }
        total += _mm512_reduce_add_ps(acc);
      }
      return total;
    };
  };
  // K and V as two halves of the buffer, a task reading 16 rows of K then the same 16 of V (the
  // decode bodies' turns on Intel cores); `nhd` false: one head's rows adjacent (HND).
  auto kv_turns = [&](bool nhd, int prefetch_rows) {
    return [=]() {
      float total = 0;
      const char* kb = buf;
      const char* vb = buf + bytes / 2;
      const std::size_t kv_rows = rows / 2;  // rows of kv_heads heads in each half
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : total)
      for (std::size_t task = 0; task < 2 * heads; ++task) {
        const std::size_t h = task / 2, r0 = task % 2 * (kv_rows / 2), r1 = r0 + kv_rows / 2;
        // NHD: row r of head h at r * row + h * 256; HND: at h * kv_rows * 256 + r * 256.
        const std::size_t rs = nhd ? row : kHeadBytes, hs = nhd ? kHeadBytes : kv_rows * kHeadBytes;
        __m512 acc = _mm512_setzero_ps();
        for (std::size_t r = r0; r + 16 <= r1; r += 16) {
          for (const char* base : {kb, vb}) {
            const char* p = base + h * hs + r * rs;
            for (int i = 0; i < 16; ++i) {
              if (prefetch_rows > 0 && r + i + prefetch_rows < r1)
                for (int b = 0; b < 256; b += 64) _mm_prefetch(p + (i + prefetch_rows) * rs + b, _MM_HINT_T1);
              acc = read_head(p + i * rs, acc);
            }
          }
        }
        total += _mm512_reduce_add_ps(acc);
      }
      return total;
    };
  };
  // K and V (NHD) by chunks of rows: every head's turns over the chunk before the next chunk.
  auto kv_chunks = [&](std::size_t chunk) {
    return [=]() {
      float total = 0;
      const char* kb = buf;
      const char* vb = buf + bytes / 2;
      const std::size_t kv_rows = rows / 2, chunks = kv_rows / chunk;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : total)
      for (std::size_t c = 0; c < chunks; ++c) {
        __m512 acc = _mm512_setzero_ps();
        for (std::size_t h = 0; h < heads; ++h)
          for (std::size_t r = c * chunk; r < (c + 1) * chunk; r += 16)
            for (const char* base : {kb, vb})
              for (int i = 0; i < 16; ++i) acc = read_head(base + (r + i) * row + h * kHeadBytes, acc);
        total += _mm512_reduce_add_ps(acc);
      }
      return total;
    };
  };
  // Every head of a chunk of rows, chunks dealt to threads.
  auto by_chunk = [&](std::size_t chunk) {
    return [=]() {
      float total = 0;
      const std::size_t chunks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : total)
      for (std::size_t c = 0; c < chunks; ++c) {
        __m512 acc = _mm512_setzero_ps();
        const std::size_t end = std::min(rows, (c + 1) * chunk);
        for (std::size_t h = 0; h < heads; ++h)
          for (std::size_t r = c * chunk; r < end; ++r) acc = read_head(buf + r * row + h * kHeadBytes, acc);
        total += _mm512_reduce_add_ps(acc);
      }
      return total;
    };
  };
  // The same bytes as one stream, halves to threads.
  auto contiguous = [&]() {
    float total = 0;
    const std::size_t lines4 = bytes / kHeadBytes;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (std::size_t i = 0; i < lines4; ++i) {
      __m512 acc = read_head(buf + i * kHeadBytes, _mm512_setzero_ps());
      total += _mm512_reduce_add_ps(acc);
    }
    return total;
  };

  struct Case {
    std::string name;
    std::function<float()> f;
    std::vector<double> t;
  };
  std::vector<Case> cases{{"contiguous", contiguous, {}},
                          {"by head", by_head(1, 0), {}},
                          {"by head, prefetch 8 rows to L2", by_head(1, 8), {}},
                          {"by head, prefetch 16 rows to L2", by_head(1, 16), {}},
                          {"by head, prefetch 32 rows to L2", by_head(1, 32), {}},
                          {"by head, prefetch 64 rows to L2", by_head(1, 64), {}},
                          {"by head, prefetch 128 rows to L2", by_head(1, 128), {}},
                          {"by head and half, no prefetch", by_head(2, 0), {}},
                          {"by head and half, prefetch 16", by_head(2, 16), {}},
                          {"by head and half, prefetch 64", by_head(2, 64), {}},
                          {"K/V turns, HND", kv_turns(false, 0), {}},
                          {"K/V turns, NHD", kv_turns(true, 0), {}},
                          {"K/V turns, HND, prefetch 32", kv_turns(false, 32), {}},
                          {"K/V turns, NHD, prefetch 32", kv_turns(true, 32), {}},
                          {"K/V NHD by chunk of 64 rows", kv_chunks(64), {}},
                          {"K/V NHD by chunk of 256 rows", kv_chunks(256), {}},
                          {"by chunk of 64 rows", by_chunk(64), {}},
                          {"by chunk of 256 rows", by_chunk(256), {}},
                          {"by chunk of 1024 rows", by_chunk(1024), {}}};
  float sink = 0;
  for (int r = 0; r < rounds; ++r)
    for (auto& c : cases) c.t.push_back(seconds_of(c.f, sink));
  std::printf("%zu MiB, rows of %zu heads x 256 B, %d threads, median of %d rounds (alternating)\n", mib, heads,
              threads, rounds);
  for (auto& c : cases) {
    std::sort(c.t.begin(), c.t.end());
    std::printf("  %-34s %7.2f GB/s\n", c.name.c_str(), bytes / c.t[c.t.size() / 2] / 1e9);
  }
  std::free(buf);
  return sink == 12345.0f ? 1 : 0;
}
