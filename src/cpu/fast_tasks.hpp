// Internal: the unit of work of the fast CPU kernels, shared by the thread-level driver
// (fast_kernels.cpp) and the per-ISA bodies (fast_isa_*.cpp). Plain data only: the driver cuts
// the plan into tasks, the bodies compute one task into f32 scratch, the driver writes tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>  // the bodies' Vec traits (fast_body.hpp)
#include <utility>

#include "attnkit/dtype.hpp"

namespace attnkit::cpu::detail {

// Elements of one input row set: row r starts at data + row_offset(*this, r) (in elements): at
// offset + r * row_stride, or, for the rows of a paged KV cache (pages non-null), in page
// pages[(r >> page_shift) * table_stride] of 2^page_shift rows, page_stride elements apart.
struct RowSource {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t offset = 0;
  std::int64_t row_stride = 0;
  std::int64_t head_stride = 0;  // next query head (q only)
  const std::int32_t* pages = nullptr;  // the sequence's page-table row, or null: one strided run
  std::int64_t table_stride = 1;
  std::int64_t page_stride = 0;
  int page_shift = 0;
};

inline std::int64_t row_offset(const RowSource& s, std::int64_t r) {
  if (s.pages == nullptr) return s.offset + r * s.row_stride;
  const std::int64_t page = s.pages[(r >> s.page_shift) * s.table_stride];
  return s.offset + page * s.page_stride + (r & ((std::int64_t{1} << s.page_shift) - 1)) * s.row_stride;
}

// A tile of n rows from key j0 as strided runs: a paged source's rows are strided inside a page, so
// a tile spanning pages (the plan keeps tiles and pages powers of two, tiles page-aligned) is walked
// page by page; a contiguous tile is one run. Row j0 + r of the run that holds it lies at
// run_offset(s, j0, r0) + r * row_stride, r0 being the run's first row.
inline std::int64_t rows_per_run(const RowSource& s, std::int64_t n) {
  return s.pages == nullptr ? n : std::int64_t{1} << s.page_shift;
}
inline std::int64_t run_offset(const RowSource& s, std::int64_t j0, std::int64_t r0) {
  return row_offset(s, j0 + r0) - r0 * s.row_stride;
}

// Where a task's output rows go: the caller's tensor (any dtype, its strides) or f32 scratch.
struct RowSink {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t offset = 0;
  std::int64_t row_stride = 0;
  std::int64_t head_stride = 0;
};
struct LseSink {
  float* data = nullptr;
  std::int64_t offset = 0;
  std::int64_t row_stride = 0;
  std::int64_t head_stride = 0;
};

// Decode: one (sequence, KV head, key split): the `group` query heads of the KV head against
// keys [key_begin, key_end), in tiles of `tile` keys. K/V rows: f32, f16, bf16 or e4m3 (the bf16
// and AMX bodies hand e4m3 to the f32-arithmetic ones, as they do f16).
// Paged K/V rows: key_begin is a multiple of the tile and the tile divides the page, so a tile's
// rows are one strided run (the bodies find a tile's first row with row_offset, the rest
// row_stride apart; prefetches look up every row).
struct DecodeTask {
  std::int64_t head_dim = 0, group = 0, tile = 0;
  // scale: of the scores (an e4m3 K cache's dequantization scale folded in); out_scale: of the
  // normalised output rows (an e4m3 V cache's), so the bodies read the stored values as they are.
  float scale = 1, softcap = 0, out_scale = 1;
  RowSource q;     // row g = query head g of the group (head_stride apart)
  RowSource k, v;  // row j = key j
  std::int64_t key_begin = 0, key_end = 0;
  // The plan's two-stage pipeline (pipeline_stages 2: groups of 1 or 2 heads, tiles of one vector
  // of scores): each key's K row beside the V row of the key one tile earlier (decode_pipelined).
  bool pipelined = false;
  // The row-block bodies' prefetch of the next rows into L1 (the plan's cpu_l1_prefetch); the L2
  // prefetches of the stream run either way.
  bool l1_prefetch = true;
  float* out = nullptr;  // [group][out_stride] f32, normalised (zeros when no key is visible)
  std::int64_t out_stride = 0;
  float* lse = nullptr;  // [group], -inf when no key is visible
  float* scratch = nullptr;  // decode_scratch_floats()
};

// Prefill: one (sequence, KV head, block of query rows) for every query head of the group.
// Query row i of the block sits at absolute key position first_position + i.
struct PrefillTask {
  std::int64_t head_dim = 0, group = 0, rows = 0, block_rows = 0, tile = 0;
  float scale = 1, softcap = 0;
  bool causal = true;
  std::int64_t window = 0;
  std::int64_t kv_len = 0, first_position = 0;
  RowSource q;     // row i of head g: offset + g * head_stride + i * row_stride
  RowSource k, v;  // row j = key j of the sequence
  RowSink out;  // normalised row i of head g: offset + g * head_stride + i * row_stride, in out.dtype
  LseSink lse;  // row i of head g's LSE (natural log); nothing written when lse.data is null
  const float* sink_logits = nullptr;  // [group]: head g's attention-sink logit, folded into its rows; or null
  float* scratch = nullptr;  // prefill_scratch_floats()
};

// One ISA's bodies and the scratch (in floats) they need for a task's shape.
struct FastBodies {
  const char* name;
  int width;  // f32 lanes
  std::size_t (*decode_scratch_floats)(std::int64_t head_dim, std::int64_t group, std::int64_t tile);
  void (*decode)(const DecodeTask& task);
  std::size_t (*prefill_scratch_floats)(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                        std::int64_t tile);
  void (*prefill)(const PrefillTask& task);
};

const FastBodies& fast_bodies_scalar();
const FastBodies& fast_bodies_avx2();
const FastBodies& fast_bodies_avx512();
const FastBodies& fast_bodies_avx512bf16();
const FastBodies& fast_bodies_amx();
// The bodies of the instruction set simd::selected_isa() picks now (ATTNKIT_CPU_ISA or the best);
// every caller of the bodies should go through this, so a new ISA level reaches all of them.
const FastBodies& selected_fast_bodies();

}  // namespace attnkit::cpu::detail
