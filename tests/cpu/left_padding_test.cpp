// Left-padded caches (DecodeTensors::key_starts): the golden's meaning checked by another route
// (the same cache cut at each start), the scalar and fast CPU decode against the golden on every
// ISA level with the padding rows NaN (a kernel that reads one fails), and the rejections.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_case.hpp"
#include "isa_scope.hpp"
#include "support/expect_error.hpp"

namespace attnkit::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A decode case whose sequence b starts at key starts[b]: keys before it (and before the window)
// are NaN in both caches.
struct PaddedCase : DecodeCase {
  HostTensor starts;
  PaddedCase(const DecodeProblem& p, const std::vector<std::int32_t>& lens, const std::vector<std::int32_t>& first)
      : DecodeCase(p, lens), starts(DType::kI32, {p.batch}) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      starts.i32()[b] = first[static_cast<std::size_t>(b)];
      const std::int64_t len = lens[static_cast<std::size_t>(b)];
      const std::int64_t begin = decode_keys(len, p.options.window, first[static_cast<std::size_t>(b)]).begin;
      for (std::int64_t h = 0; h < p.kv_heads; ++h) {
        for (std::int64_t j = 0; j < begin; ++j) {
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            const std::size_t at = static_cast<std::size_t>(((b * p.kv_heads + h) * p.max_seq + j) * p.head_dim + d);
            k_cache.set(at, kNaN);
            v_cache.set(at, kNaN);
          }
        }
      }
    }
  }
  DecodeTensors tensors() const {
    DecodeTensors t = DecodeCase::tensors();
    t.key_starts = starts.view;
    return t;
  }
};

// The golden with key_starts equals the golden of each sequence alone over its cache cut at the
// start (rows [start, max_seq), length len - start): the window counts back from the query either way.
TEST(LeftPadding, GoldenEqualsTheCacheCutAtEachStart) {
  for (std::int64_t window : {0, 5, 40}) {
    DecodeProblem p = decode_problem(4, 4, 2, 32, 60);
    p.options.window = window;
    const std::vector<std::int32_t> lens{60, 33, 9, 20}, first{17, 0, 8, 20};
    PaddedCase c(p, lens, first);
    const reference::Result padded = reference::decode(p, c.tensors());
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t start = first[static_cast<std::size_t>(b)];
      DecodeProblem one = p;
      one.batch = 1;
      one.max_seq = one.kv_len = p.max_seq - start;
      auto cut = [&](const TensorView& cache) {
        TensorView v = cache;
        v.data = static_cast<std::byte*>(cache.data) +
                 (b * cache.strides[0] + start * cache.strides[2]) * static_cast<std::int64_t>(dtype_size(cache.dtype));
        v.shape[0] = 1;
        v.shape[2] = one.max_seq;
        return v;
      };
      auto row = [&](const TensorView& t) {
        TensorView v = t;
        v.data = static_cast<std::byte*>(t.data) + b * t.strides[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
        v.shape[0] = 1;
        return v;
      };
      HostTensor length(DType::kI32, {1});
      length.i32()[0] = static_cast<std::int32_t>(lens[static_cast<std::size_t>(b)] - start);
      const reference::Result alone =
          reference::decode(one, DecodeTensors{row(c.q.view), cut(c.k_cache.view), cut(c.v_cache.view), length.view, {}, {}});
      for (std::int64_t i = 0; i < p.num_heads * p.head_dim; ++i) {
        EXPECT_EQ(padded.out[static_cast<std::size_t>(b * p.num_heads * p.head_dim + i)], alone.out[static_cast<std::size_t>(i)])
            << "b=" << b << " window=" << window;
      }
      for (std::int64_t h = 0; h < p.num_heads; ++h) {
        EXPECT_EQ(padded.lse[static_cast<std::size_t>(b * p.num_heads + h)], alone.lse[static_cast<std::size_t>(h)])
            << "b=" << b << " h=" << h << " window=" << window;
      }
    }
  }
}

// Scalar and fast decode (every ISA level, several thread counts so keys split) against the golden.
// Starts inside, at 0, one before the end, at the end and past it (no key: zeros, LSE -inf or the
// sink), before and inside a window.
void run_padded(const DecodeProblem& p, const std::vector<std::int32_t>& lens, const std::vector<std::int32_t>& first,
                int threads, bool with_sinks = false) {
  PaddedCase c(p, lens, first);
  std::mt19937_64 rng(c.seed);
  const HostTensor sinks = random_sinks(p.num_heads, rng);
  DecodeTensors t = c.tensors();
  if (with_sinks) t.sinks = sinks.view;
  const reference::Result golden = reference::decode(p, t);
  const std::string what = "H=" + std::to_string(p.num_heads) + " KV=" + std::to_string(p.kv_heads) + " D=" +
                           std::to_string(p.head_dim) + " window=" + std::to_string(p.options.window) + " threads=" +
                           std::to_string(threads) + " dtype=" + std::string(dtype_name(p.kv_dtype)) +
                           (with_sinks ? " sinks" : "") + seed_note(c.seed);
  const DType tolerance = coarsest({p.q_dtype, p.kv_dtype, p.out_dtype});
  {
    poison(c.out);
    poison(c.lse);
    cpu::decode(scalar_decode_plan(p), t);
    expect_matches_golden(c.out, golden.out, tolerance, "scalar " + what);
    expect_lse_matches(c.lse, golden.lse, "scalar " + what);
  }
  const DecodePlan plan = plan_decode(p, cpu_target(threads));
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  for (cpu::simd::Isa isa : supported_isas()) {
    ScopedIsa scoped(isa);
    poison(c.out);
    poison(c.lse);
    cpu::decode(plan, t, Workspace{workspace.data(), workspace.size()});
    const std::string note = "fast " + what + " splits=" + std::to_string(plan.partition.sequence_splits) + " isa=" +
                             std::string(cpu::simd::isa_name(isa));
    expect_matches_golden(c.out, golden.out, tolerance, note);
    expect_lse_matches(c.lse, golden.lse, note);
  }
}

TEST(LeftPadding, ScalarAndFastDecodeMatchGolden) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    run_padded(decode_problem(6, 8, 2, 64, 300, dtype), {300, 41, 7, 1, 90, 90}, {120, 0, 6, 1, 90, 200}, 2);
    run_padded(decode_problem(2, 32, 8, 128, 3001, dtype), {3001, 2000}, {1999, 3}, 7);  // split keys
  }
  DecodeProblem windowed = decode_problem(3, 4, 1, 96, 500);
  windowed.options.window = 100;
  run_padded(windowed, {500, 500, 60}, {450, 10, 59}, 4);  // inside, before the window, one key
  run_padded(decode_problem(3, 4, 2, 64, 80, DType::kBF16), {80, 30, 12}, {79, 30, 0}, 2, true);  // sinks
  run_padded(decode_problem(1, 2, 1, 64, 33, DType::kBF16), {33}, {5}, 2);  // one split, shorter than a tile
}

TEST(LeftPadding, BadStartsAreRejectedBeforeAnythingIsWritten) {
  const DecodeProblem p = decode_problem(2, 4, 2, 64, 50);
  PaddedCase c(p, {50, 20}, {0, 5});
  const DecodePlan plan = plan_decode(p, cpu_target(2));
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  const std::vector<std::uint8_t> before = c.out.bytes;
  auto rejected = [&](const DecodeTensors& t, const std::string& needle) {
    expect_error([&] { cpu::decode(plan, t, Workspace{workspace.data(), workspace.size()}); }, needle);
    EXPECT_EQ(std::memcmp(c.out.bytes.data(), before.data(), before.size()), 0) << needle;
  };
  HostTensor starts(DType::kI32, {2});
  starts.i32()[0] = 0;
  DecodeTensors t = c.tensors();
  t.key_starts = starts.view;
  starts.i32()[1] = -1;
  rejected(t, "key_starts[1]=-1 is outside 0..kv_len=50");
  starts.i32()[1] = 51;
  rejected(t, "key_starts[1]=51 is outside 0..kv_len=50");
  HostTensor as_float(DType::kF32, {2});
  t.key_starts = as_float.view;
  rejected(t, "key_starts");
  HostTensor short_starts(DType::kI32, {1});
  t.key_starts = short_starts.view;
  rejected(t, "key_starts");
}

}  // namespace
}  // namespace attnkit::testing
