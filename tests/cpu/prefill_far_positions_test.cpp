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

namespace attnkit::testing {
namespace {

using cpu::simd::Isa;

TEST(PrefillFarPositions, CausalAndWindowMasksStayExactPast2To24) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      const std::uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      FarPositionsCase c(dtype, causal, /*q_len=*/37, /*window=*/50, /*head_dim=*/64, rng);
      const PrefillProblem& p = c.p;
      HostTensor &out = c.out, &lse = c.lse;
      const PrefillTensors t = c.tensors();
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
