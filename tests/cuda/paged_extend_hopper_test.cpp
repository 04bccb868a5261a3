// Extend over a paged cache on the Hopper prefill kernel (chunks of 128+ rows, f16 / bf16 pools)
// against the float64 golden: both layouts, pages of 8 / 16 / 24 / 32 / 64 keys (16- and 8-key
// boxes), head_dim 64 / 128 / 256, GQA, windows, f32 out, key splits, sequences whose end cuts a
// page box (the pools' unowned slots are NaN, so a stale row that reached P V would show), chunks
// that are whole prefills, empty sequences, and rows past the batch left untouched. Each plan is
// checked to name the Hopper family, so a rule change cannot quietly move these cases to the decode
// kernel. The small case is the one compute-sanitizer runs.
#include <gtest/gtest.h>

#include <numeric>

#include "cuda/hopper_support.hpp"
#include "paged_support.hpp"

namespace attnkit::testing::paged_cuda {
namespace {

struct LongChunk {
  PageLayout layout;
  std::int64_t page, heads, kv_heads, head_dim;
  DType dtype, out;
  std::int64_t window;
  std::vector<std::int32_t> lengths, q_lens;
  bool lse = true;  // false: no LSE asked (d64's 192-row blocks then sum P on the tensor core)
};

void run_long_chunk(const LongChunk& v) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.layout = v.layout;
  s.page_size = v.page;
  s.batch = static_cast<std::int64_t>(v.lengths.size());
  s.heads = v.heads;
  s.kv_heads = v.kv_heads;
  s.head_dim = v.head_dim;
  s.dtype = v.dtype;
  s.lengths = v.lengths;
  PagedCase c(s, rng);
  const std::int32_t longest_q = *std::max_element(v.q_lens.begin(), v.q_lens.end());
  ExtendProblem problem = extend_problem(c, longest_q, c.max_length());
  problem.out_dtype = v.out;
  problem.options.window = v.window;
  // Up to 5 padding rows past the batch's (they must stay untouched), within batch * max_q_len.
  const std::int64_t rows = std::accumulate(v.q_lens.begin(), v.q_lens.end(), std::int64_t{0});
  const std::int64_t pad = std::min<std::int64_t>(5, s.batch * longest_q - rows);
  problem.max_total_q = rows + pad;
  const ExtendPlan plan = plan_extend(problem, cuda::target());
  const std::string note = describe_case(s, seed) + " out=" + std::string(dtype_name(v.out)) +
                           " window=" + std::to_string(v.window) + " max_q_len=" + std::to_string(longest_q) +
                           " splits=" + std::to_string(plan.partition.sequence_splits);
  ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma) << note;
  run_and_check_extend(c, plan, v.q_lens, pad, rng, note + (v.lse ? "" : " no-lse"), v.lse);
}

TEST(ExtendHopperCuda, LongChunksMatchGoldenOnEveryLayoutPageAndHeadDim) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("Hopper extend kernel");
  const DType bf16 = DType::kBF16, f16 = DType::kF16, f32 = DType::kF32;
  const PageLayout hnd = PageLayout::kHND, nhd = PageLayout::kNHD;
  for (const LongChunk& v : {
           // A chunk over a prefix, a whole prefill (q_len == length), a 129-row chunk, an empty sequence.
           LongChunk{hnd, 16, 8, 2, 128, bf16, bf16, 0, {1000, 300, 700, 0}, {300, 300, 129, 0}},
           LongChunk{nhd, 16, 8, 2, 128, f16, f16, 0, {1000, 300, 700, 0}, {300, 300, 129, 0}},
           // Pages of 8 and 24 keys: 8-key boxes; lengths that end inside a box.
           LongChunk{hnd, 8, 8, 8, 128, bf16, bf16, 0, {517, 133}, {200, 133}},
           LongChunk{nhd, 24, 8, 1, 64, f16, f32, 0, {611, 250}, {256, 131}},
           // head_dim 256 (64- or 80-key tiles), f32 out; head_dim 64 with a window.
           LongChunk{hnd, 32, 4, 2, 256, bf16, f32, 0, {900, 450}, {160, 450}},
           LongChunk{nhd, 64, 8, 2, 64, bf16, bf16, 100, {2000, 500}, {400, 128}},
           // One sequence, a long prefix: few query tiles, so the plan splits keys.
           LongChunk{hnd, 16, 8, 2, 128, bf16, bf16, 0, {9001}, {200}},
           LongChunk{nhd, 32, 16, 2, 128, f16, f32, 0, {12345, 3}, {130, 3}},
           // No LSE: the instances that skip it (tensor-core row sums at d64).
           LongChunk{hnd, 16, 8, 2, 64, bf16, bf16, 0, {3000, 700}, {1000, 700}, false},
           LongChunk{nhd, 16, 8, 2, 128, f16, f16, 0, {3000, 700}, {1000, 700}, false},
       }) {
    run_long_chunk(v);
  }
}

TEST(ExtendHopperCudaSmall, SanitizerCase) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("Hopper extend kernel");
  run_long_chunk({PageLayout::kHND, 16, 8, 2, 128, DType::kBF16, DType::kBF16, 0, {203, 150}, {130, 128}});
}

// Corrupt device indices (a page past the pool, a negative page, a length past the plan's) never
// reach memory outside the pool: the call completes (compute-sanitizer's memcheck runs this too).
TEST(ExtendHopperCudaSmall, CorruptPagesAndLengthsStayInsideThePool) {
  ATTNKIT_SKIP_WITHOUT_HOPPER("Hopper extend kernel");
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  PagedSetup s;
  s.page_size = 16;
  s.batch = 2;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.dtype = DType::kBF16;
  s.lengths = {300, 200};
  PagedCase c(s, rng);
  const ExtendPlan plan = plan_extend(extend_problem(c, 160, 300), cuda::target());
  ASSERT_EQ(plan.partition.family, KernelFamily::kWarpSpecializedWgmma);
  c.table.i32()[1] = 1 << 30;
  c.table.i32()[2] = -7;
  c.lengths.i32()[1] = 1 << 20;  // past the plan's kv_len: clamped
  const std::vector<std::int32_t> q_lens = {160, 150};
  HostTensor cu = offsets(q_lens);
  HostTensor q(s.dtype, {310, s.heads, s.head_dim}), out(s.dtype, {310, s.heads, s.head_dim});
  fill_normal(q, rng);
  DevicePaged dev(c);
  DeviceTensor dq(q), dcu(cu), dout(out);
  DeviceWorkspace ws(plan.bounds.workspace_bytes);
  cuda::extend(plan, {dq.view, dcu.view, dev.cache(), dout.view, {}}, ws.view());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << seed_note(seed);
}

}  // namespace
}  // namespace attnkit::testing::paged_cuda
