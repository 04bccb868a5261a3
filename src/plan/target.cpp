// Targets the planner plans for: this host (cpu_target) and datasheet GPUs (known_target), so a
// GPU plan can be printed and checked on a machine without that GPU.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"
#include "cpu/fast_isa.hpp"

namespace attnkit {
namespace {

constexpr std::int64_t kFallbackCacheBytes = 32ll << 20;

// "32768K", "1M" or a plain byte count, as in /sys/devices/system/cpu/cpu0/cache/index*/size.
std::int64_t parse_cache_size(const std::string& text) {
  std::size_t used = 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (...) {
    return 0;
  }
  const char unit = used < text.size() ? static_cast<char>(std::toupper(static_cast<unsigned char>(text[used]))) : ' ';
  if (unit == 'K') value <<= 10;
  if (unit == 'M') value <<= 20;
  if (unit == 'G') value <<= 30;
  return value;
}

std::string read_word(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  in >> text;
  return text;
}

// CPUs named by a sysfs list such as "0-3,8,10-11" (0 when unreadable).
std::int64_t count_cpu_list(const std::string& list) {
  std::int64_t count = 0;
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string range = list.substr(at, comma - at);
    const std::size_t dash = range.find('-');
    try {
      const std::int64_t first = std::stoll(range.substr(0, dash));
      const std::int64_t last = dash == std::string::npos ? first : std::stoll(range.substr(dash + 1));
      if (last < first) return 0;
      count += last - first + 1;
    } catch (...) {
      return 0;
    }
    at = comma + 1;
  }
  return count;
}

// The host's last-level cache as lscpu counts it: the size of cpu0's highest-level data/unified
// cache times its instances (online CPUs / CPUs sharing one instance). sysfs first: glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) comes from cpuid and can confuse one instance with the machine
// (this 2-vCPU VM: 320 MiB, where sysfs and lscpu say one 32 MiB L3 shared by both CPUs).
std::int64_t last_level_cache_bytes() {
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index";
  int best_level = 0;
  std::int64_t best_size = 0, best_sharing = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string base = dir + std::to_string(index) + "/";
    const std::string type = read_word(base + "type");
    if (type.empty() || type == "Instruction") continue;
    int level = 0;
    try {
      level = std::stoi(read_word(base + "level"));
    } catch (...) {
      continue;
    }
    const std::int64_t size = parse_cache_size(read_word(base + "size"));
    if (size <= 0 || level < best_level || (level == best_level && size <= best_size)) continue;
    best_level = level;
    best_size = size;
    best_sharing = count_cpu_list(read_word(base + "shared_cpu_list"));
  }
  if (best_size > 0) {
    std::int64_t online = count_cpu_list(read_word("/sys/devices/system/cpu/online"));
    if (online <= 0) online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const std::int64_t sharing = std::clamp<std::int64_t>(best_sharing, 1, online);
    return best_size * ((online + sharing - 1) / sharing);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) return l3;
#endif
  return kFallbackCacheBytes;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    if (!name.empty()) return name;
  }
  return "cpu";
}

// Hopper (GH100, SXM): both parts share the die; the H200 differs by its HBM3e.
Target hopper(std::string name, double peak_read_bytes_per_s) {
  Target t;
  t.backend = Backend::kCuda;
  t.name = std::move(name);
  t.sm_count = 132;
  t.cc_major = 9;
  t.cc_minor = 0;
  t.shared_bytes_per_block = 232448;  // 227 KiB opt-in
  t.shared_bytes_per_sm = 233472;     // 228 KiB
  t.max_threads_per_sm = 2048;
  t.cache_bytes = 50ll << 20;          // 50 MiB L2 as configured on SXM parts (what cudaDeviceProp reports)
  t.peak_read_bytes_per_s = peak_read_bytes_per_s;
  t.peak_matmul_flops_per_s = 989.4e12;  // dense bf16/f16 tensor-core rate, SXM
  return t;
}

// The instruction set the fast CPU kernels run on now (ATTNKIT_CPU_ISA or the CPU selects), so a
// plan's tiles fit the body that will run it; none for a bad ATTNKIT_CPU_ISA, which the kernels
// report (with its fix), not planning.
std::optional<cpu::simd::Isa> isa_selected() {
  try {
    return cpu::simd::selected_isa();
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The f32 lanes of that set's vectors (16 where it cannot be told, as for a hand-built Target).
int vector_lanes(std::optional<cpu::simd::Isa> isa) {
  if (isa == cpu::simd::Isa::kScalar) return 1;
  if (isa == cpu::simd::Isa::kAvx2) return 8;
  return 16;
}

// Whether this host's cores are Intel's (cpuid's vendor string). Decode reads K and V in short
// turns there, whatever instruction set the kernels use (docs/perf-notes.md, CPU round 21).
bool intel_cores() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

}  // namespace

Target cpu_target(int threads) {
  if (threads < 0)
    fail("cpu_target", "threads=" + std::to_string(threads) + " is negative",
         "pass threads >= 1, or 0 for every hardware thread");
  Target t;
  t.backend = Backend::kCpu;
  t.name = cpu_model_name();
  t.threads = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  t.cache_bytes = last_level_cache_bytes();
  const std::optional<cpu::simd::Isa> isa = isa_selected();
  t.cpu_matrix_tiles = isa == cpu::simd::Isa::kAmx;
  t.cpu_vector_lanes = vector_lanes(isa);
  t.cpu_intel_cores = intel_cores();
  return t;
}

Target known_target(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "h200") return hopper("NVIDIA H200 (datasheet)", 4.8e12);
  if (lower == "h100") return hopper("NVIDIA H100 SXM (datasheet)", 3.35e12);
  if (lower == "cpu") return cpu_target();
  fail("known_target", "unknown target '" + std::string(name) + "'", "use one of: h200, h100, cpu");
}

}  // namespace attnkit
