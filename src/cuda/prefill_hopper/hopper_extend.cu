// Launcher of the Hopper prefill kernel's Paged instances (hopper_prefill.cuh with Paged = true):
// extend over a paged cache. The query side is the ragged prefill's (q / out [rows, heads, D] seen
// as [1, heads, rows, D]); the pools are 4-D TMA maps (D, slot, KV head, page) whose boxes are one
// page run of box_rows keys (page_boxes.hpp), the same maps for HND and NHD pools (only the strides
// differ).
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/prefill/split_merge_launch.hpp"
#include "cuda/prefill_hopper/hopper_extend.hpp"
#include "cuda/prefill_hopper/hopper_instances.cuh"

namespace attnkit::cuda_prefill_hopper {
namespace {

constexpr const char* kContext = "cuda::extend (hopper)";

// [rows, heads, D] as the kernel's [1, heads, rows, D].
TensorView rows_as_heads(const TensorView& v) {
  TensorView r = v;
  r.rank = 4;
  r.shape = {1, v.shape[1], v.shape[0], v.shape[2], 0};
  r.strides = {v.shape[0] * v.strides[0], v.strides[1], v.strides[0], v.strides[2], 0};
  return r;
}

// A pool as [pages, kv_heads, page_size, D] (HND as it is, NHD with its middle dimensions swapped).
TensorView pool_as_hnd(const TensorView& v, PageLayout layout) {
  if (layout == PageLayout::kHND) return v;
  TensorView r = v;
  r.shape = {v.shape[0], v.shape[2], v.shape[1], v.shape[3], 0};
  r.strides = {v.strides[0], v.strides[2], v.strides[1], v.strides[3], 0};
  return r;
}

}  // namespace

void launch_hopper_extend(const ExtendPlan& plan, const ExtendTensors& t, Workspace workspace, void* stream) {
  const ExtendProblem& pr = plan.problem;
  const WorkPartition& part = plan.partition;
  const DType dtype = pr.kv_dtype;
  if (!((dtype == DType::kBF16 || dtype == DType::kF16) && pr.q_dtype == dtype &&
        (pr.out_dtype == dtype || pr.out_dtype == DType::kF32) && pr.options.softcap == 0.0f))
    fail(kContext, "the plan's dtypes or options have no Hopper extend kernel",
         "plan again with plan_extend (it picks this family for f16 / bf16 pools, q of the pool's dtype, no soft-cap)");
  const HopperConfig* hc = find_hopper_config(pr.head_dim, part.tile_size, part.rows_per_block);
  const int box_rows = hopper_page_box_rows(pr.cache.page_size);
  if (!(hc != nullptr && hopper_pages_fit(pr.cache.page_size, hc->keys_per_tile) && part.packed_heads <= 1))
    fail(kContext, "the plan's tiles do not match a compiled Hopper extend kernel (head_dim=" +
                       std::to_string(pr.head_dim) + ", pages of " + std::to_string(pr.cache.page_size) + ")",
         "plan with plan_extend from this build of attnkit");

  cuda_prefill::PrefillParams p{};
  p.q = t.q.data, p.out = t.out.data;
  p.q_batch_stride = 0, p.q_head_stride = t.q.strides[1], p.q_row_stride = t.q.strides[0];
  p.o_batch_stride = 0, p.o_head_stride = t.out.strides[1], p.o_row_stride = t.out.strides[0];
  if (!t.lse.empty()) {
    p.lse = t.lse.as<float>();
    p.lse_batch_stride = 0, p.lse_head_stride = t.lse.strides[1], p.lse_row_stride = t.lse.strides[0];
  }
  p.sinks = t.sinks.empty() ? nullptr : t.sinks.as<const float>();
  p.cu_seqlens_q = t.cu_seqlens_q.as<const int>();
  p.kv_lengths = t.cache.lengths.as<const int>();
  const std::int64_t rows = std::min<std::int64_t>(t.q.shape[0], pr.total_q_bound());
  p.q_rows = static_cast<int>(rows);
  p.batch = static_cast<int>(pr.batch), p.num_heads = static_cast<int>(pr.num_heads);
  p.group_size = static_cast<int>(pr.group_size()), p.head_dim = static_cast<int>(pr.head_dim);
  p.q_len = static_cast<int>(pr.max_q_len), p.kv_len = static_cast<int>(pr.kv_len);
  p.causal = true;
  p.window = pr.options.window;
  p.scale = pr.effective_scale();
  p.out_kind = pr.out_dtype == DType::kF32 ? cuda_prefill::OutKind::kF32 : cuda_prefill::OutKind::kInput;
  p.workspace_rows = pr.total_q_bound();
  cuda_prefill::bind_split_states(p, part, pr.num_heads, pr.head_dim, workspace, kContext);
  if (p.splits > 1 && p.tiles_per_split <= 0)
    fail(kContext, "the plan splits keys with no key tiles per split", "plan again with plan_extend");

  HopperParams hp{};
  hp.p = p;
  hp.qk_scale = 1.0f, hp.v_scale = 1.0f;
  hp.out_bf16 = pr.out_dtype == DType::kBF16 ? 1 : 0;
  bool vec16 = dtype_size(pr.out_dtype) == 2 && reinterpret_cast<std::uintptr_t>(t.out.data) % 16 == 0;
  for (int d = 0; d < 2; ++d) vec16 = vec16 && t.out.strides[d] % 8 == 0;
  hp.out_vec16 = vec16 ? 1 : 0;
  const int block_rows = rows_per_block(*hc);
  hp.packed_rows = 0;
  hp.q_tile_bytes = static_cast<std::uint32_t>(block_rows * pr.head_dim * dtype_size(dtype));
  const int m_tiles = static_cast<int>((pr.max_q_len + block_rows - 1) / block_rows);
  const int pairs = static_cast<int>(pr.num_heads * pr.batch);
  const int tiles_per_unit = static_cast<int>(part.tiles_per_unit);
  if (!(tiles_per_unit == 1 || (tiles_per_unit == 2 && p.splits == 1)) ||
      !(part.tail_pairs <= static_cast<std::uint32_t>(pairs)))
    fail(kContext, "the plan's walk does not match the Hopper kernel's", "plan again with plan_extend");
  const std::int64_t units = walk_units_per_pair(m_tiles, tiles_per_unit, p.splits) * static_cast<std::int64_t>(pairs);
  if (units > INT32_MAX) fail(kContext, "too many work units (" + std::to_string(units) + ")", "split the batch");
  hp.walk = make_walk(m_tiles, pairs, part.heads_per_tile_group, tiles_per_unit, p.splits,
                      static_cast<int>(part.tail_pairs), static_cast<std::int64_t>(part.grid_blocks));
  hp.heads = cuda_common::FastDivider(static_cast<std::uint32_t>(pr.num_heads));

  HopperPages& pages = hp.pages;
  pages.table = t.cache.page_table.as<const int>();
  pages.table_stride = t.cache.page_table.strides[0];
  pages.num_pages = static_cast<int>(pr.cache.num_pages);
  pages.box_rows = box_rows;
  pages.page_size = cuda_common::FastDivider(static_cast<std::uint32_t>(pr.cache.page_size));
  const TensorView v_hnd = pool_as_hnd(t.cache.v_pages, pr.cache.layout);
  pages.v_pool = v_hnd.data;
  pages.v_page_stride = v_hnd.strides[0], pages.v_head_stride = v_hnd.strides[1], pages.v_row_stride = v_hnd.strides[2];
  if (!(pages.v_row_stride % 8 == 0 && pages.v_head_stride % 8 == 0 && pages.v_page_stride % 8 == 0))
    fail(kContext, "v_pages " + t.cache.v_pages.describe() + " has strides that are not 16-byte multiples",
         "pass pools whose page, head and row strides are multiples of 8 elements");

  // The epilogue stores pairs of elements (4 or 8 bytes) per lane.
  bool paired = reinterpret_cast<std::uintptr_t>(t.out.data) % (2 * dtype_size(pr.out_dtype)) == 0;
  for (int d = 0; d < 2; ++d) paired = paired && t.out.strides[d] % 2 == 0;
  if (!paired)
    fail(kContext, "out " + t.out.describe() + " is not aligned for paired stores",
         "pass out with even row and head strides and a base aligned to two elements");
  if (rows == 0) return;  // nothing to compute (and no TMA map has a zero extent)
  // Every descriptor is made (and every tensor checked) before anything runs.
  const TensorView q4 = rows_as_heads(t.q), out4 = rows_as_heads(t.out);
  hp.q_map = instances::make_map(kContext, q4, dtype, block_rows, "q");
  hp.k_map = instances::make_map(kContext, pool_as_hnd(t.cache.k_pages, pr.cache.layout), dtype, box_rows, "k_pages");
  hp.v_map = instances::make_map(kContext, v_hnd, dtype, box_rows, "v_pages");
  if (call_stages_o(hp) && pr.head_dim >= 128) {
    hp.o_map = instances::make_map(kContext, out4, pr.out_dtype, 64, "out");
    hp.o_tma = 1;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const auto configs = std::make_index_sequence<std::size(kHopperConfigs)>{};
  if (dtype == DType::kBF16) {
    instances::launch_any<kHopperConfigs, HopperInput::kBF16, true>(kContext, hp, *hc, s, configs);
  } else {
    instances::launch_any<kHopperConfigs, HopperInput::kF16, true>(kContext, hp, *hc, s, configs);
  }
  cuda_prefill::merge_split_states(hp.p, dtype, s);
}

}  // namespace attnkit::cuda_prefill_hopper
