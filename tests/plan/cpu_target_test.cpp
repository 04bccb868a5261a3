// cpu_target()'s last-level cache against what the kernel tells sysfs. Only plausibility is
// checked (the exact value is the host's), and only where sysfs lists cpu0's caches, so the test
// can fail for a real reason (a per-machine figure read as per-instance, or the reverse) and
// skips, visibly, where it has nothing to compare with.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#include "attnkit/plan.hpp"
#include "support/cpu_features.hpp"

using namespace attnkit;

namespace {

// The largest data/unified cache of cpu0 in bytes (one instance), 0 if sysfs does not list one.
std::int64_t largest_cpu0_cache() {
  std::int64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string base = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream type_file(base + "type"), size_file(base + "size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size) || type == "Instruction") continue;
    std::size_t used = 0;
    std::int64_t bytes = std::stoll(size, &used);
    if (used < size.size() && (size[used] == 'K' || size[used] == 'k')) bytes <<= 10;
    if (used < size.size() && size[used] == 'M') bytes <<= 20;
    best = std::max(best, bytes);
  }
  return best;
}

}  // namespace

TEST(CpuTarget, LastLevelCacheIsOneInstanceTimesAtMostEveryCpu) {
  const std::int64_t instance = largest_cpu0_cache();
  if (instance <= 0) GTEST_SKIP() << "sysfs lists no cache for cpu0 here: nothing to compare cpu_target() with";
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GT(online, 0);
  const Target t = cpu_target();
  // At least the largest cache one core sees; at most one such instance per online CPU.
  EXPECT_GE(t.cache_bytes, instance) << "cpu_target() reports less than cpu0's largest cache";
  EXPECT_LE(t.cache_bytes, instance * online)
      << "cpu_target() reports more last-level cache than " << online << " CPUs with one " << (instance >> 20)
      << " MiB instance each could have (a per-machine figure counted again per instance?)";
  // The thread count does not change the cache.
  EXPECT_EQ(cpu_target(1).cache_bytes, t.cache_bytes);
}

// cpu_target()'s Intel flag (cpuid's vendor) against the kernel's /proc/cpuinfo vendor_id.
TEST(CpuTarget, IntelCoresMatchTheVendorTheKernelReports) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  while (std::getline(in, line)) {
    if (line.rfind("vendor_id", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) vendor = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  if (vendor.empty()) GTEST_SKIP() << "/proc/cpuinfo lists no vendor_id here";
  EXPECT_EQ(cpu_target(1).cpu_intel_cores, vendor == "GenuineIntel") << "vendor_id " << vendor;
}

// The vector lanes the planner sizes decode tiles by follow the path the kernels will take:
// ATTNKIT_CPU_ISA when set, else the widest this CPU has (cpuid's AVX-512 F bit decides 16 or 8).
TEST(CpuTarget, VectorLanesFollowTheSelectedPath) {
  struct ScopedIsa {
    explicit ScopedIsa(const char* isa) { setenv("ATTNKIT_CPU_ISA", isa, 1); }
    ~ScopedIsa() { unsetenv("ATTNKIT_CPU_ISA"); }
  };
  {
    ScopedIsa scalar("scalar");
    EXPECT_EQ(cpu_target(1).cpu_vector_lanes, 1);
  }
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && attnkit::testing::cpu_has_f16c()) {
    ScopedIsa avx2("avx2");
    EXPECT_EQ(cpu_target(1).cpu_vector_lanes, 8);
  }
  EXPECT_EQ(cpu_target(1).cpu_vector_lanes, avx512 ? 16 : __builtin_cpu_supports("avx2") ? 8 : 1);
#endif
}
