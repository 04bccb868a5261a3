// DESIGN.md's parity rule by input storage dtype (relative L2 error against the float64 golden),
// plus e4m3 (docs/architecture.md, numerics).
#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"

namespace attnkit {

double rel_l2_tolerance_for(DType input_dtype) {
  switch (input_dtype) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
    // e4m3 inputs, against the golden computed from the same quantized bytes (times their scales):
    // the kernel rounds the softmax probabilities P to e4m3 for P V (3 mantissa bits, each P off by
    // up to 2^-4 relative, about 3.6% RMS of a diffuse row's output); docs/architecture.md.
    case DType::kE4M3: return 5e-2;
    case DType::kI32: break;
  }
  fail("plan", "no attention tolerance for dtype " + std::string(dtype_name(input_dtype)),
       "use f32, f16, bf16 (or e4m3 prefill) inputs");
}

}  // namespace attnkit
