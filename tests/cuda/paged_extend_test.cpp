// Extend (multi-token queries against a paged cache) on the GPU against the float64 golden:
// ragged q_len (0, 1, 2, 17, and q_len == length: a whole prefill) in one batch, both layouts, page
// sizes 1/16/32/64, GQA 1/4/8, windows, soft-cap, f32/f16/bf16, split and unsplit plans; padding
// rows past cu_seqlens_q[batch] stay untouched; q_len = 1 equals paged decode. Then a serving step
// (paged append + extend) captured once in a CUDA graph and replayed while lengths, offsets,
// start positions and page tables change, checked against the golden after every replay (on the
// decode kernel, and with long chunks on the Hopper kernel).
#include <gtest/gtest.h>

#include "cuda/hopper_support.hpp"
#include "paged_support.hpp"

namespace attnkit::testing::paged_cuda {
namespace {

TEST(ExtendCuda, RaggedQueriesMatchGoldenOnEveryLayoutPageSizeAndGroup) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
      for (std::int64_t page : {1, 16, 32, 64}) {
        for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) {
          const std::uint64_t seed = fresh_seed();
          std::mt19937_64 rng(seed);
          PagedSetup s;
          s.layout = layout;
          s.page_size = page;
          s.batch = 6;
          s.heads = heads;
          s.kv_heads = kv_heads;
          s.head_dim = 64;
          s.dtype = dtype;
          s.lengths = {40, 17, 150, 9, 1, 66};
          const std::vector<std::int32_t> q_lens = {1, 17, 5, 0, 1, 2};  // 17 == its length: a whole prefill
          PagedCase c(s, rng);
          const auto plan = plan_extend(extend_problem(c, 17, 150), cuda::target());
          run_and_check_extend(c, plan, q_lens, 3, rng,
                               describe_case(s, seed) + " splits=" + std::to_string(plan.partition.sequence_splits));
        }
      }
    }
  }
}

TEST(ExtendCuda, WindowsSoftcapDtypesHeadDimsAndSplits) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  struct Variant {
    DType dtype;
    std::int64_t head_dim, window;
    float softcap;
    std::int64_t max_q_len;
  };
  for (const Variant& v : {Variant{DType::kF32, 128, 50, 0.0f, 17}, Variant{DType::kF16, 128, 0, 25.0f, 9},
                           Variant{DType::kBF16, 256, 0, 0.0f, 40}, Variant{DType::kBF16, 128, 130, 0.0f, 33},
                           Variant{DType::kF32, 64, 0, 10.0f, 20}}) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    PagedSetup s;
    s.layout = PageLayout::kNHD;
    s.page_size = 16;
    s.batch = 4;
    s.heads = 8;
    s.kv_heads = 2;
    s.head_dim = v.head_dim;
    s.dtype = v.dtype;
    s.lengths = {1200, 9, 333, 0};
    const std::int32_t longest = static_cast<std::int32_t>(v.max_q_len);
    const std::vector<std::int32_t> q_lens = {longest, 9, 2, 0};
    PagedCase c(s, rng);
    auto problem = extend_problem(c, v.max_q_len, 1200);
    problem.options.window = v.window;
    problem.options.softcap = v.softcap;
    const auto plan = plan_extend(problem, cuda::target());
    run_and_check_extend(c, plan, q_lens, 1, rng,
                         describe_case(s, seed) + " window=" + std::to_string(v.window) + " softcap=" +
                             std::to_string(v.softcap) + " max_q_len=" + std::to_string(v.max_q_len) +
                             " splits=" + std::to_string(plan.partition.sequence_splits));
  }
}

TEST(ExtendCuda, EveryQueryLengthFrom0To17InOneBatch) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = PageLayout::kHND;
  s.page_size = 16;
  s.batch = 18;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.dtype = DType::kBF16;
  std::vector<std::int32_t> q_lens;
  for (std::int32_t n = 0; n <= 17; ++n) {
    q_lens.push_back(n);
    s.lengths.push_back(n + 31 * n % 97);  // prefixes of many sizes, q_len <= length
  }
  PagedCase c(s, rng);
  auto problem = extend_problem(c, 17, c.max_length());
  problem.max_total_q = 160;  // fewer packed rows than batch * max_q_len
  const auto plan = plan_extend(problem, cuda::target());
  run_and_check_extend(c, plan, q_lens, 7, rng, describe_case(s, seed));
}

TEST(ExtendCuda, OneTokenPerSequenceEqualsPagedDecode) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.page_size = 32;
  s.batch = 5;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.dtype = DType::kBF16;
  s.lengths = {700, 1, 64, 65, 300};
  PagedCase c(s, rng);
  const auto dplan = plan_paged_decode(paged_decode_problem(c, 700), cuda::target());
  const auto eplan = plan_extend(extend_problem(c, 1, 700), cuda::target());
  HostTensor q(s.dtype, {s.batch, s.heads, s.head_dim}), out_d(s.dtype, {s.batch, s.heads, s.head_dim});
  HostTensor out_e(s.dtype, {s.batch, s.heads, s.head_dim});
  fill_normal(q, rng);
  poison(out_d);
  poison(out_e);
  HostTensor cu = offsets(std::vector<std::int32_t>(5, 1));
  DevicePaged dev(c);
  DeviceTensor dq(q), dcu(cu), dd(out_d), de(out_e);
  DeviceWorkspace wd(dplan.bounds.workspace_bytes), we(eplan.bounds.workspace_bytes);
  cuda::paged_decode(dplan, {dq.view, dev.cache(), dd.view, {}}, wd.view());
  cuda::extend(eplan, {dq.view, dcu.view, dev.cache(), de.view, {}}, we.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dd.copy_to(out_d);
  de.copy_to(out_e);
  const auto golden = reference::paged_decode(dplan.problem, {q.view, c.cache(), out_d.view, {}});
  cuda_decode_tests::expect_matches_golden(out_d, golden.out, s.dtype, s.dtype, s.dtype, "decode" + seed_note(seed));
  cuda_decode_tests::expect_matches_golden(out_e, golden.out, s.dtype, s.dtype, s.dtype, "extend" + seed_note(seed));
}

// A serving step captured once: append each sequence's new K/V rows into its pages, then extend its
// new query rows over the whole sequence. Between replays only the contents of the device index
// tensors, the new rows and the pool change (same pointers, same shapes).
// Compositions: (final length, new tokens) per sequence, one list per replay.
using Steps = std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>>;

void capture_once_and_replay(std::int64_t max_q, std::int64_t rows_cap, const Steps& steps, KernelFamily family) {
  const std::int64_t B = 4, H = 8, KH = 2, D = 64, P = 16, width = 24, pool = 80;
  const DType dtype = DType::kBF16;
  ExtendProblem problem;
  problem.batch = B;
  problem.num_heads = H;
  problem.kv_heads = KH;
  problem.head_dim = D;
  problem.cache = {pool, P, width, PageLayout::kNHD};
  problem.max_q_len = max_q;
  problem.max_total_q = rows_cap;
  problem.kv_len = width * P;
  problem.kv_dtype = problem.q_dtype = problem.out_dtype = dtype;
  const ExtendPlan plan = plan_extend(problem, cuda::target());
  ASSERT_EQ(plan.partition.family, family);

  // Device buffers at their bound shapes, allocated once.
  HostTensor pool_k(dtype, {pool, P, KH, D}), pool_v(dtype, {pool, P, KH, D}), table(DType::kI32, {B, width});
  HostTensor lengths(DType::kI32, {B}), cu(DType::kI32, {B + 1}), starts(DType::kI32, {B});
  HostTensor k_new(dtype, {rows_cap, KH, D}), v_new(dtype, {rows_cap, KH, D}), q(dtype, {rows_cap, H, D});
  HostTensor out(dtype, {rows_cap, H, D}), lse(DType::kF32, {rows_cap, H});
  DeviceTensor dk(pool_k), dv(pool_v), dtable(table), dlen(lengths), dcu(cu), dstart(starts), dkn(k_new), dvn(v_new),
      dq(q), dout(out), dlse(lse);
  DeviceWorkspace ws(plan.bounds.workspace_bytes);
  const PagedKvCache dcache{dk.view, dv.view, dtable.view, dlen.view};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  for (std::size_t step = 0; step < steps.size(); ++step) {
    const std::uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    const std::string note = "replay " + std::to_string(step) + seed_note(seed);
    // Host state of this step: a fresh permuted page assignment, the prefix in the pool, the new rows.
    PagedSetup s;
    s.layout = PageLayout::kNHD;
    s.page_size = P;
    s.batch = B;
    s.heads = H;
    s.kv_heads = KH;
    s.head_dim = D;
    s.dtype = dtype;
    s.table_width = width;
    s.pool_pages = pool;
    std::vector<std::int32_t> q_lens;
    for (auto [len, n] : steps[step]) {
      s.lengths.push_back(len);
      q_lens.push_back(n);
    }
    PagedCase c(s, rng);  // the whole final sequence, new tokens included: the golden's view
    HostTensor cu_h = offsets(q_lens);
    const std::int32_t rows = cu_h.i32()[B];
    ASSERT_LE(rows, rows_cap);
    // New rows = the case's final keys; the device pool gets them only through the append.
    HostTensor prefix_k(dtype, {pool, P, KH, D}), prefix_v(dtype, {pool, P, KH, D});
    std::copy(c.k_pages.bytes.begin(), c.k_pages.bytes.end(), prefix_k.bytes.begin());
    std::copy(c.v_pages.bytes.begin(), c.v_pages.bytes.end(), prefix_v.bytes.begin());
    fill_normal(q, rng);
    poison(k_new);
    poison(v_new);
    for (std::int64_t b = 0; b < B; ++b) {
      starts.i32()[b] = s.lengths[b] - q_lens[b];
      for (std::int32_t i = 0; i < q_lens[b]; ++i) {
        const std::int64_t pos = starts.i32()[b] + i, row = cu_h.i32()[b] + i;
        for (std::int64_t h = 0; h < KH; ++h) {
          for (std::int64_t d = 0; d < D; ++d) {
            const std::size_t at = c.row(b, h, pos) + static_cast<std::size_t>(d);
            k_new.set(static_cast<std::size_t>((row * KH + h) * D + d), c.k_pages.get(at));
            v_new.set(static_cast<std::size_t>((row * KH + h) * D + d), c.v_pages.get(at));
            prefix_k.set(at, std::numeric_limits<float>::quiet_NaN());  // written by the append only
            prefix_v.set(at, std::numeric_limits<float>::quiet_NaN());
          }
        }
      }
    }
    std::copy(cu_h.bytes.begin(), cu_h.bytes.end(), cu.bytes.begin());
    // The step's inputs go to the same device buffers (the graph keeps their pointers).
    upload(dk, prefix_k);
    upload(dv, prefix_v);
    upload(dtable, c.table);
    upload(dlen, c.lengths);
    upload(dcu, cu);
    upload(dstart, starts);
    upload(dkn, k_new);
    upload(dvn, v_new);
    upload(dq, q);
    poison(out);
    poison(lse);
    upload(dout, out);
    upload(dlse, lse);
    if (step == 0) {
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
      cuda::paged_append_kv(problem.cache, {dkn.view, dvn.view, dcu.view, dstart.view, dk.view, dv.view, dtable.view},
                            stream);
      cuda::extend(plan, {dq.view, dcu.view, dcache, dout.view, dlse.view}, ws.view(), stream);
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    }
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << note;
    // The pool now equals the case's (prefix + appended rows), byte for byte.
    EXPECT_TRUE(DevicePaged::bytes_of(dk) == c.k_pages.bytes) << note << ": K pool after the append";
    EXPECT_TRUE(DevicePaged::bytes_of(dv) == c.v_pages.bytes) << note << ": V pool after the append";
    dout.copy_to(out);
    dlse.copy_to(lse);
    const auto golden = reference::extend(problem, {q.view, cu.view, c.cache(), out.view, lse.view});
    expect_parity(head_rows(out, rows), golden.out, head_rows(lse, rows), golden.lse, dtype, note);
    for (std::size_t i = static_cast<std::size_t>(rows) * H * D; i < out.numel(); ++i) {
      ASSERT_TRUE(std::isnan(out.get(i))) << note << ": row past the batch's was written";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(PagedGraphCuda, CaptureOnceReplayWithChangingLengthsOffsetsAndTables) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  // New tokens cross page boundaries.
  capture_once_and_replay(6, 16,
                          {{{20, 6}, {1, 1}, {300, 3}, {0, 0}},
                           {{17, 2}, {33, 6}, {64, 1}, {5, 5}},
                           {{0, 0}, {383, 4}, {16, 1}, {100, 6}}},
                          KernelFamily::kSplitKvDecode);
}

// The same on the Hopper kernel: chunks of up to 200 rows.
TEST(PagedGraphCuda, CaptureOnceReplayLongChunksOnHopper) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("Hopper extend kernel");
  capture_once_and_replay(200, 360,
                          {{{383, 200}, {1, 1}, {300, 130}, {0, 0}},
                           {{17, 2}, {333, 150}, {64, 1}, {200, 200}},
                           {{0, 0}, {383, 4}, {16, 1}, {250, 180}}},
                          KernelFamily::kWarpSpecializedWgmma);
}

}  // namespace
}  // namespace attnkit::testing::paged_cuda
