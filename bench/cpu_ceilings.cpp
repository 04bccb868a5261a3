// CPU ceilings, measured in the same run as the kernels they bound.
//   read bandwidth: every thread XOR-reduces its slice of a buffer 4x the last-level cache (at
//     least 256 MiB, at most 2 GiB), so every pass streams from DRAM; 32-byte loads (AVX2) where
//     present. Three access patterns, the best of all: one sequential stream per thread
//     (hardware prefetch alone); kStreams interleaved streams per thread with software prefetch
//     kPrefetchBytes ahead (how the decode kernels read K and V rows; one stream alone undershot
//     them by up to 39% on a 2-vCPU EPYC VM); two streams read in 4 KiB turns with a short
//     prefetch (the decode's 16-key tiles on AMX Xeons, which outran the other two there). Each on
//     4 KiB pages and on 2 MiB pages (cpu::advise_huge_pages): the kernels' inputs may sit on
//     either (the bench puts them on huge pages unless told not to), and on a KVM Xeon the probe
//     read 10% less on huge pages while the decode read 14% more, so no page policy flatters the
//     kernels.
//   FMA rate: every thread runs 12 independent f32 FMA chains per ISA level (enough to cover a
//     4-cycle latency on two pipes), so the loop is bound by FMA throughput alone.
// Both report the best of several passes: a ceiling is what the machine can do, not its median.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "attnkit/error.hpp"
#include "read_probe.hpp"

namespace attnkit::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCeilingPasses = 9;  // three of each pattern

int thread_count(const Options& options) { return options.threads > 0 ? options.threads : omp_get_max_threads(); }

__attribute__((target("avx2"))) std::uint64_t xor_read_avx2(const std::uint8_t* p, std::size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^
                                    _mm256_extract_epi64(a, 2) ^ _mm256_extract_epi64(a, 3));
}

// kStreams equal parts of [p, p + bytes) read side by side, 128 bytes of each per step, each
// prefetched kPrefetchBytes ahead into L1 (bytes is a multiple of kStreams * 4 KiB).
constexpr int kStreams = 4;
constexpr std::size_t kPrefetchBytes = 1024;

__attribute__((target("avx2"))) std::uint64_t xor_read_streams_avx2(const std::uint8_t* p, std::size_t bytes) {
  const std::size_t part = bytes / kStreams;
  __m256i acc[kStreams][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_si256();
  for (std::size_t i = 0; i + 128 <= part; i += 128) {
    for (int s = 0; s < kStreams; ++s) {
      const std::uint8_t* q = p + s * part + i;
      if (i + kPrefetchBytes < part) _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchBytes), _MM_HINT_T0);
      if (i + kPrefetchBytes + 64 < part) _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchBytes + 64), _MM_HINT_T0);
      acc[s][0] = _mm256_xor_si256(acc[s][0], _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q)),
                                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32))));
      acc[s][1] = _mm256_xor_si256(acc[s][1], _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64)),
                                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96))));
    }
  }
  __m256i a = _mm256_setzero_si256();
  for (const auto& s : acc) a = _mm256_xor_si256(a, _mm256_xor_si256(s[0], s[1]));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^
                                    _mm256_extract_epi64(a, 2) ^ _mm256_extract_epi64(a, 3));
}

// Two halves of [p, p + bytes) read in turns of kTurnBytes each, every line prefetched kTurnAhead
// bytes ahead within its own half (how the decode kernels read K and V on 16-key tiles; on an AMX
// Xeon the bf16 multi-head decode read 36 GB/s this way, above the other two patterns' 33-34).
constexpr std::size_t kTurnBytes = 4096, kTurnAhead = 2048;

__attribute__((target("avx2"))) std::uint64_t xor_read_turns_avx2(const std::uint8_t* p, std::size_t bytes) {
  const std::size_t part = bytes / 2;
  __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (std::size_t turn = 0; turn + kTurnBytes <= part; turn += kTurnBytes) {
    for (int s = 0; s < 2; ++s) {
      const std::uint8_t* q = p + s * part + turn;
      for (std::size_t i = 0; i < kTurnBytes; i += 128) {
        if (turn + i + kTurnAhead + 128 <= part) {
          _mm_prefetch(reinterpret_cast<const char*>(q + i + kTurnAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(q + i + kTurnAhead + 64), _MM_HINT_T0);
        }
        acc[0] = _mm256_xor_si256(acc[0], _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + i)),
                                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(q + i + 32))));
        acc[1] = _mm256_xor_si256(acc[1], _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + i + 64)),
                                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(q + i + 96))));
      }
    }
  }
  const __m256i a = _mm256_xor_si256(acc[0], acc[1]);
  return static_cast<std::uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^
                                    _mm256_extract_epi64(a, 2) ^ _mm256_extract_epi64(a, 3));
}

std::uint64_t xor_read_generic(const std::uint8_t* p, std::size_t bytes) {
  const auto* words = reinterpret_cast<const std::uint64_t*>(p);
  std::uint64_t a0 = 0, a1 = 0;
  for (std::size_t i = 0; i + 2 <= bytes / 8; i += 2) {
    a0 ^= words[i];
    a1 ^= words[i + 1];
  }
  return a0 ^ a1;
}

// 12 chains x lanes of acc = acc * a + b; converges to 1, so no overflow or denormals.
__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.5f + 0.01f * j);
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(0.0001f);
  for (long i = 0; i < iterations; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < 12; ++j) sum = _mm512_add_ps(sum, acc[j]);
  return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.5f + 0.01f * j);
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(0.0001f);
  for (long i = 0; i < iterations; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < 12; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// Best FLOP/s over passes of `chains` on every thread at once; `flops_per_iteration` per thread.
template <class Chains>
double fma_rate(const Options& options, Chains chains, double flops_per_iteration) {
  constexpr long kIterations = 4'000'000;
  const int threads = thread_count(options);
  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    float total = 0;
    const auto start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += chains(kIterations);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    sink = sink + total;
    best = std::max(best, flops_per_iteration * kIterations * threads / seconds);
  }
  return best;
}

}  // namespace

ReadProbe::ReadProbe(std::size_t slice, int threads, bool huge_pages)
    : buffer_(slice * static_cast<std::size_t>(threads), huge_pages), slice_(slice), threads_(threads) {
  std::uint8_t* base = buffer_.data();
  // First touch by the thread that later reads the slice (page placement on NUMA hosts).
#pragma omp parallel num_threads(threads)
  {
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
    for (std::size_t i = 0; i < slice; ++i) base[t * slice + i] = static_cast<std::uint8_t>(i * 131 + t);
  }
}

int ReadProbe::patterns() { return __builtin_cpu_supports("avx2") ? 3 : 1; }

double ReadProbe::pass(int pattern) {
  const bool avx2 = __builtin_cpu_supports("avx2");
  const std::uint8_t* base = buffer_.data();
  const std::size_t slice = slice_;
  std::uint64_t total = 0;
  const auto start = Clock::now();
#pragma omp parallel num_threads(threads_) reduction(^ : total)
  {
    const std::uint8_t* mine = base + static_cast<std::size_t>(omp_get_thread_num()) * slice;
    total ^= pattern == 1   ? xor_read_streams_avx2(mine, slice)
             : pattern == 2 ? xor_read_turns_avx2(mine, slice)
                            : (avx2 ? xor_read_avx2(mine, slice) : xor_read_generic(mine, slice));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  sink_ = sink_ ^ total;
  return static_cast<double>(slice * static_cast<std::size_t>(threads_)) / seconds;
}

ReadCeiling cpu_read_ceiling(const Options& options) {
  const std::int64_t llc = cpu_target(options.threads).cache_bytes;
  const std::int64_t requested =
      options.ceiling_bytes > 0 ? options.ceiling_bytes : std::clamp<std::int64_t>(4 * llc, 256ll << 20, 2ll << 30);
  const int threads = thread_count(options);
  // Whole 4 KiB pages per stream of every thread, so slices and their parts are aligned and equal.
  constexpr std::size_t kGranule = 4096 * kStreams;
  const std::size_t slice = static_cast<std::size_t>((requested / threads + kGranule - 1) / kGranule * kGranule);
  ReadCeiling best{0, 0, false, slice, threads};
  for (const bool huge_pages : {false, true}) {
    ReadProbe probe(slice, threads, huge_pages);
    for (int pass = 0; pass < kCeilingPasses; ++pass) {
      const int pattern = pass % ReadProbe::patterns();  // rotate the patterns
      const double rate = probe.pass(pattern);
      if (rate > best.value) best = {rate, pattern, huge_pages, slice, threads};
    }
  }
  return best;
}

Ceiling cpu_fma_ceiling(const Options& options) {
  Ceiling best{"f32-fma scalar", 0};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    best = {"f32-fma avx2", fma_rate(options, fma_chains_avx2, 12.0 * 8 * 2)};
  }
  if (__builtin_cpu_supports("avx512f")) {
    const double rate = fma_rate(options, fma_chains_avx512, 12.0 * 16 * 2);
    if (rate > best.value) best = {"f32-fma avx512", rate};
  }
  if (best.value == 0) {
    // No FMA unit the loops can use: a scalar multiply-add chain is the honest bound.
    auto scalar = [](long iterations) {
      float acc[12];
      for (int j = 0; j < 12; ++j) acc[j] = 0.5f + 0.01f * j;
      for (long i = 0; i < iterations; ++i) {
        for (float& x : acc) x = x * 0.9999f + 0.0001f;
      }
      float total = 0;
      for (float x : acc) total += x;
      return total;
    };
    best.value = fma_rate(options, scalar, 12.0 * 2);
  }
  return best;
}

}  // namespace attnkit::bench
