// Plans for the paged calls (paged.hpp): plan once per batch composition, run many times.
//
// Paged decode is contiguous decode with one more indirection per page, so it is cut by the same
// backend rules (rules.hpp) applied to the equivalent contiguous problem (as_decode()); the
// evidence is that problem's plus the page-table reads. Extend (q_len_b new rows per sequence) is
// cut like a causal prefill of max_q_len rows against kv_len keys, then its keys are split when the
// (sequence, KV head, row block) tasks alone leave the machine idle (short q_len, few sequences).
// The plan is made from host-side bounds only; it states what it covers (PlanBounds) and the exact
// workspace, so a run never allocates and a captured CUDA graph stays valid within the bounds.
//
// CUDA: both calls run the split-KV decode kernel (src/cuda/decode/) with page-table addressing.
// Paged decode takes the contiguous decode partition, with more key splits for batches of several
// sequences (split_for_ragged_batches: mixed lengths balance in short blocks); when its tiles are
// page-aligned (page_boxes_fit) the kernel copies page runs as TMA boxes like contiguous tiles. Extend packs (query row, head of
// the group) pairs into the kernel's rows: the CUDA decode rules are applied to the equivalent
// decode problem whose "group" is max_q_len * group (so rows_per_block, passes, the ring, the
// residency and the split count follow the same Target-driven rules), with the split range widened
// by the query rows one block spans when a window bounds it. The workspace is exactly the split
// states the kernels write: splits x (state rows x num_heads) x (head_dim + 1) f32, 256-byte rounded.
#include <algorithm>
#include <numeric>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/prefill_hopper/page_boxes.hpp"
#include "plan/checked_math.hpp"
#include "plan/evidence.hpp"
#include "plan/rules.hpp"

namespace attnkit {
namespace {

constexpr std::uint64_t kI32Bytes = 4;
constexpr std::uint64_t kWorkspaceAlignment = 256;
// CPU gather chunk of paged decode: K and V rows of one chunk (native dtype) stay within half of an
// assumed 1 MiB L2, so the decode body reads them from cache right after the gather.
constexpr std::uint64_t kAssumedL2Bytes = 1 << 20;
constexpr std::uint64_t kMaxGatherKeys = 1024;
// CPU extend: chunks of up to 4 MiB of K and V per thread. Each chunk is one prefill-body call whose
// fixed costs (the row block's Q packed, its state finished and merged) an L2-sized chunk repeats
// every 1024 keys: 6-10% of a 512-row chunk's time, measured; decode-like chunks (2 rows) read
// alike either way (docs/perf-notes.md, "Extend on the CPU against contiguous prefill").
constexpr std::uint64_t kExtendGatherBytes = 4 << 20;

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

std::uint64_t round_workspace(std::uint64_t bytes, const char* ctx) {
  if (bytes == 0) return 0;
  const std::uint64_t padded = detail::checked_add(bytes, kWorkspaceAlignment - 1, ctx, "workspace bytes");
  return padded / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Page-table entries the bounds make a run read: batch rows of ceil(kv_len / page_size).
void add_page_table_reads(Evidence& e, std::int64_t batch, std::int64_t kv_len, const PagedCacheSpec& c,
                          const Target& target, const char* ctx) {
  const std::uint64_t bytes = detail::checked_product(
      {u(batch), detail::div_ceil(u(kv_len), u(c.page_size)), kI32Bytes}, ctx, "page table bytes");
  e.traffic.global_read_bytes = detail::checked_add(e.traffic.global_read_bytes, bytes, ctx, "global read bytes");
  if (target.peak_read_bytes_per_s > 0) e.predicted_seconds += static_cast<double>(bytes) / target.peak_read_bytes_per_s;
}

std::uint32_t gather_keys_for(const Target& target, std::int64_t head_dim, DType kv_dtype, std::uint32_t tile) {
  if (target.backend != Backend::kCpu) return 0;  // the GPU kernels read pages in place
  const std::uint64_t per_key = 2 * u(head_dim) * dtype_size(kv_dtype);
  std::uint64_t keys = std::min<std::uint64_t>(kAssumedL2Bytes / 2 / per_key, kMaxGatherKeys);
  keys = std::max<std::uint64_t>(tile, keys / tile * tile);
  return static_cast<std::uint32_t>(keys);
}

std::uint32_t extend_gather_keys_for(const Target& target, std::int64_t head_dim, DType kv_dtype, std::uint32_t tile) {
  if (target.backend != Backend::kCpu) return 0;
  const std::uint64_t per_key = 2 * u(head_dim) * dtype_size(kv_dtype);
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(tile, kExtendGatherBytes / per_key / tile * tile));
}

// CUDA: the split states the kernels write (splits x rows x (head_dim + 1) f32), or 0 unsplit.
std::uint64_t cuda_state_bytes(std::uint32_t splits, std::int64_t state_rows, std::int64_t num_heads,
                               std::int64_t head_dim, const char* ctx) {
  if (splits <= 1) return 0;
  return round_workspace(
      detail::checked_product({splits, u(state_rows), u(num_heads), u(head_dim) + 1, std::uint64_t{4}}, ctx,
                              "split state bytes"),
      ctx);
}

// CUDA: the paged kernels' shared memory (decode's plus extend's row ranges)
// must fit the target's block limit.
void require_paged_shared_fits(const WorkPartition& p, std::int64_t head_dim, DType kv_dtype, const Target& t,
                               const char* ctx) {
  namespace geo = cuda_decode;
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(kv_dtype));
  const int chunks = geo::head_chunks(p.rows_per_block, kv_bytes);
  const std::int64_t bytes =
      geo::shared_bytes(geo::head_dim_capacity(head_dim), static_cast<int>(p.tile_size), static_cast<int>(p.pipeline_stages),
                        kv_bytes, p.rows_per_block, geo::key_warps_of(p.warps_per_block, chunks)) +
      geo::paged_extra_bytes(static_cast<int>(p.tile_size), static_cast<int>(p.pipeline_stages), p.rows_per_block) + geo::kStaticSharedBytes;
  const std::int64_t limit = t.shared_bytes_per_block > 0 ? t.shared_bytes_per_block : std::int64_t{227} << 10;
  if (bytes > limit)
    fail(ctx,
         "the paged kernel needs " + std::to_string(bytes) + " bytes of shared memory per block, the target allows " +
             std::to_string(limit),
         "use a smaller head_dim or fewer query heads per KV head");
}

// Blocks of the paged kernel one SM holds at once (its shared memory includes the page-row
// offsets; counted as the contiguous planner counts its own).
std::int64_t resident_per_sm(const PagedDecodeProblem& pr, const Target& t, const WorkPartition& p) {
  namespace geo = cuda_decode;
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(pr.kv_dtype));
  const int chunks = geo::head_chunks(p.rows_per_block, kv_bytes);
  const std::int64_t smem =
      geo::shared_bytes(geo::head_dim_capacity(pr.head_dim), static_cast<int>(p.tile_size),
                        static_cast<int>(p.pipeline_stages), kv_bytes, p.rows_per_block,
                        geo::key_warps_of(p.warps_per_block, chunks)) +
      geo::paged_extra_bytes(static_cast<int>(p.tile_size), static_cast<int>(p.pipeline_stages), p.rows_per_block);
  const int hpw = geo::heads_per_warp(p.rows_per_block, kv_bytes);
  return detail::cuda_decode_blocks_per_sm(t, smem, static_cast<int>(p.warps_per_block), hpw,
                                           geo::head_dim_capacity(pr.head_dim), kv_bytes);
}

// ...and the whole GPU (one wave of resident blocks).
std::int64_t wave_of(std::int64_t per_sm, const Target& t) { return per_sm * (t.sm_count > 0 ? t.sm_count : 132); }
std::int64_t resident_wave(const PagedDecodeProblem& pr, const Target& t, const WorkPartition& p) {
  return wave_of(resident_per_sm(pr, t, p), t);
}

// Sets the plan's key splits (base blocks per split: sequences x KV heads x passes).
void set_splits(WorkPartition& p, std::int64_t base, std::int64_t splits, std::int64_t range) {
  const std::int64_t tile = p.tile_size;
  const std::int64_t keys_per_split = ((range + splits - 1) / splits + tile - 1) / tile * tile;
  p.sequence_splits = static_cast<std::uint32_t>((range + keys_per_split - 1) / keys_per_split);
  p.keys_per_split = static_cast<std::uint32_t>(keys_per_split);
  p.tiles_per_split = static_cast<std::uint32_t>(keys_per_split / tile);
  p.workgroups_per_row = p.sequence_splits;
  p.grid_blocks = static_cast<std::uint64_t>(base) * p.sequence_splits;
}

// Pages shorter than a tile make the producer issue one box per page run and row segment (a bf16
// tile of 64 keys in pages of 16: eight 2 KiB boxes of K and eight of V), so one block per SM,
// the contiguous rule for 16-bit K/V, cannot keep the DRAM busy: uniform b16 x 16k / 64k read
// 0.76 / 0.74 of the contiguous kernel and b1 x 64k 0.88 (7d23576). Such plans are split until the
// GPU's resident blocks (one wave) are filled, never below the contiguous count: then 0.93 / 0.92
// and 0.95 in the same call (docs/paged.md).
constexpr std::int64_t kShortPageMinTiles = 16;
void split_for_short_pages(const PagedDecodePlan& plan, const Target& t, WorkPartition& p,
                           std::vector<std::string>& reasons) {
  const PagedDecodeProblem& pr = plan.problem;
  if (pr.cache.page_size >= static_cast<std::int64_t>(p.tile_size)) return;
  const std::int64_t wave = resident_wave(pr, t, p);
  const std::int64_t passes = (pr.group_size() + p.rows_per_block - 1) / p.rows_per_block;
  const std::int64_t base = pr.batch * pr.kv_heads * passes;
  const std::int64_t range = pr.options.window > 0 ? std::min(pr.kv_len, pr.options.window) : pr.kv_len;
  // At least kShortPageMinTiles tiles per split: b16 x 1k split in two read 0.943 of contiguous, unsplit 0.987.
  const std::int64_t most = std::clamp<std::int64_t>(range / (kShortPageMinTiles * p.tile_size), 1, cuda_decode::kMaxSplits);
  const std::int64_t splits = std::min(wave / base, most);
  if (splits <= static_cast<std::int64_t>(p.sequence_splits)) return;
  const std::uint32_t was = p.sequence_splits;
  set_splits(p, base, splits, range);
  reasons.push_back("paged: sequence_splits " + std::to_string(p.sequence_splits) + " of " +
                    std::to_string(p.keys_per_split) + " keys (was " + std::to_string(was) + "): pages of " +
                    std::to_string(pr.cache.page_size) + " keys are shorter than a tile of " +
                    std::to_string(p.tile_size) + ", so a tile is several small copies and one block per SM cannot "
                    "keep the memory busy: splits fill the " + std::to_string(wave) + " resident blocks");
}

// CUDA paged decode serves ragged batches: a block's time grows with its sequence's length, so with
// few long blocks the longest sequences set the tail. When there is more than one sequence, keys
// are split until the grid holds kRaggedWaves waves of resident blocks, with at least
// kRaggedMinKeys keys per split (shorter blocks cost more in per-block work and merged states than
// they gain: a uniform batch ran up to 28% slower at 512 keys per split), so blocks are short
// enough for the scheduler to balance mixed lengths; never fewer splits than the contiguous rule
// chose. Measured on the H200 (docs/paged.md): a 64-sequence batch with lengths uniform in
// 100..32k ran 1.81 ms unsplit, 1.38 ms at 4 splits, 1.31 ms at 8, 1.28 ms at 9.
constexpr std::int64_t kRaggedWaves = 16;
constexpr std::int64_t kRaggedMinKeys = 2048;
// A batch whose expected mean length is at least kUniformMeanTenths / 10 of kv_len is near-uniform: its blocks
// already balance, and the extra splits only add per-block work and merged states (uniform batches
// measured 0.89-0.93 of the contiguous partition with them, 0.97-1.04 without; docs/paged.md).
constexpr std::int64_t kUniformMeanTenths = 9;

// Page runs copied as TMA boxes stream like contiguous tiles, so the final cut takes the
// contiguous rule's two-tile ring where every SM's two slots stream long ranges for the whole call
// (cuda_decode_streams_full_waves).
void ring_for_full_wave_streams(const PagedDecodeProblem& pr, const Target& t, WorkPartition& p,
                                std::vector<std::string>& reasons) {
  namespace geo = cuda_decode;
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(pr.kv_dtype));
  if (p.pipeline_stages <= 2 || !geo::page_boxes_fit(static_cast<int>(p.tile_size), pr.cache.page_size, pr.options.window)) {
    return;
  }
  const std::int64_t per_sm = resident_per_sm(pr, t, p);
  if (!detail::cuda_decode_streams_full_waves(kv_bytes, per_sm, wave_of(per_sm, t),
                                              static_cast<std::int64_t>(p.grid_blocks), p.tiles_per_split,
                                              geo::ring_bytes(geo::head_dim_capacity(pr.head_dim),
                                                              static_cast<int>(p.tile_size), 1, kv_bytes))) {
    return;
  }
  const std::uint32_t was = p.pipeline_stages;
  // The residency the splits counted on: the smaller ring could let one more block in, and the
  // launch reserves shared memory against that.
  p.resident_blocks = static_cast<std::uint32_t>(per_sm);
  p.pipeline_stages = 2;
  const int chunks = geo::head_chunks(p.rows_per_block, kv_bytes);
  const std::int64_t smem = geo::shared_bytes(geo::head_dim_capacity(pr.head_dim), static_cast<int>(p.tile_size), 2,
                                              kv_bytes, p.rows_per_block, geo::key_warps_of(p.warps_per_block, chunks));
  p.o_acc_scratch_elements = static_cast<std::uint32_t>((smem - 4 * static_cast<std::int64_t>(p.score_scratch_elements)) / 4);
  reasons.push_back("paged: pipeline_stages 2 (was " + std::to_string(was) + "): page boxes stream like contiguous tiles, and " +
                    std::to_string(p.grid_blocks) + " blocks fill every SM's two slots, each streaming " +
                    std::to_string(p.tiles_per_split) + " tiles (long full-wave streams read 1-3% faster with two)");
}

void split_for_ragged_batches(const PagedDecodeProblem& pr, const Target& t, WorkPartition& p,
                              std::vector<std::string>& reasons) {
  namespace geo = cuda_decode;
  if (pr.batch <= 1) return;
  // (validate() bounds the hint by batch * kv_len < 2^62, so ten times it does not overflow.)
  if (pr.expected_total_keys > 0 && 10 * pr.expected_total_keys >= kUniformMeanTenths * pr.batch * pr.kv_len) {
    reasons.push_back("paged: expected lengths near-uniform (mean " +
                      std::to_string(pr.expected_total_keys / pr.batch) + " of kv_len " + std::to_string(pr.kv_len) +
                      "): the contiguous decode partition, no extra splits for mixed lengths");
    return;
  }
  const std::int64_t wave = resident_wave(pr, t, p);
  const std::int64_t passes = (pr.group_size() + p.rows_per_block - 1) / p.rows_per_block;
  const std::int64_t base = pr.batch * pr.kv_heads * passes;
  const std::int64_t range = pr.options.window > 0 ? std::min(pr.kv_len, pr.options.window) : pr.kv_len;
  const std::int64_t tile = p.tile_size;
  const std::int64_t most = std::clamp<std::int64_t>(range / std::max(kRaggedMinKeys, tile), 1, geo::kMaxSplits);
  std::int64_t splits = std::min((kRaggedWaves * wave + base - 1) / base, most);
  if (splits <= static_cast<std::int64_t>(p.sequence_splits)) return;
  const std::int64_t keys_per_split = ((range + splits - 1) / splits + tile - 1) / tile * tile;
  if ((range + keys_per_split - 1) / keys_per_split <= static_cast<std::int64_t>(p.sequence_splits)) return;
  const std::uint32_t was = p.sequence_splits;
  set_splits(p, base, splits, range);
  reasons.push_back("paged: sequence_splits " + std::to_string(p.sequence_splits) + " of " +
                    std::to_string(p.keys_per_split) + " keys (was " + std::to_string(was) +
                    "): a batch of mixed lengths balances in " + std::to_string(kRaggedWaves) + " waves of " +
                    std::to_string(wave) + " resident blocks; short sequences use fewer splits");
}

std::string cache_line(const PagedCacheSpec& c) {
  return "paged cache: " + to_string(c.layout) + " pages of " + std::to_string(c.page_size) + " keys, " +
         std::to_string(c.num_pages) + " in the pool, page table " + std::to_string(c.max_pages_per_seq) +
         " entries per sequence (one i32 load finds a key's page)";
}

std::string bounds_line(const PlanBounds& b) {
  return "covers: batch " + std::to_string(b.batch) + " (pad with empty sequences), lengths <= " +
         std::to_string(b.max_kv_len) + ", q_len <= " + std::to_string(b.max_q_len) + ", total query rows <= " +
         std::to_string(b.max_total_q) + "; workspace " + std::to_string(b.workspace_bytes) +
         " bytes; runs within these bounds reuse the plan (and a captured CUDA graph)";
}

// Extend as a decode problem whose GQA group is max_q_len * group: its packed rows are the
// (query row, head) pairs the CUDA kernel serves (what the evidence counts: every sequence at
// max_q_len rows, each reading its keys once per pass).
DecodeProblem packed_decode(const ExtendProblem& e) {
  PagedDecodeProblem pd;
  pd.batch = e.batch;
  pd.num_heads = e.kv_heads * e.group_size() * e.max_q_len;
  pd.kv_heads = e.kv_heads;
  pd.head_dim = e.head_dim;
  pd.cache = e.cache;
  pd.kv_len = e.kv_len;
  pd.kv_dtype = e.kv_dtype;
  pd.q_dtype = e.q_dtype;
  pd.out_dtype = e.out_dtype;
  pd.options = e.options;
  DecodeProblem d = pd.as_decode();
  if (e.options.scale <= 0.0f) d.options.scale = e.effective_scale();  // the real head_dim's scale
  return d;
}

void partition_cuda_extend(const ExtendProblem& e, const Target& target, WorkPartition& p,
                           std::vector<std::string>& reasons) {
  DecodeProblem d = packed_decode(e);
  // A block's rows span up to rows / group + 1 query rows, so with a window its keys span that many
  // more than the window.
  const std::int64_t packed = e.group_size() * e.max_q_len;
  const std::int64_t rows =
      std::min<std::int64_t>(packed, cuda_decode::max_rows_per_block(static_cast<std::int64_t>(dtype_size(e.kv_dtype))));
  // (A window of kv_len or more covers every key already; comparing first keeps the sum from
  // overflowing for windows near 2^63, which the planner fuzzer passes.)
  if (d.options.window > 0) {
    d.options.window = d.options.window >= e.kv_len ? e.kv_len
                                                    : std::min(e.kv_len, d.options.window + rows / e.group_size() + 1);
  }
  detail::partition_cuda_decode(d, target, nullptr, p, reasons, detail::DecodeCache::kPaged);
  reasons.push_back("cuda extend: the split-KV decode kernel with packed rows: a block serves " +
                    std::to_string(p.rows_per_block) + " (query row, head) pairs of one (sequence, KV head), " +
                    std::to_string(packed) + " per sequence at max_q_len (" +
                    std::to_string((packed + p.rows_per_block - 1) / p.rows_per_block) +
                    " passes), each row masked to its own causal key range; passes and splits past a sequence's "
                    "q_len_b and length exit at once");
  require_paged_shared_fits(p, e.head_dim, e.kv_dtype, target, "plan_extend");
}

// Long chunks on Hopper: the warp-specialized prefill kernel's Paged instances (a K / V tile as page
// boxes, hopper_prefill.cuh), where the decode kernel's mma.sync rows would re-read each K / V tile per
// 64 packed rows. Taken for f16 / bf16 pools with q in the pool's type, f16/bf16 or f32 out, no
// soft-cap, chunks of at least kHopperExtendMinRows rows (a whole 128-row query tile per head;
// shorter chunks pad it), and pages the producer's boxes fit. Chosen by itself (`asked` false) only
// where the packed rows the plan covers average at least half a tile per sequence: a mixed batch of
// decode rows and one long chunk would pad every short sequence to a 128-row tile per head (a
// 1-row query costs the Hopper kernel what 128 rows do), which the decode kernel does not. Returns
// false (nothing changed) where it does not apply.
constexpr std::int64_t kHopperExtendMinRows = 128;
bool partition_hopper_extend(const ExtendProblem& e, const PrefillProblem& pre, const Target& target, bool asked,
                             WorkPartition& p, std::vector<std::string>& reasons) {
  namespace hop = cuda_prefill_hopper;
  const bool half = e.kv_dtype == DType::kF16 || e.kv_dtype == DType::kBF16;
  if (!(target.cc_major == 9 && target.cc_minor == 0 && half && e.q_dtype == e.kv_dtype &&
        (e.out_dtype == e.kv_dtype || e.out_dtype == DType::kF32) && e.options.softcap == 0.0f &&
        e.max_q_len >= kHopperExtendMinRows && hop::hopper_page_box_rows(e.cache.page_size) > 0 &&
        (e.head_dim == 64 || e.head_dim == 128 || e.head_dim == 256)))
    return false;
  if (!asked && e.total_q_bound() < e.batch * (kHopperExtendMinRows / 2)) {
    reasons.push_back("cuda extend: max_total_q " + std::to_string(e.total_q_bound()) + " averages under " +
                      std::to_string(kHopperExtendMinRows / 2) + " rows per sequence, so the batch is mostly short "
                      "rows: the decode kernel, not the Hopper prefill kernel, which would pad each sequence to a " +
                      std::to_string(kHopperExtendMinRows) + "-row tile per head (run long chunks in a call of their "
                      "own, or name the family)");
    return false;
  }
  WorkPartition hopper;
  std::vector<std::string> why;
  const KernelFamily wgmma = KernelFamily::kWarpSpecializedWgmma;
  detail::partition_cuda_prefill(pre, target, &wgmma, hopper, why);
  if (!(hop::hopper_pages_fit(e.cache.page_size, hopper.tile_size) && hopper.packed_heads <= 1)) return false;
  p = hopper;
  reasons.insert(reasons.end(), why.begin(), why.end());
  reasons.push_back("cuda extend: chunks of up to " + std::to_string(e.max_q_len) +
                    " rows on the Hopper prefill kernel; each K / V tile of " + std::to_string(p.tile_size) +
                    " keys is loaded as " + std::to_string(p.tile_size / hop::hopper_page_box_rows(e.cache.page_size)) +
                    " TMA boxes of " + std::to_string(hop::hopper_page_box_rows(e.cache.page_size)) +
                    " keys inside a page, one producer lane each; query tiles past a sequence's q_len_b exit at once");
  return true;
}

}  // namespace

PagedDecodePlan plan_paged_decode(const PagedDecodeProblem& problem, const Target& target) {
  namespace geo = cuda_decode;
  const char* ctx = "plan_paged_decode";
  problem.validate();
  const DecodeProblem d = problem.as_decode();
  PagedDecodePlan plan;
  plan.problem = problem;
  plan.target = target;
  if (target.backend == Backend::kCpu) {
    detail::partition_cpu_decode(d, target, nullptr, plan.partition, plan.reasons, detail::DecodeCache::kPaged,
                                 problem.cache.page_size);
  } else {
    detail::partition_cuda_decode(d, target, nullptr, plan.partition, plan.reasons, detail::DecodeCache::kPaged);
  }
  if (plan.partition.family != KernelFamily::kSplitKvDecode)
    fail(ctx, "the decode rules chose " + to_string(plan.partition.family) + ", which has no paged kernel",
         "paged decode runs the split_kv_decode family; fix the rules");
  if (target.backend == Backend::kCuda) {
    split_for_short_pages(plan, target, plan.partition, plan.reasons);
    split_for_ragged_batches(problem, target, plan.partition, plan.reasons);
    ring_for_full_wave_streams(problem, target, plan.partition, plan.reasons);
  }
  plan.evidence = detail::compute_decode_evidence(d, plan.partition, target);
  add_page_table_reads(plan.evidence, problem.batch, problem.kv_len, problem.cache, target, ctx);
  if (target.backend == Backend::kCuda) {
    require_paged_shared_fits(plan.partition, problem.head_dim, problem.kv_dtype, target, ctx);
    plan.evidence.workspace_bytes =
        cuda_state_bytes(plan.partition.sequence_splits, problem.batch, problem.num_heads, problem.head_dim, ctx);
    plan.page_boxes = geo::page_boxes_fit(static_cast<int>(plan.partition.tile_size), problem.cache.page_size,
                                          problem.options.window);
    plan.reasons.push_back(
        plan.page_boxes
            ? "cuda: the contiguous split-KV decode kernel on page runs: every tile is " +
                  std::to_string(plan.partition.tile_size / geo::page_box_rows(static_cast<int>(plan.partition.tile_size),
                                                                               problem.cache.page_size)) +
                  " run(s) of rows sharing a page, copied by the producer warp as TMA boxes (page_boxes)"
            : "cuda: the contiguous split-KV decode kernel with page-table row addressing: a tile's (page, slot) "
              "pairs are looked up once per key row, one tile ahead of its copies (no page_boxes: a window, pages "
              "under " + std::to_string(geo::kMinBoxPageRows) + " rows, or pages and tiles that do not nest)");
  }
  const std::uint32_t tile = plan.partition.tile_size;
  const bool in_place = target.backend == Backend::kCpu && detail::cpu_reads_pages_in_place(problem.cache.page_size, tile);
  plan.gather_keys = in_place ? 0 : gather_keys_for(target, problem.head_dim, problem.kv_dtype, tile);
  plan.reasons.push_back(cache_line(problem.cache));
  if (target.backend == Backend::kCpu && problem.cache.layout == PageLayout::kNHD && problem.kv_heads > 1) {
    plan.reasons.push_back("layout: NHD pages put a KV head's rows " + std::to_string(problem.kv_heads) +
                           " rows apart, which the CPU decode reads at about two thirds of HND's rate (measured; "
                           "docs/perf-notes.md, \"Paged decode on the CPU: the NHD layout\"): HND pools decode faster "
                           "on the CPU");
  }
  if (in_place) {
    plan.reasons.push_back("in place: the decode bodies read each tile of " + std::to_string(tile) +
                           " keys from its page" + (problem.cache.page_size < tile ? "s, page by page" : std::string()) +
                           ", table lookups per page run only (and per two pages for the prefetches), no staging "
                           "copy (a window's keys before its first tile boundary are copied)");
  } else if (plan.gather_keys > 0) {
    plan.reasons.push_back("gather: " + std::to_string(plan.gather_keys) +
                           " keys of K and V copied from their pages per kernel call (half of an assumed 1 MiB L2), "
                           "each chunk's partial state merged into the task's (in place needs pages of a power of "
                           "two keys, at least 8)");
  }
  plan.bounds = PlanBounds{problem.batch, problem.kv_len, 1, problem.batch, plan.evidence.workspace_bytes};
  plan.reasons.push_back(bounds_line(plan.bounds));
  return plan;
}

namespace detail {
PrefillProblem extend_as_prefill(const ExtendProblem& e) {
  PrefillProblem pre;
  pre.batch = e.batch;
  pre.num_heads = e.num_heads;
  pre.kv_heads = e.kv_heads;
  pre.head_dim = e.head_dim;
  pre.q_len = e.max_q_len;
  pre.kv_len = e.kv_len;
  pre.causal = true;
  pre.dtype = e.kv_dtype;
  pre.out_dtype = e.out_dtype;
  pre.options = e.options;
  return pre;
}
}  // namespace detail

namespace {

ExtendPlan plan_extend_as(const ExtendProblem& problem, const Target& target, const KernelFamily* requested) {
  const char* ctx = "plan_extend";
  problem.validate();
  PrefillProblem pre = detail::extend_as_prefill(problem);
  // The CPU widens an e4m3 pool's rows to f16 (exact) as it gathers them, so its bodies and tiles
  // are f16's; the evidence counts the bytes memory holds (q in its dtype, the pool's 1 per element).
  const bool cpu_widens = target.backend == Backend::kCpu && is_fp8(problem.kv_dtype);
  if (cpu_widens) pre.dtype = DType::kF16;

  ExtendPlan plan;
  plan.problem = problem;
  plan.target = target;
  WorkPartition& p = plan.partition;
  if (target.backend == Backend::kCpu) {
    if (requested != nullptr && *requested != KernelFamily::kCooperativeTiled)
      fail(ctx, "extend on the CPU runs the cooperative_tiled family, not " + to_string(*requested),
           "ask for cooperative_tiled or no family");
    detail::partition_cpu_prefill(pre, target, nullptr, p, plan.reasons);
    // Split keys when the row-block tasks cannot keep every thread busy (decode-like batches).
    const std::uint64_t threads = u(std::max(1, target.threads));
    const std::uint64_t units = p.grid_blocks;
    const std::uint64_t keys = problem.options.window > 0
                                   ? std::min(u(problem.kv_len), u(problem.options.window) + u(problem.max_q_len) - 1)
                                   : u(problem.kv_len);
    std::uint64_t splits = units < 4 * threads ? threads / std::gcd(units, threads) : 1;
    const std::uint64_t max_splits = std::max<std::uint64_t>(1, keys / (u(p.tile_size) * kTargetTilesPerSplit));
    splits = std::min(splits, max_splits);
    std::uint64_t keys_per_split = detail::div_ceil(detail::div_ceil(keys, splits), u(p.tile_size)) * p.tile_size;
    splits = detail::div_ceil(keys, keys_per_split);
    if (splits == 1) keys_per_split = keys;
    p.sequence_splits = static_cast<std::uint32_t>(splits);
    p.keys_per_split = static_cast<std::uint32_t>(keys_per_split);
    p.tiles_per_split = static_cast<std::uint32_t>(detail::div_ceil(keys_per_split, u(p.tile_size)));
    p.workgroups_per_row = p.sequence_splits;
    p.grid_blocks = detail::checked_mul(units, splits, ctx, "tasks");
    p.split_reduce_scratch_elements =
        splits > 1 ? static_cast<std::uint32_t>(splits * u(problem.group_size()) * (u(problem.head_dim) + 2)) : 0;
    plan.reasons.push_back(splits > 1 ? "splits: " + std::to_string(splits) + " key ranges of " +
                                            std::to_string(keys_per_split) + " keys per row block (" +
                                            std::to_string(units) + " row-block tasks for " +
                                            std::to_string(threads) + " threads), merged after"
                                      : "splits: 1: row-block tasks already keep the threads busy");
  } else {
    const bool want_hopper = requested == nullptr || *requested == KernelFamily::kWarpSpecializedWgmma;
    const bool want_decode = requested == nullptr || *requested == KernelFamily::kSplitKvDecode;
    if (!(want_hopper || want_decode))
      fail(ctx, "extend on CUDA has no " + to_string(*requested) + " kernel",
           "ask for split_kv_decode (any chunk) or warp_specialized_wgmma (long chunks on Hopper), or no family");
    if (!(want_hopper && partition_hopper_extend(problem, pre, target, requested != nullptr, p, plan.reasons))) {
      if (!want_decode)
        fail(ctx, "the Hopper extend kernel does not take this problem",
             "it needs an sm_90 target, f16 / bf16 pools with q of the pool's dtype, f16/bf16/f32 out, no soft-cap, "
             "head_dim 64 / 128 / 256, max_q_len >= " + std::to_string(kHopperExtendMinRows) +
             " and pages of a multiple of 8 keys; or ask for split_kv_decode");
      partition_cuda_extend(problem, target, p, plan.reasons);
    }
  }
  const bool on_hopper = p.family == KernelFamily::kWarpSpecializedWgmma;
  const KernelFamily family = target.backend == Backend::kCpu ? KernelFamily::kCooperativeTiled
                              : on_hopper                      ? KernelFamily::kWarpSpecializedWgmma
                                                               : KernelFamily::kSplitKvDecode;
  if (p.family != family)
    fail(ctx, "the rules chose " + to_string(p.family) + ", which has no extend kernel",
         "extend runs the " + to_string(family) + " family on this backend; fix the rules");
  plan.evidence = target.backend == Backend::kCpu || on_hopper
                      ? detail::compute_prefill_evidence(
                            pre, p, target, {dtype_size(problem.q_dtype), dtype_size(problem.kv_dtype)})
                      : detail::compute_decode_evidence(packed_decode(problem), p, target);
  add_page_table_reads(plan.evidence, problem.batch, problem.kv_len, problem.cache, target, ctx);
  // An e4m3 pool's values are exact in f16 and the golden reads the same bytes: f16's tolerance.
  for (DType t : {problem.q_dtype, is_fp8(problem.kv_dtype) ? DType::kF16 : problem.kv_dtype, problem.out_dtype}) {
    plan.evidence.rel_l2_tolerance = std::max(plan.evidence.rel_l2_tolerance, rel_l2_tolerance_for(t));
  }
  // Split states exist for the packed rows the plan covers (not the padded batch * max_q_len).
  const std::uint64_t state_rows = detail::checked_mul(u(problem.total_q_bound()), u(problem.num_heads), ctx, "rows");
  plan.evidence.workspace_bytes =
      target.backend == Backend::kCuda
          ? cuda_state_bytes(p.sequence_splits, problem.total_q_bound(), problem.num_heads, problem.head_dim, ctx)
      : p.sequence_splits > 1
          ? round_workspace(detail::checked_product({p.sequence_splits, state_rows,
                                                     detail::split_state_bytes_per_row(problem.head_dim)},
                                                    ctx, "split state bytes"),
                            ctx)
          : 0;
  plan.gather_keys = extend_gather_keys_for(target, problem.head_dim, pre.dtype, p.tile_size);
  plan.reasons.push_back(cache_line(problem.cache));
  if (cpu_widens) {
    plan.reasons.push_back("kv: e4m3 pool widened to f16 (exact) as each chunk is gathered; the f16 prefill bodies "
                           "run on it, the scales folded into the score scale and the finished rows (evidence counts "
                           "the pool's 1 byte per K/V element: the widening happens in cache)");
  }
  plan.reasons.push_back("queries: up to " + std::to_string(problem.max_q_len) +
                         " new rows per sequence, causal bottom-right against the cached prefix; evidence counts "
                         "the padded bound (every sequence at max_q_len rows and kv_len keys)");
  if (plan.gather_keys > 0) {
    plan.reasons.push_back("gather: " + std::to_string(plan.gather_keys) +
                           " keys of K and V copied from their pages per kernel call, partial states merged");
  }

  plan.bounds = PlanBounds{problem.batch, problem.kv_len, problem.max_q_len, problem.total_q_bound(),
                           plan.evidence.workspace_bytes};
  plan.reasons.push_back(bounds_line(plan.bounds));
  return plan;
}

}  // namespace

ExtendPlan plan_extend(const ExtendProblem& problem, const Target& target) {
  return plan_extend_as(problem, target, nullptr);
}

ExtendPlan plan_extend(const ExtendProblem& problem, const Target& target, KernelFamily family) {
  return plan_extend_as(problem, target, &family);
}

}  // namespace attnkit
