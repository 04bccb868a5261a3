// The planner: the single place where decisions live. A plan names the kernel family and the
// work partition (tiles, splits, threads), the workspace it needs, and the evidence the
// benchmark checks it against (bytes moved, FLOPs, occupancy, tolerance). Kernels read plans;
// they never re-derive a split count or a tile size. Planning is pure host code: it never
// touches or synchronises with a device.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/problem.hpp"

namespace attnkit {

// Seed 004's constants.
inline constexpr double kFlashAttentionOutputToleranceAbs = 1.0e-3;
inline constexpr std::uint32_t kTargetTilesPerSplit = 4;

enum class Backend : std::uint8_t { kCpu, kCuda };

enum class KernelFamily : std::uint8_t {
  kScalarOnline,      // one query row at a time, keys one by one (seed 004's baseline)
  kCooperativeTiled,  // key tiles shared by a block of rows, FlashAttention-2 style
  kSplitKvDecode,     // GQA-packed flash-decoding: key range split, partial states merged
  kWarpSpecializedWgmma,  // Hopper (sm_90a) prefill: TMA producer warp + wgmma consumer warpgroups
};

std::string to_string(Backend b);
std::string to_string(KernelFamily f);

// What the planner knows about the machine. Filled from the device (cuda::target()) or the host
// (cpu_target()); tests may build one by hand.
struct Target {
  Backend backend = Backend::kCpu;
  std::string name = "cpu";
  int threads = 1;                            // CPU worker threads
  std::int64_t cache_bytes = 32ll << 20;      // CPU last-level cache / GPU L2
  int sm_count = 0;                           // GPU multiprocessors
  int cc_major = 0, cc_minor = 0;             // GPU compute capability
  std::int64_t shared_bytes_per_block = 0;    // opt-in maximum
  std::int64_t shared_bytes_per_sm = 0;
  int max_threads_per_sm = 0;
  double peak_read_bytes_per_s = 0;           // datasheet lead, for predicted time (0 = unknown)
  double peak_matmul_flops_per_s = 0;         // dense f16/bf16 matmul rate (0 = unknown)
  bool cpu_matrix_tiles = false;              // CPU: AMX-BF16 tiles the kernels will use (cpu_target)
  bool cpu_intel_cores = false;               // CPU: Intel cores, whose prefetchers stream decode's K and V
                                              // fastest in short turns (cpu_target)
  int cpu_vector_lanes = 16;                  // CPU: f32 lanes of the vectors the kernels will use: 16
                                              // (AVX-512), 8 (AVX2) or 1 (scalar) (cpu_target)
};
Target cpu_target(int threads = 0);  // 0 = hardware concurrency
// Datasheet targets, for planning GPU work on a machine without that GPU:
// "h200", "h100" (SXM) or "cpu" (this host). Throws Error naming the known names otherwise.
Target known_target(std::string_view name);

struct MemoryTraffic {
  std::uint64_t global_read_bytes = 0;
  std::uint64_t global_write_bytes = 0;
  std::uint64_t shared_memory_bytes = 0;  // per block footprint
};

struct Evidence {
  MemoryTraffic traffic;
  std::uint32_t occupancy_proxy_bps = 0;  // basis points (10000 = all lanes busy)
  std::uint64_t non_matmul_flops = 0;
  std::uint64_t matmul_flops = 0;  // 4 * heads * visible pairs * head_dim (QK^T and PV)
  std::uint64_t workspace_bytes = 0;
  double output_tolerance_abs = kFlashAttentionOutputToleranceAbs;  // f32 parity (seed 004)
  double rel_l2_tolerance = 1e-5;                                  // by input dtype (DESIGN.md)
  double predicted_seconds = 0;  // max(bytes / peak bandwidth, flops / peak rate), 0 if unknown
};

// The work partition of seed 004, generalised.
struct WorkPartition {
  KernelFamily family = KernelFamily::kScalarOnline;
  std::uint32_t tile_size = 1;              // keys per tile (scalar: 1)
  std::uint32_t tile_count = 0;             // tiles over the planned key range
  std::uint32_t sequence_splits = 1;        // parallel partial rows per query row
  std::uint32_t tiles_per_split = 0;
  std::uint32_t keys_per_split = 0;
  std::uint32_t rows_per_block = 1;         // query rows served by one block (GQA group for decode)
  std::uint32_t workgroups_per_row = 1;     // blocks per query row after splitting
  std::uint32_t workgroup_lanes = 0;        // threads per block
  std::uint32_t warp_lanes = 32;
  std::uint32_t warps_per_block = 0;
  std::uint32_t q_scratch_elements = 0;
  std::uint32_t score_scratch_elements = 0;
  std::uint32_t o_acc_scratch_elements = 0;
  std::uint32_t split_reduce_scratch_elements = 0;
  std::uint64_t grid_blocks = 0;            // blocks (GPU) or tasks (CPU) launched
  std::uint32_t pipeline_stages = 1;        // buffered tiles in flight
  // Persistent schedules (warp_specialized_wgmma): (sequence, head) pairs walked before the next
  // group starts (sized so their K/V stays in L2); single tiles interleaved longest first, causal
  // pairs one head's units after another.
  std::uint32_t heads_per_tile_group = 1;
  // Query tiles per unit of the persistent walk: 2 pairs a causal problem's i-th shortest and i-th
  // longest tiles of one (sequence, head) (equal work per unit; a head's pairs walked together);
  // 1 where the tiles fit one wave.
  std::uint32_t tiles_per_unit = 1;
  // Causal pairs: the last tail_pairs (sequence, head) pairs walked after the pairs as single
  // tiles, longest first, so the blocks finish together (the planner's model of the walk picks it).
  std::uint32_t tail_pairs = 0;
  // Query heads per query tile: > 1 packs a GQA group's heads (q_len rows each) into one tile, so
  // short queries (speculative decoding, chunk tails) fill the tile's rows with work.
  std::uint32_t packed_heads = 1;
  // Split-KV decode: > 1 when a row's key splits run as one thread-block cluster of this many
  // blocks and merge their partial states through distributed shared memory (no workspace, no
  // merge launch); 0: the states go to the workspace and a merge kernel combines them.
  std::uint32_t merge_cluster = 0;
  // Split-KV decode: the K/V loads ask L2 to evict their lines first (each element is read by one
  // block, and the call's K/V are few enough for the policy to pay: docs/architecture.md).
  bool kv_evict_first = false;
  // Split-KV decode (GPU): blocks per SM the partition counts on where a smaller block would let
  // more in (the two-tile ring, measured at two per SM); the launch reserves shared memory so that
  // no more share an SM. 0: as many as fit.
  std::uint32_t resident_blocks = 0;
  // Split-KV decode (CPU): the row-block bodies (groups of 4k heads) also fetch the K and V rows
  // they are about to read into L1, a few rows ahead; false leaves those rows to the L2 prefetches
  // of the stream (on AMD cores, measured faster: docs/perf-notes.md, CPU round 35).
  bool cpu_l1_prefetch = true;
};

// Seed 004's square self-attention planner (one head, seq_len x seq_len, f32).
struct FlashAttentionWorkPlan {
  std::uint32_t seq_len = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t logical_elements = 0;  // seq_len * head_dim
  WorkPartition partition;
  Evidence evidence;
};
FlashAttentionWorkPlan plan_flash_attention_scalar(std::uint32_t seq_len, std::uint32_t head_dim);
FlashAttentionWorkPlan plan_flash_attention_tiled(std::uint32_t seq_len, std::uint32_t head_dim,
                                                  std::uint32_t tile_size);

struct DecodePlan {
  DecodeProblem problem;
  Target target;
  WorkPartition partition;
  Evidence evidence;
  std::vector<std::string> reasons;  // why each choice was made, one line each
};

struct PrefillPlan {
  PrefillProblem problem;
  Target target;
  WorkPartition partition;
  Evidence evidence;
  std::vector<std::string> reasons;
};

// family: leave unset to let the planner choose.
DecodePlan plan_decode(const DecodeProblem& problem, const Target& target);
DecodePlan plan_decode(const DecodeProblem& problem, const Target& target, KernelFamily family);
PrefillPlan plan_prefill(const PrefillProblem& problem, const Target& target);
PrefillPlan plan_prefill(const PrefillProblem& problem, const Target& target, KernelFamily family);

// Printing: an aligned two-column table, and JSON (one object).
std::string to_table(const DecodePlan& plan);
std::string to_table(const PrefillPlan& plan);
std::string to_table(const FlashAttentionWorkPlan& plan);
std::string to_json(const DecodePlan& plan);
std::string to_json(const PrefillPlan& plan);
std::string to_json(const FlashAttentionWorkPlan& plan);

// Tolerances of DESIGN.md by input storage dtype.
double rel_l2_tolerance_for(DType input_dtype);

}  // namespace attnkit
