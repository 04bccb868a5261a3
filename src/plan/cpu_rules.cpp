// The CPU partition rules: how decode and prefill work is cut into tasks for the thread pool.
//
// A CPU "block" is one task run start to finish by one thread: grid_blocks counts tasks.
// Decode (kSplitKvDecode): a task is one (sequence, KV head, key split); it packs the whole GQA
//   group (rows_per_block = group size) so each K/V row is read once for all its query heads.
//   Keys are split only when there are too few (sequence, KV head) units to keep every thread busy.
// Prefill (kCooperativeTiled): a task is one (sequence, KV head, block of rows_per_block query rows
//   for each head of the GQA group); the key tile (tile_size) is converted to f32 once per task
//   and reused by every row of every head of it.
// Cache sizes: Target carries only the last-level cache, so the per-core L1d and L2 the tiles are
// sized for are the values below, stated in the reasons. The L2 is Zen 4's and Intel server
// cores' (1 MiB); Zen 2 / 3 have 512 KiB, where prefill blocks sized for it (64 rows instead of
// 128) measured no faster (docs/perf-notes.md, CPU round 29).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "plan/rules.hpp"

namespace attnkit::detail {
namespace {

constexpr std::uint64_t kAssumedL1Bytes = 32 << 10;
constexpr std::uint64_t kAssumedL2Bytes = 1 << 20;
// Every core with AMX tiles (Xeon Sapphire Rapids and later) has 2 MiB of L2.
constexpr std::uint64_t kAmxL2Bytes = 2 << 20;
// Decode tile of the bf16 and f16 bodies on Intel cores: with 16 keys per tile (and each body's
// L1 prefetch a fraction of it), two threads of an AMX Xeon read b1 / b4 x 64k bf16 11% faster at
// group 4 and 24-37% at groups 1-3 than with 256, f16 16-31%; 8 and 32-256 were slower
// (docs/perf-notes.md, CPU round 15). The same host at its avx512 and avx2 levels gains as much or
// more (CPU round 21), so the rule follows the cores, not the AMX level; Zen 4 read longer phases
// faster (CPU round 12).
constexpr std::uint64_t kIntel16BitDecodeTile = 16;
// ...and 8 keys where the rows are wider than 128 columns and the group is 4k heads (the row-block
// bodies), on the AMX level: again 4 KiB of K per turn. Two threads of the AMX Xeon, b4 x 64k at
// head_dim 256, 16 -> 8 keys: group 4 bf16 -5%, f16 -12%; group 8 f16 -15%, bf16 even; multi-head
// +12-14% (kept at 16). Its avx512 level gained 15% at group 4 but its avx2 level lost 8%, and the
// target does not say which vector level the kernels run below AMX, so only the AMX level takes it
// (CPU round 23).
constexpr std::uint64_t kIntelWideRowDecodeTile = 8;
constexpr std::int64_t kIntelWideRowColumns = 128;
// And of the f32 bodies: 8 keys (4 KiB of K at head_dim 128) for groups of 4k heads and 16 for the
// others, each with its L1 prefetch at a fraction of the tile: b1 / b4 x 64k 15-19% faster at
// group 4, 12-14% at group 1 (CPU round 15).
constexpr std::uint64_t kIntelF32RowBlockDecodeTile = 8;
constexpr std::uint64_t kIntelF32DecodeTile = 16;
// On other cores without AVX-512 (AVX2: Zen 2 / 3) short turns win too: two threads of a Zen 2,
// b1 / b4 x 64k at group 4, 16 keys against 256: bf16 -15% / -20%, f16 -23% / -24%, f32 -5% /
// -17%; 8 and 32 were slower. Multi-head f32 (the generic body) read 3-6% slower, so f32 outside
// the row-block body keeps the L1-sized tile (CPU round 25).
constexpr std::uint64_t kNarrowVectorDecodeTile = 16;
// Decode of one query head per KV head (and pairs of f32 rows) on cores that are neither Intel's
// nor AMX ones, at 8 lanes: tiles of 8 / group keys in a two-stage pipeline, K of tile b read
// beside V of tile b - 1 by demand loads (the body, fast_body.hpp's decode_pipelined, issues no
// software prefetch). Software prefetch hints hold the L1's miss buffers on AMD cores; two threads
// of a Zen 2 read K and V rows side by side at ~34 GB/s against ~23 for a tile's K then its V, and
// multi-head b1 / b4 x 64k ran 31-35% faster in f32 (82-92% of the read ceiling), 10-13% in f16
// and bf16 b4. An AMX Xeon's 16 threads read it 3-27% slower at its avx512 level (the tiled body's
// short turns suit Intel's prefetchers) (docs/perf-notes.md, CPU round 33). AMD cores at 16 lanes
// (Zen 4) take it for f32 and f16 rows: two threads, multi-head b1 / b4 x 64k, each call's rate
// over the read probe's pass beside it f32 77-83% -> 92-97%, f16 78-83% -> 92-94%; bf16 rows keep
// the tiled vdpbf16ps body (b4 88% -> 79-81% pipelined; CPU round 34).
constexpr int kPipelinedDecodeLanes = 8;
constexpr int kPipelinedWideDecodeLanes = 16;
// Paged decode reads power-of-two pages of at least 8 keys in place (paged_decode.cpp): a tile
// that a page holds, or, from pages of 16 keys (every body's key step fits a page), a tile of whole
// pages walked page by page (fast_tasks.hpp's rows_per_run); a longer tile shrinks to pages of 8.
// Against gathering 256-key tiles into staging, two threads of a Zen 4, b1 x 64k group 4, tiles
// shrunk to pages of 8 / 16 / 32 / 64 keys: bf16 1.1-1.9x / 1.4-1.5x / 1.4-2.0x / 1.3-1.8x faster,
// f32 1.1-1.3x / 1.4x / 1.8-2.2x / 1.7-2.5x (pages of 4 as often slower, of 1 2-6x slower); 256-key
// tiles walked across pages of 16 / 64 another ~17% / ~7% (bf16; docs/perf-notes.md, "Paged decode
// on the CPU: tiles shrunk to the page").
constexpr std::uint64_t kMinInPlacePageKeys = 8;
constexpr std::uint64_t kMinSpannedPageKeys = 16;
// Pairs of heads (group 2) only for f32 rows: b1 / b4 x 64k f32 -35%, but bf16 and f16 +25% (their
// widening and O's per-head load and store per chunk make the pair compute-bound; the tiled body's
// 16-key tiles read them at ~70%).
constexpr std::uint64_t kPipelinedF32Group = 2;
// Query rows of the AVX2 prefill's widest register block: VecAvx2::kQkMaxVecs (3) vectors of 8.
constexpr std::uint64_t kAvx2BlockRows = 24;
constexpr std::uint64_t kF32Bytes = 4;
// One 512-bit vector holds 16 f32 lanes; the kernels fall back to 8 (AVX2) or 1 at run time.
constexpr std::uint32_t kVectorLanes = 16;
// Seed 004's scalar baseline accounting.
constexpr std::uint32_t kScalarLanes = 128;
constexpr std::uint32_t kWarpLanes = 32;

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }
std::uint64_t div_up(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

std::uint32_t u32(std::uint64_t v, const char* ctx, const char* what) {
  if (v > 0xffffffffull)
    fail(ctx, std::string(what) + " = " + std::to_string(v) + " overflows 32 bits",
         "use smaller dimensions (or split the call into smaller batches / shorter sequences)");
  return static_cast<std::uint32_t>(v);
}

std::uint64_t floor_pow2(std::uint64_t v) {
  std::uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

int thread_count(const Target& t) { return std::max(1, t.threads); }

// The scalar online baseline: one query row per task, keys one by one (seed 004's scalar plan).
void scalar_partition(std::uint64_t rows, std::uint64_t keys, std::int64_t head_dim, const char* ctx,
                      WorkPartition& p, std::vector<std::string>& reasons) {
  p = WorkPartition{};
  p.family = KernelFamily::kScalarOnline;
  p.tile_size = 1;
  p.tile_count = u32(keys, ctx, "keys");
  p.sequence_splits = 1;
  p.tiles_per_split = p.tile_count;
  p.keys_per_split = p.tile_count;
  p.rows_per_block = 1;
  p.workgroups_per_row = 1;
  p.workgroup_lanes = kScalarLanes;
  p.warp_lanes = kWarpLanes;
  p.warps_per_block = kScalarLanes / kWarpLanes;
  p.q_scratch_elements = u32(u(kScalarLanes) * u(head_dim), ctx, "q scratch");
  p.score_scratch_elements = 0;
  p.o_acc_scratch_elements = p.q_scratch_elements;
  p.split_reduce_scratch_elements = 0;
  p.grid_blocks = rows;
  p.pipeline_stages = 1;
  reasons.push_back("family: scalar_online (requested): one query row per task, keys one by one, no splits "
                    "(seed 004's baseline; scratch counted as its 128 lanes x head_dim)");
}

// Decode key splits. With dynamic scheduling the busiest thread ends at most one work item after
// the mean, so an item no larger than 1/kBalanceItemsPerThread of a thread's share bounds the
// imbalance to that fraction for any thread count, and also absorbs a thread that loses time to
// another process. Each split keeps >= kTargetTilesPerSplit tiles (seed 004's target), so it stays
// a long bandwidth-bound stream and the merge stays cheap; where the keys are too few for that
// bound (first == 0 below), the split count that gives the busiest thread the fewest keys wins.
constexpr std::uint64_t kBalanceItemsPerThread = 8;

using Wide = unsigned __int128;  // products of 64-bit counts

struct KeySplits {
  std::uint64_t splits = 1, keys_per_split = 0;
  bool balanced = true;  // the 1/kBalanceItemsPerThread bound holds
};

KeySplits balanced_key_splits(std::uint64_t units, std::uint64_t keys, std::uint64_t tile, std::uint64_t threads) {
  auto cut = [&](std::uint64_t wanted) {
    KeySplits k;
    k.keys_per_split = div_up(div_up(keys, wanted), tile) * tile;
    k.splits = div_up(keys, k.keys_per_split);
    if (k.splits == 1) k.keys_per_split = keys;
    // item <= mean / 8, mean = units * keys / threads (128-bit: hand-built targets may be huge)
    k.balanced = Wide{k.keys_per_split} * kBalanceItemsPerThread * threads <= Wide{units} * keys;
    return k;
  };
  if (threads <= 1 || keys == 0) return cut(1);
  const std::uint64_t max_splits = std::max<std::uint64_t>(1, keys / (tile * kTargetTilesPerSplit));
  // The busiest thread's keys if every task were a full split: ceil(tasks / threads) of them.
  auto busiest = [&](const KeySplits& k) { return (Wide{units} * k.splits + threads - 1) / threads * k.keys_per_split; };
  // Of the counts from the first that meets the bound up to twice it, the one whose tasks divide
  // best over the threads (whole tiles leave the last split short; ties: fewer splits).
  std::uint64_t first = 0;
  for (std::uint64_t s = 1; s <= max_splits && first == 0; ++s) {
    if (cut(s).balanced) first = s;
  }
  if (first == 1) return cut(1);  // whole (sequence, KV head) tasks already meet it: no merge
  const std::uint64_t last = first == 0 ? max_splits : std::min(max_splits, 2 * first);
  KeySplits best = cut(first == 0 ? 1 : first);
  Wide best_load = busiest(best);
  for (std::uint64_t s = first == 0 ? 2 : first + 1; s <= last; ++s) {
    const KeySplits k = cut(s);
    if (first != 0 && !k.balanced) continue;
    const Wide load = busiest(k);
    if (load < best_load) {
      best = k;
      best_load = load;
    }
  }
  return best;
}

}  // namespace

void require_cpu_prefill_dtype(DType dtype, const char* context) {
  if (is_fp8(dtype))
    fail(context, "e4m3 prefill runs on the CUDA backend on Hopper (sm_90) only, not on the CPU",
         "plan with backend cuda (cuda::target() on an H100/H200, or known_target(\"h200\")), or use f16/bf16/f32 "
         "inputs");
}

void partition_cpu_decode(const DecodeProblem& pr, const Target& t, const KernelFamily* requested,
                          WorkPartition& p, std::vector<std::string>& reasons, DecodeCache cache,
                          std::int64_t page_size) {
  const char* ctx = "plan_decode";
  const std::uint64_t keys = pr.options.window > 0 ? std::min(u(pr.kv_len), u(pr.options.window)) : u(pr.kv_len);
  if (requested != nullptr && *requested == KernelFamily::kScalarOnline) {
    scalar_partition(u(pr.batch) * u(pr.num_heads), keys, pr.head_dim, ctx, p, reasons);
    return;
  }
  if (requested != nullptr && *requested != KernelFamily::kSplitKvDecode) {
    fail(ctx, "the CPU has no " + to_string(*requested) + " decode kernel",
         "request split_kv_decode or scalar_online, or leave the family unset");
  }
  const int threads = thread_count(t);
  const std::uint64_t group = u(pr.group_size());
  const std::uint64_t hd = u(pr.head_dim);
  // An e4m3 cache takes f16's rules: the f32-arithmetic bodies (the bf16 and AMX levels hand it to
  // them too) read it as they read f16, widened to f32 per vector through f16 (one more integer
  // step, cpu/simd/vec_e4m3.hpp), so its tiles, pipeline and prefetch stand where f16's were
  // measured; its rows are half as long, which the L1-sized tile below does not depend on (it
  // counts f32 scores and accumulators). Not measured separately yet.
  const DType kv_rules = is_fp8(pr.kv_dtype) ? DType::kF16 : pr.kv_dtype;
  p = WorkPartition{};
  p.family = KernelFamily::kSplitKvDecode;
  reasons.push_back("family: split_kv_decode: one task per (sequence, KV head, key split), the GQA group of " +
                    std::to_string(group) + " query heads packed so each K/V row is read once");
  if (is_fp8(pr.kv_dtype))
    reasons.push_back("kv: e4m3 cache widened to f32 through f16 per vector (FMA bodies, f16's tile rules), its "
                      "scales folded into the score scale and the output rows");

  const bool pipelined_lanes = t.cpu_vector_lanes == kPipelinedDecodeLanes ||
                               (t.cpu_vector_lanes == kPipelinedWideDecodeLanes && kv_rules != DType::kBF16);
  const bool pipelined = cache == DecodeCache::kContiguous &&
                         (group == 1 || (group == kPipelinedF32Group && kv_rules == DType::kF32)) &&
                         !t.cpu_intel_cores && !t.cpu_matrix_tiles && pipelined_lanes;
  // Key tile: the scores of one tile for the whole group, plus the group's q and accumulators,
  // stay in half of L1 (the other half streams K and V).
  const std::uint64_t fixed = 2 * group * hd * kF32Bytes;
  const std::uint64_t budget = kAssumedL1Bytes / 2;
  std::uint64_t tile = budget > fixed ? (budget - fixed) / (group * kF32Bytes) : 0;
  tile = std::clamp<std::uint64_t>(floor_pow2(std::max<std::uint64_t>(tile, 1)), 32, 256);
  if (t.cpu_intel_cores || t.cpu_matrix_tiles) {
    const bool wide_rows = kv_rules != DType::kF32 && t.cpu_matrix_tiles && group % 4 == 0 &&
                           pr.head_dim > kIntelWideRowColumns;
    tile = wide_rows                      ? kIntelWideRowDecodeTile
           : kv_rules != DType::kF32      ? kIntel16BitDecodeTile
           : group % 4 == 0               ? kIntelF32RowBlockDecodeTile
                                          : kIntelF32DecodeTile;
    reasons.push_back("tile: " + std::to_string(tile) +
                      " keys: on Intel cores the decode bodies stream K and V fastest in short turns (a tile's K, "
                      "then its V) rather than in phases of up to 256 rows" +
                      (wide_rows ? std::string(" (8 keys of rows wider than 128 columns: 4 KiB of K per turn)") : std::string{}));
  } else if (pipelined) {
    tile = u(t.cpu_vector_lanes) / group;
    reasons.push_back("tile: " + std::to_string(tile) + " keys, one vector of scores for the group of " +
                      std::to_string(group) + ": K streams beside V in a two-stage pipeline (a tile's Q K^T "
                      "with the previous tile's P V, one loop, no software prefetch)");
  } else if (t.cpu_vector_lanes < 16 && (kv_rules != DType::kF32 || group % 4 == 0)) {
    tile = kNarrowVectorDecodeTile;
    reasons.push_back("tile: " + std::to_string(tile) +
                      " keys: on cores without AVX-512 the decode bodies stream K and V fastest in short turns "
                      "(a tile's K, then its V)");
  } else {
    reasons.push_back("tile: " + std::to_string(tile) + " keys, so the group's q, accumulators and tile scores (" +
                      std::to_string((fixed + group * tile * kF32Bytes) >> 10) +
                      " KiB) stay in half of an assumed 32 KiB L1d");
  }

  const std::uint64_t page = cache == DecodeCache::kPaged ? u(page_size) : 0;
  if (page >= kMinInPlacePageKeys && page < kMinSpannedPageKeys && std::has_single_bit(page) && page < tile) {
    tile = page;
    reasons.push_back("tile: " + std::to_string(tile) + " keys, one page: the bodies walk a tile across pages of " +
                      std::to_string(kMinSpannedPageKeys) + " keys or more, and read shorter pages in place one "
                      "tile each, which beats gathering longer tiles into staging");
  }
  // Splits: see balanced_key_splits.
  const std::uint64_t units = u(pr.batch) * u(pr.kv_heads);
  const KeySplits cut = balanced_key_splits(units, keys, tile, u(threads));
  const std::uint64_t splits = cut.splits, keys_per_split = cut.keys_per_split;
  const std::string share = "1/" + std::to_string(kBalanceItemsPerThread);
  const std::string why =
      threads == 1 ? "one thread: nothing to balance"
      : cut.balanced
          ? "each task at most " + share + " of a thread's share, so the busiest thread ends within " + share +
                " of the mean"
          : "too few keys for tasks of " + share + " of a share with >= " + std::to_string(kTargetTilesPerSplit) +
                " tiles per split; this count leaves the busiest thread the fewest keys";
  reasons.push_back("splits: " + std::to_string(splits) + (splits > 1 ? " of " + std::to_string(keys_per_split) + " keys" : "") +
                    " per (sequence, KV head): " + std::to_string(units * splits) + " tasks for " +
                    std::to_string(threads) + " threads; " + why);

  p.tile_size = u32(tile, ctx, "tile");
  p.tile_count = u32(div_up(keys, tile), ctx, "tile count");
  p.sequence_splits = u32(splits, ctx, "splits");
  p.keys_per_split = u32(keys_per_split, ctx, "keys per split");
  p.tiles_per_split = u32(div_up(keys_per_split, tile), ctx, "tiles per split");
  p.rows_per_block = u32(group, ctx, "group");
  p.workgroups_per_row = p.sequence_splits;
  p.workgroup_lanes = 1;  // a task runs on one thread
  p.warp_lanes = kVectorLanes;
  p.warps_per_block = 1;
  p.q_scratch_elements = u32(group * hd, ctx, "q scratch");
  p.score_scratch_elements = u32(group * tile, ctx, "score scratch");
  p.o_acc_scratch_elements = u32(group * hd, ctx, "accumulator scratch");
  p.split_reduce_scratch_elements = splits > 1 ? u32(splits * group * (hd + 2), ctx, "split reduce scratch") : 0;
  p.grid_blocks = units * splits;
  p.pipeline_stages = pipelined ? 2 : 1;
  // The row-block bodies (groups of 4k heads) over a contiguous cache on AMD's 16-lane cores: no
  // L1 prefetch of the next rows. Those rows arrive by the L2 prefetches of the stream, and the L1
  // requests only compete with them (b1 / b4 x 64k at group 4, Zen 4: f16 and f32 5-15 points more
  // of the read probe beside each call, bf16 about even; docs/perf-notes.md, CPU round 35). Paged
  // caches keep them (their page runs restart the stream: 3-8% slower without), as do Intel cores
  // (tuned there with them) and AVX2 (not measured without).
  p.cpu_l1_prefetch = !(cache == DecodeCache::kContiguous && group % 4 == 0 && !t.cpu_intel_cores &&
                        !t.cpu_matrix_tiles && t.cpu_vector_lanes >= 16);
  if (!p.cpu_l1_prefetch) {
    reasons.push_back("prefetch: rows reach L1 on demand from the L2 stream (no L1 prefetch: on AMD cores the "
                      "group bodies read the stream faster without it)");
  }
  reasons.push_back("threads: " + std::to_string(threads) + " for " + std::to_string(p.grid_blocks) + " tasks; " +
                    (pipelined ? std::string("two stages: each key's K row is read beside the V row of the key one "
                                             "tile earlier, by demand loads (fast_body.hpp, decode_pipelined)")
                               : std::string("keys are streamed (software prefetch ahead of each stream, "
                                             "fast_body.hpp), one stage")));
}

void partition_cpu_prefill(const PrefillProblem& pr, const Target& t, const KernelFamily* requested,
                           WorkPartition& p, std::vector<std::string>& reasons) {
  const char* ctx = "plan_prefill";
  require_cpu_prefill_dtype(pr.dtype, ctx);
  if (requested != nullptr && *requested == KernelFamily::kScalarOnline) {
    scalar_partition(u(pr.batch) * u(pr.num_heads) * u(pr.q_len), u(pr.kv_len), pr.head_dim, ctx, p, reasons);
    return;
  }
  if (requested != nullptr && *requested != KernelFamily::kCooperativeTiled) {
    fail(ctx, "the CPU has no " + to_string(*requested) + " prefill kernel",
         "request cooperative_tiled or scalar_online, or leave the family unset");
  }
  const int threads = thread_count(t);
  const std::uint64_t hd = u(pr.head_dim);
  p = WorkPartition{};
  p.family = KernelFamily::kCooperativeTiled;
  // AMX tiles take bf16 inputs as they are, f16 as two bf16 parts (exact) and f32 as three (24
  // bits): 1, 3 or 6 products per bf16 one (fast_body_amx.hpp).
  const bool amx = t.cpu_matrix_tiles;
  const std::uint64_t parts = pr.dtype == DType::kF32 ? 3 : pr.dtype == DType::kF16 ? 2 : 1;  // bf16 parts per value
  const std::string products =
      parts == 1 ? "bf16 products" : "q, K, V and P as " + std::to_string(parts) + " bf16 parts each";
  reasons.push_back(amx ? "family: cooperative_tiled: a block of query rows against key tiles, Q K^T and P V on AMX "
                          "tiles (" + products + ", f32 sums), the online softmax on AVX-512"
                        : "family: cooperative_tiled: a block of query rows against key tiles, register-blocked "
                          "Q K^T and P V micro-kernels in f32");

  // Key tile. On AMX tiles: the transposed K and paired V tiles (in their bf16 parts) take at most
  // a quarter of the 2 MiB L2, up to 512 keys for bf16 and 256 for the split dtypes; more keys per
  // tile amortise the per-row softmax bookkeeping and the accumulator tiles' round trips (bf16 512
  // against 256 at head_dim 128: 2-3% faster non-causal, CPU round 13; f32 256 against 128 3-5%
  // faster, f16 512 against 256 3-5% slower, round 17). Else the f32 copy of one K tile (reused by
  // every row micro-block) fits in L1.
  const std::uint64_t staged_per_key = 2 * hd * 2 * parts;  // K and V, bf16 parts
  std::uint64_t tile = amx ? std::clamp<std::uint64_t>(floor_pow2(kAmxL2Bytes / 4 / staged_per_key), 32,
                                                       parts == 1 ? 512 : 256)
                           : std::clamp<std::uint64_t>(floor_pow2(kAssumedL1Bytes / (hd * kF32Bytes)), 32, 128);
  tile = std::min<std::uint64_t>(tile, std::max<std::uint64_t>(32, div_up(u(pr.kv_len), 32) * 32));
  if (amx) {
    reasons.push_back("tile: " + std::to_string(tile) + " keys: " + std::string(dtype_name(pr.dtype)) +
                      " K/V on AMX tiles; the tile's transposed K and paired V (" +
                      std::to_string(tile * staged_per_key >> 10) +
                      " KiB) within a quarter of the 2 MiB L2 of an AMX core");
  } else {
    reasons.push_back("tile: " + std::to_string(tile) + " keys: the f32 K tile (" +
                      std::to_string(tile * hd * kF32Bytes >> 10) + " KiB) fits an assumed 32 KiB L1d");
  }

  // Query rows per block (per head; a task packs the GQA group, so the K/V tile is converted once
  // for group x rows rows): the group's q and output accumulators fill at most half of L2, and the
  // blocks still give each thread several tasks to balance causal work. The AMX body keeps q in
  // bf16 parts (2 bytes per part, row and column, with the f32 accumulator) and runs on 2 MiB L2
  // cores, so its q and accumulators take what the staged tile leaves of L2 and its blocks reach
  // 256 rows: half the K/V staging per row of 128 (3-4% at 1k-4k, perf-notes CPU round 14; f32
  // 256 rows with 256-key tiles 3-5% faster than 128 with 128, round 17).
  const std::uint64_t group = u(pr.group_size());
  const std::uint64_t l2 = amx ? kAmxL2Bytes : kAssumedL2Bytes;
  const std::uint64_t row_bytes = group * hd * (amx ? 2 * parts + kF32Bytes : 2 * kF32Bytes);
  const std::uint64_t rows_budget = amx ? l2 - std::min(l2 / 2, tile * staged_per_key) : l2 / 2;
  std::uint64_t rows = std::clamp<std::uint64_t>(floor_pow2(rows_budget / row_bytes), 16, amx ? 256 : 128);
  const std::uint64_t q_len = std::max<std::uint64_t>(1, u(pr.q_len));
  while (rows > 16 && u(pr.batch) * u(pr.kv_heads) * div_up(q_len, rows) < 4 * u(threads)) rows /= 2;
  rows = std::min<std::uint64_t>(rows, div_up(q_len, 8) * 8);
  // On 8-lane vectors the products' register blocks span 3 row vectors (12 accumulators, the
  // chains two FMA pipes need); 128 rows split as 3 + 3 + 3 + 3 + 2 + 2, and a 2-vector block's 8
  // chains cap it at 80% of the FMA rate. Whole 3-vector blocks (128 -> 120, 64 -> 48) where the
  // query is long enough that the extra block, which converts the K/V tiles again, is a small
  // share (2k f32 non-causal 2.7% faster; docs/perf-notes.md, CPU round 31).
  const bool whole_blocks = !amx && t.cpu_vector_lanes == 8 && rows >= kAvx2BlockRows && rows % kAvx2BlockRows != 0 &&
                            q_len >= 4 * rows;
  if (whole_blocks) rows = rows / kAvx2BlockRows * kAvx2BlockRows;
  const std::uint64_t blocks = div_up(q_len, rows);
  const std::uint64_t tasks = u(pr.batch) * u(pr.kv_heads) * blocks;
  reasons.push_back("rows: " + std::to_string(rows) + " query rows per block for each of the " + std::to_string(group) +
                    " heads of a KV group (q and accumulators " + std::to_string(rows * row_bytes >> 10) +
                    " KiB, within " + (amx ? "what the staged tile leaves of the 2 MiB L2 of an AMX core" : "half of an assumed 1 MiB L2") +
                    ")" + (whole_blocks ? ", whole 3-vector register blocks of 8-lane rows" : "") + "; " +
                    std::to_string(tasks) + " (sequence, KV head, row block) tasks for " +
                    std::to_string(threads) + " threads");
  reasons.push_back("splits: 1: query rows already give the threads independent work (no merge needed)");

  const std::uint64_t keys = std::max<std::uint64_t>(1, u(pr.kv_len));
  p.tile_size = u32(tile, ctx, "tile");
  p.tile_count = u32(div_up(keys, tile), ctx, "tile count");
  p.sequence_splits = 1;
  p.keys_per_split = u32(keys, ctx, "keys");
  p.tiles_per_split = p.tile_count;
  p.rows_per_block = u32(rows, ctx, "rows per block");
  p.workgroups_per_row = 1;
  p.workgroup_lanes = 1;
  p.warp_lanes = kVectorLanes;
  p.warps_per_block = 1;
  p.q_scratch_elements = u32(group * rows * hd, ctx, "q scratch");
  p.score_scratch_elements = u32(rows * tile, ctx, "score scratch");
  p.o_acc_scratch_elements = u32(group * rows * hd, ctx, "accumulator scratch");
  p.split_reduce_scratch_elements = 0;
  p.grid_blocks = tasks;
  p.pipeline_stages = 1;
}

bool cpu_reads_pages_in_place(std::int64_t page_size, std::uint32_t tile) {
  const std::uint64_t page = u(page_size);
  return std::has_single_bit(page) && (page % tile == 0 || (page >= kMinSpannedPageKeys && tile % page == 0));
}

}  // namespace attnkit::detail
