// Placeholder until this file's owner lands the real rules: planning for it fails loudly.
#include "attnkit/error.hpp"
#include "plan/rules.hpp"

namespace attnkit::detail {
void partition_cuda_prefill(const PrefillProblem&, const Target&, const KernelFamily*, WorkPartition&, std::vector<std::string>&) {
  fail("plan", "the cuda prefill rules are not implemented yet", "use another backend");
}
}  // namespace attnkit::detail
