// Test support for the CUDA paged calls (label gpu): the CPU tests' NaN-poisoned page pools
// (tests/cpu/paged_case.hpp: a read outside the table or past a length yields NaN) copied to the
// device, runs of paged decode / extend / append on it, and the golden comparisons with
// DESIGN.md's tolerances (the loosest storage dtype of the call applies).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "attnkit/cuda_paged.hpp"
#include "cpu/paged_case.hpp"
#include "decode_support.hpp"

namespace attnkit::testing::paged_cuda {

using cuda_decode_tests::DeviceTensor;
using cuda_decode_tests::DeviceWorkspace;

// The pool and index tensors of a PagedCase on the device.
struct DevicePaged {
  DeviceTensor k, v, table, lengths;
  explicit DevicePaged(const PagedCase& c) : k(c.k_pages), v(c.v_pages), table(c.table), lengths(c.lengths) {}
  PagedKvCache cache() const { return {k.view, v.view, table.view, lengths.view}; }
  // Host copies of the pools (after a run), for byte comparisons.
  std::vector<std::uint8_t> k_bytes() const { return bytes_of(k); }
  std::vector<std::uint8_t> v_bytes() const { return bytes_of(v); }
  static std::vector<std::uint8_t> bytes_of(const DeviceTensor& t) {
    std::vector<std::uint8_t> out(t.bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), t.data, t.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

inline void upload(DeviceTensor& d, const HostTensor& h) {
  ASSERT_EQ(d.bytes, h.bytes.size());
  ASSERT_EQ(cudaMemcpy(d.data, h.bytes.data(), d.bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

// Output parity (rows already trimmed to the golden's) and LSE parity.
inline void expect_parity(const HostTensor& out, const std::vector<double>& golden_out, const HostTensor& lse,
                          const std::vector<double>& golden_lse, DType dtype, const std::string& note) {
  cuda_decode_tests::expect_matches_golden(out, golden_out, dtype, dtype, dtype, note);
  cuda_decode_tests::expect_lse_matches(lse, golden_lse, note, cuda_decode_tests::rel_l2_limit(dtype, dtype, dtype));
}

// The first `rows` token rows of a [rows_total, ...] host tensor.
inline HostTensor head_rows(const HostTensor& t, std::int64_t rows) {
  HostTensor h;
  if (t.view.rank == 3) {
    h = HostTensor(t.view.dtype, {rows, t.view.shape[1], t.view.shape[2]});
  } else {
    h = HostTensor(t.view.dtype, {rows, t.view.shape[1]});
  }
  std::copy(t.bytes.begin(), t.bytes.begin() + static_cast<std::ptrdiff_t>(h.bytes.size()), h.bytes.begin());
  return h;
}

// Ragged query offsets for q_lens.
inline HostTensor offsets(const std::vector<std::int32_t>& q_lens) {
  HostTensor cu(DType::kI32, {static_cast<std::int64_t>(q_lens.size()) + 1});
  cu.i32()[0] = 0;
  for (std::size_t b = 0; b < q_lens.size(); ++b) cu.i32()[b + 1] = cu.i32()[b] + q_lens[b];
  return cu;
}

// One paged decode on the GPU: fresh q, poisoned out/lse, checked against the golden.
inline void run_and_check_paged_decode(const PagedCase& c, const PagedDecodePlan& plan, std::mt19937_64& rng,
                                       const std::string& note) {
  const auto& s = c.setup;
  HostTensor q(s.dtype, {s.batch, s.heads, s.head_dim}), out(s.dtype, {s.batch, s.heads, s.head_dim});
  HostTensor lse(DType::kF32, {s.batch, s.heads});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  DevicePaged dev(c);
  DeviceTensor dq(q), dout(out), dlse(lse);
  DeviceWorkspace ws(plan.bounds.workspace_bytes);
  cuda::paged_decode(plan, {dq.view, dev.cache(), dout.view, dlse.view}, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << note;
  dout.copy_to(out);
  dlse.copy_to(lse);
  const auto golden = reference::paged_decode(plan.problem, {q.view, c.cache(), out.view, lse.view});
  expect_parity(out, golden.out, lse, golden.lse, s.dtype, note);
}

// One extend on the GPU with `pad_rows` rows past the last sequence's (they must stay poisoned); out
// in the plan's out_dtype, the tolerance the storage dtype's; the LSE written and checked unless
// with_lse is false (no LSE asked).
inline void run_and_check_extend(const PagedCase& c, const ExtendPlan& plan, const std::vector<std::int32_t>& q_lens,
                                 std::int64_t pad_rows, std::mt19937_64& rng, const std::string& note,
                                 bool with_lse = true) {
  const auto& s = c.setup;
  HostTensor cu = offsets(q_lens);
  const std::int64_t rows = cu.i32()[s.batch], total = rows + pad_rows;
  HostTensor q(s.dtype, {total, s.heads, s.head_dim}), out(plan.problem.out_dtype, {total, s.heads, s.head_dim});
  HostTensor lse(DType::kF32, {total, s.heads});
  fill_normal(q, rng);
  poison(out);
  poison(lse);
  DevicePaged dev(c);
  DeviceTensor dq(q), dcu(cu), dout(out), dlse(lse);
  DeviceWorkspace ws(plan.bounds.workspace_bytes);
  cuda::extend(plan, {dq.view, dcu.view, dev.cache(), dout.view, with_lse ? dlse.view : TensorView{}}, ws.view());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << note;
  dout.copy_to(out);
  dlse.copy_to(lse);
  const auto golden = reference::extend(plan.problem, {q.view, cu.view, c.cache(), out.view, lse.view});
  if (with_lse) {
    expect_parity(head_rows(out, rows), golden.out, head_rows(lse, rows), golden.lse, s.dtype, note);
  } else {  // no LSE asked: the kernels may take their other instances (the Hopper d64 one sums P on the tensor core)
    cuda_decode_tests::expect_matches_golden(head_rows(out, rows), golden.out, s.dtype, s.dtype, s.dtype, note);
  }
  for (std::size_t i = static_cast<std::size_t>(rows * s.heads * s.head_dim); i < out.numel(); ++i) {
    ASSERT_TRUE(std::isnan(out.get(i))) << note << ": padding row element " << i << " was written";
  }
  for (std::size_t i = static_cast<std::size_t>(rows * s.heads); i < lse.numel(); ++i) {
    ASSERT_TRUE(std::isnan(lse.get(i))) << note << ": padding LSE " << i << " was written";
  }
}

inline std::string describe_case(const PagedSetup& s, std::uint64_t seed) {
  return to_string(s.layout) + " page=" + std::to_string(s.page_size) + " H=" + std::to_string(s.heads) +
         " KH=" + std::to_string(s.kv_heads) + " D=" + std::to_string(s.head_dim) + " " + std::string(dtype_name(s.dtype)) +
         seed_note(seed);
}

}  // namespace attnkit::testing::paged_cuda
