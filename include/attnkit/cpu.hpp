// The CPU backend. Every entry point validates its inputs first (an Error with a Fix, nothing
// written), then runs the kernel family its plan names.
#pragma once
#include "attnkit/paged.hpp"
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

// Paged cache (paged.hpp). Decode: one query per sequence. Extend: q_len_b new rows per sequence
// (cu_seqlens_q), causal bottom-right against the sequence's cached keys. The workspace is the
// plan's bounds.workspace_bytes; nothing is allocated per call beyond per-thread scratch.
void paged_decode(const PagedDecodePlan& plan, const PagedDecodeTensors& tensors, Workspace workspace = {});
void extend(const ExtendPlan& plan, const ExtendTensors& tensors, Workspace workspace = {});
// Appends n_b new K and/or V rows per sequence into its pages, across page boundaries.
void paged_append_kv(const PagedCacheSpec& cache, const PagedAppendTensors& tensors);

}  // namespace attnkit::cpu
