// The CPU entry points for attention: validate everything (an Error with a Fix, nothing
// written), then run the kernel family the plan names. No decision is re-made here.
#include <string>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cpu/kernels.hpp"
#include "plan/rules.hpp"

namespace attnkit::cpu {
namespace {

void require_cpu_plan(const Target& target, const char* context) {
  if (target.backend != Backend::kCpu)
    fail(context,
         std::string("the plan was made for the ") + (target.backend == Backend::kCuda ? "cuda" : "cpu") + " backend",
         "plan with cpu_target() to run on the CPU, or call the matching backend");
}

}  // namespace

void decode(const DecodePlan& plan, const DecodeTensors& tensors, Workspace workspace) {
  require_cpu_plan(plan.target, "cpu::decode");
  validate_decode(plan.problem, tensors, DeviceKind::kCpu);  // lengths checked against plan kv_len
  validate_workspace(workspace, plan.evidence.workspace_bytes, DeviceKind::kCpu);
  if (plan.partition.family == KernelFamily::kScalarOnline) {
    detail::scalar_online_decode(plan, tensors);
  } else {
    detail::fast_decode(plan, tensors, workspace);
  }
}

void prefill(const PrefillPlan& plan, const PrefillTensors& tensors, Workspace workspace) {
  require_cpu_plan(plan.target, "cpu::prefill");
  attnkit::detail::require_cpu_prefill_dtype(plan.problem.dtype, "cpu::prefill");
  validate_prefill(plan.problem, tensors, DeviceKind::kCpu);
  validate_workspace(workspace, plan.evidence.workspace_bytes, DeviceKind::kCpu);
  if (plan.partition.family == KernelFamily::kScalarOnline) {
    detail::scalar_online_prefill(plan, tensors);
  } else {
    detail::fast_prefill(plan, tensors, workspace);
  }
}

}  // namespace attnkit::cpu
