// The CUDA entry points of the serving layouts (paged.hpp). Same plans as the CPU: plan on the host
// with cuda::target(), allocate plan.bounds.workspace_bytes once, then run. A run allocates nothing
// and never synchronises with the host: index tensors (page table, lengths, offsets, start
// positions) are device tensors read by the kernels, so a captured CUDA graph replays correctly
// while their contents change within the plan's bounds. Device-resident indices cannot be checked
// on the host without a synchronisation; callers with host mirrors call validate_paged_indices_host
// (paged.hpp) on them, and the kernels never read or write outside the pool (see docs/paged.md).
//
// Kernels: the split-KV decode body with page-table row addressing (paged decode; extend packs
// (query row, head) pairs into its rows), on Hopper the warp-specialized prefill kernel for extend
// chunks of 128+ rows (K/V tiles as page boxes; the plan's family says which), a warp per (token,
// KV head) for the append; bad device
// indices are clamped or skipped, never followed outside the pool (docs/paged.md, "CUDA
// implementation"). A build without CUDA throws an Error whose Fix names the CPU backend.
#pragma once
#include "attnkit/cuda.hpp"
#include "attnkit/paged.hpp"

namespace attnkit::cuda {

void paged_decode(const PagedDecodePlan& plan, const PagedDecodeTensors& tensors, Workspace workspace,
                  Stream stream = nullptr);
void extend(const ExtendPlan& plan, const ExtendTensors& tensors, Workspace workspace, Stream stream = nullptr);
void paged_append_kv(const PagedCacheSpec& cache, const PagedAppendTensors& tensors, Stream stream = nullptr);

}  // namespace attnkit::cuda
