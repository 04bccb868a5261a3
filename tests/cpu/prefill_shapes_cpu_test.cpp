// The CUDA prefill tests' shapes (tests/cuda/prefill_shapes.hpp) on the CPU scalar-online path,
// against the float64 golden: CI has no GPU, so this is where every one of those shapes is checked
// on each commit.
#include <gtest/gtest.h>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_shapes.hpp"

namespace attnkit::testing {
namespace {

class PrefillShapesCpu : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(PrefillShapesCpu, ScalarOnlineMatchesGolden) {
  PrefillCase c(GetParam());
  const reference::Result golden = reference::prefill(c.problem, c.tensors());
  const PrefillPlan plan = plan_prefill(c.problem, cpu_target(), KernelFamily::kScalarOnline);
  ASSERT_EQ(plan.partition.family, KernelFamily::kScalarOnline);
  cpu::prefill(plan, c.tensors());
  EXPECT_EQ(prefill_parity_failure(c.out, golden.out, c.problem.dtype), "") << c.note();
  EXPECT_EQ(prefill_lse_failure(c.lse, golden.lse), "") << c.note();
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillShapesCpu, ::testing::ValuesIn(prefill_shapes()),
                         [](const ::testing::TestParamInfo<PrefillShape>& info) { return info.param.name; });

}  // namespace
}  // namespace attnkit::testing
