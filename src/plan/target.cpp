// Targets the planner plans for: this host (cpu_target) and datasheet GPUs (known_target), so a
// GPU plan can be printed and checked on a machine without that GPU.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <thread>

#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"

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

std::int64_t last_level_cache_bytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) return l3;
#endif
  // The largest cache of cpu0 (containers and some kernels leave sysconf at 0).
  std::int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(in >> text)) continue;
    best = std::max(best, parse_cache_size(text));
  }
  return best > 0 ? best : kFallbackCacheBytes;
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

}  // namespace

Target cpu_target(int threads) {
  require(threads >= 0, "cpu_target", "threads=" + std::to_string(threads) + " is negative",
          "pass threads >= 1, or 0 for every hardware thread");
  Target t;
  t.backend = Backend::kCpu;
  t.name = cpu_model_name();
  t.threads = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  t.cache_bytes = last_level_cache_bytes();
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
