// DESIGN.md's parity rule by input storage dtype (relative L2 error against the float64 golden).
#include "attnkit/error.hpp"
#include "attnkit/plan.hpp"

namespace attnkit {

double rel_l2_tolerance_for(DType input_dtype) {
  switch (input_dtype) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
    case DType::kI32: break;
  }
  fail("plan", "no attention tolerance for dtype " + std::string(dtype_name(input_dtype)), "use f32, f16 or bf16 inputs");
}

}  // namespace attnkit
