// CUDA prefill partition rules (seed 004's planner, for the GPU).
//
// Family kWarpSpecializedWgmma (src/cuda/prefill_hopper/): the planner's choice on a Hopper target
// (sm_90) for f16/bf16 inputs at the head dims of cuda_prefill_hopper::kHopperConfigs, without a
// soft-cap, with the output in the inputs' dtype or f32, whatever the shape (short queries against
// long keys split keys inside the Hopper kernel, or pack a GQA group's heads). One persistent block per SM
// walks (query tile of 128 rows, head, sequence) work tiles, longest first (causal: in pairs of equal
// total work). e4m3 inputs plan only this family (kHopperFp8Configs), with V^T staged in the
// workspace; anything it cannot run is an error, since no other family has an fp8 kernel.
//
// Family kCooperativeTiled (key tiles shared by a block of query rows), two kernels:
//   tensor cores (src/cuda/prefill/tiled_prefill.cuh) for f16/bf16 inputs at the head dims of
//     cuda_prefill::kTiledConfigs: a block owns rows_per_block query rows of one (batch, head); K/V
//     tiles of tile_size keys stream through shared memory;
//   SIMT (simt_tiled_prefill.cuh) for f32 inputs (tensor cores would round them) and other head
//     dims: one warp per row, f32 K/V tiles in shared memory: exact, not fast.
// Key splits: when q tiles * batch * heads cannot fill every SM (one wave at the occupancy the
// shared memory and registers allow), the key range is cut into sequence_splits parts of at least
// kTargetTilesPerSplit tiles; partial states go to the workspace and are merged afterwards.
// Pure host code: compiled with or without CUDA.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "common/window_begin.hpp"
#include "cuda/prefill/prefill_config.hpp"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/prefill_hopper/hopper_walk.hpp"
#include "plan/checked_math.hpp"
#include "plan/rules.hpp"

namespace attnkit::detail {
namespace {

constexpr const char* kContext = "plan (cuda prefill)";
// The Hopper split rule's costs, in key-tile times (~1.2 us at d128): a work unit's own overhead
// (its first S and softmax with no P V beside it, its last P V, the epilogue: ~3-5 us at d128,
// docs/perf-notes.md "Hopper prefill round 10"), and the merge launch after split units.
constexpr std::uint64_t kUnitOverheadTiles = 3;
constexpr std::uint64_t kMergeTiles = 3;

// The target's SMs (an H100/H200 class GPU when it does not say).
std::uint64_t sm_count_of(const Target& t) { return t.sm_count > 0 ? static_cast<std::uint64_t>(t.sm_count) : 132; }

std::uint32_t to_u32(std::uint64_t v, const char* what) {
  if (v > UINT32_MAX)
    fail(kContext, std::string(what) + "=" + std::to_string(v) + " does not fit 32 bits",
         "split the call into smaller batches or shorter sequences");
  return static_cast<std::uint32_t>(v);
}

// Blocks of one config that fit on one SM at once (shared memory, registers, threads).
int blocks_per_sm(const cuda_prefill::TiledConfig& c, const Target& t) {
  const std::int64_t smem = cuda_prefill::tiled_shared_bytes(c);
  const int threads = c.warps * 32;
  const std::int64_t smem_per_sm = t.shared_bytes_per_sm > 0 ? t.shared_bytes_per_sm : 228 * 1024;
  const int threads_per_sm = t.max_threads_per_sm > 0 ? t.max_threads_per_sm : 2048;
  // Each block also reserves 1 KiB of shared memory for the runtime.
  const std::int64_t by_smem = smem_per_sm / (smem + 1024);
  const std::int64_t by_threads = threads_per_sm / threads;
  const std::int64_t by_regs = 65536 / (static_cast<std::int64_t>(cuda_prefill::tiled_registers_per_thread(c)) * threads);
  return static_cast<int>(std::max<std::int64_t>(1, std::min({by_smem, by_threads, by_regs})));
}

void partition_simt(const PrefillProblem& p, WorkPartition& part, std::vector<std::string>& reasons) {
  const std::uint32_t warps = cuda_prefill::kSimtWarpsPerBlock;
  const std::uint32_t tile = cuda_prefill::kSimtKeysPerTile;
  part.family = KernelFamily::kCooperativeTiled;
  part.tile_size = tile;
  part.tile_count = to_u32(div_ceil(static_cast<std::uint64_t>(p.kv_len), std::uint64_t{tile}), "tile_count");
  part.sequence_splits = 1;
  part.tiles_per_split = part.tile_count;
  part.keys_per_split = to_u32(std::uint64_t{part.tile_count} * tile, "keys_per_split");
  part.rows_per_block = warps;
  part.workgroups_per_row = 1;
  part.warp_lanes = 32;
  part.warps_per_block = warps;
  part.workgroup_lanes = warps * 32;
  part.q_scratch_elements = 0;  // q lives in registers, head_dim / 32 per lane
  part.score_scratch_elements = 0;  // one score at a time per warp
  part.o_acc_scratch_elements = 0;
  part.split_reduce_scratch_elements = 0;
  part.pipeline_stages = 1;
  const std::uint64_t rows = checked_product({static_cast<std::uint64_t>(p.batch), static_cast<std::uint64_t>(p.num_heads),
                                              static_cast<std::uint64_t>(p.q_len)},
                                             kContext, "query rows");
  part.grid_blocks = div_ceil(rows, std::uint64_t{warps});
  reasons.push_back("SIMT tiles: one warp per query row, " + std::to_string(warps) + " rows per block share f32 K/V tiles of " +
                    std::to_string(tile) + " keys (" + std::to_string(2 * tile * cuda_prefill::kSimtMaxHeadDim * 4) +
                    " bytes of shared memory); no key split");
}

// The cooperative-tiled family (tensor-core or SIMT kernel).
void partition_cooperative(const PrefillProblem& p, const Target& t, const KernelFamily* requested,
                           WorkPartition& part, std::vector<std::string>& reasons) {
  const cuda_prefill::TiledConfig* config = cuda_prefill::find_tiled_config(p.head_dim);
  const bool half_inputs = p.dtype == DType::kF16 || p.dtype == DType::kBF16;
  const bool out_ok = p.out_dtype == p.dtype || p.out_dtype == DType::kF32;

  if (requested != nullptr && *requested == KernelFamily::kSplitKvDecode) {
    fail(kContext, "split-kv-decode is a decode family", "plan prefill with cooperative-tiled");
  }
  if (requested != nullptr && *requested == KernelFamily::kScalarOnline) {
    fail(kContext, "the GPU has no scalar-online prefill kernel (its exact f32 path is the SIMT variant of "
                   "cooperative-tiled)",
         "plan with cooperative-tiled (or leave the family unset), or run scalar-online on the CPU");
  }
  if (!out_ok)
    fail(kContext,
         "out_dtype=" + std::string(dtype_name(p.out_dtype)) + " with inputs " + std::string(dtype_name(p.dtype)),
         "use out_dtype equal to the input dtype, or f32");
  if (p.head_dim > cuda_prefill::kSimtMaxHeadDim)
    fail(kContext, "head_dim=" + std::to_string(p.head_dim) + " is above 256", "use head_dim <= 256");

  if (!half_inputs || config == nullptr) {
    reasons.push_back(!half_inputs ? "inputs are " + std::string(dtype_name(p.dtype)) +
                                         ": tensor cores would round them, so the exact SIMT kernel runs"
                                   : "no tensor-core instantiation for head_dim=" + std::to_string(p.head_dim) +
                                         " (64, 96, 128, 256): SIMT kernel");
    partition_simt(p, part, reasons);
    return;
  }

  const cuda_prefill::TiledConfig& c = *config;
  const std::uint64_t q_tiles = div_ceil(static_cast<std::uint64_t>(p.q_len), static_cast<std::uint64_t>(c.rows_per_block));
  const std::uint64_t kv_tiles = div_ceil(static_cast<std::uint64_t>(p.kv_len), static_cast<std::uint64_t>(c.keys_per_tile));
  const std::uint64_t base_blocks = checked_product(
      {q_tiles, static_cast<std::uint64_t>(p.batch), static_cast<std::uint64_t>(p.num_heads)}, kContext, "blocks");

  part.family = KernelFamily::kCooperativeTiled;
  part.rows_per_block = static_cast<std::uint32_t>(c.rows_per_block);
  part.tile_size = static_cast<std::uint32_t>(c.keys_per_tile);
  part.tile_count = to_u32(kv_tiles, "tile_count");
  part.warp_lanes = 32;
  part.warps_per_block = static_cast<std::uint32_t>(c.warps);
  part.workgroup_lanes = static_cast<std::uint32_t>(c.warps * 32);
  part.pipeline_stages = static_cast<std::uint32_t>(c.stages);
  part.q_scratch_elements = static_cast<std::uint32_t>(c.rows_per_block * c.head_dim);
  part.score_scratch_elements = static_cast<std::uint32_t>(c.rows_per_block * c.keys_per_tile);
  part.o_acc_scratch_elements = static_cast<std::uint32_t>(c.rows_per_block * c.head_dim);
  reasons.push_back("cooperative-tiled (tensor cores): " + std::string(dtype_name(p.dtype)) + " inputs, head_dim " +
                    std::to_string(p.head_dim) + " has an instantiation");
  reasons.push_back(std::to_string(c.rows_per_block) + " query rows per block (" + std::to_string(c.warps) + " warps x " +
                    std::to_string(16 * c.row_tiles) + " rows: " + std::to_string(c.row_tiles) +
                    " m16 tile(s) share each K/V fragment), " + std::to_string(c.keys_per_tile) +
                    " keys per tile; " +
                    (c.q_in_registers ? "Q fragments stay in registers"
                                      : "Q re-read from shared memory per k-step (registers go to the O accumulator)"));
  const int fit = blocks_per_sm(c, t);
  reasons.push_back(std::to_string(c.stages) + " shared-memory stages for K and V (cp.async): " +
                    std::to_string(cuda_prefill::tiled_shared_bytes(c)) + " bytes per block, " +
                    std::to_string(fit) + " block(s) per SM");

  // Key splits: only when one wave is not full, and never below kTargetTilesPerSplit tiles a split.
  const std::uint64_t sms = sm_count_of(t);
  const std::uint64_t wave = sms * static_cast<std::uint64_t>(fit);
  std::uint64_t splits = 1;
  if (base_blocks < wave) {
    const std::uint64_t wanted = div_ceil(wave, base_blocks);
    const std::uint64_t by_length = std::max<std::uint64_t>(1, kv_tiles / kTargetTilesPerSplit);
    splits = std::min({wanted, by_length, static_cast<std::uint64_t>(cuda_prefill::kMaxKeySplits)});
  }
  std::uint64_t tiles_per_split = div_ceil(kv_tiles, splits);
  splits = div_ceil(kv_tiles, tiles_per_split);  // no empty trailing split
  part.sequence_splits = to_u32(splits, "sequence_splits");
  part.tiles_per_split = to_u32(tiles_per_split, "tiles_per_split");
  part.keys_per_split = to_u32(tiles_per_split * static_cast<std::uint64_t>(c.keys_per_tile), "keys_per_split");
  part.workgroups_per_row = part.sequence_splits;
  part.split_reduce_scratch_elements =
      splits > 1 ? to_u32(checked_product({splits, static_cast<std::uint64_t>(c.head_dim) + 1}, kContext, "split scratch"),
                          "split_reduce_scratch_elements")
                 : 0;
  part.grid_blocks = checked_mul(base_blocks, splits, kContext, "grid blocks");
  if (splits > 1) {
    reasons.push_back(std::to_string(base_blocks) + " blocks fill less than one wave (" + std::to_string(wave) +
                      "): keys split " + std::to_string(splits) + " ways, " + std::to_string(tiles_per_split) +
                      " tiles each, states merged after");
  } else {
    reasons.push_back(std::to_string(base_blocks) + " blocks" +
                      (base_blocks >= wave ? " fill at least one wave (" + std::to_string(wave) + "): no key split"
                                           : ": too few key tiles to split (" + std::to_string(kv_tiles) + ")"));
  }
  if (p.causal || p.options.window > 0) {
    reasons.push_back("masked tiles are skipped, only boundary tiles are masked; causal blocks run longest-first");
  }
}

bool is_hopper(const Target& t) { return t.cc_major == 9 && t.cc_minor == 0; }

std::string format_rate(double rate) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2fx", rate);
  return text;
}

std::string format_fixed(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", v);
  return text;
}

// Whether a config's query tile holds a whole GQA group's queries (partition_hopper then packs
// the group's heads into one tile).
bool packs_gqa_group(const PrefillProblem& p, const cuda_prefill_hopper::HopperConfig& c) {
  return p.group_size() > 1 && p.q_len * p.group_size() <= cuda_prefill_hopper::rows_per_block(c);
}

// Matrix work of a config over one (sequence, head), in (query row, key row) pairs its consumer
// warpgroups compute, padding included: each block walks the key tiles its rows' visible keys
// touch, masked parts included, as the kernel's work_tile does (bottom-right causal, window counted
// back from the block's first row), and each of its 64-row warpgroups computes them all, or under
// a causal mask (unpacked, on configs that skip dead key tiles) only those up to its own last row's.
double padded_tile_work(const PrefillProblem& p, const cuda_prefill_hopper::HopperConfig& c) {
  namespace hop = cuda_prefill_hopper;
  const std::int64_t rows = hop::rows_per_block(c), bc = c.keys_per_tile, offset = p.kv_len - p.q_len;
  const bool skips =
      p.causal && hop::skips_dead_key_tiles(c.keys_per_tile, c.consumer_warpgroups) && !packs_gqa_group(p, c);
  double total = 0;
  for (std::int64_t m0 = 0; m0 < p.q_len; m0 += rows) {
    const std::int64_t first = m0 + offset, last = std::min(p.q_len, m0 + rows) - 1 + offset;
    const std::int64_t lo = detail::window_begin(first, p.options.window);
    const std::int64_t hi = p.causal ? std::min(p.kv_len, last + 1) : p.kv_len;
    if (hi <= lo) continue;
    const std::int64_t tile_lo = lo / bc, tiles = (hi + bc - 1) / bc - tile_lo;
    for (int wg = 0; wg < c.consumer_warpgroups; ++wg) {
      std::int64_t live = tiles;
      if (skips) live = std::clamp<std::int64_t>((m0 + wg * 64 + 63 + offset) / bc + 1 - tile_lo, 1, tiles);
      total += static_cast<double>(live * bc * 64);
    }
  }
  return total;
}

// The Hopper config for the problem's head_dim with the least padded tile work per unit of speed
// (nullptr: none compiled for that head_dim). A config that packs the GQA group beats one that does
// not (packing divides the tiles by the group; d64: 160 rows of a group of 8 fit a 192-row block,
// not a 128-row one). The loop over query blocks is O(q_len / 128).
const cuda_prefill_hopper::HopperConfig* choose_hopper_config(const PrefillProblem& p) {
  const cuda_prefill_hopper::HopperConfig* best = nullptr;
  double best_cost = 0;
  for (const cuda_prefill_hopper::HopperConfig& c : cuda_prefill_hopper::kHopperConfigs) {
    if (c.head_dim != p.head_dim) continue;
    const double cost = padded_tile_work(p, c) / c.relative_rate;
    const bool packs = packs_gqa_group(p, c), best_packs = best != nullptr && packs_gqa_group(p, *best);
    if (best == nullptr || packs > best_packs || (packs == best_packs && cost < best_cost)) {
      best = &c;
      best_cost = cost;
    }
  }
  return best;
}

// Query tiles per unit of the Hopper kernel's walk (unsplit plans). Causal problems pair one
// (sequence, head)'s query tiles, the i-th shortest with the i-th longest, so every unit holds the
// same number of key tiles (rounds of tiles sorted longest first left a block up to 1.8x the mean
// work when a round spanned one head: d256 16k causal). Where the tiles fit one wave of blocks,
// pairing only halves the blocks at work: a pair costs its two tiles' fixed costs and one more key
// tile than the longest tile alone (docs/perf-notes.md, "Hopper prefill round 14").
std::uint64_t hopper_tiles_per_unit(const PrefillProblem& p, std::uint64_t work_tiles, std::uint64_t sms) {
  return p.causal && work_tiles > sms ? 2 : 1;
}

// The tail of a causal pairs walk (hopper_walk.hpp): the last pairs as single tiles, longest first,
// dealt on in the walk's rounds. Rounds of equal pairs leave the blocks uneven by the last partial
// round (0.95-0.97 of the mean load over the largest at the sweep's causal points; perf-notes,
// "Hopper prefill round 28"); the tail's tiles fill it, the longest where the pairs ended first.
// Each candidate tail is walked by the kernel's own code (step order, unit_tile), a tile costing
// its key tiles + kUnitOverheadTiles, and the most even wins (ties: the smaller tail). Candidates
// hold at most two rounds of tiles, so few heads' K/V are read outside their pairs' rounds.
struct WalkTail {
  std::uint32_t pairs = 0;
  double balance = 1, balance_without = 1;  // mean block load over the largest
};

WalkTail hopper_walk_tail(const PrefillProblem& p, std::int64_t rows, std::int64_t bc, int m_tiles, int pairs,
                          std::uint64_t heads_per_group, std::uint64_t grid) {
  namespace hop = cuda_prefill_hopper;
  std::vector<double> cost(static_cast<std::size_t>(m_tiles));  // by m_rev
  const std::int64_t offset = p.kv_len - p.q_len;
  for (int m_rev = 0; m_rev < m_tiles; ++m_rev) {
    const std::int64_t m0 = static_cast<std::int64_t>(m_tiles - 1 - m_rev) * rows;
    const std::int64_t last = std::min(p.q_len, m0 + rows) - 1 + offset;
    const std::int64_t hi = std::clamp<std::int64_t>(last + 1, 0, p.kv_len);
    cost[static_cast<std::size_t>(m_rev)] = static_cast<double>((hi + bc - 1) / bc + kUnitOverheadTiles);
  }
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0) * pairs;
  const auto balance = [&](int tail) {
    const hop::HopperWalk w = hop::make_walk(m_tiles, pairs, static_cast<std::int64_t>(heads_per_group), 2, 1, tail,
                                             static_cast<std::int64_t>(grid));
    // Whole rounds of pairs, or of middle tiles, add the same to every block: only the rounds
    // around the pairs' end and the last two before the tail are walked.
    std::vector<double> load(static_cast<std::size_t>(w.grid), 0.0);
    double walked = 0;
    const int pairs_end = std::min(w.total_units, (w.paired_units / w.grid + 1) * w.grid);
    const int tail_start = std::max(0, w.tail_units / w.grid - 2) * w.grid;
    for (int u = std::max(0, w.paired_units / w.grid - 2) * w.grid; u < w.total_units; ++u) {
      if (u == pairs_end && u < tail_start) u = tail_start;
      const int round = u / w.grid;
      double& block_load = load[static_cast<std::size_t>(hop::round_slot(w, round, u - round * w.grid))];
      for (int k = 0; k < 2; ++k) {
        const hop::TileCoord tc = hop::unit_tile(w, u, k);
        if (tc.bh < 0) continue;
        walked += cost[static_cast<std::size_t>(tc.m_rev)];
        block_load += cost[static_cast<std::size_t>(tc.m_rev)];
      }
    }
    const double mean = total / w.grid, before = (total - walked) / w.grid;
    return mean / (before + *std::max_element(load.begin(), load.end()));
  };
  WalkTail best;
  best.balance = best.balance_without = balance(0);
  constexpr double kEven = 0.999;  // nothing left worth a tail (many rounds of pairs get here unaided)
  for (int tail = 1; best.balance < kEven && tail <= pairs && static_cast<std::uint64_t>(tail) * m_tiles <= 2 * grid;
       ++tail) {
    const double b = balance(tail);
    if (b > best.balance + 1e-3) best.pairs = static_cast<std::uint32_t>(tail), best.balance = b;
  }
  return best;
}

void partition_hopper(const PrefillProblem& p, const Target& t, const cuda_prefill_hopper::HopperConfig& c,
                      WorkPartition& part, std::vector<std::string>& reasons) {
  namespace hop = cuda_prefill_hopper;
  const bool fp8 = is_fp8(p.dtype);
  const std::uint64_t rows = static_cast<std::uint64_t>(hop::rows_per_block(c));
  const std::uint64_t bc = static_cast<std::uint64_t>(c.keys_per_tile);
  // GQA packing: where a group's queries fit one tile (q_len x group <= rows: speculative decoding,
  // short chunks), the group's heads share the tile instead of each padding a tile of its own, so
  // a KV head's tiles are read and multiplied once, not group times.
  const bool packed = !fp8 && packs_gqa_group(p, c);
  const std::uint64_t q_tiles = packed ? 1 : div_ceil(static_cast<std::uint64_t>(p.q_len), rows);
  const std::uint64_t kv_tiles = div_ceil(static_cast<std::uint64_t>(p.kv_len), bc);
  const std::uint64_t tile_pairs = checked_mul(static_cast<std::uint64_t>(p.batch),
                                               static_cast<std::uint64_t>(packed ? p.kv_heads : p.num_heads), kContext,
                                               "(sequence, head) pairs");  // packed: (sequence, KV head)
  const std::uint64_t work_tiles = checked_mul(q_tiles, tile_pairs, kContext, "work tiles");
  if (work_tiles > INT32_MAX)
    fail(kContext, std::to_string(work_tiles) + " work tiles do not fit 31 bits",
         "split the call into smaller batches");
  const std::uint64_t sms = sm_count_of(t);
  part = WorkPartition{};
  part.family = KernelFamily::kWarpSpecializedWgmma;
  part.rows_per_block = static_cast<std::uint32_t>(rows);
  part.tile_size = static_cast<std::uint32_t>(bc);
  part.tile_count = to_u32(kv_tiles, "tile_count");
  part.warp_lanes = 32;
  part.workgroup_lanes = static_cast<std::uint32_t>(hop::threads_per_block(c.consumer_warpgroups));
  part.warps_per_block = part.workgroup_lanes / 32;
  part.pipeline_stages = static_cast<std::uint32_t>(c.stages);
  // Shared memory, in the evidence's 4-byte units: the K/V ring [stages x 2 x Bc x D] as score
  // scratch, and as Q scratch Q [rows x D] plus the rest (mbarriers, the 1 KiB swizzle-alignment
  // slack, the row sums' chunks of ones), so the evidence's shared bytes are the kernel's
  // (hopper_shared_bytes / hopper_fp8_shared_bytes) exactly. S, P and O live in registers.
  const std::int64_t smem = fp8 ? hop::hopper_fp8_shared_bytes(c) : hop::hopper_shared_bytes(c);
  {
    const std::int64_t ring = 2LL * c.stages * c.keys_per_tile * p.head_dim * (fp8 ? 1 : 2);
    const std::int64_t q_and_rest = smem - ring;
    part.q_scratch_elements = static_cast<std::uint32_t>(q_and_rest / 4);
    part.score_scratch_elements = static_cast<std::uint32_t>(ring / 4);
  }
  part.o_acc_scratch_elements = 0;
  part.split_reduce_scratch_elements = 0;
  // Key splits (16-bit inputs): where the work tiles fill less than one wave of persistent blocks
  // (few query tiles against long keys: chunked prefill, speculative decoding), each tile's keys
  // are cut into splits of at least kTargetTilesPerSplit tiles; the units are then single tiles of
  // one split, and the merge combines the splits' states from the workspace. The split count
  // minimises the estimated time in key-tile times: rounds of units per block x (a unit's key tiles
  // + kUnitOverheadTiles), + kMergeTiles when split. So a wave already 97% full (128 tiles of 32
  // key tiles) stays whole (split in two it ran 64 against 56 us on the H200), and 8 tiles of 256
  // key tiles split 16 ways (one round) rather than 33 (two rounds of shorter units). Only where
  // keys outnumber queries two to one: a square causal problem's paired units are already even
  // (split in two, b1 x 8 heads x 1024 causal d128 ran 26.0 against 24.0 us).
  std::uint64_t splits = 1;
  if (!fp8 && work_tiles < sms && p.kv_len >= 2 * p.q_len) {
    const std::uint64_t most = std::min<std::uint64_t>(std::max<std::uint64_t>(1, kv_tiles / kTargetTilesPerSplit),
                                                       cuda_prefill::kMaxKeySplits);
    auto estimate = [&](std::uint64_t s) {
      return div_ceil(work_tiles * s, sms) * (div_ceil(kv_tiles, s) + kUnitOverheadTiles) + (s > 1 ? kMergeTiles : 0);
    };
    for (std::uint64_t s = 2; s <= most; ++s) {
      if (estimate(s) < estimate(splits)) splits = s;
    }
  }
  const std::uint64_t tiles_per_split = div_ceil(kv_tiles, splits);
  splits = div_ceil(kv_tiles, tiles_per_split);  // no empty trailing split
  part.sequence_splits = to_u32(splits, "sequence_splits");
  part.tiles_per_split = to_u32(tiles_per_split, "tiles_per_split");
  part.keys_per_split = to_u32(tiles_per_split * bc, "keys_per_split");
  part.workgroups_per_row = part.sequence_splits;
  part.packed_heads = packed ? to_u32(static_cast<std::uint64_t>(p.group_size()), "packed_heads") : 1;
  part.tiles_per_unit = to_u32(splits > 1 || packed ? 1 : hopper_tiles_per_unit(p, work_tiles, sms), "tiles_per_unit");
  const std::uint64_t work_units =
      splits > 1 ? checked_mul(work_tiles, splits, kContext, "work units")
                 : checked_mul(div_ceil(q_tiles, std::uint64_t{part.tiles_per_unit}), tile_pairs, kContext, "work units");
  if (!(work_units <= static_cast<std::uint64_t>(hop::kMaxWalkUnits)))
    fail(kContext, std::to_string(work_units) + " work units exceed the walk's " + std::to_string(hop::kMaxWalkUnits),
         "split the call into smaller batches");
  part.grid_blocks = std::min(work_units, sms);
  // Order of the persistent walk: groups of (sequence, head) pairs whose K/V fit in a share of L2
  // (kL2GroupBytes); inside a group the query tiles of all its heads interleave, longest first, so
  // the blocks in flight re-read a few heads' K/V from L2 and a round of tiles has similar lengths
  // (the kernel hands rounds out boustrophedon, which evens out what each block gets).
  constexpr std::uint64_t kL2GroupBytes = 24ull << 20;
  const std::uint64_t kv_head_bytes = std::max<std::uint64_t>(
      1, 2ull * static_cast<std::uint64_t>(p.kv_len) * static_cast<std::uint64_t>(p.head_dim) * dtype_size(p.dtype));
  // Without a mask every tile costs the same: one head at a time is the tightest L2 reuse
  // (measured: d128 2k-16k non-causal 572-609 TFLOP/s against 522-604 with 24 MiB groups).
  const bool uneven = p.causal || p.options.window > 0;
  part.heads_per_tile_group =
      uneven ? to_u32(std::clamp<std::uint64_t>(kL2GroupBytes / kv_head_bytes, 1, tile_pairs), "heads_per_tile_group") : 1;
  // Causal pairs end in a tail of single tiles, where the model of the walk finds one that evens
  // out the blocks (only without a window: the pairs are then of equal work).
  WalkTail tail;
  if (part.tiles_per_unit == 2 && p.options.window == 0) {
    tail = hopper_walk_tail(p, static_cast<std::int64_t>(rows), static_cast<std::int64_t>(bc),
                            static_cast<int>(q_tiles), static_cast<int>(tile_pairs), part.heads_per_tile_group,
                            part.grid_blocks);
  }
  part.tail_pairs = tail.pairs;
  reasons.push_back("warp_specialized_wgmma (Hopper sm_90): " + std::string(dtype_name(p.dtype)) + " inputs, head_dim " +
                    std::to_string(p.head_dim) + " has a Hopper " + (fp8 ? "fp8 " : "") + "config, no soft-cap");
  if (fp8) {
    reasons.push_back("e4m3: fp8 wgmma reads its B operand K-major only, so for O += P V (B = V) a first pass stages "
                      "V^T, e4m3 [batch][kv_heads][head_dim][keys padded to " +
                      std::to_string(hop::kFp8KeyAlignment) + "], at offset 0 of the workspace (" +
                      std::to_string(hop::hopper_fp8_vt_bytes(p.batch, p.kv_heads, p.head_dim, p.kv_len)) +
                      " bytes); Q K^T reads K as stored");
    reasons.push_back("e4m3: q_scale * k_scale folds into the score scale and v_scale into the output; P is rounded to "
                      "e4m3 for P V (rel-L2 tolerance 5e-2)");
  }
  const bool q_regs = hop::q_in_registers(c.head_dim, c.keys_per_tile);
  const bool row_sums = !fp8 && hop::tensor_row_sums(c.head_dim, c.consumer_warpgroups);
  reasons.push_back("block = 1 producer warpgroup (one thread issues TMA loads, setmaxnreg " +
                    std::to_string(hop::kProducerRegisters) + ") + " + std::to_string(c.consumer_warpgroups) +
                    " consumer warpgroups x 64 query rows (setmaxnreg " + std::to_string(hop::consumer_registers(c.consumer_warpgroups)) +
                    "): S = Q K^T by wgmma " +
                    (q_regs ? "with Q's fragments in registers (loaded once per work tile)" : "from shared memory") +
                    ", P V with P in registers" +
                    (row_sums ? " against [V | ones], whose 8 extra columns sum P's rows (calls writing an LSE or split states sum them in f32)"
                         : ""));
  for (const hop::HopperConfig& other : hop::kHopperConfigs) {
    if (fp8) break;  // one fp8 config per head_dim: nothing to compare
    if (other.head_dim != c.head_dim || &other == &c) continue;
    const auto shape = [](const hop::HopperConfig& x) {
      return std::to_string(hop::rows_per_block(x)) + " x " + std::to_string(x.keys_per_tile);
    };
    reasons.push_back(shape(c) + " tiles (query rows x keys), not " + shape(other) + ": padded tile work " +
                      std::to_string(static_cast<std::uint64_t>(padded_tile_work(p, c))) + " vs " +
                      std::to_string(static_cast<std::uint64_t>(padded_tile_work(p, other))) +
                      " (masked tile parts included), at " + format_rate(c.relative_rate) + " vs " +
                      format_rate(other.relative_rate) + " measured speed (hopper_config.hpp)");
  }
  // P packs two 16-bit or four 8-bit probabilities per register.
  const int p_registers = c.keys_per_tile / (fp8 ? 8 : 4);
  reasons.push_back(std::to_string(c.keys_per_tile) + " keys per tile (registers: S " + std::to_string(c.keys_per_tile / 2) +
                    " + P " + std::to_string(p_registers) + " + O " + std::to_string(p.head_dim / 2 + (row_sums ? 4 : 0)) +
                    (q_regs ? " + Q " + std::to_string(p.head_dim / (fp8 ? 8 : 4)) : std::string()) +
                    " per consumer thread), " + std::to_string(c.stages) + "-slot K/V ring, " +
                    std::to_string(smem) + " bytes of shared memory, 1 block per SM");
  reasons.push_back(std::to_string(work_tiles) + " work tiles (" + std::to_string(rows) + " rows x head x sequence) over " +
                    std::to_string(part.grid_blocks) + " persistent blocks" +
                    "; walked in groups of " + std::to_string(part.heads_per_tile_group) +
                    (uneven ? std::string(" (sequence, head) pairs whose K/V fit 24 MiB of L2, ") +
                                  (part.tiles_per_unit == 2 ? "" : "query tiles longest first, ") +
                                  "rounds handed out boustrophedon"
                            : " (sequence, head) pair: equal tiles, one head's K/V in L2 at a time") +
                    (p.causal && splits == 1
                         ? (part.tiles_per_unit == 2
                                ? "; causal: " + std::to_string(work_units) +
                                      " units of two query tiles (i-th shortest, then i-th longest of one head: equal work; a head's "
                                      "units consecutive, so they share its K/V reads in L2)" +
                                      (tail.pairs > 0
                                           ? ", then the last " + std::to_string(tail.pairs) +
                                                 " pairs as single tiles, longest first: the walk's model evens the blocks "
                                                 "from " + format_fixed(tail.balance_without) + " to " +
                                                 format_fixed(tail.balance) + " of the mean over the busiest"
                                           : std::string())
                                : "; causal: the tiles fit one wave, one tile per block (pairs would idle half the SMs)")
                         : std::string()) +
                    (splits > 1 ? "; they fill less than one wave, so keys split " + std::to_string(splits) + " ways, " +
                                      std::to_string(tiles_per_split) + " tiles each: " + std::to_string(work_units) +
                                      " units, split states merged after"
                                : "; no key split"));
  if (packed) {
    reasons.push_back("GQA packing: the " + std::to_string(p.group_size()) + " query heads of a KV group share one " +
                      std::to_string(rows) + "-row tile (" + std::to_string(p.q_len) + " rows each), so each KV head's " +
                      "keys are multiplied once, not " + std::to_string(p.group_size()) + " times");
  } else {
    reasons.push_back("GQA heads are not packed into one query tile" +
                      std::string(p.group_size() == 1 ? ""
                                  : fp8         ? " (the e4m3 kernel does not pack)"
                                                : " (q_len x group > " + std::to_string(rows) + " rows)") +
                      ": each query head's tile reads its KV head (group " + std::to_string(p.group_size()) +
                      " re-reads come from L2)");
  }
  if (p.causal || p.options.window > 0) {
    std::string masked = "key tiles no row of the block sees are never loaded; only tiles a warpgroup cannot fully see are masked";
    if (p.causal && !packed && hop::skips_dead_key_tiles(c.keys_per_tile, c.consumer_warpgroups)) {
      masked += "; a warpgroup skips the tiles wholly past its own rows (" + std::to_string(rows) + "-row blocks over " +
                std::to_string(c.keys_per_tile) + "-key tiles)";
    }
    reasons.push_back(masked);
  }
}

// e4m3 inputs: only the Hopper family has an fp8 kernel, so there is no fallback: any target,
// head_dim or option it cannot run is an error, and decode-like shapes (too few query tiles to
// fill the GPU) still run on it without a key split.
void partition_fp8(const PrefillProblem& p, const Target& t, const KernelFamily* requested, WorkPartition& part,
                   std::vector<std::string>& reasons) {
  namespace hop = cuda_prefill_hopper;
  const std::string fallback = "or use f16/bf16 inputs";
  if (!(requested == nullptr || *requested == KernelFamily::kWarpSpecializedWgmma))
    fail(kContext,
         "e4m3 inputs run only on warp_specialized_wgmma, " + to_string(requested ? *requested : part.family) +
             " has no fp8 kernel",
         "leave the family unset (or request warp_specialized_wgmma), " + fallback);
  if (!is_hopper(t))
    fail(kContext,
         "e4m3 prefill needs a Hopper GPU (sm_90), the target is " + t.name + " (sm_" + std::to_string(t.cc_major) +
             std::to_string(t.cc_minor) + ")",
         "run on an H100/H200 (plan for one with known_target(\"h200\")), " + fallback);
  const hop::HopperConfig* config = hop::find_hopper_fp8_config(p.head_dim);
  std::string supported;
  for (const hop::HopperConfig& c : hop::kHopperFp8Configs) {
    supported += (supported.empty() ? "" : ", ") + std::to_string(c.head_dim);
  }
  if (config == nullptr)
    fail(kContext,
         "no e4m3 kernel for head_dim=" + std::to_string(p.head_dim) + " (e4m3 prefill has head_dim " + supported + ")",
         "use head_dim " + supported + ", " + fallback);
  if (p.options.softcap != 0.0f)
    fail(kContext, "e4m3 prefill has no soft-cap",
         "pass softcap=0, " + fallback + " (the tiled family has the soft-cap)");
  partition_hopper(p, t, *config, part, reasons);
  const std::uint64_t sms = sm_count_of(t);
  if (part.grid_blocks < sms) {
    reasons.push_back("only " + std::to_string(part.grid_blocks) + " of " + std::to_string(sms) +
                      " SMs get work: f16/bf16 would fall back to the tiled family's key split here, which has no fp8 "
                      "kernel");
  }
}

}  // namespace

void partition_cuda_prefill(const PrefillProblem& p, const Target& t, const KernelFamily* requested,
                            WorkPartition& part, std::vector<std::string>& reasons) {
  // The GPU kernels hold positions (and TMA coordinates) in 32 bits, with room for a tile past the end.
  constexpr std::int64_t kMaxLen = std::int64_t{1} << 30;
  if (!(p.q_len <= kMaxLen && p.kv_len <= kMaxLen))
    fail(kContext,
         "q_len=" + std::to_string(p.q_len) + ", kv_len=" + std::to_string(p.kv_len) +
             ": the GPU kernels take at most 2^30",
         "split the sequence into chunks of at most 2^30 tokens and merge their states");
  if (is_fp8(p.dtype)) {
    partition_fp8(p, t, requested, part, reasons);
    return;
  }
  const cuda_prefill_hopper::HopperConfig* hopper = choose_hopper_config(p);
  const bool half_inputs = p.dtype == DType::kF16 || p.dtype == DType::kBF16;
  const bool out_ok = p.out_dtype == p.dtype || p.out_dtype == DType::kF32;
  if (requested != nullptr && *requested == KernelFamily::kWarpSpecializedWgmma) {
    if (!is_hopper(t))
      fail(kContext,
           "warp_specialized_wgmma needs a Hopper GPU (sm_90), the target is " + t.name + " (sm_" +
               std::to_string(t.cc_major) + std::to_string(t.cc_minor) + ")",
           "plan with cooperative_tiled (or leave the family unset)");
    if (!half_inputs)
      fail(kContext, "warp_specialized_wgmma takes f16 or bf16 inputs, got " + std::string(dtype_name(p.dtype)),
           "plan f32 inputs with cooperative_tiled (or leave the family unset)");
    if (hopper == nullptr)
      fail(kContext, "no Hopper config for head_dim=" + std::to_string(p.head_dim) + " (64, 128, 256)",
           "plan with cooperative_tiled (or leave the family unset)");
    if (p.options.softcap != 0.0f)
      fail(kContext, "warp_specialized_wgmma has no soft-cap",
           "plan with cooperative_tiled (or leave the family unset)");
    if (!out_ok)
      fail(kContext,
           "out_dtype=" + std::string(dtype_name(p.out_dtype)) + " with inputs " + std::string(dtype_name(p.dtype)),
           "use out_dtype equal to the input dtype, or f32");
    partition_hopper(p, t, *hopper, part, reasons);
    return;
  }
  partition_cooperative(p, t, requested, part, reasons);
  if (requested != nullptr) return;
  if (is_hopper(t) && half_inputs && hopper != nullptr && p.options.softcap == 0.0f && out_ok) {
    reasons.clear();
    partition_hopper(p, t, *hopper, part, reasons);
  }
}

}  // namespace attnkit::detail
