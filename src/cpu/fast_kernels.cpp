// Placeholder until the fast CPU kernels land: plans naming them fail loudly.
#include "attnkit/error.hpp"
#include "cpu/kernels.hpp"

namespace attnkit::cpu::detail {
void fast_decode(const DecodePlan&, const DecodeTensors&, Workspace) {
  fail("cpu::decode", "the fast CPU decode kernel is not implemented yet", "plan with KernelFamily::kScalarOnline");
}
void fast_prefill(const PrefillPlan&, const PrefillTensors&, Workspace) {
  fail("cpu::prefill", "the fast CPU prefill kernel is not implemented yet", "plan with KernelFamily::kScalarOnline");
}
}  // namespace attnkit::cpu::detail
