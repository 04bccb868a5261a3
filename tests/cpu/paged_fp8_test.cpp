// e4m3 (fp8) page pools on the CPU (vLLM's fp8 serving cache): paged decode and extend against the
// float64 golden (both layouts, decode pages read in place and gathered, GQA 1-12, q/out of every
// dtype, windows, soft-cap, sinks, LSE, key splits, ragged query rows, every instruction-set level
// this CPU runs; owned rows quantized from normal draws with scales != 1, every other slot and every
// spare page e4m3's NaN code), paged append's quantization bit for bit across page boundaries, append
// then decode, and the rejected calls, which write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "isa_scope.hpp"
#include "paged_case.hpp"
#include "support/expect_error.hpp"

namespace attnkit::testing {
namespace {

using cpu::simd::Isa;

const KvScales kOddScales{0.02f, 3.5f};  // keys stored ~50x their value, values ~0.3x (subnormals)

struct Fp8PagedSpec {
  PagedSetup setup;  // dtype is set to e4m3
  DType q_dtype = DType::kBF16, out_dtype = DType::kBF16;
  AttentionOptions options = {};
  KvScales scales = kOddScales;
  bool sinks = false;
  std::vector<int> threads = {1, 3};
};

// Output and LSE against the golden, judged by the plan's own tolerance.
void expect_parity(const HostTensor& out, const HostTensor& lse, const reference::Result& golden, double tolerance,
                   const std::string& what) {
  const Comparison cmp = compare(out, golden.out);
  EXPECT_EQ(cmp.nan_count, 0u) << what << ": " << describe(cmp);
  EXPECT_LE(cmp.rel_l2, tolerance) << what << ": " << describe(cmp);
  expect_lse_matches(lse, golden.lse, what);
}

struct PathsSeen {
  int in_place = 0, gathered = 0, split = 0;
};

// One case against the golden: every thread count's plan at every ISA level, outputs poisoned
// before each run, judged by the plan's own tolerance.
void run_fp8_paged(Fp8PagedSpec spec, PathsSeen* seen = nullptr) {
  spec.setup.dtype = DType::kE4M3;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedCase c(spec.setup, rng);
  quantize_owned_rows(c, spec.scales, rng);
  PagedDecodeProblem p = paged_decode_problem(c, c.max_length());
  p.q_dtype = spec.q_dtype;
  p.out_dtype = spec.out_dtype;
  p.options = spec.options;
  const PagedSetup& s = c.setup;
  HostTensor q(spec.q_dtype, {s.batch, s.heads, s.head_dim}), out(spec.out_dtype, {s.batch, s.heads, s.head_dim});
  HostTensor lse(DType::kF32, {s.batch, s.heads});
  fill_normal(q, rng);
  const HostTensor sinks = random_sinks(spec.sinks ? s.heads : 0, rng);
  PagedDecodeTensors t{q.view, c.cache(), out.view, lse.view};
  if (spec.sinks) t.sinks = sinks.view;
  t.kv_scales = spec.scales;
  const reference::Result golden = reference::paged_decode(p, t);
  const std::string base = to_string(s.layout) + " page=" + std::to_string(s.page_size) + " H=" + std::to_string(s.heads) +
                           "/" + std::to_string(s.kv_heads) + " D=" + std::to_string(s.head_dim) + " q/out " +
                           std::string(dtype_name(spec.q_dtype)) + "/" + std::string(dtype_name(spec.out_dtype)) +
                           " window=" + std::to_string(spec.options.window) + seed_note(seed);
  for (int threads : spec.threads) {
    const PagedDecodePlan plan = plan_paged_decode(p, cpu_target(threads));
    if (seen) {
      (plan.gather_keys == 0 ? seen->in_place : seen->gathered) += 1;
      seen->split += plan.partition.sequence_splits > 1;
    }
    OwnedWorkspace ws(plan.bounds.workspace_bytes);
    for (Isa isa : supported_isas()) {
      ScopedIsa scoped(isa);
      poison(out);
      poison(lse);
      cpu::paged_decode(plan, t, ws.get());
      const std::string what = base + " threads=" + std::to_string(threads) + " splits=" +
                               std::to_string(plan.partition.sequence_splits) + " gather=" +
                               std::to_string(plan.gather_keys) + " isa=" + std::string(cpu::simd::isa_name(isa));
      expect_parity(out, lse, golden, plan.evidence.rel_l2_tolerance, what);
    }
  }
}

PagedSetup setup(PageLayout layout, std::int64_t page, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                 std::vector<std::int32_t> lengths) {
  PagedSetup s;
  s.layout = layout;
  s.page_size = page;
  s.batch = static_cast<std::int64_t>(lengths.size());
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.lengths = std::move(lengths);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Decode

// Pages of 1 and 8 keys are gathered into staging on this host's tiles, pages of 16 and 64 read in
// place (the plan says which; both must be seen).
TEST(PagedFp8Decode, LayoutsPagesAndGroupsMatchGolden) {
  PathsSeen seen;
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 8, 16, 64}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{12, 1}}) {
        Fp8PagedSpec spec;
        spec.setup = setup(layout, page, heads, kv_heads, 64,
                           {static_cast<std::int32_t>(page), 1, 131, static_cast<std::int32_t>(3 * page + 5), 0});
        run_fp8_paged(spec, &seen);
      }
    }
  }
  EXPECT_GT(seen.in_place, 0);
  EXPECT_GT(seen.gathered, 0);
}

TEST(PagedFp8Decode, HeadDimsAndDtypes) {
  for (std::int64_t d : {128, 256, 72, 8}) {
    Fp8PagedSpec spec;
    spec.setup = setup(PageLayout::kHND, 16, 8, 2, d, {77, 16, 3});
    run_fp8_paged(spec);
  }
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      Fp8PagedSpec spec;
      spec.setup = setup(PageLayout::kNHD, 32, 8, 2, 128, {45, 100});
      spec.q_dtype = q, spec.out_dtype = out;
      spec.threads = {2};
      run_fp8_paged(spec);
    }
  }
}

TEST(PagedFp8Decode, WindowSoftCapSinksAndSplits) {
  for (std::int64_t window : {1, 17, 300}) {
    Fp8PagedSpec spec;
    spec.setup = setup(PageLayout::kHND, 16, 8, 2, 128, {400, 40, 1});
    spec.options.window = window;
    spec.sinks = window == 17;
    run_fp8_paged(spec);
  }
  Fp8PagedSpec capped;
  capped.setup = setup(PageLayout::kNHD, 16, 8, 1, 64, {200, 63});
  capped.options.softcap = 30.0f;
  capped.options.scale = 0.5f;
  capped.scales = {0.004f, 0.01f};  // stored values near +-448: scores past the cap
  run_fp8_paged(capped);
  // One long sequence over several threads: key splits and their merge (some splits empty below).
  PathsSeen seen;
  Fp8PagedSpec split;
  split.setup = setup(PageLayout::kHND, 64, 8, 1, 128, {3001});
  split.threads = {4, 7};
  run_fp8_paged(split, &seen);
  split.setup.lengths = {3001, 200};
  split.setup.batch = 2;
  split.sinks = true;
  run_fp8_paged(split, &seen);
  EXPECT_GT(seen.split, 0);
}

TEST(PagedFp8Decode, LongSequenceAndUnitScales) {
  Fp8PagedSpec spec;
  spec.setup = setup(PageLayout::kHND, 16, 4, 1, 64, {70001});
  spec.threads = {2};
  run_fp8_paged(spec);
  Fp8PagedSpec unit;
  unit.setup = setup(PageLayout::kNHD, 16, 8, 2, 64, {100, 51});
  unit.scales = {};
  run_fp8_paged(unit);
}

// ---------------------------------------------------------------------------------------------
// Append

struct Fp8Append {
  HostTensor k_new, v_new, cu, start;
};

// Sequence b's last n[b] keys are the new tokens (its pages are already in the table). Rows mix
// normal draws, values past 448 x scale (saturating), e4m3 subnormals and signed zeros.
Fp8Append make_rows(const PagedCase& c, const std::vector<std::int32_t>& n, DType row_dtype, KvScales scales,
                    std::mt19937_64& rng) {
  const PagedSetup& s = c.setup;
  Fp8Append a{HostTensor(row_dtype, {1}), HostTensor(row_dtype, {1}), HostTensor(DType::kI32, {s.batch + 1}),
              HostTensor(DType::kI32, {s.batch})};
  a.cu.i32()[0] = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    a.cu.i32()[b + 1] = a.cu.i32()[b] + n[static_cast<std::size_t>(b)];
    a.start.i32()[b] = s.lengths[static_cast<std::size_t>(b)] - n[static_cast<std::size_t>(b)];
  }
  const std::int64_t rows = a.cu.i32()[s.batch];
  a.k_new = HostTensor(row_dtype, {rows, s.kv_heads, s.head_dim});
  a.v_new = HostTensor(row_dtype, {rows, s.kv_heads, s.head_dim});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [t, scale] : {std::pair{&a.k_new, scales.k}, std::pair{&a.v_new, scales.v}}) {
    for (std::size_t i = 0; i < t->numel(); ++i) {
      const float x = normal(rng);
      switch (i % 8) {
        case 5: t->set(i, x * 600.0f * scale); break;    // saturates at +-448
        case 6: t->set(i, x * 0.004f * scale); break;    // e4m3 subnormals
        case 7: t->set(i, i % 16 == 7 ? -0.0f : 0.0f); break;
        default: t->set(i, x * scale); break;
      }
    }
  }
  return a;
}

// The pool bytes the append must leave: e4m3(x / scale) of each new element x as stored in its row
// dtype (read back as f32), every other byte as it was.
std::vector<std::uint8_t> expected_pool(const PagedCase& c, const HostTensor& pool, const HostTensor& src,
                                        const Fp8Append& a, float scale) {
  std::vector<std::uint8_t> bytes = pool.bytes;
  const PagedSetup& s = c.setup;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t i = a.cu.view.as<std::int32_t>()[b]; i < a.cu.view.as<std::int32_t>()[b + 1]; ++i) {
      const std::int64_t pos = a.start.view.as<std::int32_t>()[b] + (i - a.cu.view.as<std::int32_t>()[b]);
      for (std::int64_t h = 0; h < s.kv_heads; ++h) {
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          const float x = src.get(static_cast<std::size_t>((i * s.kv_heads + h) * s.head_dim + d));
          bytes[c.row(b, h, pos) + static_cast<std::size_t>(d)] = float_to_e4m3_bits(x / scale);
        }
      }
    }
  }
  return bytes;
}

PagedAppendTensors append_tensors(PagedCase& c, Fp8Append& a, KvScales scales) {
  PagedAppendTensors t{a.k_new.view, a.v_new.view, a.cu.view, a.start.view, c.k_pages.view, c.v_pages.view, c.table.view};
  t.kv_scales = scales;
  return t;
}

TEST(PagedFp8Append, QuantizesEveryRowDtypeBitForBitAcrossPages) {
  const KvScales scales{0.25f, 1.5f};
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 8, 16}) {
      for (DType row_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s = setup(layout, page, 8, 2, 72, {21, 9, 1, 40});
        s.dtype = DType::kE4M3;
        PagedCase c(s, rng);
        Fp8Append a = make_rows(c, {13, 9, 1, 0}, row_dtype, scales, rng);  // crossing pages, a whole sequence, none
        const auto k_want = expected_pool(c, c.k_pages, a.k_new, a, scales.k);
        const auto v_want = expected_pool(c, c.v_pages, a.v_new, a, scales.v);
        cpu::paged_append_kv(c.spec, append_tensors(c, a, scales));
        const std::string what = to_string(layout) + " page=" + std::to_string(page) + " rows " +
                                 std::string(dtype_name(row_dtype)) + seed_note(seed);
        EXPECT_EQ(c.k_pages.bytes, k_want) << what;
        EXPECT_EQ(c.v_pages.bytes, v_want) << what;
      }
    }
  }
}

// A K-only append reads no V scale; then decode over the appended pools matches the golden.
TEST(PagedFp8Append, AppendThenDecode) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s = setup(PageLayout::kHND, 16, 8, 2, 128, {50, 17});
  s.dtype = DType::kE4M3;
  PagedCase c(s, rng);
  quantize_owned_rows(c, kOddScales, rng);
  Fp8Append a = make_rows(c, {3, 17}, DType::kBF16, kOddScales, rng);
  PagedAppendTensors k_only = append_tensors(c, a, {kOddScales.k, std::numeric_limits<float>::quiet_NaN()});
  k_only.v_new = {};
  cpu::paged_append_kv(c.spec, k_only);
  PagedAppendTensors v_only = append_tensors(c, a, {0.0f, kOddScales.v});
  v_only.k_new = {};
  cpu::paged_append_kv(c.spec, v_only);

  PagedDecodeProblem p = paged_decode_problem(c, 50);
  p.q_dtype = p.out_dtype = DType::kBF16;
  HostTensor q(DType::kBF16, {2, 8, 128}), out(DType::kBF16, {2, 8, 128}), lse(DType::kF32, {2, 8});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  PagedDecodeTensors t{q.view, c.cache(), out.view, lse.view};
  t.kv_scales = kOddScales;
  const PagedDecodePlan plan = plan_paged_decode(p, cpu_target(2));
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  cpu::paged_decode(plan, t, ws.get());
  const reference::Result golden = reference::paged_decode(p, t);
  expect_parity(out, lse, golden, plan.evidence.rel_l2_tolerance, seed_note(seed));
}

// ---------------------------------------------------------------------------------------------
// Rejections: an Error with a Fix, and not one byte written

TEST(PagedFp8Append, RejectedCallsLeaveBothPoolsUntouched) {
  std::mt19937_64 rng(fresh_seed());
  PagedSetup s = setup(PageLayout::kNHD, 16, 8, 2, 64, {20, 5});
  s.dtype = DType::kE4M3;
  PagedCase c(s, rng);
  Fp8Append a = make_rows(c, {2, 1}, DType::kF16, kOddScales, rng);
  HostTensor e4m3_rows(DType::kE4M3, {3, 2, 64});
  const auto k_before = c.k_pages.bytes, v_before = c.v_pages.bytes;
  auto expect_untouched = [&](const std::string& what) {
    EXPECT_EQ(c.k_pages.bytes, k_before) << what;
    EXPECT_EQ(c.v_pages.bytes, v_before) << what;
  };
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    expect_error([&] { cpu::paged_append_kv(c.spec, append_tensors(c, a, {1.0f, bad})); }, "kv_scales.v=");
    expect_untouched("v scale " + std::to_string(bad));
  }
  PagedAppendTensors fp8_rows = append_tensors(c, a, kOddScales);
  fp8_rows.v_new = e4m3_rows.view;
  expect_error([&] { cpu::paged_append_kv(c.spec, fp8_rows); }, "v_new has dtype e4m3 for an e4m3 pool");
  expect_untouched("e4m3 rows");

  // A bf16 pool: rows of its own dtype only, and scales of 1.
  PagedSetup plain_setup = s;
  plain_setup.dtype = DType::kBF16;
  PagedCase plain(plain_setup, rng);
  Fp8Append bf16_rows = make_rows(plain, {2, 1}, DType::kBF16, {}, rng);
  const auto plain_before = plain.k_pages.bytes;
  expect_error([&] { cpu::paged_append_kv(plain.spec, append_tensors(plain, bf16_rows, {2.0f, 1.0f})); },
               "kv_scales apply to e4m3 caches");
  PagedAppendTensors f16_rows = append_tensors(plain, a, {});
  expect_error([&] { cpu::paged_append_kv(plain.spec, f16_rows); }, "k_new has dtype f16, expected bf16");
  EXPECT_EQ(plain.k_pages.bytes, plain_before);
}

TEST(PagedFp8Decode, BadScalesAreRejectedBeforeAnyWrite) {
  std::mt19937_64 rng(fresh_seed());
  PagedSetup s = setup(PageLayout::kHND, 16, 8, 2, 64, {20, 5});
  s.dtype = DType::kE4M3;
  PagedCase c(s, rng);
  PagedDecodeProblem p = paged_decode_problem(c, 20);
  p.q_dtype = p.out_dtype = DType::kBF16;
  HostTensor q(DType::kBF16, {2, 8, 64}), out(DType::kBF16, {2, 8, 64}), lse(DType::kF32, {2, 8});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  const auto out_before = out.bytes, lse_before = lse.bytes;
  const PagedDecodePlan plan = plan_paged_decode(p, cpu_target(2));
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  for (KvScales bad : {KvScales{0.0f, 1.0f}, KvScales{1.0f, -2.0f}, KvScales{std::numeric_limits<float>::infinity(), 1.0f}}) {
    PagedDecodeTensors t{q.view, c.cache(), out.view, lse.view};
    t.kv_scales = bad;
    expect_error([&] { cpu::paged_decode(plan, t, ws.get()); }, "is not a finite number > 0");
    EXPECT_EQ(out.bytes, out_before);
    EXPECT_EQ(lse.bytes, lse_before);
  }
}

// ---------------------------------------------------------------------------------------------
// Extend: ragged multi-token queries against an e4m3 pool

struct Fp8ExtendSpec {
  PagedSetup setup;
  std::vector<std::int32_t> q_lens;
  std::int64_t max_q_len = 17, window = 0, pad_rows = 2;
  DType io_dtype = DType::kBF16;
  KvScales scales = kOddScales;
  bool sinks = false;
  std::vector<int> threads = {1, 4};
};

// Rows past cu_seqlens_q[batch] (pad_rows) must keep their poison.
void run_fp8_extend(Fp8ExtendSpec spec, int* split_plans = nullptr) {
  spec.setup.dtype = DType::kE4M3;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedCase c(spec.setup, rng);
  quantize_owned_rows(c, spec.scales, rng);
  const PagedSetup& s = c.setup;
  ExtendProblem p = extend_problem(c, spec.max_q_len, c.max_length());
  p.q_dtype = p.out_dtype = spec.io_dtype;
  p.options.window = spec.window;
  HostTensor cu(DType::kI32, {s.batch + 1});
  cu.i32()[0] = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) cu.i32()[b + 1] = cu.i32()[b] + spec.q_lens[static_cast<std::size_t>(b)];
  const std::int64_t rows = cu.i32()[s.batch], total = rows + spec.pad_rows;
  HostTensor q(spec.io_dtype, {total, s.heads, s.head_dim}), out(spec.io_dtype, {total, s.heads, s.head_dim});
  HostTensor lse(DType::kF32, {total, s.heads});
  fill_normal(q, rng);
  const HostTensor sinks = random_sinks(spec.sinks ? s.heads : 0, rng);
  ExtendTensors t{q.view, cu.view, c.cache(), out.view, lse.view};
  if (spec.sinks) t.sinks = sinks.view;
  t.kv_scales = spec.scales;
  const reference::Result golden = reference::extend(p, t);
  const std::string base = to_string(s.layout) + " page=" + std::to_string(s.page_size) + " H=" + std::to_string(s.heads) +
                           "/" + std::to_string(s.kv_heads) + " D=" + std::to_string(s.head_dim) +
                           " window=" + std::to_string(spec.window) + seed_note(seed);
  for (int threads : spec.threads) {
    const ExtendPlan plan = plan_extend(p, cpu_target(threads));
    if (split_plans) *split_plans += plan.partition.sequence_splits > 1;
    OwnedWorkspace ws(plan.bounds.workspace_bytes);
    for (Isa isa : supported_isas()) {
      ScopedIsa scoped(isa);
      poison(out);
      poison(lse);
      cpu::extend(plan, t, ws.get());
      const std::string what = base + " threads=" + std::to_string(threads) + " splits=" +
                               std::to_string(plan.partition.sequence_splits) + " isa=" +
                               std::string(cpu::simd::isa_name(isa));
      HostTensor head(spec.io_dtype, {rows, s.heads, s.head_dim}), head_lse(DType::kF32, {rows, s.heads});
      std::copy_n(out.bytes.begin(), head.bytes.size(), head.bytes.begin());
      std::copy_n(lse.bytes.begin(), head_lse.bytes.size(), head_lse.bytes.begin());
      expect_parity(head, head_lse, golden, plan.evidence.rel_l2_tolerance, what);
      EXPECT_LE(plan.evidence.rel_l2_tolerance, 2e-2) << what << ": f16's rules, not e4m3 prefill's";
      for (std::size_t i = head.numel(); i < out.numel(); ++i) {
        ASSERT_TRUE(std::isnan(out.get(i))) << what << ": padding row element " << i << " was written";
      }
    }
  }
}

TEST(PagedFp8Extend, RaggedRowsOnEveryLayoutAndPageSizeMatchGolden) {
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16, 64}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) {
        Fp8ExtendSpec spec;
        // q_len 0 (idle), 1 (decode), q_len == length (a whole prefill), and mid-page starts.
        spec.setup = setup(layout, page, heads, kv_heads, 64, {40, 1, 17, 131, 0});
        spec.q_lens = {17, 1, 17, 5, 0};
        run_fp8_extend(spec);
      }
    }
  }
}

TEST(PagedFp8Extend, HeadDimsWindowsSinksDtypesAndSplits) {
  for (std::int64_t d : {128, 72}) {
    Fp8ExtendSpec spec;
    spec.setup = setup(PageLayout::kHND, 16, 8, 2, d, {300, 20});
    spec.q_lens = {9, 20};
    spec.max_q_len = 20;
    run_fp8_extend(spec);
  }
  for (std::int64_t window : {1, 33}) {
    Fp8ExtendSpec spec;
    spec.setup = setup(PageLayout::kNHD, 16, 8, 2, 64, {300, 50});
    spec.q_lens = {12, 3};
    spec.window = window;
    spec.sinks = window == 33;
    run_fp8_extend(spec);
  }
  for (DType io : {DType::kF32, DType::kF16}) {
    Fp8ExtendSpec spec;
    spec.setup = setup(PageLayout::kHND, 32, 8, 2, 64, {100, 33});
    spec.q_lens = {4, 7};
    spec.io_dtype = io;
    spec.scales = {0.004f, 0.01f};  // stored values near +-448
    run_fp8_extend(spec);
  }
  int split_plans = 0;
  Fp8ExtendSpec split;  // one sequence, few query rows, many threads: key splits and their merge
  split.setup = setup(PageLayout::kHND, 16, 8, 1, 128, {5000});
  split.q_lens = {3};
  split.max_q_len = 4;
  split.pad_rows = 1;  // max_total_q = 4 rows
  split.threads = {4, 7};
  run_fp8_extend(split, &split_plans);
  EXPECT_GT(split_plans, 0);
}

// The plan's evidence counts what memory holds: an e4m3 pool's 1 byte per K/V element (the CPU
// widens rows to f16 in cache, after the read) and q in its own dtype.
TEST(PagedFp8Extend, EvidenceCountsThePoolsBytesAndQsDtype) {
  ExtendProblem p;
  p.batch = 2;
  p.num_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.cache = PagedCacheSpec{64, 16, 32, PageLayout::kHND};
  p.max_q_len = 5;
  p.kv_len = 300;  // every key is seen by a sequence's last row (causal, bottom-right, no window)
  auto read_bytes = [&](DType kv, DType q) {
    ExtendProblem x = p;
    x.kv_dtype = kv;
    x.q_dtype = x.out_dtype = q;
    return plan_extend(x, cpu_target(2)).evidence.traffic.global_read_bytes;
  };
  const std::uint64_t kv_elements = 2 * p.batch * p.kv_heads * p.kv_len * p.head_dim;
  const std::uint64_t q_elements = p.batch * p.num_heads * p.max_q_len * p.head_dim;
  EXPECT_EQ(read_bytes(DType::kF16, DType::kBF16) - read_bytes(DType::kE4M3, DType::kBF16), kv_elements);
  EXPECT_EQ(read_bytes(DType::kE4M3, DType::kF32) - read_bytes(DType::kE4M3, DType::kBF16), 2 * q_elements);
  EXPECT_EQ(read_bytes(DType::kBF16, DType::kF32) - read_bytes(DType::kBF16, DType::kBF16), 2 * q_elements);
}

TEST(PagedFp8Extend, BadScalesAreRejectedBeforeAnyWrite) {
  std::mt19937_64 rng(fresh_seed());
  PagedSetup s = setup(PageLayout::kHND, 16, 8, 2, 64, {20, 5});
  s.dtype = DType::kE4M3;
  PagedCase c(s, rng);
  ExtendProblem p = extend_problem(c, 4, 20);
  p.q_dtype = p.out_dtype = DType::kBF16;
  HostTensor q(DType::kBF16, {6, 8, 64}), out(DType::kBF16, {6, 8, 64}), lse(DType::kF32, {6, 8});
  HostTensor cu(DType::kI32, {3});
  cu.i32()[0] = 0, cu.i32()[1] = 4, cu.i32()[2] = 6;
  fill_normal(q, rng);
  poison(out);
  const auto out_before = out.bytes;
  const ExtendPlan plan = plan_extend(p, cpu_target(2));
  OwnedWorkspace ws(plan.bounds.workspace_bytes);
  ExtendTensors t{q.view, cu.view, c.cache(), out.view, lse.view};
  t.kv_scales = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  expect_error([&] { cpu::extend(plan, t, ws.get()); }, "kv_scales.k=");
  EXPECT_EQ(out.bytes, out_before);
}

}  // namespace
}  // namespace attnkit::testing
