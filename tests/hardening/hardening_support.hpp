// Hardening test support: every CPU kernel path (the scalar-online baseline, and the fast
// families on each instruction set this CPU supports), planning and running a case on one path,
// and byte-level helpers for "unchanged" and "confined to these rows" checks.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/cpu_case.hpp"
#include "cpu/fast_isa.hpp"

namespace attnkit::testing {

using cpu::simd::Isa;

struct KernelPath {
  bool fast = false;
  Isa isa = Isa::kScalar;
  std::string name() const { return fast ? "fast/" + std::string(cpu::simd::isa_name(isa)) : "scalar_online"; }
};

inline std::vector<KernelPath> cpu_kernel_paths() {
  std::vector<KernelPath> paths{{false, Isa::kScalar}};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (cpu::simd::isa_supported(isa)) paths.push_back({true, isa});
  }
  return paths;
}

// Pins the fast kernels' instruction set for one scope (single-threaded tests only: setenv).
class IsaScope {
 public:
  explicit IsaScope(const KernelPath& path) {
    if (path.fast) setenv("ATTNKIT_CPU_ISA", std::string(cpu::simd::isa_name(path.isa)).c_str(), 1);
  }
  ~IsaScope() { unsetenv("ATTNKIT_CPU_ISA"); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

inline DecodePlan decode_plan_on(const KernelPath& path, const DecodeProblem& p, int threads = 2) {
  return path.fast ? plan_decode(p, cpu_target(threads)) : plan_decode(p, cpu_target(threads), KernelFamily::kScalarOnline);
}
inline PrefillPlan prefill_plan_on(const KernelPath& path, const PrefillProblem& p, int threads = 2) {
  return path.fast ? plan_prefill(p, cpu_target(threads))
                   : plan_prefill(p, cpu_target(threads), KernelFamily::kScalarOnline);
}

inline void run_decode(const DecodePlan& plan, const DecodeTensors& t) {
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  cpu::decode(plan, t, Workspace{workspace.data(), workspace.size()});
}
inline void run_prefill(const PrefillPlan& plan, const PrefillTensors& t) {
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  cpu::prefill(plan, t, Workspace{workspace.data(), workspace.size()});
}

// Element i of a contiguous tensor of any storage dtype, as float.
inline float at(const HostTensor& t, std::size_t i) { return t.get(i); }

// Bytes of row r (of `row_elements` elements) of a contiguous tensor.
inline bool row_bytes_equal(const HostTensor& a, const HostTensor& b, std::size_t r, std::size_t row_elements) {
  const std::size_t size = dtype_size(a.view.dtype) * row_elements;
  return std::memcmp(a.bytes.data() + r * size, b.bytes.data() + r * size, size) == 0;
}

// A prefill call's buffers (dense, contiguous): fresh random q/k/v, poisoned out/lse.
struct DensePrefill {
  PrefillProblem problem;
  HostTensor q, k, v, out, lse;
  std::uint64_t seed;
  DensePrefill(const PrefillProblem& p, float stddev = 1.0f, std::uint64_t s = fresh_seed()) : problem(p), seed(s) {
    const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim;
    q = HostTensor(p.dtype, {B, H, p.q_len, D});
    k = HostTensor(p.dtype, {B, G, p.kv_len, D});
    v = HostTensor(p.dtype, {B, G, p.kv_len, D});
    out = HostTensor(p.out_dtype, {B, H, p.q_len, D});
    lse = HostTensor(DType::kF32, {B, H, p.q_len});
    std::mt19937_64 rng(seed);
    fill_normal(q, rng, stddev);
    fill_normal(k, rng, stddev);
    fill_normal(v, rng);
    poison(out);
    poison(lse);
  }
  PrefillTensors tensors() const { return {q.view, k.view, v.view, out.view, lse.view, {}, {}}; }
};

}  // namespace attnkit::testing
