// The CPU backend. Every entry point validates its inputs first (an Error with a Fix, nothing
// written), then runs the kernel family its plan names.
#pragma once
#include <cstddef>

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

// Host memory for a KV cache: ask Linux to back [data, data + bytes) with transparent huge pages
// (madvise MADV_HUGEPAGE on the whole 2 MiB pages inside the range). Call it before the cache is
// first written: pages touched earlier stay 4 KiB until the kernel's background collapse. The
// decode streams K/V once per call, and with 4 KiB pages every 4 KiB of a stream costs a TLB
// miss (a two-level walk under a hypervisor); on a KVM Xeon the bf16 group-4 decode ran 12-14%
// faster from 2 MiB pages (docs/perf-notes.md). Returns false where the system refuses (THP set
// to "never", not Linux); the memory and its contents are unchanged either way.
bool advise_huge_pages(void* data, std::size_t bytes);

}  // namespace attnkit::cpu
