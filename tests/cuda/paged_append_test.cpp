// Paged append on the GPU, and what the paged CUDA calls do with bad inputs.
// Append: n new tokens per sequence land exactly in their (page, slot)s across page boundaries,
// both layouts, page sizes 1/16/32/64, K only / V only / both, the pool byte-for-byte equal to the
// CPU append's. Rejections: everything the host can see (plan, shapes, dtypes, devices, workspace)
// throws before anything is written, the pools and outputs byte-for-byte unchanged; host mirrors of
// the indices are checked by validate_paged_indices_host; device-resident bad indices (pages out
// of the pool, negative or decreasing offsets, lengths above the plan) are clamped or skipped by
// the kernels, which never touch memory outside the pool (compute-sanitizer memcheck runs these).
#include <gtest/gtest.h>

#include "paged_support.hpp"

namespace attnkit::testing::paged_cuda {
namespace {

struct AppendRows {
  HostTensor k_new, v_new, cu, start;
};

AppendRows make_rows(const PagedCase& c, const std::vector<std::int32_t>& n, std::mt19937_64& rng) {
  const auto& s = c.setup;
  AppendRows a;
  a.cu = offsets(n);
  a.start = HostTensor(DType::kI32, {s.batch});
  for (std::int64_t b = 0; b < s.batch; ++b) {
    a.start.i32()[b] = s.lengths[static_cast<std::size_t>(b)] - n[static_cast<std::size_t>(b)];
  }
  const std::int64_t rows = a.cu.i32()[s.batch] + 2;  // two rows past the last: never read
  a.k_new = HostTensor(s.dtype, {rows, s.kv_heads, s.head_dim});
  a.v_new = HostTensor(s.dtype, {rows, s.kv_heads, s.head_dim});
  fill_normal(a.k_new, rng);
  fill_normal(a.v_new, rng);
  return a;
}

TEST(PagedAppendCuda, WritesExactlyTheNewSlotsAcrossPageBoundaries) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (PageLayout layout : {PageLayout::kHND, PageLayout::kNHD}) {
      for (std::int64_t page : {1, 16, 32, 64}) {
        for (int mode = 0; mode < 3; ++mode) {  // 0: K only, 1: V only, 2: both
          const std::uint64_t seed = fresh_seed();
          std::mt19937_64 rng(seed);
          PagedSetup s;
          s.layout = layout;
          s.page_size = page;
          s.batch = 4;
          s.heads = 4;
          s.kv_heads = 2;
          s.head_dim = 40;  // 80 or 160 bytes: the 16-byte path for f32, 16-byte rows for bf16 too
          s.dtype = dtype;
          s.lengths = {40, 17, 130, 0};
          const std::vector<std::int32_t> n = {33, 1, 70, 0};  // crossing page boundaries
          PagedCase c(s, rng);
          AppendRows a = make_rows(c, n, rng);
          const std::string note = describe_case(s, seed) + " mode=" + std::to_string(mode);
          DevicePaged dev(c);
          DeviceTensor dkn(a.k_new), dvn(a.v_new), dcu(a.cu), dstart(a.start);
          PagedAppendTensors dt{mode == 1 ? TensorView{} : dkn.view, mode == 0 ? TensorView{} : dvn.view, dcu.view,
                                dstart.view, mode == 1 ? TensorView{} : dev.k.view, mode == 0 ? TensorView{} : dev.v.view,
                                dev.table.view};
          cuda::paged_append_kv(c.spec, dt);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << note;
          // The CPU append on the host pools is the expected result (its own tests check it exactly).
          PagedAppendTensors ht{mode == 1 ? TensorView{} : a.k_new.view, mode == 0 ? TensorView{} : a.v_new.view,
                                a.cu.view, a.start.view, mode == 1 ? TensorView{} : c.k_pages.view,
                                mode == 0 ? TensorView{} : c.v_pages.view, c.table.view};
          cpu::paged_append_kv(c.spec, ht);
          EXPECT_TRUE(dev.k_bytes() == c.k_pages.bytes) << note << ": K pool";
          EXPECT_TRUE(dev.v_bytes() == c.v_pages.bytes) << note << ": V pool";
        }
      }
    }
  }
}

// A small paged decode setup shared by the rejection tests: long enough (kLongest keys, at least
// two 64-key tiles per split) that the plan splits and needs a workspace.
constexpr int kLongest = 600;
struct RejectSetup {
  std::mt19937_64 rng{fresh_seed()};
  PagedCase c;
  PagedDecodePlan plan;
  HostTensor q, out, lse;
  RejectSetup() : c(setup(), rng) {
    plan = plan_paged_decode(paged_decode_problem(c, kLongest), cuda::target());
    q = HostTensor(DType::kBF16, {3, 8, 64});
    out = HostTensor(DType::kBF16, {3, 8, 64});
    lse = HostTensor(DType::kF32, {3, 8});
    fill_normal(q, rng);
    poison(out);
    poison(lse);
  }
  static PagedSetup setup() {
    PagedSetup s;
    s.page_size = 16;
    s.batch = 3;
    s.heads = 8;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.dtype = DType::kBF16;
    s.lengths = {kLongest, 3, 77};
    return s;
  }
};

TEST(PagedRejectsCuda, HostVisibleErrorsThrowBeforeAnythingIsWritten) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  RejectSetup r;
  DevicePaged dev(r.c);
  DeviceTensor dq(r.q), dout(r.out), dlse(r.lse);
  DeviceWorkspace ws(r.plan.bounds.workspace_bytes);
  ASSERT_GT(r.plan.bounds.workspace_bytes, 0u) << "the case is meant to split";
  const auto k_before = dev.k_bytes(), v_before = dev.v_bytes();
  const auto out_before = DevicePaged::bytes_of(dout), lse_before = DevicePaged::bytes_of(dlse);
  auto expect_rejected = [&](auto&& call, const std::string& what) {
    EXPECT_THROW(call(), Error) << what;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    EXPECT_TRUE(dev.k_bytes() == k_before && dev.v_bytes() == v_before) << what << ": pool changed";
    EXPECT_TRUE(DevicePaged::bytes_of(dout) == out_before && DevicePaged::bytes_of(dlse) == lse_before)
        << what << ": output changed";
  };
  const PagedDecodeTensors good{dq.view, dev.cache(), dout.view, dlse.view};
  expect_rejected([&] { cuda::paged_decode(plan_paged_decode(r.plan.problem, cpu_target(2)), good, ws.view()); },
                  "a CPU plan");
  expect_rejected([&] { cuda::paged_decode(r.plan, good, Workspace{ws.data, ws.bytes - 16, DeviceKind::kCuda}); },
                  "a workspace smaller than the plan's");
  auto bad = good;
  bad.cache.page_table = r.c.table.view;  // host memory
  expect_rejected([&] { cuda::paged_decode(r.plan, bad, ws.view()); }, "a host page table");
  bad = good;
  bad.cache.lengths.shape[0] = 2;
  expect_rejected([&] { cuda::paged_decode(r.plan, bad, ws.view()); }, "lengths of the wrong batch");
  bad = good;
  bad.out.dtype = DType::kF16;
  expect_rejected([&] { cuda::paged_decode(r.plan, bad, ws.view()); }, "an out dtype the plan did not ask for");
  bad = good;
  bad.cache.k_pages.shape[2] = 32;  // a pool whose pages hold another page size
  expect_rejected([&] { cuda::paged_decode(r.plan, bad, ws.view()); }, "a pool of another page size");
  // Append: the pools' layout and the new rows' shape are checked on the host.
  HostTensor k_new(DType::kBF16, {4, 2, 64}), cu = offsets({1, 2, 1}), start(DType::kI32, {3});
  fill_normal(k_new, r.rng);
  DeviceTensor dkn(k_new), dcu(cu), dstart(start);
  PagedAppendTensors app{dkn.view, {}, dcu.view, dstart.view, dev.k.view, {}, dev.table.view};
  app.k_new.shape[2] = 32;
  expect_rejected([&] { cuda::paged_append_kv(r.c.spec, app); }, "new rows of another head_dim");
  app = PagedAppendTensors{dkn.view, {}, dcu.view, dstart.view, {}, {}, dev.table.view};
  expect_rejected([&] { cuda::paged_append_kv(r.c.spec, app); }, "k_new without k_pages");
}

TEST(PagedRejectsCuda, HostMirrorsOfBadIndicesAreRejected) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  RejectSetup r;
  const PagedCacheSpec& spec = r.c.spec;
  auto rejected = [&](const HostTensor& table, const HostTensor& lengths, const std::string& what) {
    EXPECT_THROW(validate_paged_indices_host(spec, table.view, lengths.view, 3, kLongest, "cuda mirror"), Error) << what;
  };
  auto copy = [](const HostTensor& t) {
    HostTensor c(t.view.dtype, {t.view.shape[0], t.view.rank > 1 ? t.view.shape[1] : 1});
    if (t.view.rank == 1) c = HostTensor(t.view.dtype, {t.view.shape[0]});
    std::copy(t.bytes.begin(), t.bytes.end(), c.bytes.begin());
    return c;
  };
  EXPECT_NO_THROW(validate_paged_indices_host(spec, r.c.table.view, r.c.lengths.view, 3, kLongest, "cuda mirror"));
  HostTensor table = copy(r.c.table), lengths = copy(r.c.lengths);
  table.i32()[0] = static_cast<std::int32_t>(spec.num_pages);
  rejected(table, lengths, "page index out of range");
  table = copy(r.c.table);
  table.i32()[1] = -1;
  rejected(table, lengths, "a sequence longer than its pages");
  table = copy(r.c.table);
  lengths.i32()[1] = static_cast<std::int32_t>(spec.capacity() + 1);
  rejected(table, lengths, "a table shorter than the sequence");
  lengths = copy(r.c.lengths);
  lengths.i32()[2] = -4;
  rejected(table, lengths, "a negative length");
}

TEST(PagedRejectsCuda, BadDeviceIndicesNeverLeaveThePool) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  RejectSetup r;
  DevicePaged dev(r.c);
  const std::int64_t width = r.c.spec.max_pages_per_seq, pages = r.c.spec.num_pages;
  // Append with device indices the host never saw: sequence 0's first page is outside the pool,
  // sequence 1 starts at -1 (its first row is skipped, its second lands at 0), sequence 2 is fine.
  HostTensor table(DType::kI32, {3, width});
  std::copy(r.c.table.bytes.begin(), r.c.table.bytes.end(), table.bytes.begin());
  table.i32()[0] = 1 << 30;
  HostTensor k_new(DType::kBF16, {6, 2, 64}), cu(DType::kI32, {4}), start(DType::kI32, {3});
  fill_normal(k_new, r.rng);
  const std::int32_t cu_values[] = {0, 2, 4, 6};
  std::copy(cu_values, cu_values + 4, cu.i32());
  start.i32()[0] = 0;
  start.i32()[1] = -1;
  start.i32()[2] = 70;
  DeviceTensor dtable(table), dkn(k_new), dcu(cu), dstart(start);
  const auto k_before = dev.k_bytes();
  cuda::paged_append_kv(r.c.spec, {dkn.view, {}, dcu.view, dstart.view, dev.k.view, {}, dtable.view});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostTensor pool(DType::kBF16, {pages, 2, 16, 64});  // HND
  std::copy(k_before.begin(), k_before.end(), pool.bytes.begin());
  for (std::int64_t b = 0; b < 3; ++b) {
    for (std::int32_t row = cu_values[b]; row < cu_values[b + 1]; ++row) {
      const std::int64_t pos = start.i32()[b] + (row - cu_values[b]);
      if (pos < 0 || pos / 16 >= width) continue;
      const std::int32_t page = table.i32()[b * width + pos / 16];
      if (page < 0 || page >= pages) continue;
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t d = 0; d < 64; ++d) {
          pool.set(static_cast<std::size_t>(((page * 2 + h) * 16 + pos % 16) * 64 + d),
                   k_new.get(static_cast<std::size_t>((row * 2 + h) * 64 + d)));
        }
      }
    }
  }
  EXPECT_TRUE(dev.k_bytes() == pool.bytes) << "append with a page outside the pool and a negative start";

  // Decreasing offsets: rows go to some sequence's own pages, never to a page no table row names.
  const std::int32_t decreasing[] = {0, 4, 2, 6};
  std::copy(decreasing, decreasing + 4, cu.i32());
  start.i32()[1] = 0;
  upload(dcu, cu);
  upload(dstart, start);
  upload(dtable, r.c.table);
  upload(dev.k, r.c.k_pages);
  cuda::paged_append_kv(r.c.spec, {dkn.view, {}, dcu.view, dstart.view, dev.k.view, {}, dtable.view});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto after = dev.k_bytes();
  std::vector<bool> named(static_cast<std::size_t>(pages), false);
  for (std::int64_t i = 0; i < 3 * width; ++i) {
    const std::int32_t page = r.c.table.view.as<std::int32_t>()[i];
    if (page >= 0 && page < pages) named[static_cast<std::size_t>(page)] = true;
  }
  const std::size_t page_bytes = 2 * 16 * 64 * 2;
  for (std::int64_t page = 0; page < pages; ++page) {
    if (named[static_cast<std::size_t>(page)]) continue;
    const auto at = static_cast<std::ptrdiff_t>(page * page_bytes);
    EXPECT_TRUE(std::equal(after.begin() + at, after.begin() + at + static_cast<std::ptrdiff_t>(page_bytes),
                           r.c.k_pages.bytes.begin() + at))
        << "decreasing offsets wrote page " << page << ", which no table row names";
  }
  upload(dev.k, r.c.k_pages);

  // Decode: a length above the plan's kv_len is clamped to it; a page outside the pool reads zeros.
  HostTensor lengths(DType::kI32, {3});
  lengths.i32()[0] = 1 << 30;
  lengths.i32()[1] = -7;
  lengths.i32()[2] = 77;
  upload(dev.lengths, lengths);
  DeviceTensor dq(r.q), dout(r.out), dlse(r.lse);
  DeviceWorkspace ws(r.plan.bounds.workspace_bytes);
  cuda::paged_decode(r.plan, {dq.view, dev.cache(), dout.view, dlse.view}, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(r.out);
  dlse.copy_to(r.lse);
  HostTensor clamped(DType::kI32, {3});
  clamped.i32()[0] = kLongest;
  clamped.i32()[1] = 0;
  clamped.i32()[2] = 77;
  const PagedKvCache golden_cache{r.c.k_pages.view, r.c.v_pages.view, r.c.table.view, clamped.view};
  const auto golden = reference::paged_decode(r.plan.problem, {r.q.view, golden_cache, r.out.view, r.lse.view});
  expect_parity(r.out, golden.out, r.lse, golden.lse, DType::kBF16, "lengths clamped to [0, kv_len]");

  upload(dtable, table);  // sequence 0's first page out of the pool
  upload(dev.lengths, r.c.lengths);
  poison(r.out);
  upload(dout, r.out);
  cuda::paged_decode(r.plan, {dq.view, {dev.k.view, dev.v.view, dtable.view, dev.lengths.view}, dout.view, dlse.view},
                     ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(r.out);
  for (std::size_t i = 0; i < r.out.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(r.out.get(i))) << "a page outside the pool must read zeros, not NaN or garbage: " << i;
  }
}

}  // namespace
}  // namespace attnkit::testing::paged_cuda
