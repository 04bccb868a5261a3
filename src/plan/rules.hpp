// Internal: the per-backend partition rules the planner calls. Each backend's rules live beside
// its kernels' owner (cpu_rules.cpp, cuda_decode_rules.cpp, cuda_prefill_rules.cpp); the common
// planner (plan_decode / plan_prefill) validates, calls the rules, then fills in the evidence.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"

namespace attnkit::detail {

// Each rule fills `partition` (family, tiles, splits, threads, scratch, grid) and appends one
// line per decision to `reasons`. `requested` is the caller's family, or nullptr to choose.
// Which cache the kernel reads: contiguous decode can merge a row's splits inside a cluster and
// load its K/V evict-first; the paged and extend kernels merge through the workspace and load
// without a cache hint (evict-first measured no gain there: docs/perf-notes.md, "Decode round 23").
enum class DecodeCache { kContiguous, kPaged };
// CPU: a contiguous multi-head cache on cores whose prefetch hints hold L1's miss buffers streams
// K beside V (pipeline_stages 2); paged tasks keep the tiled body, on tiles the bodies can read in
// place from pages of `page_size` keys where the page allows it (cpu_reads_pages_in_place).
void partition_cpu_decode(const DecodeProblem& p, const Target& t, const KernelFamily* requested,
                          WorkPartition& partition, std::vector<std::string>& reasons,
                          DecodeCache cache = DecodeCache::kContiguous, std::int64_t page_size = 0);
// CPU paged decode: whether the bodies read tiles of `tile` keys in place from pages of `page_size`
// keys (a power of two that holds whole tiles, or, from 16 keys, whose whole pages make a tile);
// else the kernel gathers chunks of keys into staging.
bool cpu_reads_pages_in_place(std::int64_t page_size, std::uint32_t tile);
void partition_cpu_prefill(const PrefillProblem& p, const Target& t, const KernelFamily* requested,
                           WorkPartition& partition, std::vector<std::string>& reasons);
void partition_cuda_decode(const DecodeProblem& p, const Target& t, const KernelFamily* requested,
                           WorkPartition& partition, std::vector<std::string>& reasons,
                           DecodeCache cache = DecodeCache::kContiguous);
void partition_cuda_prefill(const PrefillProblem& p, const Target& t, const KernelFamily* requested,
                            WorkPartition& partition, std::vector<std::string>& reasons);

// Blocks of the split-KV decode kernel (contiguous or paged) one SM of `t` holds at once: shared
// memory (`shared_bytes` of dynamic memory per block), threads, and registers (the kernel's
// register budget, decode_geometry.hpp). Both decode planners count their waves with it.
std::int64_t cuda_decode_blocks_per_sm(const Target& t, std::int64_t shared_bytes, int warps, int heads_per_warp,
                                       int capacity, std::int64_t kv_bytes);
// Whether a tensor-core decode cut keeps both of every SM's two block slots streaming long ranges
// for the whole call (`wave` = resident blocks of the GPU): there a two-tile ring reads faster than
// the budget's three (cuda_decode_rules.cpp, kMinTilesForTwoStages). The contiguous rules apply it
// as they cut; the paged planner, whose splits change after, to its final cut of TMA page boxes.
bool cuda_decode_streams_full_waves(std::int64_t kv_bytes, std::int64_t blocks_per_sm, std::int64_t wave,
                                    std::int64_t grid_blocks, std::int64_t tiles_per_split, std::int64_t stage_bytes);

// The CPU has no e4m3 prefill: its planner and cpu::prefill both reject it with this Error.
void require_cpu_prefill_dtype(DType dtype, const char* context);

// Extend as the padded causal prefill it is planned, costed and printed as: every sequence with
// max_q_len rows at the end of kv_len keys, in the pool's dtype (paged_plan.cpp).
PrefillProblem extend_as_prefill(const ExtendProblem& e);

}  // namespace attnkit::detail
