// e4m3 (fp8) page pools on the GPU: paged decode against the float64 golden (both layouts, pages
// of 1 / 16 / 32 / 64 keys, page runs as TMA boxes and the cp.async copy ring, GQA 1 / 4 / 8 / 16,
// head_dim 64 / 128 / 256, q/out of every dtype, window, soft-cap, sinks, key splits; owned rows
// quantized with scales != 1, every other slot and spare page e4m3's NaN code), extend's ragged rows
// against the golden, and paged append into e4m3 pools bit for bit against the CPU's quantization.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "paged_support.hpp"

namespace attnkit::testing::paged_cuda {
namespace {

const KvScales kOddScales{0.02f, 3.5f};  // keys stored ~50x their value, values ~0.3x (subnormals)

struct Fp8Variant {
  PageLayout layout = PageLayout::kHND;
  std::int64_t page = 16, heads = 8, kv_heads = 2, head_dim = 128;
  std::vector<std::int32_t> lengths = {0, 1, 37, 300, 64, 129};
  DType q_dtype = DType::kBF16, out_dtype = DType::kBF16;
  std::int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  KvScales scales = kOddScales;
};

struct PathsSeen {
  int boxes = 0, ring = 0, split = 0;
};

void run_fp8_paged(const Fp8Variant& v, PathsSeen& seen) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = v.layout;
  s.page_size = v.page;
  s.batch = static_cast<std::int64_t>(v.lengths.size());
  s.heads = v.heads;
  s.kv_heads = v.kv_heads;
  s.head_dim = v.head_dim;
  s.dtype = DType::kE4M3;
  s.lengths = v.lengths;
  PagedCase c(s, rng);
  quantize_owned_rows(c, v.scales, rng);
  PagedDecodeProblem problem = paged_decode_problem(c, c.max_length());
  problem.q_dtype = v.q_dtype;
  problem.out_dtype = v.out_dtype;
  problem.options.window = v.window;
  problem.options.softcap = v.softcap;
  const PagedDecodePlan plan = plan_paged_decode(problem, cuda::target());
  (plan.page_boxes ? seen.boxes : seen.ring) += 1;
  seen.split += plan.partition.sequence_splits > 1;

  HostTensor q(v.q_dtype, {s.batch, s.heads, s.head_dim}), out(v.out_dtype, {s.batch, s.heads, s.head_dim});
  HostTensor lse(DType::kF32, {s.batch, s.heads});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  const HostTensor sinks = random_sinks(v.sinks ? s.heads : 0, rng);
  DevicePaged dev(c);
  DeviceTensor dq(q), dout(out), dlse(lse), dsinks(sinks);
  DeviceWorkspace ws(plan.bounds.workspace_bytes, 0xFF);
  PagedDecodeTensors t{dq.view, dev.cache(), dout.view, dlse.view};
  if (v.sinks) t.sinks = dsinks.view;
  t.kv_scales = v.scales;
  const std::string note = describe_case(s, seed) + " q/out " + std::string(dtype_name(v.q_dtype)) + "/" +
                           std::string(dtype_name(v.out_dtype)) + " window=" + std::to_string(v.window) +
                           " softcap=" + std::to_string(v.softcap) + " boxes=" + std::to_string(plan.page_boxes) +
                           " splits=" + std::to_string(plan.partition.sequence_splits);
  cuda::paged_decode(plan, t, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << note;
  dout.copy_to(out);
  dlse.copy_to(lse);
  PagedDecodeTensors host{q.view, c.cache(), out.view, lse.view};
  if (v.sinks) host.sinks = sinks.view;
  host.kv_scales = v.scales;
  const auto golden = reference::paged_decode(problem, host);
  cuda_decode_tests::expect_matches_golden(out, golden.out, DType::kE4M3, v.q_dtype, v.out_dtype, note);
  cuda_decode_tests::expect_lse_matches(lse, golden.lse, note,
                                        cuda_decode_tests::rel_l2_limit(DType::kE4M3, v.q_dtype, v.out_dtype));
}

TEST(PagedFp8DecodeCuda, LayoutsPagesAndGroupsMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  PathsSeen seen;
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16, 32, 64}) {
      for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{16, 2}, std::pair{16, 1}}) {
        Fp8Variant v;
        v.layout = layout, v.page = page, v.heads = heads, v.kv_heads = kv_heads;
        run_fp8_paged(v, seen);
      }
    }
  }
  EXPECT_GT(seen.boxes, 0);
  EXPECT_GT(seen.ring, 0);
}

TEST(PagedFp8DecodeCuda, HeadDimsDtypesWindowSoftcapAndSinks) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  PathsSeen seen;
  for (std::int64_t d : {64, 256}) {
    for (std::int64_t page : {1, 16}) {
      Fp8Variant v;
      v.head_dim = d, v.page = page;
      run_fp8_paged(v, seen);
    }
  }
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      Fp8Variant v;
      v.layout = PageLayout::kNHD, v.page = 32, v.q_dtype = q, v.out_dtype = out;
      v.lengths = {500, 1, 0, 257};
      run_fp8_paged(v, seen);
    }
  }
  Fp8Variant windowed;
  windowed.window = 77, windowed.sinks = true;
  run_fp8_paged(windowed, seen);
  Fp8Variant capped;
  capped.softcap = 30.0f, capped.scales = {0.004f, 0.01f};  // stored values near +-448
  run_fp8_paged(capped, seen);
  Fp8Variant unit;
  unit.scales = {};
  run_fp8_paged(unit, seen);
}

// A long kv_len with a small batch splits the keys: pages of 16 (boxes) and 1 (the ring), and one
// long sequence.
TEST(PagedFp8DecodeCuda, SplitPlansMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  PathsSeen seen;
  for (std::int64_t page : {16, 1}) {
    Fp8Variant v;
    v.page = page, v.heads = 8, v.kv_heads = 1;
    v.lengths = {3000, 1503, 17};
    run_fp8_paged(v, seen);
  }
  Fp8Variant long_one;  // group 4, one 70000-key sequence
  long_one.heads = 32, long_one.kv_heads = 8, long_one.lengths = {70000};
  run_fp8_paged(long_one, seen);
  EXPECT_EQ(seen.split, 3);
}

// Small cases for compute-sanitizer (scripts/device-fp8-decode.sh): one page-box plan and one copy-
// ring plan, each split.
TEST(PagedFp8DecodeCuda, SanitizerCase) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  PathsSeen seen;
  for (std::int64_t page : {16, 1}) {
    Fp8Variant v;
    v.page = page, v.kv_heads = 1, v.lengths = {2001, 0, 1};
    run_fp8_paged(v, seen);
  }
  EXPECT_EQ(seen.boxes, 1);
  EXPECT_EQ(seen.ring, 1);
  EXPECT_GE(seen.split, 1);
}

// Extend over e4m3 pools: ragged query rows (0, 1, q_len == length), GQA 1 / 4 / 8, pages of 1 and
// 16, a window, a split plan; padding rows stay poisoned.
TEST(PagedFp8ExtendCuda, RaggedRowsMatchGolden) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  struct Case {
    PageLayout layout;
    std::int64_t page, heads, kv_heads, head_dim, window;
    std::vector<std::int32_t> lengths, q_lens;
  };
  const std::vector<Case> cases = {
      {PageLayout::kHND, 16, 8, 2, 128, 0, {40, 1, 17, 131, 0}, {17, 1, 17, 5, 0}},
      {PageLayout::kNHD, 1, 4, 4, 64, 0, {40, 1, 17, 131, 0}, {17, 1, 17, 5, 0}},
      {PageLayout::kNHD, 16, 8, 1, 256, 33, {300, 50}, {12, 3}},
      {PageLayout::kHND, 32, 32, 8, 128, 0, {6000}, {3}},  // few rows, long keys: split
  };
  int split_plans = 0;
  for (const Case& k : cases) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    PagedSetup s;
    s.layout = k.layout, s.page_size = k.page, s.heads = k.heads, s.kv_heads = k.kv_heads, s.head_dim = k.head_dim;
    s.batch = static_cast<std::int64_t>(k.lengths.size());
    s.lengths = k.lengths;
    s.dtype = DType::kE4M3;
    PagedCase c(s, rng);
    quantize_owned_rows(c, kOddScales, rng);
    const std::int64_t max_q = *std::max_element(k.q_lens.begin(), k.q_lens.end());
    ExtendProblem problem = extend_problem(c, max_q, c.max_length());
    problem.q_dtype = problem.out_dtype = DType::kBF16;
    problem.options.window = k.window;
    problem.max_total_q = s.batch * max_q;
    const ExtendPlan plan = plan_extend(problem, cuda::target());
    split_plans += plan.partition.sequence_splits > 1;
    HostTensor cu = offsets(k.q_lens);
    const std::int64_t rows = cu.i32()[s.batch], total = std::min<std::int64_t>(rows + 2, s.batch * max_q);
    HostTensor q(DType::kBF16, {total, s.heads, s.head_dim}), out(DType::kBF16, {total, s.heads, s.head_dim});
    HostTensor lse(DType::kF32, {total, s.heads});
    fill_normal(q, rng);
    poison(out);
    poison(lse);
    DevicePaged dev(c);
    DeviceTensor dq(q), dcu(cu), dout(out), dlse(lse);
    DeviceWorkspace ws(plan.bounds.workspace_bytes, 0xFF);
    ExtendTensors t{dq.view, dcu.view, dev.cache(), dout.view, dlse.view};
    t.kv_scales = kOddScales;
    const std::string note = describe_case(s, seed) + " window=" + std::to_string(k.window) +
                             " splits=" + std::to_string(plan.partition.sequence_splits);
    cuda::extend(plan, t, ws.view());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << note;
    dout.copy_to(out);
    dlse.copy_to(lse);
    ExtendTensors host{q.view, cu.view, c.cache(), out.view, lse.view};
    host.kv_scales = kOddScales;
    const auto golden = reference::extend(problem, host);
    cuda_decode_tests::expect_matches_golden(head_rows(out, rows), golden.out, DType::kE4M3, DType::kBF16, DType::kBF16,
                                             note);
    cuda_decode_tests::expect_lse_matches(head_rows(lse, rows), golden.lse, note,
                                          cuda_decode_tests::rel_l2_limit(DType::kE4M3, DType::kBF16, DType::kBF16));
    for (std::size_t i = static_cast<std::size_t>(rows * s.heads * s.head_dim); i < out.numel(); ++i) {
      ASSERT_TRUE(std::isnan(out.get(i))) << note << ": padding row element " << i << " was written";
    }
  }
  EXPECT_GT(split_plans, 0);
}

// The GPU's quantization of new rows into e4m3 pools equals the CPU's bit for bit (the same rule:
// e4m3(x / scale), round to nearest even, saturating), every other byte untouched.
TEST(PagedFp8AppendCuda, QuantizesLikeTheCpuAcrossPages) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const KvScales scales{0.25f, 1.5f};
  for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
    for (std::int64_t page : {1, 16}) {
      for (DType row_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::uint64_t seed = fresh_seed();
        std::mt19937_64 rng(seed);
        PagedSetup s;
        s.layout = layout, s.page_size = page, s.batch = 3, s.heads = 8, s.kv_heads = 2, s.head_dim = 128;
        s.dtype = DType::kE4M3;
        s.lengths = {21, 9, 40};
        PagedCase c(s, rng);
        const std::vector<std::int32_t> n = {13, 9, 0};
        HostTensor cu = offsets(n), start(DType::kI32, {3});
        for (std::int64_t b = 0; b < 3; ++b) start.i32()[b] = s.lengths[b] - n[b];
        HostTensor k_new(row_dtype, {22, 2, 128}), v_new(row_dtype, {22, 2, 128});
        fill_normal(k_new, rng, 60.0f);  // some past 448 x 0.25: saturating
        fill_normal(v_new, rng, 0.01f);  // many e4m3 subnormals at 1.5
        DevicePaged dev(c);
        DeviceTensor dk(k_new), dv(v_new), dcu(cu), dstart(start);
        PagedAppendTensors t{dk.view, dv.view, dcu.view, dstart.view, dev.k.view, dev.v.view, dev.table.view};
        t.kv_scales = scales;
        cuda::paged_append_kv(c.spec, t);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        cpu::paged_append_kv(c.spec, {k_new.view, v_new.view, cu.view, start.view, c.k_pages.view, c.v_pages.view,
                                      c.table.view, scales});
        const std::string note = describe_case(s, seed) + " rows " + std::string(dtype_name(row_dtype));
        EXPECT_EQ(dev.k_bytes(), c.k_pages.bytes) << note;
        EXPECT_EQ(dev.v_bytes(), c.v_pages.bytes) << note;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::testing::paged_cuda
