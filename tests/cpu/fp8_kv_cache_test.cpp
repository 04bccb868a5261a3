// e4m3 (fp8) KV cache on the CPU: decode against the float64 golden on both plan families and every
// instruction-set level this CPU supports (caches quantized from fresh normal draws with scales
// != 1, outputs poisoned, cache slots past each length poisoned with e4m3's NaN code), the exact
// reading of every finite e4m3 code, append's quantization bit for bit, and the calls that must
// reject an e4m3 cache (bad scales, fused step, sharded; paged pools: paged_fp8_test.cpp) with a Fix, writing nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/context_parallel.hpp"
#include "cpu_case.hpp"
#include "isa_scope.hpp"
#include "support/expect_error.hpp"

namespace attnkit::testing {
namespace {

using cpu::simd::Isa;

constexpr std::uint8_t kE4m3Nan = 0x7f;
const KvScales kOddScales{0.02f, 3.5f};  // keys stored ~50x their value, values ~0.3x (subnormals)

// Stores e4m3(x / scale) of normal draws x (real values ~ N(0, stddev)) in every element.
void fill_quantized(HostTensor& t, std::mt19937_64& rng, float scale, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::size_t i = 0; i < t.numel(); ++i) t.bytes[i] = float_to_e4m3_bits(dist(rng) / scale);
}

// A decode over an e4m3 cache: q/out of any storage dtype, poisoned out/lse, cache slots at or
// past each sequence's length holding e4m3's NaN code (a kernel must skip, not read, them).
struct Fp8DecodeCase {
  DecodeProblem problem;
  KvScales scales;
  HostTensor q, k_cache, v_cache, lengths, out, lse, sinks;
  bool with_sinks = false;
  std::uint64_t seed;

  Fp8DecodeCase(const DecodeProblem& p, const std::vector<std::int32_t>& lens, KvScales s, bool sink_logits = false,
                std::uint64_t seed_ = fresh_seed())
      : problem(p), scales(s), with_sinks(sink_logits), seed(seed_) {
    const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
    q = HostTensor(p.q_dtype, {B, H, D});
    k_cache = HostTensor(DType::kE4M3, {B, G, S, D});
    v_cache = HostTensor(DType::kE4M3, {B, G, S, D});
    lengths = HostTensor(DType::kI32, {B});
    out = HostTensor(p.out_dtype, {B, H, D});
    lse = HostTensor(DType::kF32, {B, H});
    std::mt19937_64 rng(seed);
    fill_normal(q, rng);
    fill_quantized(k_cache, rng, s.k);
    fill_quantized(v_cache, rng, s.v);
    for (std::int64_t b = 0; b < B; ++b) {
      lengths.i32()[b] = lens[static_cast<std::size_t>(b)];
      for (std::int64_t g = 0; g < G; ++g) {
        for (std::int64_t j = lens[static_cast<std::size_t>(b)]; j < S; ++j) {
          const std::size_t row = static_cast<std::size_t>(((b * G + g) * S + j) * D);
          std::fill_n(k_cache.bytes.begin() + static_cast<std::ptrdiff_t>(row), D, kE4m3Nan);
          std::fill_n(v_cache.bytes.begin() + static_cast<std::ptrdiff_t>(row), D, kE4m3Nan);
        }
      }
    }
    sinks = random_sinks(sink_logits ? H : 0, rng);
    poison(out);
    poison(lse);
  }
  DecodeTensors tensors() const {
    DecodeTensors t{q.view, k_cache.view, v_cache.view, lengths.view, out.view, lse.view};
    if (with_sinks) t.sinks = sinks.view;
    t.kv_scales = scales;
    return t;
  }
};

DecodeProblem fp8_problem(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                          std::int64_t max_seq, DType q_dtype = DType::kBF16, DType out_dtype = DType::kBF16) {
  DecodeProblem p = decode_problem(batch, heads, kv_heads, head_dim, max_seq);
  p.kv_dtype = DType::kE4M3;
  p.q_dtype = q_dtype;
  p.out_dtype = out_dtype;
  return p;
}

std::string describe(const DecodeProblem& p, const DecodePlan& plan, const Fp8DecodeCase& c) {
  return "e4m3 decode b" + std::to_string(p.batch) + " h" + std::to_string(p.num_heads) + "/" +
         std::to_string(p.kv_heads) + " d" + std::to_string(p.head_dim) + " kv" + std::to_string(p.kv_len) + "/" +
         std::to_string(p.max_seq) + " window=" + std::to_string(p.options.window) +
         " softcap=" + std::to_string(p.options.softcap) + " q=" + std::string(dtype_name(p.q_dtype)) +
         " out=" + std::string(dtype_name(p.out_dtype)) + " scales=" + std::to_string(c.scales.k) + "/" +
         std::to_string(c.scales.v) + (c.with_sinks ? " +sinks" : "") + " family=" +
         to_string(plan.partition.family) + " tile=" + std::to_string(plan.partition.tile_size) +
         " splits=" + std::to_string(plan.partition.sequence_splits) + seed_note(c.seed);
}

// One case and golden; the scalar online plan once, the fast plan on every ISA level, each run on
// freshly poisoned outputs, judged by the plan's own tolerance.
void run_fp8_decode(const DecodeProblem& p, const std::vector<std::int32_t>& lengths, KvScales scales = kOddScales,
                    bool sinks = false, int threads = 2) {
  Fp8DecodeCase c(p, lengths, scales, sinks);
  const reference::Result golden = reference::decode(p, c.tensors());
  auto judge = [&](const DecodePlan& plan, const std::string& what) {
    const Comparison cmp = compare(c.out, golden.out);
    EXPECT_EQ(cmp.nan_count, 0u) << what << ": " << describe(cmp);
    EXPECT_LE(cmp.rel_l2, plan.evidence.rel_l2_tolerance) << what << ": " << describe(cmp);
    expect_lse_matches(c.lse, golden.lse, what);
  };
  const DecodePlan scalar = plan_decode(p, cpu_target(threads), KernelFamily::kScalarOnline);
  cpu::decode(scalar, c.tensors());
  judge(scalar, describe(p, scalar, c));

  const DecodePlan fast = plan_decode(p, cpu_target(threads));
  ASSERT_EQ(fast.partition.family, KernelFamily::kSplitKvDecode);
  std::vector<std::uint8_t> workspace(fast.evidence.workspace_bytes, 0xFF);
  for (Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    poison(c.out);
    poison(c.lse);
    cpu::decode(fast, c.tensors(), Workspace{workspace.data(), workspace.size()});
    judge(fast, describe(p, fast, c) + " isa=" + std::string(cpu::simd::isa_name(isa)));
  }
}

// ---------------------------------------------------------------------------------------------
// Decode against the golden

TEST(Fp8KvCacheDecode, HeadDimsAndGroups) {
  for (std::int64_t d : {64, 128, 256, 72}) {
    for (std::int64_t group : {1, 4, 8}) run_fp8_decode(fp8_problem(2, 8, 8 / group, d, 67), {67, 30});
  }
  run_fp8_decode(fp8_problem(1, 12, 1, 64, 50), {50});  // group 12: row chunks of 8 and 4
  run_fp8_decode(fp8_problem(1, 6, 2, 8, 33), {33});    // head_dim 8, shorter than an AVX-512 vector
}

TEST(Fp8KvCacheDecode, QueryAndOutputDtypes) {
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      run_fp8_decode(fp8_problem(2, 8, 2, 128, 45, q, out), {45, 19});
      run_fp8_decode(fp8_problem(1, 4, 4, 64, 45, q, out), {44});
    }
  }
}

TEST(Fp8KvCacheDecode, AwkwardLengths) {
  run_fp8_decode(fp8_problem(1, 4, 1, 64, 1), {1});
  run_fp8_decode(fp8_problem(1, 4, 2, 72, 37), {37});
  run_fp8_decode(fp8_problem(1, 8, 2, 128, 1041), {1041});  // not a multiple of any tile
  DecodeProblem mixed = fp8_problem(5, 8, 2, 64, 130);
  mixed.kv_len = 120;  // below the cache capacity
  run_fp8_decode(mixed, {120, 0, 1, 77, 119});
  DecodeProblem mha = fp8_problem(4, 4, 4, 128, 90, DType::kF32, DType::kF32);
  run_fp8_decode(mha, {0, 90, 33, 1});
}

TEST(Fp8KvCacheDecode, LongSequence) {
  run_fp8_decode(fp8_problem(1, 4, 1, 64, 70001), {70001});
}

TEST(Fp8KvCacheDecode, WindowSoftCapLseAndSinks) {
  for (std::int64_t window : {1, 17, 1000}) {
    DecodeProblem p = fp8_problem(3, 8, 2, 128, 300);
    p.options.window = window;
    run_fp8_decode(p, {300, 40, 1});
  }
  DecodeProblem capped = fp8_problem(2, 8, 1, 64, 200, DType::kF16, DType::kF32);
  capped.options.softcap = 30.0f;
  capped.options.scale = 0.5f;
  run_fp8_decode(capped, {200, 63});
  DecodeProblem sunk = fp8_problem(3, 8, 2, 128, 150);
  run_fp8_decode(sunk, {150, 0, 7}, kOddScales, true);
  sunk.options.window = 33;
  run_fp8_decode(sunk, {150, 2, 77}, {0.5f, 0.125f}, true);
}

TEST(Fp8KvCacheDecode, KeySplitsAndTheirMerge) {
  for (int threads : {4, 7}) {
    const DecodeProblem p = fp8_problem(1, 8, 1, 128, 3001);
    EXPECT_GT(plan_decode(p, cpu_target(threads)).partition.sequence_splits, 1u) << "threads=" << threads;
    run_fp8_decode(p, {3001}, kOddScales, false, threads);
    run_fp8_decode(p, {200}, kOddScales, true, threads);  // some splits empty
  }
}

TEST(Fp8KvCacheDecode, UnitScalesAndLargeStoredValues) {
  run_fp8_decode(fp8_problem(2, 8, 2, 128, 100), {100, 51}, KvScales{});
  // Stored values near +-448: scores of +-20 and more after the scale.
  run_fp8_decode(fp8_problem(2, 8, 2, 64, 100), {100, 51}, KvScales{0.004f, 0.01f});
}

// Every finite e4m3 code read exactly, by K and by V, on both families and every ISA level: one key
// per sequence, q one-hot at column b for sequence b (scale 1), so the LSE of sequence b is K's
// column b times k's scale and the output is the V row times v's scale, both exact in f32 for
// power-of-two scales. Group 1 and group 4 (the row-block bodies) both take it.
TEST(Fp8KvCacheDecode, EveryFiniteCodeReadsExactly) {
  constexpr std::int64_t kCodes = 256;
  for (std::int64_t heads : {1, 4}) {
    DecodeProblem p = fp8_problem(kCodes, heads, 1, kCodes, 1, DType::kF32, DType::kF32);
    p.options.scale = 1.0f;
    const KvScales scales{0.25f, 4.0f};
    HostTensor q(DType::kF32, {kCodes, heads, kCodes}), k(DType::kE4M3, {kCodes, 1, 1, kCodes});
    HostTensor v(DType::kE4M3, {kCodes, 1, 1, kCodes}), lengths(DType::kI32, {kCodes});
    HostTensor out(DType::kF32, {kCodes, heads, kCodes}), lse(DType::kF32, {kCodes, heads});
    for (std::int64_t b = 0; b < kCodes; ++b) {
      lengths.i32()[b] = 1;
      for (std::int64_t h = 0; h < heads; ++h) q.set(static_cast<std::size_t>((b * heads + h) * kCodes + b), 1.0f);
      for (std::int64_t c = 0; c < kCodes; ++c) {
        // Row b holds every code, rotated by b; the NaN codes 0x7f / 0xff become zeros of their sign.
        const auto code = static_cast<std::uint8_t>((b + c) % kCodes);
        const std::uint8_t finite = (code & 0x7f) == 0x7f ? static_cast<std::uint8_t>(code & 0x80) : code;
        k.bytes[static_cast<std::size_t>(b * kCodes + c)] = finite;
        v.bytes[static_cast<std::size_t>(b * kCodes + c)] = finite;
      }
    }
    DecodeTensors t{q.view, k.view, v.view, lengths.view, out.view, lse.view};
    t.kv_scales = scales;
    auto check = [&](const DecodePlan& plan, const std::string& what) {
      poison(out);
      poison(lse);
      cpu::decode(plan, t, Workspace{});
      std::size_t wrong = 0;
      for (std::int64_t b = 0; b < kCodes; ++b) {
        for (std::int64_t h = 0; h < heads; ++h) {
          const float key = e4m3_bits_to_float(k.bytes[static_cast<std::size_t>(b * kCodes + b)]) * scales.k;
          if (lse.get(static_cast<std::size_t>(b * heads + h)) != key) ++wrong;
          for (std::int64_t c = 0; c < kCodes; ++c) {
            const float value = e4m3_bits_to_float(v.bytes[static_cast<std::size_t>(b * kCodes + c)]) * scales.v;
            if (out.get(static_cast<std::size_t>((b * heads + h) * kCodes + c)) != value) ++wrong;
          }
        }
      }
      EXPECT_EQ(wrong, 0u) << what << " heads=" << heads;
    };
    check(plan_decode(p, cpu_target(2), KernelFamily::kScalarOnline), "scalar_online");
    const DecodePlan fast = plan_decode(p, cpu_target(2));
    ASSERT_EQ(fast.evidence.workspace_bytes, 0u);
    for (Isa isa : supported_isas()) {
      ScopedIsa scoped(isa);
      check(fast, "split_kv_decode isa=" + std::string(cpu::simd::isa_name(isa)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Planning and rejection

// The fast plan reads an e4m3 cache with f16's tile rules on every kind of core (cpu_rules.cpp).
TEST(Fp8KvCachePlan, TilesFollowF16) {
  Target amd_avx2 = cpu_target(2), amd_avx512 = cpu_target(2), intel = cpu_target(2), amx = cpu_target(2);
  amd_avx2.cpu_vector_lanes = 8;
  amd_avx512.cpu_vector_lanes = 16;
  for (Target* t : {&amd_avx2, &amd_avx512}) t->cpu_intel_cores = t->cpu_matrix_tiles = false;
  intel.cpu_vector_lanes = 16;
  intel.cpu_intel_cores = true;
  intel.cpu_matrix_tiles = false;
  amx.cpu_vector_lanes = 16;
  amx.cpu_intel_cores = amx.cpu_matrix_tiles = true;
  for (const Target& t : {amd_avx2, amd_avx512, intel, amx}) {
    for (std::int64_t group : {1, 2, 4}) {
      for (std::int64_t d : {64, 128, 256}) {
        const DecodeProblem e4m3 = fp8_problem(1, 8, 8 / group, d, 65536);
        DecodeProblem f16 = e4m3;
        f16.kv_dtype = DType::kF16;
        const DecodePlan a = plan_decode(e4m3, t), b = plan_decode(f16, t);
        const std::string what = "lanes=" + std::to_string(t.cpu_vector_lanes) + " intel=" +
                                 std::to_string(t.cpu_intel_cores) + " amx=" + std::to_string(t.cpu_matrix_tiles) +
                                 " group=" + std::to_string(group) + " d=" + std::to_string(d);
        EXPECT_EQ(a.partition.tile_size, b.partition.tile_size) << what;
        EXPECT_EQ(a.partition.pipeline_stages, b.partition.pipeline_stages) << what;
        EXPECT_EQ(a.partition.sequence_splits, b.partition.sequence_splits) << what;
        EXPECT_LT(a.evidence.traffic.global_read_bytes, b.evidence.traffic.global_read_bytes) << what;
        EXPECT_EQ(a.evidence.rel_l2_tolerance, b.evidence.rel_l2_tolerance) << what;
        EXPECT_NE(to_table(a).find("e4m3 cache"), std::string::npos) << to_table(a);
      }
    }
  }
}

TEST(Fp8KvCacheDecode, BadScalesAreRejectedBeforeAnyWrite) {
  const DecodeProblem p = fp8_problem(2, 8, 2, 64, 40);
  Fp8DecodeCase c(p, {40, 3}, kOddScales);
  const DecodePlan plan = plan_decode(p, cpu_target(2));
  std::vector<std::uint8_t> ws(plan.evidence.workspace_bytes);
  const auto out_before = c.out.bytes, lse_before = c.lse.bytes;
  const float bad_values[] = {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    for (bool key : {true, false}) {
      DecodeTensors t = c.tensors();
      (key ? t.kv_scales.k : t.kv_scales.v) = bad;
      const std::string name = key ? "kv_scales.k=" : "kv_scales.v=";
      expect_error([&] { cpu::decode(plan, t, Workspace{ws.data(), ws.size()}); }, name);
      expect_error([&] { cpu::decode(plan, t, Workspace{ws.data(), ws.size()}); }, "is not a finite number > 0");
      expect_error([&] { reference::decode(p, t); }, "is not a finite number > 0");
    }
  }
  EXPECT_EQ(c.out.bytes, out_before);
  EXPECT_EQ(c.lse.bytes, lse_before);
  // Scales on a bf16 cache mean nothing: rejected.
  DecodeProblem bf16 = p;
  bf16.kv_dtype = DType::kBF16;
  DecodeCase plain(bf16, {40, 3});
  DecodeTensors t = plain.tensors();
  t.kv_scales.v = 2.0f;
  const auto plain_before = plain.out.bytes;
  expect_error([&] { cpu::decode(scalar_decode_plan(bf16), t); }, "kv_scales apply to e4m3 caches");
  EXPECT_EQ(plain.out.bytes, plain_before);
}

TEST(Fp8KvCachePlan, FusedAndShardedRejectE4m3) {
  const DecodeProblem p = fp8_problem(2, 8, 2, 64, 40);
  // The fused step: a decode plan is fine, the fused call refuses before writing.
  HostTensor q(DType::kBF16, {2, 8, 64}), k_new(DType::kE4M3, {2, 2, 64}), v_new(DType::kE4M3, {2, 2, 64});
  HostTensor k(DType::kE4M3, {2, 2, 40, 64}), v(DType::kE4M3, {2, 2, 40, 64}), pos(DType::kI32, {2});
  HostTensor out(DType::kBF16, {2, 8, 64}), lse(DType::kF32, {2, 8});
  poison(out);
  pos.i32()[0] = 3, pos.i32()[1] = 39;
  const auto k_before = k.bytes, v_before = v.bytes, out_before = out.bytes;
  const FusedDecodeTensors fused{q.view, k_new.view, v_new.view, k.view, v.view, pos.view, out.view, lse.view};
  expect_error([&] { cpu::fused_rope_append_decode(plan_decode(p, cpu_target(2)), fused, RopeSpec{}); },
               "kv_dtype is e4m3, which this op does not take");
  EXPECT_EQ(k.bytes, k_before);
  EXPECT_EQ(v.bytes, v_before);
  EXPECT_EQ(out.bytes, out_before);

  ShardedDecodeProblem sharded;
  sharded.decode = fp8_problem(1, 8, 2, 128, 100000);
  for (const Target& t : {cpu_target(2), known_target("h200")}) {
    expect_error([&] { plan_sharded_decode(sharded, std::vector<Target>{t, t}); }, "kv_dtype is e4m3");
  }
}

// ---------------------------------------------------------------------------------------------
// Append

// New rows in `dtype` whose real values cover what an fp8 cache meets: normal draws, values past
// 448 * scale (saturate), tiny ones (e4m3 subnormals and values that round to zero), exact halfway
// points between e4m3 neighbours, and signed zeros.
void fill_append_rows(HostTensor& rows, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::size_t i = 0; i < rows.numel(); ++i) {
    const float sign = unit(rng) < 0.5f ? -1.0f : 1.0f;
    float stored;  // the value after division by the scale
    switch (i % 6) {
      case 0: stored = normal(rng) * 100.0f; break;
      case 1: stored = sign * (448.0f + unit(rng) * 2000.0f); break;       // saturates
      case 2: stored = sign * unit(rng) * 0.02f; break;                    // subnormal range, and zero
      case 3: stored = sign * (std::ldexp(1.0f, -10) * (1.0f + unit(rng))); break;  // near half the least
      case 4: stored = sign * (1.0f + (2.0f * static_cast<float>(i % 8) + 1.0f) / 16.0f); break;  // ties
      default: stored = i % 12 == 5 ? -0.0f : normal(rng); break;
    }
    rows.set(i, stored * scale);
  }
}

struct AppendCase {
  std::int64_t B = 3, G = 2, S = 20, D = 72;
  HostTensor k_new, v_new, k, v, positions;
  explicit AppendCase(DType new_dtype, std::mt19937_64& rng, const KvScales& scales)
      : k_new(new_dtype, {B, G, D}), v_new(new_dtype, {B, G, D}), k(DType::kE4M3, {B, G, S, D}),
        v(DType::kE4M3, {B, G, S, D}), positions(DType::kI32, {B}) {
    fill_append_rows(k_new, rng, scales.k);
    fill_append_rows(v_new, rng, scales.v);
    fill_quantized(k, rng, scales.k);
    fill_quantized(v, rng, scales.v);
    positions.i32()[0] = static_cast<std::int32_t>(S - 1);
    positions.i32()[1] = 0;
    positions.i32()[2] = 7;
  }
  // The cache bytes an append of `rows` must leave: `before` with each written row quantized.
  std::vector<std::uint8_t> expected(const std::vector<std::uint8_t>& before, const HostTensor& rows,
                                     float scale) const {
    std::vector<std::uint8_t> want = before;
    const auto* position = reinterpret_cast<const std::int32_t*>(positions.bytes.data());
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t g = 0; g < G; ++g) {
        for (std::int64_t d = 0; d < D; ++d) {
          const float x = rows.get(static_cast<std::size_t>((b * G + g) * D + d));
          want[static_cast<std::size_t>(((b * G + g) * S + position[b]) * D + d)] = float_to_e4m3_bits(x / scale);
        }
      }
    }
    return want;
  }
};

TEST(Fp8KvCacheAppend, QuantizesBitForBitFromEveryStorageDtype) {
  std::mt19937_64 rng(fresh_seed());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const KvScales& scales : {kOddScales, KvScales{}, KvScales{1.0f / 3.0f, 1e-3f}}) {
      for (int which = 0; which < 3; ++which) {  // K and V, K only, V only
        AppendCase c(dtype, rng, scales);
        const auto want_k = which == 2 ? c.k.bytes : c.expected(c.k.bytes, c.k_new, scales.k);
        const auto want_v = which == 1 ? c.v.bytes : c.expected(c.v.bytes, c.v_new, scales.v);
        AppendTensors t;
        if (which != 2) t.k_new = c.k_new.view;
        if (which != 1) t.v_new = c.v_new.view;
        t.k_cache = c.k.view;
        t.v_cache = c.v.view;
        t.positions = c.positions.view;
        t.kv_scales = scales;
        cpu::append_kv(t);
        const std::string what = std::string(dtype_name(dtype)) + " scales=" + std::to_string(scales.k) + "/" +
                                 std::to_string(scales.v) + " which=" + std::to_string(which);
        EXPECT_TRUE(c.k.bytes == want_k) << "k cache: " << what;
        EXPECT_TRUE(c.v.bytes == want_v) << "v cache: " << what;
      }
    }
  }
}

// The rows above hit every rounding case: saturation, subnormals, zeros of both signs.
TEST(Fp8KvCacheAppend, RowsCoverSaturationSubnormalsAndZeros) {
  std::mt19937_64 rng(fresh_seed());
  AppendCase c(DType::kF32, rng, kOddScales);
  cpu::append_kv({c.k_new.view, c.v_new.view, c.k.view, c.v.view, c.positions.view, kOddScales});
  int saturated = 0, subnormal = 0, negative_zero = 0;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t g = 0; g < c.G; ++g) {
      for (std::int64_t d = 0; d < c.D; ++d) {
        const std::int64_t slot = ((b * c.G + g) * c.S + c.positions.i32()[b]) * c.D + d;
        const std::uint8_t code = c.k.bytes[static_cast<std::size_t>(slot)];
        EXPECT_NE(code & 0x7f, 0x7f) << "append wrote a NaN code";
        saturated += (code & 0x7f) == 0x7e;
        subnormal += (code & 0x78) == 0 && (code & 0x07) != 0;
        negative_zero += code == 0x80;
      }
    }
  }
  EXPECT_GT(saturated, 0);
  EXPECT_GT(subnormal, 0);
  EXPECT_GT(negative_zero, 0);
}

TEST(Fp8KvCacheAppend, RejectedCallsLeaveBothCachesUntouched) {
  std::mt19937_64 rng(fresh_seed());
  AppendCase c(DType::kBF16, rng, kOddScales);
  const auto k_before = c.k.bytes, v_before = c.v.bytes;
  auto attempt = [&](AppendTensors t, const std::string& needle) {
    expect_error([&] { cpu::append_kv(t); }, needle);
    EXPECT_TRUE(c.k.bytes == k_before) << needle;
    EXPECT_TRUE(c.v.bytes == v_before) << needle;
  };
  const AppendTensors good{c.k_new.view, c.v_new.view, c.k.view, c.v.view, c.positions.view, kOddScales};
  for (float bad : {0.0f, -2.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    AppendTensors t = good;
    t.kv_scales.v = bad;  // the K side is valid and would be written first
    attempt(t, "kv_scales.v=");
    t = good;
    t.kv_scales.k = bad;
    attempt(t, "kv_scales.k=");
  }
  // A scale other than 1 on a bf16 cache (here the V side) is refused, the e4m3 K side unwritten.
  HostTensor v16(DType::kBF16, {c.B, c.G, c.S, c.D});
  fill_normal(v16, rng);
  const auto v16_before = v16.bytes;
  AppendTensors mixed = good;
  mixed.v_cache = v16.view;
  attempt(mixed, "kv_scales apply to e4m3 caches");
  EXPECT_TRUE(v16.bytes == v16_before);
  // New rows in e4m3 are not taken (append quantizes; it does not copy fp8 bytes).
  HostTensor k8(DType::kE4M3, {c.B, c.G, c.D});
  AppendTensors e4m3_rows = good;
  e4m3_rows.k_new = k8.view;
  attempt(e4m3_rows, "k_new has dtype e4m3");
  // A position out of range in the last sequence: nothing written for the earlier ones either.
  for (std::int32_t bad_position : {static_cast<std::int32_t>(c.S), -1}) {
    c.positions.i32()[2] = bad_position;
    attempt(good, "position");
  }
}

// Append into an e4m3 cache, then decode it: the golden reads the same bytes.
TEST(Fp8KvCacheAppend, AppendThenDecode) {
  std::mt19937_64 rng(fresh_seed());
  DecodeProblem p = fp8_problem(2, 8, 2, 128, 64, DType::kF32, DType::kF32);
  HostTensor k(DType::kE4M3, {2, 2, 64, 128}), v(DType::kE4M3, {2, 2, 64, 128});
  HostTensor k_row(DType::kF32, {2, 2, 128}), v_row(DType::kF32, {2, 2, 128}), pos(DType::kI32, {2});
  const std::int32_t lens[2] = {64, 29};
  for (std::int32_t j = 0; j < 64; ++j) {
    fill_normal(k_row, rng);
    fill_normal(v_row, rng);
    pos.i32()[0] = j;
    pos.i32()[1] = std::min(j, lens[1] - 1);
    cpu::append_kv({k_row.view, v_row.view, k.view, v.view, pos.view, kOddScales});
  }
  HostTensor q(DType::kF32, {2, 8, 128}), out(DType::kF32, {2, 8, 128}), lse(DType::kF32, {2, 8});
  HostTensor lengths(DType::kI32, {2});
  lengths.i32()[0] = lens[0], lengths.i32()[1] = lens[1];
  fill_normal(q, rng);
  DecodeTensors t{q.view, k.view, v.view, lengths.view, out.view, lse.view};
  t.kv_scales = kOddScales;
  const reference::Result golden = reference::decode(p, t);
  const DecodePlan plan = plan_decode(p, cpu_target(2));
  std::vector<std::uint8_t> ws(plan.evidence.workspace_bytes);
  poison(out);
  cpu::decode(plan, t, Workspace{ws.data(), ws.size()});
  const Comparison cmp = compare(out, golden.out);
  EXPECT_EQ(cmp.nan_count, 0u);
  EXPECT_LE(cmp.rel_l2, plan.evidence.rel_l2_tolerance) << describe(cmp);
}

}  // namespace
}  // namespace attnkit::testing
