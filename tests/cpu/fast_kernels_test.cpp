// The fast CPU kernels (split-KV decode, tiled prefill) against the float64 golden, on every
// instruction-set path this CPU supports (ATTNKIT_CPU_ISA picks the path), over the same shape
// lists as the scalar baseline and the GPU prefill tests, plus thread counts and split counts
// that force key splits and their merge.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/fast_isa.hpp"
#include "cpu_case.hpp"
#include "cuda/prefill_shapes.hpp"
#include "isa_scope.hpp"

namespace attnkit::testing {
namespace {

using cpu::simd::Isa;

std::string isa_note(Isa isa) { return " isa=" + std::string(cpu::simd::isa_name(isa)); }

// ---------------------------------------------------------------------------------------------
// Decode

// flip_l1_prefetch: the plan's cpu_l1_prefetch negated, so both row-block prefetch forms run here.
void run_decode(const DecodeProblem& p, const std::vector<std::int32_t>& lengths, float stddev = 1.0f,
                int threads = 2, bool flip_l1_prefetch = false) {
  DecodePlan plan = plan_decode(p, cpu_target(threads));
  if (flip_l1_prefetch) plan.partition.cpu_l1_prefetch = !plan.partition.cpu_l1_prefetch;
  ASSERT_EQ(plan.partition.family, KernelFamily::kSplitKvDecode);
  for (Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    DecodeCase c(p, lengths, stddev);
    std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
    cpu::decode(plan, c.tensors(), Workspace{workspace.data(), workspace.size()});
    const reference::Result golden = reference::decode(p, c.tensors());
    const std::string what = "fast decode H=" + std::to_string(p.num_heads) + " KV=" + std::to_string(p.kv_heads) +
                             " D=" + std::to_string(p.head_dim) + " window=" + std::to_string(p.options.window) +
                             " splits=" + std::to_string(plan.partition.sequence_splits) + " threads=" +
                             std::to_string(threads) + " dtype=" + std::string(dtype_name(p.kv_dtype)) +
                             " l1_prefetch=" + std::to_string(plan.partition.cpu_l1_prefetch) + isa_note(isa) +
                             seed_note(c.seed);
    expect_matches_golden(c.out, golden.out, coarsest({p.q_dtype, p.kv_dtype, p.out_dtype}), what);
    expect_lse_matches(c.lse, golden.lse, what);
  }
}

TEST(FastDecode, HeadDims) {
  for (std::int64_t d : {64, 80, 96, 128, 256}) run_decode(decode_problem(2, 4, 2, d, 67), {67, 30});
  run_decode(decode_problem(1, 2, 1, 8, 33), {33});  // shorter than one AVX-512 vector
  run_decode(decode_problem(1, 2, 1, 24, 33), {33});  // a partial vector at the tail
}

TEST(FastDecode, GroupedQueryRatiosAndMultiQuery) {
  for (std::int64_t group : {1, 4, 8}) run_decode(decode_problem(2, 8, 8 / group, 64, 45), {45, 11});
  run_decode(decode_problem(1, 12, 1, 64, 50), {50});  // group 12: chunks of 8 and 4
  run_decode(decode_problem(1, 32, 1, 128, 70), {70});  // group 32: two chunks of 16
  run_decode(decode_problem(1, 6, 2, 64, 40), {40});  // group 3: chunks of 2 and 1
}

TEST(FastDecode, SlidingWindows) {
  for (std::int64_t window : {1, 17, 1000}) {
    DecodeProblem p = decode_problem(3, 4, 2, 64, 90);
    p.options.window = window;
    run_decode(p, {90, 40, 1});
  }
}

TEST(FastDecode, LengthsOneOddAndThousands) {
  run_decode(decode_problem(1, 2, 1, 64, 1), {1});
  run_decode(decode_problem(1, 4, 2, 80, 37), {37});
  run_decode(decode_problem(1, 4, 1, 128, 4099), {4099});
}

TEST(FastDecode, MixedLengthsIncludingEmpty) {
  DecodeProblem p = decode_problem(5, 4, 2, 64, 130);
  p.kv_len = 120;  // the plan bound is below the cache capacity
  run_decode(p, {120, 0, 1, 77, 119});
}

TEST(FastDecode, KeySplitsAndTheirMerge) {
  // One (sequence, KV head) unit for 4 and 7 threads: the planner splits the keys.
  for (int threads : {4, 7}) {
    DecodeProblem p = decode_problem(1, 8, 1, 128, 3001);
    const DecodePlan plan = plan_decode(p, cpu_target(threads));
    EXPECT_GT(plan.partition.sequence_splits, 1u) << "threads=" << threads;
    run_decode(p, {3001}, 1.0f, threads);
    // Shorter runs than the plan bound leave some splits empty (their state is -inf, weight 0).
    run_decode(p, {200}, 1.0f, threads);
    p.options.window = 700;
    run_decode(p, {3001}, 1.0f, threads);
  }
}

// Shapes the balance rule (cpu_rules.cpp) now splits although their (sequence, KV head) tasks
// already divide over the threads: batch 1 of llama3-8b's heads, awkward lengths, a window, mixed
// lengths; every storage dtype and every ISA level, out and LSE against the golden.
// One random case and golden for all ISA levels (the inputs are large enough that drawing them
// per level would dominate the test), outputs poisoned before each level's run.
void run_split_decode(const DecodeProblem& p, const std::vector<std::int32_t>& lengths, int threads,
                      std::uint32_t min_splits = 2) {
  const DecodePlan plan = plan_decode(p, cpu_target(threads));
  ASSERT_GE(plan.partition.sequence_splits, min_splits)
      << "the case should exercise split-KV and its merge: " << to_table(plan);
  DecodeCase c(p, lengths);
  const reference::Result golden = reference::decode(p, c.tensors());
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  for (Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    poison(c.out);
    poison(c.lse);
    cpu::decode(plan, c.tensors(), Workspace{workspace.data(), workspace.size()});
    const std::string what = "split decode H=" + std::to_string(p.num_heads) + " KV=" + std::to_string(p.kv_heads) +
                             " D=" + std::to_string(p.head_dim) + " kv_len=" + std::to_string(p.kv_len) +
                             " window=" + std::to_string(p.options.window) + " lengths[0]=" +
                             std::to_string(lengths[0]) + " splits=" + std::to_string(plan.partition.sequence_splits) +
                             " threads=" + std::to_string(threads) + " dtype=" + std::string(dtype_name(p.kv_dtype)) +
                             isa_note(isa) + seed_note(c.seed);
    expect_matches_golden(c.out, golden.out, coarsest({p.q_dtype, p.kv_dtype, p.out_dtype}), what);
    expect_lse_matches(c.lse, golden.lse, what);
  }
}

TEST(FastDecode, BalancedSplitsAtBatchOne) {
  // llama3-8b heads (8 tasks on 2 threads): 3 splits of 1536 keys; full, odd and one-key runs.
  for (DType t : {DType::kBF16, DType::kF32}) run_split_decode(decode_problem(1, 32, 8, 128, 4099, t), {4099}, 2, 3);
  for (DType t : {DType::kBF16, DType::kF16}) {
    run_split_decode(decode_problem(1, 32, 8, 64, 4099, t), {2049}, 2, 3);  // the second split holds one key
    run_split_decode(decode_problem(1, 32, 8, 64, 4099, t), {1}, 2, 3);     // every split but the first empty
  }
  // 3 threads: 4 splits; 16 threads: too few keys for 8 tasks a thread of >= 4 tiles, still split.
  run_split_decode(decode_problem(1, 32, 8, 64, 5003, DType::kBF16), {5003}, 3, 4);
  run_split_decode(decode_problem(1, 32, 8, 64, 8200, DType::kF32), {8200}, 16);
  // A window of 6000 keys of 9000: three splits over the window, none over the keys before it.
  DecodeProblem window = decode_problem(1, 32, 8, 64, 9000, DType::kBF16);
  window.options.window = 6000;
  run_split_decode(window, {9000}, 2, 3);
  run_split_decode(window, {5000}, 2, 3);  // shorter than the window: its last split is empty
  // Group 3, head_dim 80 on 7 threads; batch 2 with an empty and a one-key sequence on 3 threads.
  run_split_decode(decode_problem(1, 6, 2, 80, 5003, DType::kBF16), {5003}, 7);
  run_split_decode(decode_problem(2, 32, 8, 64, 9000, DType::kBF16), {9000, 0}, 3, 3);
  run_split_decode(decode_problem(2, 32, 8, 64, 9000, DType::kF32), {1, 8999}, 3, 3);
}

TEST(FastDecode, SoftCapAndScale) {
  DecodeProblem p = decode_problem(2, 4, 2, 96, 70);
  p.options.softcap = 5.0f;
  p.options.scale = 0.3f;
  run_decode(p, {70, 33}, 3.0f);  // large scores, so the cap bites
}

TEST(FastDecode, StorageDtypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    run_decode(decode_problem(2, 8, 2, 128, 300, t), {300, 129});
    DecodeProblem mixed = decode_problem(1, 4, 4, 64, 40, t);
    mixed.q_dtype = DType::kF32;
    mixed.out_dtype = t == DType::kBF16 ? DType::kF16 : DType::kBF16;
    run_decode(mixed, {40});
  }
}

TEST(FastDecode, AdversarialScores) {
  run_decode(decode_problem(1, 4, 2, 64, 200), {200}, 8.0f);   // large magnitudes: a few keys dominate
  run_decode(decode_problem(1, 4, 2, 64, 200), {200}, 1e-3f);  // near-equal scores: a near-uniform mix
}

// ---------------------------------------------------------------------------------------------
// Prefill

void check_prefill(PrefillCase& c, int threads, const std::string& what) {
  const PrefillPlan plan = plan_prefill(c.problem, cpu_target(threads));
  ASSERT_EQ(plan.partition.family, KernelFamily::kCooperativeTiled);
  const reference::Result golden = reference::prefill(c.problem, c.tensors());
  for (Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    poison(c.out);
    poison(c.lse);
    cpu::prefill(plan, c.tensors());
    EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << what << isa_note(isa) << " "
                                                                              << c.note();
    EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << what << isa_note(isa) << " " << c.note();
  }
}

class FastPrefillShapes : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(FastPrefillShapes, MatchesGoldenOnEveryIsa) {
  PrefillCase c(GetParam());
  check_prefill(c, 2, "fast prefill");
}

INSTANTIATE_TEST_SUITE_P(Shapes, FastPrefillShapes, ::testing::ValuesIn(prefill_shapes()),
                         [](const ::testing::TestParamInfo<PrefillShape>& info) { return info.param.name; });

PrefillShape shape(std::string name, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
                   std::int64_t q_len, std::int64_t kv_len, bool causal, DType dtype = DType::kF32) {
  PrefillShape s{std::move(name), batch, heads, kv_heads, d, q_len, kv_len, causal, dtype, dtype};
  return s;
}

TEST(FastPrefill, HeadDimsAndF32) {
  for (std::int64_t d : {8, 24, 64, 80, 96, 128, 256}) {
    PrefillCase c(shape("d" + std::to_string(d), 1, 4, 2, d, 37, 53, true));
    check_prefill(c, 2, "head_dim " + std::to_string(d));
  }
}

TEST(FastPrefill, WindowsOneMidAndLongerThanTheSequence) {
  for (std::int64_t window : {1, 40, 5000}) {
    for (bool causal : {true, false}) {
      PrefillShape s = shape("window", 1, 4, 1, 64, 150, 170, causal, DType::kBF16);
      s.window = window;
      PrefillCase c(s);
      check_prefill(c, 2, "window " + std::to_string(window) + (causal ? " causal" : ""));
    }
  }
}

TEST(FastPrefill, LengthOneAndSeveralThousand) {
  PrefillCase one(shape("len1", 2, 4, 4, 128, 1, 1, true));
  check_prefill(one, 2, "length 1");
  PrefillCase decode_like(shape("q1_long_kv", 1, 8, 2, 64, 1, 900, true, DType::kF16));
  check_prefill(decode_like, 2, "one query row, 900 keys");
  PrefillCase long_seq(shape("long", 1, 2, 1, 64, 2050, 2050, true, DType::kBF16));
  check_prefill(long_seq, 2, "2050 rows causal");
}

TEST(FastPrefill, SoftCapWithMasks) {
  PrefillShape s = shape("softcap", 1, 8, 2, 96, 70, 90, true, DType::kF32);
  s.softcap = 3.0f;
  s.stddev = 3.0f;
  s.window = 25;
  PrefillCase c(s);
  check_prefill(c, 2, "softcap + window");
}

TEST(FastPrefill, ThreadCounts) {
  for (int threads : {1, 3}) {
    PrefillCase c(shape("threads", 2, 4, 2, 64, 65, 65, true, DType::kF16));
    check_prefill(c, threads, "threads " + std::to_string(threads));
  }
}

TEST(FastPrefill, StridedBshdViews) {
  // [batch, seq, heads, dim] storage seen as [batch, heads, seq, dim]: rows are heads * dim apart.
  const std::int64_t B = 2, H = 4, KV = 2, D = 64, S = 45;
  PrefillProblem p = prefill_problem(B, H, KV, D, S, S, true, DType::kBF16);
  auto bshd = [](HostTensor& t, DType dtype, std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) {
    t = HostTensor(dtype, {b, s, h, d});
    TensorView v = t.view;
    v.shape = {b, h, s, d, 0};
    v.strides = {s * h * d, d, h * d, 1, 0};
    return v;
  };
  HostTensor q, k, v, out;
  HostTensor lse(DType::kF32, {B, H, S});
  PrefillTensors t;
  t.q = bshd(q, p.dtype, B, H, S, D);
  t.k = bshd(k, p.dtype, B, KV, S, D);
  t.v = bshd(v, p.dtype, B, KV, S, D);
  t.out = bshd(out, p.dtype, B, H, S, D);
  t.lse = lse.view;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  fill_normal(q, rng);
  fill_normal(k, rng);
  fill_normal(v, rng);
  const reference::Result golden = reference::prefill(p, t);
  const PrefillPlan plan = plan_prefill(p, cpu_target(2));
  for (Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    poison(out);
    cpu::prefill(plan, t);
    HostTensor logical(DType::kF32, {B, H, S, D});
    std::size_t i = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t s = 0; s < S; ++s)
          for (std::int64_t d = 0; d < D; ++d)
            logical.set(i++, out.get(static_cast<std::size_t>(b * t.out.strides[0] + h * t.out.strides[1] +
                                                              s * t.out.strides[2] + d)));
    expect_matches_golden(logical, golden.out, DType::kBF16, "bshd" + isa_note(isa) + seed_note(seed));
  }
}

// ---------------------------------------------------------------------------------------------
// bf16 K/V on the vdpbf16ps path (avx512bf16): key pairs, 32-column blocks and q splits at sizes
// that leave every tail partial, and the real error margins against the f32 path.

TEST(FastBf16, DecodePairTailsAndSplitQ) {
  // head_dim not a multiple of 32 (partial 32-blocks), odd lengths (a lone last key pair), groups
  // that take every row chunk, and an f32/f16 q on a bf16 cache (the hi + lo split of q).
  for (std::int64_t d : {8, 24, 40, 136, 200}) run_decode(decode_problem(2, 6, 2, d, 259, DType::kBF16), {259, 2});
  run_decode(decode_problem(1, 5, 1, 72, 1, DType::kBF16), {1});
  run_decode(decode_problem(1, 20, 1, 64, 97, DType::kBF16), {97});  // group 20: chunks 16 + 4
  for (DType q : {DType::kF32, DType::kF16}) {
    DecodeProblem p = decode_problem(2, 8, 2, 136, 131, DType::kBF16);
    p.q_dtype = q;
    p.out_dtype = DType::kF32;
    run_decode(p, {131, 64});
  }
}

// Groups of 4k heads take the row-block bodies (fast_body_bf16_rows4.hpp for bf16 K/V with
// vdpbf16ps, fast_body_rows4.hpp for f32/f16 K/V and for bf16 K/V on plain AVX-512): 4 keys per
// score step, [key][head] scores, P V in 64-column passes (bf16, f16) or head pairs x passes of up
// to 128 columns (f32 K/V; 232 = passes of 8, 4, 2 and a partial vector). Lengths around its
// steps (4 keys), key pairs and the tiles (256 keys at group 4 and 8, 32 at group 16), head_dim
// with partial vectors and a lone last pass, 1-3 head blocks, soft-cap, window, split q; every
// storage dtype.
TEST(FastDecode, RowBlocksOfFour) {
  for (DType t : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (std::int64_t kv_len : {1, 2, 3, 5, 255, 256, 257, 513}) {
      for (bool flip : {false, true}) {  // with and without the L1 prefetch (CPU round 35)
        run_decode(decode_problem(1, 8, 2, 128, kv_len, t), {static_cast<std::int32_t>(kv_len)}, 1.0f, 2, flip);
      }
    }
    DecodeProblem eight = decode_problem(2, 16, 2, 96, 777, t);  // group 8, two head blocks
    eight.options.window = 300;
    run_decode(eight, {777, 40}, 1.0f, 2, true);
    for (std::int64_t d : {8, 40, 64, 96, 136, 200, 232, 256}) run_decode(decode_problem(2, 8, 2, d, 301, t), {301, 6});
    for (std::int64_t heads : {16, 24, 32}) run_decode(decode_problem(1, heads, 2, 72, 97, t), {97});
    run_decode(decode_problem(1, 16, 1, 128, 70, t), {70});  // group 16: 32-key tiles
    DecodeProblem cap = decode_problem(2, 8, 2, 96, 133, t);
    cap.options.softcap = 5.0f;
    cap.options.scale = 0.3f;
    run_decode(cap, {133, 7}, 3.0f);
    DecodeProblem window = decode_problem(2, 8, 2, 64, 700, t);
    window.options.window = 301;
    run_decode(window, {700, 150});
    run_decode(decode_problem(1, 8, 2, 128, 400, t), {400}, 8.0f);  // a few keys dominate
  }
  for (DType q : {DType::kF32, DType::kF16}) {  // split q on the bf16 cache
    for (std::int64_t d : {104, 128}) {  // 128: the body instance compiled for that head_dim
      DecodeProblem p = decode_problem(2, 8, 2, d, 131, DType::kBF16);
      p.q_dtype = q;
      p.out_dtype = DType::kF32;
      run_decode(p, {131, 1});
    }
  }
}

// Head_dim 128 with bf16 K/V and groups of 4k has its own instance of the row-block body
// (fast_body_bf16_rows4.hpp, kD = 128; CPU round 10 tried a 16-key step body here, in git history
// at f543d52): lengths around 4-, 16- and 32-key steps (odd and even last steps, a last step of 1
// key), 2 and 3 head blocks, soft-cap and scale, windows (tasks that start mid-sequence), key
// splits, peaked scores (the max rises often) and split q.
TEST(FastBf16, DecodeHeadDim128Lengths) {
  for (std::int64_t kv_len : {4, 7, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 1000}) {
    run_decode(decode_problem(2, 8, 2, 128, kv_len, DType::kBF16),
               {static_cast<std::int32_t>(kv_len), static_cast<std::int32_t>(kv_len / 2 + 1)});
  }
  for (std::int64_t heads : {16, 24}) run_decode(decode_problem(2, heads, 2, 128, 77, DType::kBF16), {77, 18});
  DecodeProblem cap = decode_problem(2, 8, 2, 128, 133, DType::kBF16);
  cap.options.softcap = 5.0f;
  cap.options.scale = 0.3f;
  run_decode(cap, {133, 9}, 3.0f);
  DecodeProblem window = decode_problem(2, 8, 2, 128, 700, DType::kBF16);
  window.options.window = 37;
  run_decode(window, {700, 30});
  run_decode(decode_problem(1, 8, 2, 128, 5000, DType::kBF16), {5000}, 8.0f, 1);  // splits of one thread, peaked
  run_decode(decode_problem(1, 8, 2, 128, 5000, DType::kBF16), {4999}, 8.0f, 2);
  for (DType q : {DType::kF32, DType::kF16}) {
    DecodeProblem p = decode_problem(2, 16, 2, 128, 49, DType::kBF16);
    p.q_dtype = q;
    p.out_dtype = DType::kF32;
    run_decode(p, {49, 16}, 4.0f);
  }
}

TEST(FastBf16, PrefillPairTails) {
  for (std::int64_t d : {8, 24, 40, 80, 136}) {
    for (bool causal : {true, false}) {
      PrefillCase c(shape("bf16 d" + std::to_string(d), 1, 6, 2, d, 37, 53, causal, DType::kBF16));
      check_prefill(c, 2, "bf16 pairs head_dim " + std::to_string(d));
    }
  }
  PrefillCase odd(shape("bf16 odd tile", 2, 4, 4, 128, 131, 131, true, DType::kBF16));  // 131 = 128 + 3
  check_prefill(odd, 3, "bf16 pairs odd tile");
}

// bf16 prefill on AMX tiles (fast_body_amx.hpp): head_dim, query rows and keys that leave every
// 32-padding partial, the AMX plan's tiles (up to 512 keys) and row blocks (up to 256 rows) and the
// vector plan's 64-128, causal row blocks
// that skip a tile's 32-row blocks, q shorter than the keys, a window, soft-cap with peaked
// scores, groups 1 to 8. Each case runs on AMX under both plans, outputs poisoned before each run.
TEST(FastAmx, PrefillPaddingTilesAndOptions) {
  if (!cpu::simd::isa_supported(Isa::kAmx)) GTEST_SKIP() << "this CPU (or its kernel) offers no AMX-BF16 tiles";
  std::vector<PrefillShape> shapes;
  for (std::int64_t d : {8, 40, 128, 136, 256}) {
    shapes.push_back(shape("amx d" + std::to_string(d), 1, 8, 2, d, 37, 300, true, DType::kBF16));
  }
  shapes.push_back(shape("amx q<kv group 4", 2, 4, 1, 64, 45, 700, true, DType::kBF16));
  shapes.push_back(shape("amx non-causal group 1", 1, 8, 8, 128, 130, 513, false, DType::kBF16));
  shapes.push_back(shape("amx square 600", 1, 16, 2, 128, 600, 600, true, DType::kBF16));
  // Group 4 at head_dim 128 takes 256-row blocks on AMX (the last one 8 rows).
  const std::string rows_256 = "amx 256-row blocks";
  shapes.push_back(shape(rows_256, 1, 16, 4, 128, 520, 520, true, DType::kBF16));
  PrefillShape window = shape("amx window 100", 1, 8, 2, 128, 600, 600, true, DType::kBF16);
  window.window = 100;
  shapes.push_back(window);
  PrefillShape cap = shape("amx softcap", 1, 8, 2, 96, 70, 290, false, DType::kBF16);
  cap.softcap = 20.0f;
  cap.stddev = 3.0f;
  shapes.push_back(cap);
  PrefillShape out32 = shape("amx f32 out", 1, 4, 2, 128, 33, 257, true, DType::kBF16);
  out32.out_dtype = DType::kF32;
  shapes.push_back(out32);
  for (const PrefillShape& s : shapes) {
    PrefillCase c(s);
    const reference::Result golden = reference::prefill(c.problem, c.tensors());
    PrefillPlan vector_plan;
    {
      ScopedIsa vectors(Isa::kAvx512Bf16);
      vector_plan = plan_prefill(c.problem, cpu_target(2));
    }
    ScopedIsa amx(Isa::kAmx);
    const PrefillPlan amx_plan = plan_prefill(c.problem, cpu_target(2));
    EXPECT_GT(amx_plan.partition.tile_size, vector_plan.partition.tile_size) << s.name;
    if (s.name == rows_256) EXPECT_EQ(amx_plan.partition.rows_per_block, 256u) << to_table(amx_plan);
    for (const PrefillPlan& plan : {amx_plan, vector_plan}) {
      poison(c.out);
      poison(c.lse);
      cpu::prefill(plan, c.tensors());
      const std::string what = s.name + " tile " + std::to_string(plan.partition.tile_size);
      EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << what << " " << c.note();
      EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << what << " " << c.note();
    }
  }
}

// rel-L2 of one output against the golden, on one ISA.
double rel_l2_on(Isa isa, const DecodeProblem& p, DecodeCase& c, const reference::Result& golden) {
  ScopedIsa scoped(isa);
  const DecodePlan plan = plan_decode(p, cpu_target(2));
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  poison(c.out);
  cpu::decode(plan, c.tensors(), Workspace{workspace.data(), workspace.size()});
  expect_lse_matches(c.lse, golden.lse, "margin decode" + isa_note(isa) + seed_note(c.seed));
  return compare(c.out, golden.out).rel_l2;
}

double rel_l2_on(Isa isa, PrefillCase& c, const reference::Result& golden) {
  ScopedIsa scoped(isa);
  poison(c.out);
  cpu::prefill(plan_prefill(c.problem, cpu_target(2)), c.tensors());
  EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << "margin prefill" << isa_note(isa) << " " << c.note();
  return compare(c.out, golden.out).rel_l2;
}

// f32 outputs, so the only bf16 rounding left is the kernel's own (P before P V). The margin
// bound (3e-3, a third of DESIGN's bf16 tolerance) catches a lost q split or a bf16 accumulator;
// the numbers are printed for docs/perf-notes.md.
TEST(FastBf16, ErrorMarginsAgainstTheF32Path) {
  if (!cpu::simd::isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  for (float stddev : {1.0f, 4.0f}) {  // spread and peaked softmax
    for (DType q : {DType::kBF16, DType::kF32}) {
      DecodeProblem p = decode_problem(1, 32, 8, 128, 3000, DType::kBF16);
      p.q_dtype = q;
      p.out_dtype = DType::kF32;
      DecodeCase c(p, {3000}, stddev);
      const reference::Result golden = reference::decode(p, c.tensors());
      const double f32 = rel_l2_on(Isa::kAvx512, p, c, golden), bf = rel_l2_on(Isa::kAvx512Bf16, p, c, golden);
      std::printf("margin decode h32/8 d128 kv3000 q=%s stddev=%.0f: rel_l2 avx512 %.2e avx512bf16 %.2e\n",
                  std::string(dtype_name(q)).c_str(), stddev, f32, bf);
      EXPECT_LE(bf, 3e-3) << "decode q=" << dtype_name(q) << seed_note(c.seed);
    }
    for (bool causal : {true, false}) {
      PrefillShape s = shape("margin", 1, 8, 2, 128, 700, 700, causal, DType::kBF16);
      s.out_dtype = DType::kF32;
      s.stddev = stddev;
      PrefillCase c(s);
      const reference::Result golden = reference::prefill(c.problem, c.tensors());
      const double f32 = rel_l2_on(Isa::kAvx512, c, golden), bf = rel_l2_on(Isa::kAvx512Bf16, c, golden);
      std::printf("margin prefill h8/2 d128 s700 causal=%d stddev=%.0f: rel_l2 avx512 %.2e avx512bf16 %.2e\n",
                  causal ? 1 : 0, stddev, f32, bf);
      EXPECT_LE(bf, 3e-3) << c.note();
      if (cpu::simd::isa_supported(Isa::kAmx)) {
        const double amx = rel_l2_on(Isa::kAmx, c, golden);
        std::printf("margin prefill h8/2 d128 s700 causal=%d stddev=%.0f: rel_l2 amx %.2e\n", causal ? 1 : 0, stddev,
                    amx);
        EXPECT_LE(amx, 3e-3) << "amx " << c.note();
      }
    }
  }
}

TEST(FastKernels, UnknownOrUnsupportedIsaIsRejectedWithAFix) {
  setenv("ATTNKIT_CPU_ISA", "sse9", 1);
  DecodeProblem p = decode_problem(1, 2, 1, 64, 10);
  DecodeCase c(p, {10});
  const std::vector<std::uint8_t> before = snapshot(c.out);
  try {
    cpu::decode(plan_decode(p, cpu_target(1)), c.tensors());
    ADD_FAILURE() << "an unknown ATTNKIT_CPU_ISA was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << e.what();
  }
  unsetenv("ATTNKIT_CPU_ISA");
  EXPECT_EQ(snapshot(c.out), before) << "a rejected call wrote its output";
}

TEST(FastKernels, PlannerPicksTheFastFamiliesAndHonoursScalar) {
  const DecodeProblem d = decode_problem(1, 32, 8, 128, 4096, DType::kBF16);
  EXPECT_EQ(plan_decode(d, cpu_target(2)).partition.family, KernelFamily::kSplitKvDecode);
  EXPECT_EQ(plan_decode(d, cpu_target(2)).partition.rows_per_block, 4u);
  EXPECT_EQ(plan_decode(d, cpu_target(2), KernelFamily::kScalarOnline).partition.family, KernelFamily::kScalarOnline);
  const PrefillProblem p = prefill_problem(1, 32, 8, 128, 1024, 1024, true, DType::kBF16);
  EXPECT_EQ(plan_prefill(p, cpu_target(2)).partition.family, KernelFamily::kCooperativeTiled);
  EXPECT_EQ(plan_prefill(p, cpu_target(2), KernelFamily::kScalarOnline).partition.family,
            KernelFamily::kScalarOnline);
}

}  // namespace
}  // namespace attnkit::testing
