// Internal: which instruction set the fast CPU kernels run with. Chosen at run time from cpuid,
// overridable (tests, benchmarks) with the environment variable
// ATTNKIT_CPU_ISA=scalar|avx2|avx512|avx512bf16|amx (avx512bf16: avx512 plus vdpbf16ps for bf16 K/V;
// amx: avx512bf16 plus AMX-BF16 tiles for bf16 prefill).
#pragma once
#include <string_view>

namespace attnkit::cpu::simd {

enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16, kAmx };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU and this build
Isa best_isa();               // the widest supported
// The ISA to run now: ATTNKIT_CPU_ISA when set (an Error with a Fix if this CPU lacks it or the
// name is unknown), else best_isa(). Read on every call so a test can switch paths.
Isa selected_isa();

}  // namespace attnkit::cpu::simd
