// Prefill rows at positions past 2^24, where an f32 no longer holds every integer: the masks of the
// causal diagonal and the window's start must stay exact there (a query must not see the key after
// it, nor the one before its window). K and V span kv_len = 2^25 + 77 rows of a reserved address
// range of which only the rows near the window are mapped, so a read of any other key faults.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "attnkit/attnkit.hpp"
#include "cpu/fast_isa.hpp"
#include "cuda/prefill_shapes.hpp"
#include "isa_scope.hpp"
#include "support/far_positions.hpp"
#include "support/sparse_rows.hpp"

namespace attnkit::testing {
namespace {

using cpu::simd::Isa;

TEST(PrefillFarPositions, CausalAndWindowMasksStayExactPast2To24) {
  constexpr std::int64_t kKvLen = kFarKvLen, kQLen = 37, kWindow = 50, kHeadDim = 64;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      const PrefillProblem p = far_positions_problem(dtype, causal, kQLen, kWindow, kHeadDim);
      // The first row's window starts at kv_len - q_len - window + 1; a margin of rows before it.
      const std::int64_t mapped_from = kKvLen - kQLen - kWindow - 256;
      SparseRows k(dtype, kKvLen, kHeadDim, mapped_from, rng), v(dtype, kKvLen, kHeadDim, mapped_from, rng);
      HostTensor q(dtype, {1, 4, kQLen, kHeadDim}), out(dtype, {1, 4, kQLen, kHeadDim}), lse(DType::kF32, {1, 4, kQLen});
      fill_normal(q, rng, 1.0f);
      const PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
      const reference::Result golden = reference::prefill(p, t);
      const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : " non-causal") +
                               " (ATTNKIT_TEST_SEED=" + std::to_string(seed) + ")";
      for (KernelFamily family : {KernelFamily::kCooperativeTiled, KernelFamily::kScalarOnline}) {
        const PrefillPlan plan = plan_prefill(p, cpu_target(2), family);
        for (Isa isa : supported_isas()) {
          ScopedIsa scoped(isa);
          poison(out);
          poison(lse);
          cpu::prefill(plan, t);
          EXPECT_EQ(prefill_parity_failure(out, golden.out, dtype), "")
              << what << " " << to_string(family) << " isa=" << cpu::simd::isa_name(isa);
          EXPECT_EQ(prefill_lse_failure(lse, golden.lse), "") << what << " " << to_string(family);
        }
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::testing
