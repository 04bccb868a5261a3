// The CPU backend. Every entry point validates its inputs first (an Error with a Fix, nothing
// written), then runs the kernel family its plan names.
#pragma once
#include "attnkit/plan.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit::cpu {

void decode(const DecodePlan& plan, const DecodeTensors& tensors, Workspace workspace = {});
void prefill(const PrefillPlan& plan, const PrefillTensors& tensors, Workspace workspace = {});

// KV append: K, V or both at positions[b] (seed 000's append and append-both).
void append_kv(const AppendTensors& tensors);

// RoPE in place on x [batch, heads, head_dim] at positions[b] (one position per sequence).
void apply_rope(TensorView x, TensorView positions, const RopeSpec& spec);

// Seed 000's fused step as one call: RoPE(q), RoPE(k_new), append k and v at positions[b],
// then decode over positions[b] + 1 keys. The plan's problem describes the attention.
void fused_rope_append_decode(const DecodePlan& plan, const FusedDecodeTensors& tensors,
                              const RopeSpec& rope, Workspace workspace = {});

// Merge partial (output, LSE) states of key splits.
void merge_states(const MergeTensors& tensors);

}  // namespace attnkit::cpu
