// The planner: validate the problem, let the backend's partition rules cut the work (rules.hpp),
// check what they chose, then count the evidence (evidence.cpp). Pure host code.
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "plan/evidence.hpp"
#include "plan/families.hpp"
#include "plan/rules.hpp"

namespace attnkit {
namespace {

using detail::Job;

const char* job_name(Job job) { return job == Job::kDecode ? "plan_decode" : "plan_prefill"; }

void require_family_available(const Target& target, Job job, const KernelFamily* requested) {
  if (requested == nullptr) return;
  const auto& families = detail::backend_families(target.backend, job);
  if (!detail::backend_has_family(target.backend, job, *requested))
    fail(job_name(job),
         "the " + to_string(target.backend) + " backend has no " + to_string(*requested) + " kernel for " +
             (job == Job::kDecode ? "decode" : "prefill"),
         "request one of: " + detail::family_list(families) + " (or leave the family unset to let the planner choose)");
}

// The rules belong to other owners; a partition the kernels cannot run must not leave the planner.
void check_partition(const Target& target, Job job, const KernelFamily* requested, const WorkPartition& p) {
  const char* ctx = job_name(job);
  const std::string rules = to_string(target.backend) + " partition rules";
  if (!detail::backend_has_family(target.backend, job, p.family))
    fail(ctx, rules + " chose " + to_string(p.family) + ", which this backend does not implement",
         "fix the rules or add the family to src/plan/families.cpp");
  if (requested != nullptr && p.family != *requested) {
    fail(ctx, rules + " chose " + to_string(p.family) + " although " + to_string(*requested) + " was requested",
         "make the rules honour the requested family");
  }
  if (!(p.tile_size >= 1 && p.sequence_splits >= 1 && p.rows_per_block >= 1))
    fail(ctx, rules + " left tile_size, sequence_splits or rows_per_block at 0", "set each to at least 1 in the rules");
}

// A hand-built target must describe a machine the rules' arithmetic can hold.
void validate_target(const char* ctx, const Target& target) {
  constexpr int kMaxUnits = 1 << 20;
  if (!(target.threads >= 0 && target.threads <= kMaxUnits))
    fail(ctx, "target threads=" + std::to_string(target.threads) + " is outside 0..2^20",
         "pass a thread count the machine has (0 = all)");
  if (!(target.sm_count >= 0 && target.sm_count <= kMaxUnits))
    fail(ctx, "target sm_count=" + std::to_string(target.sm_count) + " is outside 0..2^20",
         "use cuda::target() or known_target() rather than a hand-built target");
  if (!(target.cache_bytes >= 0 && target.shared_bytes_per_block >= 0 && target.shared_bytes_per_sm >= 0 &&
        target.max_threads_per_sm >= 0))
    fail(ctx, "the target has a negative size", "use cuda::target(), cpu_target() or known_target()");
}

DecodePlan plan_decode_impl(const DecodeProblem& problem, const Target& target, const KernelFamily* requested) {
  problem.validate();
  validate_target("plan_decode", target);
  require_family_available(target, Job::kDecode, requested);
  DecodePlan plan;
  plan.problem = problem;
  plan.target = target;
  if (target.backend == Backend::kCpu) {
    detail::partition_cpu_decode(problem, target, requested, plan.partition, plan.reasons);
  } else {
    detail::partition_cuda_decode(problem, target, requested, plan.partition, plan.reasons);
  }
  check_partition(target, Job::kDecode, requested, plan.partition);
  plan.evidence = detail::compute_decode_evidence(problem, plan.partition, target);
  const std::uint64_t reads = detail::decode_kv_reads_per_kv_head(problem, plan.partition);
  plan.reasons.push_back(reads == 1 ? "bytes: K/V read once per KV head (the GQA group of " +
                                          std::to_string(problem.group_size()) + " shares one read)"
                                    : "bytes: K/V read " + std::to_string(reads) +
                                          " times per KV head (the block does not pack its GQA group)");
  if (plan.evidence.workspace_bytes > 0) {
    plan.reasons.push_back("workspace: " + std::to_string(plan.partition.sequence_splits) +
                           " split states per row, merged after the splits");
  }
  return plan;
}

PrefillPlan plan_prefill_impl(const PrefillProblem& problem, const Target& target, const KernelFamily* requested) {
  problem.validate();
  validate_target("plan_prefill", target);
  require_family_available(target, Job::kPrefill, requested);
  PrefillPlan plan;
  plan.problem = problem;
  plan.target = target;
  if (target.backend == Backend::kCpu) {
    detail::partition_cpu_prefill(problem, target, requested, plan.partition, plan.reasons);
  } else {
    detail::partition_cuda_prefill(problem, target, requested, plan.partition, plan.reasons);
  }
  check_partition(target, Job::kPrefill, requested, plan.partition);
  plan.evidence = detail::compute_prefill_evidence(problem, plan.partition, target);
  if (plan.partition.sequence_splits > 1) {  // (an e4m3 plan's workspace is its V^T: its reasons say so)
    plan.reasons.push_back("workspace: " + std::to_string(plan.partition.sequence_splits) +
                           " split states per row, merged after the splits");
  }
  return plan;
}

}  // namespace

DecodePlan plan_decode(const DecodeProblem& problem, const Target& target) {
  return plan_decode_impl(problem, target, nullptr);
}
DecodePlan plan_decode(const DecodeProblem& problem, const Target& target, KernelFamily family) {
  return plan_decode_impl(problem, target, &family);
}
PrefillPlan plan_prefill(const PrefillProblem& problem, const Target& target) {
  return plan_prefill_impl(problem, target, nullptr);
}
PrefillPlan plan_prefill(const PrefillProblem& problem, const Target& target, KernelFamily family) {
  return plan_prefill_impl(problem, target, &family);
}

}  // namespace attnkit
