// Internal: which kernel families each backend implements for each job. The planner rejects a
// requested family outside this table before any rule runs, and checks the rules' choice against it.
// A backend owner who lands a new family adds it here in the same change.
#pragma once
#include <string>
#include <vector>

#include "attnkit/plan.hpp"

namespace attnkit::detail {

enum class Job : std::uint8_t { kDecode, kPrefill };

const std::vector<KernelFamily>& backend_families(Backend backend, Job job);
bool backend_has_family(Backend backend, Job job, KernelFamily family);
std::string family_list(const std::vector<KernelFamily>& families);  // "split_kv_decode, scalar_online"

}  // namespace attnkit::detail
