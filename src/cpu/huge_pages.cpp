// attnkit::cpu::advise_huge_pages: ask Linux for transparent huge pages under a range of host
// memory. Why a kernel library cares: the decode streams its K/V once per call, and with 4 KiB
// pages every 4 KiB of a stream is a TLB miss, whose page walk is two-dimensional under a
// hypervisor. On a KVM Xeon the group-4 bf16 decode read 12-14% faster from a cache on 2 MiB
// pages (docs/perf-notes.md, CPU round 15).
#include <cstdint>

#include "attnkit/cpu.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace attnkit::cpu {

bool advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHuge - 1) / kHuge * kHuge, last = (begin + bytes) / kHuge * kHuge;
  if (first >= last) return true;  // no whole huge page inside the range: nothing to advise
  return madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

}  // namespace attnkit::cpu
