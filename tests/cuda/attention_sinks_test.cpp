// Attention sinks on CUDA (label gpu) against the float64 golden, which scores the sink as one
// more logit inside the softmax: every place a kernel finishes a row folds them in. Decode unsplit,
// split with the cluster merge and with the merge kernel; prefill on the tensor-core and SIMT tiles
// (with a key split) and on the Hopper kernel (staged and direct epilogues, a key split); paged
// decode and extend. Each case also checks that its sinks matter. Outputs are poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "attnkit/attnkit.hpp"
#include "cuda/decode_support.hpp"
#include "plan/evidence.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

void expect_sinks_applied(const HostTensor& out, const HostTensor& lse, const reference::Result& with,
                          const reference::Result& without, DType dtype, const std::string& what) {
  expect_matches_golden(out, with.out, dtype, dtype, dtype, what);
  expect_lse_matches(lse, with.lse, what, rel_l2_limit(dtype, dtype, dtype));
  EXPECT_GT(compare(out, without.out).rel_l2, 0.05) << what << ": the sinks made no difference";
}

struct DecodeSinkCase {
  DecodeProblem p;
  HostTensor q, k, v, lengths, out, lse, sinks;
  std::uint64_t seed = fresh_seed();
  DecodeSinkCase(std::int64_t heads, std::int64_t kv_heads, std::int64_t d, DType dtype, const std::vector<int>& lens) {
    std::mt19937_64 rng(seed);
    const std::int64_t B = static_cast<std::int64_t>(lens.size());
    const std::int64_t S = std::max(1, *std::max_element(lens.begin(), lens.end()));
    p.batch = B, p.num_heads = heads, p.kv_heads = kv_heads, p.head_dim = d, p.max_seq = S, p.kv_len = S;
    p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
    q = HostTensor(dtype, {B, heads, d});
    k = HostTensor(dtype, {B, kv_heads, S, d});
    v = HostTensor(dtype, {B, kv_heads, S, d});
    lengths = HostTensor(DType::kI32, {B});
    out = HostTensor(dtype, {B, heads, d});
    lse = HostTensor(DType::kF32, {B, heads});
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
    for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = lens[static_cast<std::size_t>(b)];
    sinks = random_sinks(heads, rng);
  }
  DecodeTensors host(bool with_sinks) const {
    DecodeTensors t{q.view, k.view, v.view, lengths.view, out.view, lse.view};
    if (with_sinks) t.sinks = sinks.view;
    return t;
  }
  void run(const DecodePlan& plan) {
    poison(out);
    poison(lse);
    DeviceTensor dq(q), dk(k), dv(v), dl(lengths), dout(out), dlse(lse), ds(sinks);
    DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xFF);
    DecodeTensors t{dq.view, dk.view, dv.view, dl.view, dout.view, dlse.view};
    t.sinks = ds.view;
    cuda::decode(plan, t, ws.view());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.copy_to(out);
    dlse.copy_to(lse);
  }
};

TEST(AttentionSinksCuda, DecodeUnsplitClusterMergedAndKernelMerged) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  struct Spec {
    std::int64_t heads, kv_heads, d;
    DType dtype;
    std::vector<int> lengths;
  };
  int split_cases = 0;
  for (const Spec& s : {Spec{32, 8, 128, DType::kBF16, {1, 0, 37, 700, 4100, 9, 64, 65}},  // b8: unsplit
                        Spec{16, 4, 128, DType::kBF16, {9000}},                              // b1: split
                        Spec{8, 2, 64, DType::kF32, {20000, 0}},
                        Spec{16, 2, 256, DType::kF16, {3000, 2}}}) {
    DecodeSinkCase c(s.heads, s.kv_heads, s.d, s.dtype, s.lengths);
    const reference::Result with = reference::decode(c.p, c.host(true)), without = reference::decode(c.p, c.host(false));
    const DecodePlan plan = plan_decode(c.p, cuda::target());
    const std::string note = std::string(dtype_name(s.dtype)) + " d=" + std::to_string(s.d) + " splits=" +
                             std::to_string(plan.partition.sequence_splits) + " seed=" + std::to_string(c.seed);
    c.run(plan);
    expect_sinks_applied(c.out, c.lse, with, without, s.dtype, note + (plan.partition.merge_cluster > 1 ? " cluster" : ""));
    if (plan.partition.sequence_splits > 1) {
      ++split_cases;
      DecodePlan kernel_merge = plan;  // the same partition merged by the merge kernel
      kernel_merge.partition.merge_cluster = 0;
      kernel_merge.evidence = detail::compute_decode_evidence(c.p, kernel_merge.partition, kernel_merge.target);
      c.run(kernel_merge);
      expect_sinks_applied(c.out, c.lse, with, without, s.dtype, note + " merge kernel");
    }
  }
  EXPECT_GE(split_cases, 2) << "the split paths went untested";
}

struct PrefillSinkCase {
  PrefillProblem p;
  HostTensor q, k, v, out, lse, sinks;
  std::uint64_t seed = fresh_seed();
  PrefillSinkCase(std::int64_t heads, std::int64_t kv_heads, std::int64_t d, std::int64_t q_len, std::int64_t kv_len,
                  bool causal, DType dtype) {
    std::mt19937_64 rng(seed);
    p.batch = 2, p.num_heads = heads, p.kv_heads = kv_heads, p.head_dim = d, p.q_len = q_len, p.kv_len = kv_len;
    p.causal = causal;
    p.dtype = p.out_dtype = dtype;
    q = HostTensor(dtype, {2, heads, q_len, d});
    k = HostTensor(dtype, {2, kv_heads, kv_len, d});
    v = HostTensor(dtype, {2, kv_heads, kv_len, d});
    out = HostTensor(dtype, {2, heads, q_len, d});
    lse = HostTensor(DType::kF32, {2, heads, q_len});
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
    sinks = random_sinks(heads, rng);
  }
  PrefillTensors host(bool with_sinks) const {
    PrefillTensors t{q.view, k.view, v.view, out.view, lse.view};
    if (with_sinks) t.sinks = sinks.view;
    return t;
  }
  // with_lse false: out only (on Hopper at d64, the instance that sums P on the tensor cores).
  void run(const PrefillPlan& plan, bool with_lse = true) {
    poison(out);
    poison(lse);
    DeviceTensor dq(q), dk(k), dv(v), dout(out), dlse(lse), ds(sinks);
    DeviceWorkspace ws(plan.evidence.workspace_bytes, 0xFF);
    PrefillTensors t{dq.view, dk.view, dv.view, dout.view, with_lse ? dlse.view : TensorView{}};
    t.sinks = ds.view;
    cuda::prefill(plan, t, ws.view());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.copy_to(out);
    if (with_lse) dlse.copy_to(lse);
  }
};

TEST(AttentionSinksCuda, PrefillOnEveryFamilySplitOrNot) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  struct Spec {
    std::int64_t heads, kv_heads, d, q_len, kv_len;
    bool causal;
    DType dtype;
  };
  int split_cases = 0;
  for (const Spec& s : {Spec{8, 2, 128, 200, 200, true, DType::kBF16},    // 16-bit tiles (Hopper there)
                        Spec{8, 2, 64, 77, 300, false, DType::kF16},
                        Spec{4, 4, 40, 33, 70, true, DType::kF32},        // SIMT tiles
                        Spec{8, 1, 128, 4, 6000, true, DType::kBF16}}) {  // short queries, long keys: a key split
    PrefillSinkCase c(s.heads, s.kv_heads, s.d, s.q_len, s.kv_len, s.causal, s.dtype);
    const reference::Result with = reference::prefill(c.p, c.host(true)), without = reference::prefill(c.p, c.host(false));
    std::vector<PrefillPlan> plans = {plan_prefill(c.p, cuda::target())};
    if (plans[0].partition.family == KernelFamily::kWarpSpecializedWgmma) {
      plans.push_back(plan_prefill(c.p, cuda::target(), KernelFamily::kCooperativeTiled));
    }
    for (const PrefillPlan& plan : plans) {
      split_cases += plan.partition.sequence_splits > 1;
      c.run(plan);
      expect_sinks_applied(c.out, c.lse, with, without, s.dtype,
                           to_string(plan.partition.family) + " " + std::string(dtype_name(s.dtype)) + " q=" +
                               std::to_string(s.q_len) + " kv=" + std::to_string(s.kv_len) + " splits=" +
                               std::to_string(plan.partition.sequence_splits) + " seed=" + std::to_string(c.seed));
    }
  }
  EXPECT_GE(split_cases, 1) << "no plan split its keys: the merge went untested";

  // Without an LSE: the fold's weight comes from the row sums alone (at d64 on Hopper, summed by the
  // tensor cores from the 16-bit P).
  PrefillSinkCase c(8, 2, 64, 300, 300, true, DType::kBF16);
  const reference::Result with = reference::prefill(c.p, c.host(true)), without = reference::prefill(c.p, c.host(false));
  const PrefillPlan plan = plan_prefill(c.p, cuda::target());
  c.run(plan, /*with_lse=*/false);
  const std::string note = to_string(plan.partition.family) + " d64 no LSE seed=" + std::to_string(c.seed);
  expect_matches_golden(c.out, with.out, DType::kBF16, DType::kBF16, DType::kBF16, note);
  EXPECT_GT(compare(c.out, without.out).rel_l2, 0.05) << note << ": the sinks made no difference";
}

TEST(AttentionSinksCuda, PagedDecodeAndExtend) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::int64_t B = 3, H = 8, KH = 2, D = 128, P = 16;
  const std::vector<int> lens = {1, 300, 6000};
  const std::int64_t pages_per_seq = (6000 + P - 1) / P;
  PagedCacheSpec spec;
  spec.page_size = P;
  spec.num_pages = B * pages_per_seq;
  spec.max_pages_per_seq = pages_per_seq;
  spec.layout = PageLayout::kHND;
  HostTensor kp(DType::kBF16, {spec.num_pages, KH, P, D}), vp(DType::kBF16, {spec.num_pages, KH, P, D});
  HostTensor table(DType::kI32, {B, pages_per_seq}), lengths(DType::kI32, {B});
  fill_normal(kp, rng);
  fill_normal(vp, rng);
  std::vector<std::int32_t> order(static_cast<std::size_t>(spec.num_pages));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::int64_t i = 0; i < B * pages_per_seq; ++i) table.i32()[i] = order[static_cast<std::size_t>(i)];
  for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = lens[static_cast<std::size_t>(b)];
  const HostTensor sinks = random_sinks(H, rng);
  DeviceTensor dkp(kp), dvp(vp), dtable(table), dlen(lengths), ds(sinks);
  const PagedKvCache host_cache{kp.view, vp.view, table.view, lengths.view};
  const PagedKvCache dev_cache{dkp.view, dvp.view, dtable.view, dlen.view};

  PagedDecodeProblem dp;
  dp.batch = B, dp.num_heads = H, dp.kv_heads = KH, dp.head_dim = D, dp.cache = spec, dp.kv_len = spec.capacity();
  dp.kv_dtype = dp.q_dtype = dp.out_dtype = DType::kBF16;
  HostTensor q(DType::kBF16, {B, H, D}), out(DType::kBF16, {B, H, D}), lse(DType::kF32, {B, H});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  const PagedDecodePlan plan = plan_paged_decode(dp, cuda::target());
  {
    DeviceTensor dq(q), dout(out), dlse(lse);
    DeviceWorkspace ws(plan.bounds.workspace_bytes, 0xFF);
    PagedDecodeTensors t{dq.view, dev_cache, dout.view, dlse.view};
    t.sinks = ds.view;
    cuda::paged_decode(plan, t, ws.view());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.copy_to(out);
    dlse.copy_to(lse);
  }
  PagedDecodeTensors ht{q.view, host_cache, out.view, lse.view};
  ht.sinks = sinks.view;
  PagedDecodeTensors hn = ht;
  hn.sinks = {};
  expect_sinks_applied(out, lse, reference::paged_decode(dp, ht), reference::paged_decode(dp, hn), DType::kBF16,
                       "paged decode splits=" + std::to_string(plan.partition.sequence_splits) + " seed=" +
                           std::to_string(seed));

  // Extend with short chunks (the decode kernel) and, on Hopper, long ones (the prefill kernel).
  for (const std::vector<std::int32_t>& q_lens : {std::vector<std::int32_t>{1, 12, 5}, std::vector<std::int32_t>{1, 200, 150}}) {
    ExtendProblem ep;
    ep.batch = B, ep.num_heads = H, ep.kv_heads = KH, ep.head_dim = D, ep.cache = spec, ep.kv_len = spec.capacity();
    ep.max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
    ep.kv_dtype = ep.q_dtype = ep.out_dtype = DType::kBF16;
    HostTensor cu(DType::kI32, {B + 1});
    cu.i32()[0] = 0;
    for (std::int64_t b = 0; b < B; ++b) cu.i32()[b + 1] = cu.i32()[b] + q_lens[static_cast<std::size_t>(b)];
    const std::int64_t rows = cu.i32()[B];
    HostTensor eq(DType::kBF16, {rows, H, D}), eout(DType::kBF16, {rows, H, D}), ext_lse(DType::kF32, {rows, H});
    fill_normal(eq, rng);
    poison(eout);
    poison(ext_lse);
    const ExtendPlan eplan = plan_extend(ep, cuda::target());
    {
      DeviceTensor dq(eq), dcu(cu), dout(eout), dlse(ext_lse);
      DeviceWorkspace ws(eplan.bounds.workspace_bytes, 0xFF);
      ExtendTensors t{dq.view, dcu.view, dev_cache, dout.view, dlse.view};
      t.sinks = ds.view;
      cuda::extend(eplan, t, ws.view());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      dout.copy_to(eout);
      dlse.copy_to(ext_lse);
    }
    ExtendTensors het{eq.view, cu.view, host_cache, eout.view, ext_lse.view};
    het.sinks = sinks.view;
    ExtendTensors hen = het;
    hen.sinks = {};
    expect_sinks_applied(eout, ext_lse, reference::extend(ep, het), reference::extend(ep, hen), DType::kBF16,
                         "extend max_q_len=" + std::to_string(ep.max_q_len) + " " + to_string(eplan.partition.family) +
                             " splits=" + std::to_string(eplan.partition.sequence_splits) + " seed=" + std::to_string(seed));
  }
}

TEST(AttentionSinksCuda, HostSinksAreRejectedBeforeAnyWrite) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  DecodeSinkCase c(8, 2, 64, DType::kBF16, {100, 3});
  poison(c.out);
  DeviceTensor dq(c.q), dk(c.k), dv(c.v), dl(c.lengths), dout(c.out);
  DecodeTensors t{dq.view, dk.view, dv.view, dl.view, dout.view, {}};
  t.sinks = c.sinks.view;
  t.sinks.device = DeviceKind::kCuda;  // a host pointer that claims to be on the device
  const DecodePlan plan = plan_decode(c.p, cuda::target());
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  EXPECT_THROW(cuda::decode(plan, t, ws.view()), Error);
  HostTensor after(DType::kBF16, {2, 8, 64});
  dout.copy_to(after);
  EXPECT_EQ(after.bytes, c.out.bytes) << "out was written by a rejected call";
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
