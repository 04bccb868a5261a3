// Internal: the CPU kernel families the dispatcher (cpu/dispatch.cpp) routes plans to.
// Inputs arrive validated; kernels never re-derive a split count or tile size.
#pragma once
#include "attnkit/plan.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::cpu::detail {

// Seed 004's scalar online-softmax baseline: one query row at a time, all keys in one pass, f32.
void scalar_online_decode(const DecodePlan& plan, const DecodeTensors& t);
void scalar_online_prefill(const PrefillPlan& plan, const PrefillTensors& t);

// Fast kernels (multithreaded, SIMD): GQA-packed split-KV decode and tiled prefill.
void fast_decode(const DecodePlan& plan, const DecodeTensors& t, Workspace workspace);
void fast_prefill(const PrefillPlan& plan, const PrefillTensors& t, Workspace workspace);

}  // namespace attnkit::cpu::detail
