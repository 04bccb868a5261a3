// Test support for the CPU kernels at every instruction-set level the host runs: the levels, and
// ATTNKIT_CPU_ISA set for the scope of one run (the caller's own setting put back after it).
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/fast_isa.hpp"

namespace attnkit::testing {

inline std::vector<cpu::simd::Isa> supported_isas() {
  using cpu::simd::Isa;
  std::vector<Isa> r;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (cpu::simd::isa_supported(isa)) r.push_back(isa);
  }
  return r;
}

class ScopedIsa {
 public:
  explicit ScopedIsa(cpu::simd::Isa isa) {
    if (const char* outer = std::getenv("ATTNKIT_CPU_ISA")) outer_ = outer;
    setenv("ATTNKIT_CPU_ISA", std::string(cpu::simd::isa_name(isa)).c_str(), 1);
  }
  ~ScopedIsa() {
    if (outer_.empty()) unsetenv("ATTNKIT_CPU_ISA");
    else setenv("ATTNKIT_CPU_ISA", outer_.c_str(), 1);
  }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  std::string outer_;
};

}  // namespace attnkit::testing
