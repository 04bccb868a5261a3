// Runtime ISA selection for the fast CPU kernels (cpuid through the compiler's builtins).
#include "cpu/fast_isa.hpp"

#include <cstdlib>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cpu::simd {

std::string_view isa_name(Isa isa) {
  switch (isa) {
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
  if (name == "avx512bf16") {
    isa = Isa::kAvx512Bf16;
  } else if (name == "avx512") {
    isa = Isa::kAvx512;
  } else if (name == "avx2") {
    isa = Isa::kAvx2;
  } else if (name == "scalar") {
    isa = Isa::kScalar;
  } else {
    fail("cpu kernels", "ATTNKIT_CPU_ISA=" + name + " is not an instruction set attnkit knows",
         "set ATTNKIT_CPU_ISA to scalar, avx2, avx512 or avx512bf16, or unset it to use the best this CPU has");
  }
  require(isa_supported(isa), "cpu kernels", "ATTNKIT_CPU_ISA=" + name + " but this CPU does not support it",
          "unset ATTNKIT_CPU_ISA or pick one of the supported sets (best here: " + std::string(isa_name(best_isa())) +
              ")");
  return isa;
}

}  // namespace attnkit::cpu::simd
