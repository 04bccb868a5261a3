// The kernel families each backend implements (see families.hpp). The scalar online baseline
// (seed 004) lives on the CPU beside the golden reference; the GPU runs only the fast families.
#include "plan/families.hpp"

#include <algorithm>

namespace attnkit::detail {

const std::vector<KernelFamily>& backend_families(Backend backend, Job job) {
  static const std::vector<KernelFamily> cpu_decode{KernelFamily::kSplitKvDecode, KernelFamily::kScalarOnline};
  static const std::vector<KernelFamily> cpu_prefill{KernelFamily::kCooperativeTiled, KernelFamily::kScalarOnline};
  static const std::vector<KernelFamily> cuda_decode{KernelFamily::kSplitKvDecode};
  // Hopper's warp-specialized kernel where the target and the problem allow it, the tiled one elsewhere.
  static const std::vector<KernelFamily> cuda_prefill{KernelFamily::kWarpSpecializedWgmma,
                                                      KernelFamily::kCooperativeTiled};
  if (backend == Backend::kCpu) return job == Job::kDecode ? cpu_decode : cpu_prefill;
  return job == Job::kDecode ? cuda_decode : cuda_prefill;
}

bool backend_has_family(Backend backend, Job job, KernelFamily family) {
  const auto& families = backend_families(backend, job);
  return std::find(families.begin(), families.end(), family) != families.end();
}

std::string family_list(const std::vector<KernelFamily>& families) {
  std::string out;
  for (KernelFamily f : families) out += (out.empty() ? "" : ", ") + to_string(f);
  return out;
}

}  // namespace attnkit::detail
