// Runtime ISA selection for the fast CPU kernels (cpuid through the compiler's builtins).
#include "cpu/fast_isa.hpp"

#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "attnkit/error.hpp"

namespace attnkit::cpu::simd {
namespace {

// AMX-BF16 usable by this process: cpuid leaf 7 says the CPU has the tiles (AMX-TILE, AMX-BF16),
// and Linux grants the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, Linux 5.16+; without it the first tile instruction faults). Asked once.
bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool tiles = ((d >> 24) & 1u) != 0 && ((d >> 22) & 1u) != 0;  // AMX-TILE, AMX-BF16
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return tiles && syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAmx: return "amx";
    case Isa::kAvx512Bf16: return "avx512bf16";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: break;
  }
  return "scalar";
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::kAvx512Bf16:
      return isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::kAmx:
      return isa_supported(Isa::kAvx512Bf16) && amx_usable();
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kScalar:
      return true;
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa best_isa() {
  if (isa_supported(Isa::kAmx)) return Isa::kAmx;
  if (isa_supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa selected_isa() {
  const char* env = std::getenv("ATTNKIT_CPU_ISA");
  if (env == nullptr || *env == '\0') return best_isa();
  const std::string name(env);
  Isa isa;
  if (name == "amx") {
    isa = Isa::kAmx;
  } else if (name == "avx512bf16") {
    isa = Isa::kAvx512Bf16;
  } else if (name == "avx512") {
    isa = Isa::kAvx512;
  } else if (name == "avx2") {
    isa = Isa::kAvx2;
  } else if (name == "scalar") {
    isa = Isa::kScalar;
  } else {
    fail("cpu kernels", "ATTNKIT_CPU_ISA=" + name + " is not an instruction set attnkit knows",
         "set ATTNKIT_CPU_ISA to scalar, avx2, avx512, avx512bf16 or amx, or unset it to use the best this CPU has");
  }
  if (!isa_supported(isa))
    fail("cpu kernels", "ATTNKIT_CPU_ISA=" + name + " but this CPU does not support it",
         "unset ATTNKIT_CPU_ISA or pick one of the supported sets (best here: " + std::string(isa_name(best_isa())) +
             ")");
  return isa;
}

}  // namespace attnkit::cpu::simd
