// Internal: the evidence half of the planner. The partition rules (rules.hpp) decide how work is
// cut; these functions count what that cut costs (bytes, FLOPs, occupancy, workspace, tolerance),
// from the problem and the partition alone, so they can be tested without any backend's rules.
#pragma once
#include <cstdint>

#include "attnkit/plan.hpp"

namespace attnkit::detail {

// Bytes of one partial softmax state row (head_dim accumulators + running max + running sum, f32).
std::uint64_t split_state_bytes_per_row(std::int64_t head_dim);

// Sums over the query rows of one (batch, head) of a prefill problem, in closed form
// (exact, O(1) in q_len): visible query-key pairs, and key tiles touched (sum of ceil(visible/tile)).
// Row r sits at absolute position r + (kv_len - q_len) (problem.hpp's masking convention).
struct VisibleRows {
  std::uint64_t pairs = 0;
  std::uint64_t tile_visits = 0;
  std::uint64_t keys_seen = 0;  // size of the union of all rows' visible key ranges
};
VisibleRows sum_visible_rows(std::int64_t q_len, std::int64_t kv_len, bool causal, std::int64_t window,
                             std::uint32_t tile_size);

// Seed 004's occupancy proxy: active lanes / lanes per block, in basis points (at least one lane).
std::uint32_t lane_occupancy_bps(std::uint64_t active_lanes, std::uint32_t workgroup_lanes);

// The generalised proxy: lane fill (seed) times machine fill (blocks / SMs on a GPU, tasks /
// threads on a CPU, capped at 1).
std::uint32_t occupancy_proxy_bps(const WorkPartition& partition, std::int64_t head_dim, const Target& target);

// Seed 004's non-matmul FLOP model, generalised to rows x visible keys:
//   scalar online: 9 per pair + 4 per row value;
//   tiled / split: 4 per pair + 8 per (row, tile) + 3 per row value + 3 per merged split value.
std::uint64_t non_matmul_flops(KernelFamily family, std::uint64_t pairs, std::uint64_t tile_visits,
                               std::uint64_t rows, std::int64_t head_dim, std::uint32_t sequence_splits,
                               const char* context);

// Full evidence of a partition. The problem must be validated.
Evidence compute_decode_evidence(const DecodeProblem& problem, const WorkPartition& partition,
                                 const Target& target);
// stored: the bytes per element of q and of K/V in memory where they differ from problem.dtype
// (extend: q in its own dtype, an e4m3 pool read at 1 byte while the CPU computes on f16).
struct StoredSizes {
  std::uint64_t q = 0, kv = 0;  // 0: dtype_size(problem.dtype)
};
Evidence compute_prefill_evidence(const PrefillProblem& problem, const WorkPartition& partition,
                                  const Target& target, StoredSizes stored = {});

// How many times each KV head's keys and values are read for one decode step: once per GQA group
// when the block packs the whole group (rows_per_block >= group), once per query head for the
// scalar family (seed 000/004's re-read).
std::uint64_t decode_kv_reads_per_kv_head(const DecodeProblem& problem, const WorkPartition& partition);

}  // namespace attnkit::detail
