// Internal: the thread geometry of the split-KV decode kernel, shared by the planner
// (src/plan/cuda_decode_rules.cpp, pure host code) and the kernel (split_kv_decode.cuh), so the
// two cannot disagree. Plain C++: no CUDA include.
//
// One block serves one (sequence, KV head, head pass, key split). Its consumer warps form a grid of
// head_chunks x key_warps: a warp scores heads_per_warp query heads of the GQA group against its
// share of each shared-memory key tile; one more warp, the producer, copies the tiles in. A thread owns kSliceElems consecutive-by-chunk elements of
// head_dim for one key, so threads_per_key = head_dim_capacity / kSliceElems threads read one key
// row and a warp covers 32 / threads_per_key keys per step; a warp takes kStepsPerTile steps per tile.
#pragma once
#include <algorithm>
#include <cstdint>

namespace attnkit::cuda_decode {

inline constexpr int kSliceElems = 8;        // head_dim elements a thread owns per key
inline constexpr int kStepsPerTile = 4;      // key steps a warp takes per shared-memory tile
inline constexpr int kMaxThreads = 256;      // keeps 255 registers per thread available
inline constexpr int kProducerWarps = 1;     // the warp that issues the K/V tile copies
inline constexpr int kMaxSplits = 256;       // the merge kernel stages one weight per split
// Splits merged in a cluster (docs/perf-notes.md, "Decode round 18"). A cluster's blocks must share
// a GPC, so fewer of them are resident than single blocks (H200: 30 clusters of 8 where 33 would
// fit by resources), and the planner merges in clusters only where the grid stays within three
// quarters of the resident wave (bf16 d64 b4 x 2k, 128 blocks of one per SM in clusters of 4, ran
// 1.4x slower: a second wave). Clusters also cost streaming calls bandwidth (bf16 b4 x 16k, 4096
// keys per split, +6%; clusters of 16 at b1 x 16k / 64k +6% / +16%), so only short splits of
// tensor-core plans merge in clusters, of at most 8 blocks, where the saved merge launch is worth
// more (b1 x 1k -1.3 us, b8 x 1k -2.2 us).
inline constexpr int kMaxClusterSplits = 8;
inline constexpr int kMaxClusterSplitKeys = 512;
inline constexpr int kMaxStages = 8;

// head_dim is compiled for three capacities; any multiple of 8 up to 256 runs on the next one up.
constexpr int head_dim_capacity(std::int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }
constexpr int threads_per_key(int capacity) { return capacity / kSliceElems; }
constexpr int keys_per_warp_step(int capacity) { return 32 / threads_per_key(capacity); }

// 16-bit K/V run on tensor cores (mma.sync m16n8k16). Groups of up to 8 heads take the key-rows
// engine (engine_mma_key_rows.cuh: the MMA's 16 rows are keys, its 8 columns the warp's heads);
// larger ones the 16-row engine (engine_mma.cuh: the MMA's rows are up to 16 heads). e4m3 K/V
// (1 byte) run on the f16 tensor cores too, converted in registers, always with the 16-row
// layout (engine_mma_fp8.cuh). f32 K/V run on CUDA cores (TF32 would break the f32 parity rule),
// a warp holding 4 heads (groups up to 4) or 8 in registers.
constexpr bool uses_mma(std::int64_t kv_elem_bytes) { return kv_elem_bytes <= 2; }
inline constexpr int kMmaRows = 16;
inline constexpr int kKeyRowsHeads = 8;
inline constexpr int kMmaKeysPerWarp = 16;  // keys a warp takes per tile (one P.V k-step)
constexpr int heads_per_warp(std::int64_t rows_per_block, std::int64_t kv_elem_bytes) {
  if (kv_elem_bytes == 1) return kMmaRows;
  if (uses_mma(kv_elem_bytes)) return rows_per_block <= kKeyRowsHeads ? kKeyRowsHeads : kMmaRows;
  return rows_per_block <= 4 ? 4 : 8;
}
// Whether a (K/V element size, heads per warp) pair names a kernel instance's engine.
constexpr bool engine_exists(std::int64_t kv_elem_bytes, int heads_per_warp_) {
  if (kv_elem_bytes == 1) return heads_per_warp_ == kMmaRows;
  return uses_mma(kv_elem_bytes) ? (heads_per_warp_ == kKeyRowsHeads || heads_per_warp_ == kMmaRows)
                                 : (heads_per_warp_ == 4 || heads_per_warp_ == 8);
}
constexpr int head_chunks(std::int64_t rows_per_block, std::int64_t kv_elem_bytes) {
  const int hpw = heads_per_warp(rows_per_block, kv_elem_bytes);
  return static_cast<int>((rows_per_block + hpw - 1) / hpw);
}
// Registers per thread each kernel instance may use (its __maxnreg__), by engine: the planners
// count blocks per SM from it (blocks_by_registers), so a kernel cannot silently hold fewer blocks
// than its plan assumes. 16-row tensor-core engine: head_dim 64 and 128 keep three and two blocks
// of five warps per SM (128 / 168); 256 needs all 255. The key-rows engine holds half of q's and O's
// fragments: 96 / 128 / 168 (four, three and two blocks of five warps). CUDA cores: 4 heads per
// warp in 128 (three blocks), 8 in 255. (Uncapped, the d128 paged copy ring and extend kernels of
// the 16-row engine took 173 / 178: one block per SM.)
constexpr int register_budget(int heads_per_warp_, int capacity, std::int64_t kv_elem_bytes) {
  if (uses_mma(kv_elem_bytes) && heads_per_warp_ == kKeyRowsHeads) return capacity <= 64 ? 96 : capacity <= 128 ? 128 : 168;
  if (uses_mma(kv_elem_bytes)) return capacity <= 64 ? 128 : capacity <= 128 ? 168 : 255;
  return heads_per_warp_ <= 4 ? 128 : 255;
}
// An SM's registers are four files of 16K, one per scheduler, and a block's warps are spread over
// them: a file holds 16384 / (32 x registers, allocated in steps of 8) warps. (Two blocks of five
// warps need <= 168 registers: at 175 a bf16 d128 kernel ran one block per SM, 10-20% slower at
// batch >= 64 x 1k-4k; docs/perf-notes.md, "Decode round 11".)
inline constexpr std::int64_t kRegisterFiles = 4;
inline constexpr std::int64_t kRegistersPerFile = 16384;
constexpr std::int64_t blocks_by_registers(std::int64_t warps, std::int64_t registers) {
  const std::int64_t allocated = (registers + 7) / 8 * 8;
  return kRegisterFiles * (kRegistersPerFile / (32 * allocated)) / warps;
}
// Query heads one block serves (larger groups take several passes): as many head chunks as fit
// beside the producer warp within kMaxThreads (tensor cores: 4 chunks of 16; CUDA cores: 7 of 8).
constexpr int kConsumerWarpLimit = kMaxThreads / 32 - kProducerWarps;
constexpr std::int64_t max_rows_per_block(std::int64_t kv_elem_bytes) {
  return uses_mma(kv_elem_bytes) ? 4 * kMmaRows : kConsumerWarpLimit * 8;
}
// Key warps: 4 while the block stays within kMaxThreads, fewer for large groups (the kernel's
// combine loops are unrolled to kMaxKeyWarps).
inline constexpr int kMaxKeyWarps = 4;
constexpr int key_warps_for(int chunks) { return std::max(1, std::min(kMaxKeyWarps, kConsumerWarpLimit / chunks)); }
// A block's warps (the plan's warps_per_block): the consumers and the producer.
constexpr int block_warps(int chunks, int key_warps) { return chunks * key_warps + kProducerWarps; }
constexpr int key_warps_of(std::int64_t warps_per_block, int chunks) {
  return static_cast<int>((warps_per_block - kProducerWarps) / chunks);
}
constexpr int tile_keys(int capacity, int key_warps, std::int64_t kv_elem_bytes) {
  return key_warps * (uses_mma(kv_elem_bytes) ? kMmaKeysPerWarp : kStepsPerTile * keys_per_warp_step(capacity));
}
// Shared-memory tile layout (every K/V ring slot): a key's row is cut into segments of
// segment_elems columns; a tile stores segment 0 of all its rows, then segment 1, ... (one TMA box
// of segment_pitch x tile rows per segment).
// - 16-bit K/V: 128-byte segments with TMA's 128-byte swizzle (row r's 16-byte chunk c sits at
//   chunk c ^ (r % 8)), so the 8 rows an ldmatrix reads at one column hit 8 bank groups with no
//   padding. Padded boxes (136 columns) cost 5% of the DRAM rate (dev/tma_stream_probe.cu,
//   docs/perf-notes.md "Decode round 8"). e4m3 K/V: the same 128-byte swizzled segments, of 128
//   columns (head_dim 64 fills half of one; TMA reads its other columns as zeros).
// - f32 K/V: segments of up to 128 columns, each row padded by 16 bytes (a 132-column box). Its
//   swizzled segments would be 32 columns, four 4 KiB boxes per K tile, and measured 5-10% slower
//   at batch >= 64 with 1k-4k keys (same round): the f32 engine runs three blocks per SM.
constexpr bool swizzled_tiles(std::int64_t kv_elem_bytes) { return kv_elem_bytes <= 2; }
constexpr int segment_elems(int capacity, std::int64_t kv_elem_bytes) {
  return swizzled_tiles(kv_elem_bytes) ? 128 / static_cast<int>(kv_elem_bytes) : (capacity < 128 ? capacity : 128);
}
constexpr int segment_pitch(int capacity, std::int64_t kv_elem_bytes) {
  return segment_elems(capacity, kv_elem_bytes) + (swizzled_tiles(kv_elem_bytes) ? 0 : 16 / static_cast<int>(kv_elem_bytes));
}
constexpr int row_segments(int capacity, std::int64_t kv_elem_bytes) {
  return (capacity + segment_elems(capacity, kv_elem_bytes) - 1) / segment_elems(capacity, kv_elem_bytes);
}
// Element offset of column d (inside a 16-byte chunk) of row r in a tile of `tile` rows.
constexpr int tile_offset(int r, int d, int tile, int capacity, std::int64_t kv_elem_bytes) {
  const int width = segment_elems(capacity, kv_elem_bytes), pitch = segment_pitch(capacity, kv_elem_bytes);
  const int vec = 16 / static_cast<int>(kv_elem_bytes), within = d % width;
  const int col = swizzled_tiles(kv_elem_bytes) ? (((within / vec) ^ (r & 7)) * vec) + within % vec : within;
  return (d / width) * tile * pitch + r * pitch + col;
}
// Elements of one tile (one ring slot of K or of V).
constexpr int tile_elems(int tile, int capacity, std::int64_t kv_elem_bytes) {
  return tile * row_segments(capacity, kv_elem_bytes) * segment_pitch(capacity, kv_elem_bytes);
}

// Paged caches: a tile is copied as TMA boxes, one per run of box_rows rows that share a page, when
// every tile is page-aligned (no window: tiles start at multiples of the tile), the page holds at
// least kMinBoxPageRows rows (shorter runs make the copies too small; the copy ring serves them)
// and a tile spans at most kMaxPageRuns pages.
inline constexpr int kMinBoxPageRows = 16;
inline constexpr int kMaxPageRuns = 4;
constexpr int page_box_rows(int tile, std::int64_t page_size) {
  return page_size < tile ? static_cast<int>(page_size) : tile;
}
constexpr bool page_boxes_fit(int tile, std::int64_t page_size, std::int64_t window) {
  return window == 0 && page_size >= kMinBoxPageRows && tile > 0 &&
         (page_size >= tile ? page_size % tile == 0 : tile % page_size == 0) &&
         tile / page_box_rows(tile, page_size) <= kMaxPageRuns;
}

// Static shared memory of the kernel: the full and empty mbarrier of each ring slot.
inline constexpr std::int64_t kStaticSharedBytes = 2 * kMaxStages * 8;
// Shared memory the CUDA runtime reserves per block (sm_80 and later).
inline constexpr std::int64_t kRuntimeSharedBytes = 1024;
// Blocks of `dynamic_bytes` that share one SM by shared memory.
constexpr std::int64_t blocks_by_shared(std::int64_t dynamic_bytes, std::int64_t shared_per_sm) {
  return shared_per_sm / (dynamic_bytes + kStaticSharedBytes + kRuntimeSharedBytes);
}
// Dynamic shared memory to launch with so that at most `resident` blocks share an SM (0: no cap):
// a plan whose waves and ring depth count on `resident` blocks keeps that count where registers and
// the block's own bytes would let one more in (the key-rows engine's two-tile ring at head_dim 128).
constexpr std::int64_t shared_bytes_for_residency(std::int64_t dynamic_bytes, std::int64_t resident,
                                                  std::int64_t shared_per_sm) {
  if (resident <= 0 || blocks_by_shared(dynamic_bytes, shared_per_sm) <= resident) return dynamic_bytes;
  return shared_per_sm / (resident + 1) - kStaticSharedBytes - kRuntimeSharedBytes + 1;
}
// The dynamic part starts with the ring, aligned up to 1024 bytes (TMA swizzled destinations).
inline constexpr std::int64_t kRingAlignment = 1024;  // the 128-byte swizzle's 8-row atom (1- and 2-byte K/V)

// Dynamic shared memory of one block (bytes): alignment slack, the K/V ring, the f32 query staging (reused as the
// cross-warp reduction), the (max, sum) pairs of each key warp and the block's LSEs, and the fused
// kernel's new-key scratch.
constexpr std::int64_t ring_bytes(int capacity, int tile, int stages, std::int64_t kv_elem_bytes) {
  return std::int64_t{2} * stages * tile_elems(tile, capacity, kv_elem_bytes) * kv_elem_bytes;
}
constexpr std::int64_t shared_bytes(int capacity, int tile, int stages, std::int64_t kv_elem_bytes,
                                    std::int64_t rows_per_block, int key_warps) {
  const std::int64_t staging = rows_per_block * capacity * 4;  // f32 q rows, later the reduction
  // (max, sum) per key warp and row, and the block's LSE per row (the cluster merge reads it)
  const std::int64_t stats = (std::int64_t{2} * key_warps + 1) * rows_per_block * 4;
  const std::int64_t fused_scratch = std::int64_t{2} * capacity * 4;
  // The ring region also holds the key warps' f32 output slices in the epilogue.
  const std::int64_t ring_region =
      std::max(ring_bytes(capacity, tile, stages, kv_elem_bytes), key_warps * rows_per_block * capacity * 4);
  return kRingAlignment + ring_region + staging + stats + fused_scratch;
}

// Paged kernels (src/cuda/paged/) add, after the fused scratch: the K and V element offsets of the
// rows of `stages` tiles (two i64 per key row, looked up once per row one tile ahead; 16-byte
// aligned, hence the slack) and each packed row's visible key range [lo, hi) for extend (one i32
// pair per row, rounded up to whole warps of 16 rows so an engine's padding rows read a defined,
// empty range).
constexpr std::int64_t row_keys_entries(std::int64_t rows_per_block) { return (rows_per_block + 15) / 16 * 16; }
constexpr std::int64_t paged_extra_bytes(int tile, int stages, std::int64_t rows_per_block) {
  return 16 + std::int64_t{16} * stages * tile + row_keys_entries(rows_per_block) * 8;
}

}  // namespace attnkit::cuda_decode
