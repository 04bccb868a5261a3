// The CUDA decode partition rules: GQA-packed split-KV flash-decoding (KernelFamily::kSplitKvDecode).
//
// A block serves one (sequence, KV head, head pass, key split) and all query heads of its GQA group
// (rows_per_block = group size, up to max_rows_per_block; larger groups take several passes), so each
// K/V element is read from device memory once per pass. The thread geometry (threads per key, keys
// per tile) comes from decode_geometry.hpp, shared with the kernel. The key range is split across
// blocks only when batch x kv_heads blocks cannot keep every SM streaming: tensor-core blocks up to
// one block per SM, CUDA-core (f32) blocks to the count that fills whole waves best; at least
// kMinTilesPerSplit tiles per split.
// Pure host code: reads the Target, never a device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "plan/rules.hpp"

namespace attnkit::detail {
namespace {

namespace geo = attnkit::cuda_decode;

// At least two tiles per split: one-tile splits cost more in partial states and merge work than
// they gain (session 8, alternating CLI runs: f32 b2 x 2k 31.4 -> 26.8 us and b4 x 2k 45.8 -> 38.5
// with 22 / 11 splits instead of 32; bf16 b1 x 1k 14.9 -> 14.6 with 8 instead of 16; f32 b1 x 1k
// 16.5 -> 17.0 with 16 instead of 32, the one point that lost).
constexpr std::int64_t kMinTilesPerSplit = 2;
// CUDA-core (f32) plans: split counts tried even where unsplit blocks fill four waves or more.
constexpr std::int64_t kMinSplitsTried = 4;
// The ring budget per block. Tensor-core blocks (16-bit K/V): 96 KiB, two blocks per SM, the whole
// ring in flight (TMA): three tiles of 64 keys x 128 dims (a block alone on its SM or one that
// streams few tiles reads 1-8% slower with two or four; docs/perf-notes.md, decode rounds 10 and
// 26), six at head_dim 64 (112 KiB gave seven and one block per SM: 6-35% slower, round 28).
// CUDA-core blocks (f32) are bound by instruction latency: two tiles, three blocks per SM (f32 at
// 2 blocks/SM ran 2.9 TB/s, at 3 blocks/SM 3.3-3.8 before TMA).
constexpr std::int64_t kRingBudgetBytesMma = 96 << 10;
constexpr std::int64_t kRingBudgetBytesSimt = 96 << 10;
// Where every SM holds its two tensor-core blocks for the whole call and each block streams a
// long range, two tiles per block read faster than three (bf16 d128, the same plans with 2 / 3
// stages, dev/decode_timeline.cu: b256 x 16k -2.7%, b128 x 16k -2.1%, b128 x 4k -1.6%, b256 x 4k
// -1.0%, b64 x 4k-64k -0.3% to -0.5%), while short splits (b256 x 1k: 16 tiles, +1.7%) and one
// block per SM (b16: +4% to +8%, b1 x 64k +3.5%) need the third (decode round 26).
constexpr std::int64_t kMinTilesForTwoStages = 64;
// ...measured with 32 KiB tiles (head_dim 128): 128 KiB in flight per SM. Smaller tiles keep more.
constexpr std::int64_t kTwoTileRingStageBytes = 32 << 10;
// K/V loads evict-first while the call's K/V bytes are at most this many L2s. Each K/V element is
// read by one block, so its lines are not wanted again; loaded evict-first they replace each other
// instead of the L2's other lines (under the bench's flush those are dirty: the old policy wrote
// back 22 of them per 67 MB call, evict-first 6.5, ncu). But the policy costs a streaming call
// time at the same DRAM bytes (bf16 b16 x 16k 249 -> 271 us): measured -7% to -9% at 33-67 MB,
// -3% at 134 MB, -2% at 201 MB, +2% to +5% at 268 MB (docs/perf-notes.md, "Decode round 23").
constexpr std::int64_t kEvictFirstL2Multiple = 4;
// Fallbacks when the target does not say (an H100/H200 class GPU).
constexpr int kDefaultSmCount = 132;
constexpr std::int64_t kDefaultSharedPerBlock = 227 << 10;
constexpr std::int64_t kDefaultSharedPerSm = 228 << 10;
constexpr int kDefaultThreadsPerSm = 2048;

std::int64_t div_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

}  // namespace

std::int64_t cuda_decode_blocks_per_sm(const Target& t, std::int64_t shared_bytes, int warps, int heads_per_warp,
                                       int capacity, std::int64_t kv_bytes) {
  const std::int64_t smem_sm = t.shared_bytes_per_sm > 0 ? t.shared_bytes_per_sm : kDefaultSharedPerSm;
  const std::int64_t threads_sm = t.max_threads_per_sm > 0 ? t.max_threads_per_sm : kDefaultThreadsPerSm;
  const std::int64_t by_smem = geo::blocks_by_shared(shared_bytes, smem_sm);
  const std::int64_t by_threads = threads_sm / (32 * std::int64_t{warps});
  const std::int64_t by_regs = geo::blocks_by_registers(warps, geo::register_budget(heads_per_warp, capacity, kv_bytes));
  return std::max<std::int64_t>(1, std::min({by_smem, by_threads, by_regs, std::int64_t{32}}));
}

bool cuda_decode_streams_full_waves(std::int64_t kv_bytes, std::int64_t blocks_per_sm, std::int64_t wave,
                                    std::int64_t grid_blocks, std::int64_t tiles_per_split, std::int64_t stage_bytes) {
  return cuda_decode::uses_mma(kv_bytes) && blocks_per_sm == 2 && grid_blocks >= wave &&
         tiles_per_split >= kMinTilesForTwoStages && stage_bytes >= kTwoTileRingStageBytes;
}

void partition_cuda_decode(const DecodeProblem& pr, const Target& t, const KernelFamily* requested,
                           WorkPartition& p, std::vector<std::string>& reasons, DecodeCache cache) {
  const char* ctx = "plan_decode (cuda)";
  if (requested != nullptr && *requested != KernelFamily::kSplitKvDecode) {
    fail(ctx, "the CUDA backend has only the split_kv_decode family for decode, got " + to_string(*requested),
         "plan without a family or with KernelFamily::kSplitKvDecode");
  }
  if (!(pr.head_dim % 8 == 0 && pr.head_dim >= 8 && pr.head_dim <= 256))
    fail(ctx, "head_dim=" + std::to_string(pr.head_dim) + " is not a multiple of 8 in [8, 256]",
         "use a head_dim that is a multiple of 8, at most 256");
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(pr.kv_dtype));
  // An e4m3 cache is converted to f16 in registers: q and out may be any of f32, f16 and bf16.
  const bool fp8 = is_fp8(pr.kv_dtype);
  if (fp8 && pr.head_dim % 16 != 0)
    fail(ctx, "head_dim=" + std::to_string(pr.head_dim) + " with an e4m3 cache: its rows are not 16-byte aligned",
         "use a head_dim that is a multiple of 16 (64, 128, 256), or an f16/bf16 cache");
  if (!fp8 && !(pr.q_dtype == pr.kv_dtype || pr.q_dtype == DType::kF32))
    fail(ctx, "q dtype " + std::string(dtype_name(pr.q_dtype)) + " is neither the KV dtype nor f32",
         "pass q in the KV dtype (" + std::string(dtype_name(pr.kv_dtype)) + ") or in f32");
  if (!fp8 && !(pr.out_dtype == pr.kv_dtype || pr.out_dtype == DType::kF32))
    fail(ctx, "out dtype " + std::string(dtype_name(pr.out_dtype)) + " is neither the KV dtype nor f32",
         "ask for out in the KV dtype (" + std::string(dtype_name(pr.kv_dtype)) + ") or in f32");

  const int sm_count = t.sm_count > 0 ? t.sm_count : kDefaultSmCount;
  const std::int64_t smem_block = t.shared_bytes_per_block > 0 ? t.shared_bytes_per_block : kDefaultSharedPerBlock;
  if (t.sm_count <= 0) reasons.push_back("target: no SM count given, planned for " + std::to_string(sm_count) + " SMs (H200)");

  // GQA packing: the whole group in one block, in chunks of heads_per_warp heads per warp.
  const std::int64_t group = pr.group_size();
  const std::int64_t rows = std::min<std::int64_t>(group, geo::max_rows_per_block(kv_bytes));
  const std::int64_t passes = div_up(group, rows);
  const int hpw = geo::heads_per_warp(rows, kv_bytes);
  const int chunks = geo::head_chunks(rows, kv_bytes);
  const int key_warps = geo::key_warps_for(chunks);
  const int capacity = geo::head_dim_capacity(pr.head_dim);
  const int tile = geo::tile_keys(capacity, key_warps, kv_bytes);
  const int threads = 32 * geo::block_warps(chunks, key_warps);
  reasons.push_back("rows_per_block " + std::to_string(rows) + ": the GQA group (" + std::to_string(group) +
                    " query heads per KV head) shares one block, so each K/V element is read once" +
                    (passes > 1 ? " per pass (" + std::to_string(passes) + " passes: groups above " +
                                      std::to_string(geo::max_rows_per_block(kv_bytes)) + " heads)"
                                : std::string{}));
  if (geo::uses_mma(kv_bytes)) {
    reasons.push_back("threads " + std::to_string(threads) + ": " + std::to_string(chunks) + " head chunk(s) of " +
                      std::to_string(hpw) +
                      (hpw == geo::kKeyRowsHeads
                           ? " heads (the 8 columns of an mma.sync m16n8k16 tile whose 16 rows are keys, half the MMAs "
                             "of heads as rows for groups of up to 8; 16-bit K/V on tensor cores)"
                       : fp8 ? " heads (the 16 rows of an mma.sync m16n8k16 tile; e4m3 K/V converted to f16 in registers "
                                 "for the tensor cores, q and P rounded to f16)"
                             : " heads (the 16 rows of an mma.sync m16n8k16 tile; 16-bit K/V on tensor cores)") +
                      " x " + std::to_string(key_warps) + " key warps, and one producer warp issuing the K/V copies");
    reasons.push_back("tile " + std::to_string(tile) + " keys: " + std::to_string(key_warps) + " key warps x " +
                      std::to_string(geo::kMmaKeysPerWarp) + " keys (one P.V k-step each)");
  } else {
    reasons.push_back("threads " + std::to_string(threads) + ": " + std::to_string(chunks) + " head chunk(s) of " +
                      std::to_string(hpw) + " heads x " + std::to_string(key_warps) +
                      " key warps on CUDA cores (f32 K/V: f32 arithmetic keeps the f32 parity rule), and one producer "
                      "warp issuing the K/V copies; a thread owns 8 "
                      "elements of head_dim per key (" + std::to_string(geo::threads_per_key(capacity)) +
                      " threads per key row, head_dim capacity " + std::to_string(capacity) + ")");
    reasons.push_back("tile " + std::to_string(tile) + " keys: " + std::to_string(key_warps) + " key warps x " +
                      std::to_string(geo::kStepsPerTile) + " steps x " +
                      std::to_string(geo::keys_per_warp_step(capacity)) + " keys per warp step");
  }

  // Pipeline: as many tiles in flight as the ring budget holds (2..kMaxStages).
  const std::int64_t stage_bytes = geo::ring_bytes(capacity, tile, 1, kv_bytes);
  const std::int64_t budget =
      std::min(geo::uses_mma(kv_bytes) ? kRingBudgetBytesMma : kRingBudgetBytesSimt,
               smem_block - geo::kStaticSharedBytes - geo::shared_bytes(capacity, tile, 0, kv_bytes, rows, key_warps));
  int stages = static_cast<int>(std::clamp<std::int64_t>(budget / stage_bytes, 2, geo::kMaxStages));
  std::int64_t smem = geo::shared_bytes(capacity, tile, stages, kv_bytes, rows, key_warps);
  if (smem + geo::kStaticSharedBytes > smem_block)
    fail(ctx,
         "the block needs " + std::to_string(smem + geo::kStaticSharedBytes) +
             " bytes of shared memory, the target allows " + std::to_string(smem_block),
         "use a smaller head_dim or fewer query heads per KV head");

  const std::int64_t per_sm = cuda_decode_blocks_per_sm(t, smem, static_cast<int>(threads / 32), hpw, capacity, kv_bytes);
  const std::int64_t wave = per_sm * sm_count;

  // Splits: the visible key range of the longest sequence (a window bounds it).
  const std::int64_t range = pr.options.window > 0 ? std::min(pr.kv_len, pr.options.window) : pr.kv_len;
  const std::int64_t base = pr.batch * pr.kv_heads * passes;
  const std::int64_t max_splits = std::clamp<std::int64_t>(range / (kMinTilesPerSplit * tile), 1, geo::kMaxSplits);
  std::int64_t splits = 1;
  std::string split_reason;
  if (geo::uses_mma(kv_bytes)) {
    // Tensor-core blocks (16-bit K/V): one block per SM streams at the full rate (bf16 b1 x 16k and
    // 64k ran as fast with 16 splits as with 32), and every further split only adds a partial
    // state, merge work and queued blocks: the largest count within one block per SM (measured
    // against the wave-fill rule below: b2 x 4k 31.6 -> 25.0 us, b4 x 4k 52.1 -> 36.5, b4 x 16k
    // 92.2 -> 85.6, b1 x 4k 20.3 -> 19.2; docs/perf-notes.md, "Decode round 7").
    // e4m3 blocks hold twice the keys per byte streamed, and one per SM fell short of the SM's share:
    // on an H100 b16 x 16k / 64k read 78% / 82% of the ceiling with one split, 85% / 95% with two
    // (two blocks per SM), b1 x 64k 64% -> 67% with 32 (docs/perf-notes.md, "e4m3 KV-cache decode on
    // CUDA"). So 1-byte K/V aims at two blocks per SM where two fit.
    const std::int64_t per_sm_target = kv_bytes == 1 ? std::min<std::int64_t>(2, per_sm) : 1;
    splits = std::clamp<std::int64_t>(per_sm_target * sm_count / base, 1, max_splits);
    split_reason = std::to_string(base) + " (sequence, KV head) blocks on " + std::to_string(sm_count) +
                   " SMs: the most splits that keep " +
                   (per_sm_target == 1 ? std::string("one block per SM (one tensor-core block streams at the SM's "
                                                     "share of the bandwidth; more only queue)")
                                       : std::string("two blocks per SM (one e4m3 block does not keep up with the "
                                                     "SM's share of the bandwidth)")) +
                   ", at most " + std::to_string(max_splits) + " for " + std::to_string(range) + " keys";
  } else {
    // CUDA-core blocks (f32) are latency-bound and need several per SM: the split count whose blocks
    // fill whole waves of `wave` resident blocks best (a smaller count wins near-ties: fewer partial
    // states, less merge work), up to four waves of blocks or kMinSplitsTried splits, whichever is
    // more. A many-wave plan's last wave costs as much: b256 x 4k / 16k (5.2 waves unsplit, the
    // last 17% full) read 3.83 / 4.05 TB/s against 4.32 for b64 x 16k's 97% fill (docs/perf-notes.md,
    // "Decode round 20").
    const std::int64_t cap = std::min(max_splits, std::max(kMinSplitsTried, div_up(4 * wave, base)));
    double best = -1;
    for (std::int64_t s = 1; s <= cap; ++s) {
      const std::int64_t blocks = base * s;
      const double fill = static_cast<double>(blocks) / static_cast<double>(div_up(blocks, wave) * wave);
      if (fill > best + 0.02) {
        best = fill;
        splits = s;
      }
    }
    split_reason = std::to_string(base) + " (sequence, KV head) blocks on " + std::to_string(sm_count) + " SMs x " +
                   std::to_string(per_sm) + " resident blocks: the count whose blocks fill whole waves best (" +
                   std::to_string(static_cast<int>(best * 100)) + "% fill of the waves) within four waves of blocks or " +
                   std::to_string(kMinSplitsTried) + " splits, at least " +
                   std::to_string(kMinTilesPerSplit) + " tiles per split (at most " + std::to_string(max_splits) +
                   " splits for " + std::to_string(range) + " keys)";
  }
  const std::int64_t keys_per_split = div_up(div_up(range, splits), tile) * tile;
  splits = div_up(range, keys_per_split);
  reasons.push_back("sequence_splits " + std::to_string(splits) + " of " + std::to_string(keys_per_split) +
                    " keys: " + split_reason);
  // A full wave of two tensor-core blocks per SM, each streaming a long range: two tiles in flight
  // per block (kMinTilesForTwoStages says what was measured). Fewer stages only shrink the block,
  // so the residency (two per SM, set by registers) holds.
  std::string ring_reason;
  const bool full_wave_streams = cache == DecodeCache::kContiguous &&
                                 cuda_decode_streams_full_waves(kv_bytes, per_sm, wave, base * splits, keys_per_split / tile, stage_bytes);
  const bool ring_shrunk = full_wave_streams && stages > 2;
  if (ring_shrunk) {
    stages = 2;
    smem = geo::shared_bytes(capacity, tile, stages, kv_bytes, rows, key_warps);
    ring_reason = "; two, not the budget's three, since " + std::to_string(base * splits) +
                  " blocks fill every SM's two slots and each streams " + std::to_string(keys_per_split / tile) +
                  " tiles (long full-wave streams read 1-3% faster with two)";
  }
  reasons.push_back("pipeline_stages " + std::to_string(stages) + ": a ring of " + std::to_string(stages) +
                    " K/V tiles (contiguous caches: TMA boxes from a producer warp, the whole ring in flight, a 16-bit "
                    "split's first tile as the warp's cp.async copies, which wait for no TMA descriptor; "
                    "paged: the same for page-aligned tiles, else 16-byte copies stages - 1 tiles ahead) (" +
                    std::to_string(stage_bytes / 1024) + " KiB each), " + std::to_string(smem / 1024) +
                    " KiB shared memory per block" + ring_reason);
  // Short splits of tensor-core plans run as one cluster per row and merge in distributed shared
  // memory: no merge launch and no workspace round trip after the last split (decode_geometry.hpp's
  // kMaxClusterSplits says where, docs/perf-notes.md, "Decode round 18", what it measured).
  const bool cluster_merge = cache == DecodeCache::kContiguous && splits > 1 && splits <= geo::kMaxClusterSplits &&
                             geo::uses_mma(kv_bytes) && keys_per_split <= geo::kMaxClusterSplitKeys &&
                             base * splits * 4 <= wave * 3;
  if (cluster_merge) {
    reasons.push_back("merge: the " + std::to_string(splits) + " splits of a (sequence, KV head) run as one cluster; "
                      "each block keeps its partial (output, LSE) state in shared memory and the cluster merges them "
                      "through distributed shared memory (no workspace, no merge launch); a sequence shorter than the "
                      "plan leaves its last splits empty");
  } else if (splits > 1) {
    reasons.push_back("merge: partial (output, LSE) states of the splits go to the caller's workspace and a merge "
                      "kernel (launched as a programmatic dependent of the decode grid) combines them; a sequence shorter "
                      "than the plan uses fewer splits");
  }

  p = WorkPartition{};
  p.family = KernelFamily::kSplitKvDecode;
  p.tile_size = u32(tile);
  p.tile_count = u32(div_up(range, tile));
  p.sequence_splits = u32(splits);
  p.keys_per_split = u32(keys_per_split);
  p.tiles_per_split = u32(keys_per_split / tile);
  p.rows_per_block = u32(rows);
  p.workgroups_per_row = u32(splits);
  p.workgroup_lanes = u32(threads);
  p.warp_lanes = 32;
  p.warps_per_block = u32(threads / 32);
  // Shared-memory footprint in f32 words: q staging (aliases the ring), the K/V ring, the stats.
  p.q_scratch_elements = 0;
  p.score_scratch_elements = u32((2 * key_warps + 1) * rows + 2 * capacity);
  p.o_acc_scratch_elements = u32((smem - 4 * p.score_scratch_elements) / 4);
  p.split_reduce_scratch_elements = 0;
  p.grid_blocks = static_cast<std::uint64_t>(base) * static_cast<std::uint64_t>(splits);
  p.pipeline_stages = u32(stages);
  p.merge_cluster = cluster_merge ? u32(splits) : 0;
  // The two-tile ring was measured at two blocks per SM; the smaller block could let a third in
  // (the key-rows engine's registers allow it), so the launch keeps the count. Other plans leave
  // residency to the hardware, as before: where the planner's count is lower than what fits (the
  // f32 engine's 255-register budget for groups above 4), a cap would change them unmeasured.
  p.resident_blocks = ring_shrunk ? u32(per_sm) : 0;

  // L2 policy of the K/V loads (kEvictFirstL2Multiple says why): only where each element is read by
  // one block (one pass; the passes of a larger group re-read the same K/V from L2), and not for
  // paged pools, where it measured no gain (bf16 b16 x 1k, b1 x 16k within 1%).
  // (In doubles: a comparison, and no product of the problem's sizes can overflow.)
  const double kv_read = 2.0 * static_cast<double>(pr.batch) * static_cast<double>(pr.kv_heads) *
                         static_cast<double>(range) * static_cast<double>(pr.head_dim) * static_cast<double>(kv_bytes);
  const std::int64_t l2 = t.cache_bytes;
  const bool paged = cache == DecodeCache::kPaged;
  p.kv_evict_first = !paged && passes == 1 && l2 > 0 && kv_read <= static_cast<double>(kEvictFirstL2Multiple * l2);
  reasons.push_back(
      std::string("K/V L2 policy ") + (p.kv_evict_first ? "evict first" : "evict normal") + ": " +
      (paged        ? std::string("paged pools gained nothing from evict-first")
       : passes > 1 ? "the " + std::to_string(passes) + " passes of a KV head re-read its K/V from L2"
       : l2 <= 0    ? std::string("the target gives no L2 size")
                  : std::to_string(std::llround(kv_read / (1 << 20))) + " MiB of K/V read once " +
                        (p.kv_evict_first ? "within " : "above ") + std::to_string(kEvictFirstL2Multiple) + " x the " +
                        std::to_string(l2 >> 20) + " MiB L2" +
                        (p.kv_evict_first ? " (the stream's lines replace each other, not the L2's other lines)"
                                          : " (evict-first slows a long stream)")));
  reasons.push_back("grid_blocks " + std::to_string(p.grid_blocks) + " = batch " + std::to_string(pr.batch) +
                    " x kv_heads " + std::to_string(pr.kv_heads) + " x passes " + std::to_string(passes) +
                    " x splits " + std::to_string(splits) + " (" + std::to_string(per_sm) +
                    " blocks resident per SM by shared memory / threads / registers" +
                    (ring_shrunk ? ", kept by the launch's shared memory where the two-tile ring would let one more in"
                                       : std::string{}) +
                    ")");
}

}  // namespace attnkit::detail
