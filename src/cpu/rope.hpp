// Internal: rotary embedding of one f32 row, shared by apply_rope and the fused decode step.
#pragma once
#include <cstdint>

#include "attnkit/problem.hpp"

namespace attnkit::cpu::detail {

// Rotates head_dim values of `x` for position `pos` (validated: pos in the tables if given).
// Angles are computed in double so large positions keep their precision; the rotation is f32.
void rope_row(float* x, std::int64_t head_dim, std::int64_t pos, const RopeSpec& spec);

}  // namespace attnkit::cpu::detail
