// Placeholder until this file's owner lands the real rules: planning for it fails loudly.
#include "attnkit/error.hpp"
#include "plan/rules.hpp"

namespace attnkit::detail {
void partition_cpu_decode(const DecodeProblem&, const Target&, const KernelFamily*, WorkPartition&, std::vector<std::string>&) {
  fail("plan", "the cpu rules are not implemented yet", "use another backend");
}
void partition_cpu_prefill(const PrefillProblem&, const Target&, const KernelFamily*, WorkPartition&, std::vector<std::string>&) {
  fail("plan", "the cpu rules are not implemented yet", "use another backend");
}
}  // namespace attnkit::detail
