// CPU features the tests check that __builtin_cpu_supports does not name on every compiler
// (clang 14 rejects "f16c" at compile time; gcc accepts it).
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace attnkit::testing {

// F16C: CPUID leaf 1, ECX bit 29.
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
#else
  return false;
#endif
}

}  // namespace attnkit::testing
