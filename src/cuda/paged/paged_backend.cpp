// The CUDA entry points of the serving layouts (include/attnkit/cuda_paged.hpp): paged decode and
// extend (f32, f16, bf16 or e4m3 pools) on the split-KV decode kernel with page-table row addressing (src/cuda/decode/), their
// split-state merges (src/cuda/merge/), and the paged append (src/cuda/kv/paged_append_kv.cu).
// Each call validates what the host can see (shapes, dtypes, devices, strides, 16-byte rows, the
// plan's partition, the workspace) before anything is launched; index tensors live on the device
// and are read, clamped, by the kernels. No call allocates, synchronises or reads device data, so
// the launches can be captured in a CUDA graph and replayed while indices change within the plan.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/kv_box_map.hpp"
#include "cuda/prefill_hopper/hopper_extend.hpp"

namespace attnkit::cuda {
namespace {

namespace geo = attnkit::cuda_decode;
using cuda_decode::DecodeParams;

// The plan must be a CUDA split-KV plan whose partition matches decode_geometry.hpp for `rows`
// packed rows per (sequence, KV head) (the group, or max_q_len * group for extend).
void check_partition(const Target& target, const WorkPartition& w, std::int64_t packed_rows, std::int64_t head_dim,
                     DType kv_dtype, const char* ctx, const char* planner) {
  if (target.backend != Backend::kCuda)
    fail(ctx, "the plan was made for the " + to_string(target.backend) + " backend",
         std::string("plan with ") + planner + "(problem, cuda::target()) (or known_target(\"h200\"))");
  if (w.family != KernelFamily::kSplitKvDecode)
    fail(ctx, "the plan's family is " + to_string(w.family),
         std::string("plan with ") + planner + " of this build for the CUDA target");
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(kv_dtype));
  const std::int64_t rows = std::min<std::int64_t>(packed_rows, geo::max_rows_per_block(kv_bytes));
  const int chunks = geo::head_chunks(rows, kv_bytes);
  const bool consistent =
      w.rows_per_block == rows && w.warps_per_block > geo::kProducerWarps &&
      (w.warps_per_block - geo::kProducerWarps) % chunks == 0 && w.sequence_splits >= 1 &&
      w.sequence_splits <= static_cast<unsigned>(geo::kMaxSplits) && w.keys_per_split > 0 && w.pipeline_stages >= 2 &&
      w.pipeline_stages <= static_cast<unsigned>(geo::kMaxStages) &&
      w.tile_size ==
          static_cast<unsigned>(geo::tile_keys(geo::head_dim_capacity(head_dim), geo::key_warps_of(w.warps_per_block, chunks), kv_bytes)) &&
      w.keys_per_split % w.tile_size == 0;
  if (!consistent)
    fail(ctx, "the plan's partition does not match this build's paged kernel",
         std::string("make the plan with attnkit::") + planner + " of this build and do not edit its partition");
}

// Launch geometry and numerics shared by paged decode and extend.
DecodeParams base_params(std::int64_t batch, std::int64_t num_heads, std::int64_t kv_heads, std::int64_t head_dim,
                         std::int64_t kv_len, std::int64_t packed_rows, DType kv_dtype, const AttentionOptions& o,
                         float scale, const WorkPartition& w) {
  DecodeParams p;
  p.batch = static_cast<int>(batch);
  p.num_heads = static_cast<int>(num_heads);
  p.kv_heads = static_cast<int>(kv_heads);
  p.group = static_cast<int>(num_heads / kv_heads);
  p.head_dim = static_cast<int>(head_dim);
  p.kv_len = static_cast<int>(kv_len);
  p.max_seq = static_cast<int>(kv_len);
  p.window = o.window;
  p.softcap = o.softcap;
  p.q_scale = o.softcap > 0 ? scale : scale * 1.44269504088896340736f;
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(kv_dtype));
  p.rows_per_block = static_cast<int>(w.rows_per_block);
  p.head_chunks = geo::head_chunks(w.rows_per_block, kv_bytes);
  p.key_warps = geo::key_warps_of(w.warps_per_block, p.head_chunks);
  p.tile = static_cast<int>(w.tile_size);
  p.stages = static_cast<int>(w.pipeline_stages);
  p.splits = static_cast<int>(w.sequence_splits);
  p.keys_per_split = static_cast<int>(w.keys_per_split);
  p.resident_blocks = static_cast<int>(w.resident_blocks);
  p.passes = static_cast<int>((packed_rows + w.rows_per_block - 1) / w.rows_per_block);
  const int cap = geo::head_dim_capacity(head_dim);
  p.shared_bytes = static_cast<int>(geo::shared_bytes(cap, p.tile, p.stages, kv_bytes, p.rows_per_block, p.key_warps) +
                                    geo::paged_extra_bytes(p.tile, p.stages, p.rows_per_block));
  return p;
}

// Page pool strides: p.k_stride_b/h/s mean page / KV head / slot (HND and NHD differ only here).
void set_cache(DecodeParams& p, const PagedCacheSpec& spec, const PagedKvCache& c) {
  const bool hnd = spec.layout == PageLayout::kHND;
  const TensorView& k = c.k_pages;
  const TensorView& v = c.v_pages;
  p.k = k.data;
  p.v = v.data;
  p.k_stride_b = k.strides[0], p.k_stride_h = hnd ? k.strides[1] : k.strides[2], p.k_stride_s = hnd ? k.strides[2] : k.strides[1];
  p.v_stride_b = v.strides[0], p.v_stride_h = hnd ? v.strides[1] : v.strides[2], p.v_stride_s = hnd ? v.strides[2] : v.strides[1];
  p.page_table = c.page_table.as<const std::int32_t>();
  p.table_stride_b = c.page_table.strides[0];
  p.table_stride_p = c.page_table.strides[1];
  p.lengths = c.lengths.as<const std::int32_t>();
  p.page_size = static_cast<int>(spec.page_size);
  p.num_pages = static_cast<int>(spec.num_pages);
  p.table_width = static_cast<int>(c.page_table.shape[1]);
  p.page_div = cuda_common::FastDivider(static_cast<std::uint32_t>(spec.page_size));
}

// Page runs copied as TMA boxes (the plan's page_boxes): descriptors of the pools as
// (head_dim, page_size, kv_heads, num_pages) with boxes of one row segment x page_box_rows slots.
void set_page_boxes(DecodeParams& p, const PagedDecodeProblem& pr, const PagedKvCache& c, const char* ctx) {
  if (!geo::page_boxes_fit(p.tile, pr.cache.page_size, pr.options.window))
    fail(ctx, "the plan copies page runs as TMA boxes, which its tile, page size and window do not allow",
         "make the plan with attnkit::plan_paged_decode of this build and do not edit it");
  p.page_boxes = true;
  for (auto [dst, view, stride_s, stride_h, stride_b, name] :
       {std::tuple{&p.k_map, &c.k_pages, p.k_stride_s, p.k_stride_h, p.k_stride_b, "k_pages"},
        std::tuple{&p.v_map, &c.v_pages, p.v_stride_s, p.v_stride_h, p.v_stride_b, "v_pages"}}) {
    cuda_decode::KvBoxTensor kv;
    kv.data = view->data;
    kv.dtype = view->dtype;
    kv.head_dim = pr.head_dim, kv.rows = pr.cache.page_size, kv.kv_heads = pr.kv_heads, kv.outer = pr.cache.num_pages;
    kv.row_stride = stride_s, kv.head_stride = stride_h, kv.outer_stride = stride_b;
    cuda_decode::make_kv_box_map(*dst, kv, geo::page_box_rows(p.tile, pr.cache.page_size), ctx, name);
  }
}

void set_output(DecodeParams& p, const TensorView& q, const TensorView& out, const TensorView& lse,
                const TensorView& sinks) {
  p.q = q.data, p.q_dtype = q.dtype, p.q_stride_b = q.strides[0], p.q_stride_h = q.strides[1];
  p.out = out.data, p.out_dtype = out.dtype, p.out_stride_b = out.strides[0], p.out_stride_h = out.strides[1];
  if (!lse.empty()) p.lse = lse.as<float>(), p.lse_stride_b = lse.strides[0], p.lse_stride_h = lse.strides[1];
  p.sinks = sinks.empty() ? nullptr : sinks.as<const float>();
}

// Split states in the caller's workspace: exactly the plan's bytes, laid out as
// partial_out [splits, state_rows * num_heads, head_dim] then partial_lse [splits, state_rows * num_heads].
void set_workspace(DecodeParams& p, std::int64_t state_rows, std::uint64_t planned, const Workspace& ws,
                   const char* ctx) {
  validate_workspace(ws, planned, DeviceKind::kCuda);
  if (p.splits <= 1) return;
  const std::uint64_t rows = static_cast<std::uint64_t>(state_rows) * static_cast<std::uint64_t>(p.num_heads);
  const std::uint64_t needed = static_cast<std::uint64_t>(p.splits) * rows * (static_cast<std::uint64_t>(p.head_dim) + 1) * 4;
  if (!(needed <= planned && planned - needed < 256 && needed <= ws.bytes))
    fail(ctx,
         "the split states need " + std::to_string(needed) + " bytes, the plan reports " + std::to_string(planned) +
             " and the workspace has " + std::to_string(ws.bytes),
         "pass a device workspace of plan.bounds.workspace_bytes bytes from this build's planner");
  cuda_common::require_device_memory(ws.data, ctx, "workspace");
  if (!(reinterpret_cast<std::uintptr_t>(ws.data) % 16 == 0))
    fail(ctx, "the workspace is not 16-byte aligned", "pass a workspace from cudaMalloc (256-byte aligned)");
  p.partial_out = static_cast<float*>(ws.data);
  p.partial_lse = p.partial_out + static_cast<std::uint64_t>(p.splits) * rows * static_cast<std::uint64_t>(p.head_dim);
}

void require_cache_on_device(const PagedKvCache& c, const char* ctx) {
  cuda_common::require_device_memory(c.k_pages, ctx, "k_pages");
  cuda_common::require_device_memory(c.v_pages, ctx, "v_pages");
  cuda_common::require_device_memory(c.page_table, ctx, "page_table");
  cuda_common::require_device_memory(c.lengths, ctx, "lengths");
  cuda_common::require_vector_aligned(c.k_pages, ctx, "k_pages");
  cuda_common::require_vector_aligned(c.v_pages, ctx, "v_pages");
}

void require_small_enough(const PagedCacheSpec& c, std::int64_t blocks, const char* ctx) {
  if (!(c.num_pages < (1ll << 31) && c.capacity() < (1ll << 31) && blocks < (1ll << 31)))
    fail(ctx, "the pool, the table or the grid exceeds the kernel's 32-bit page, key and block indices",
         "split the pool or the batch (num_pages, max_pages_per_seq * page_size and blocks below 2^31)");
}

}  // namespace

void paged_decode(const PagedDecodePlan& plan, const PagedDecodeTensors& t, Workspace workspace, Stream stream) {
  const char* ctx = "cuda::paged_decode";
  const PagedDecodeProblem& pr = plan.problem;
  check_partition(plan.target, plan.partition, pr.group_size(), pr.head_dim, pr.kv_dtype, ctx, "plan_paged_decode");
  validate_paged_decode(pr, t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.q, "q"}, {&t.out, "out"}, {&t.lse, "lse"}, {&t.sinks, "sinks"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  require_cache_on_device(t.cache, ctx);
  const WorkPartition& w = plan.partition;
  DecodeParams p = base_params(pr.batch, pr.num_heads, pr.kv_heads, pr.head_dim, pr.kv_len, pr.group_size(),
                               pr.kv_dtype, pr.options, pr.effective_scale(), w);
  require_small_enough(pr.cache, static_cast<std::int64_t>(p.batch) * p.kv_heads * p.passes * p.splits, ctx);
  set_cache(p, pr.cache, t.cache);
  if (plan.page_boxes) set_page_boxes(p, pr, t.cache, ctx);
  set_output(p, t.q, t.out, t.lse, t.sinks);
  // An e4m3 pool's dequantization scales (1 otherwise), as contiguous decode folds them: K's into
  // the score scale, V's into the output normalisation.
  p.q_scale *= t.kv_scales.k;
  p.v_scale = t.kv_scales.v;
  set_workspace(p, pr.batch, plan.bounds.workspace_bytes, workspace, ctx);
  cuda_decode::launch_split_kv_decode_paged(p, pr.kv_dtype, /*extend=*/false, stream);
  if (p.splits > 1) cuda_decode::launch_merge_splits(p, stream);
}

void extend(const ExtendPlan& plan, const ExtendTensors& t, Workspace workspace, Stream stream) {
  const char* ctx = "cuda::extend";
  const ExtendProblem& pr = plan.problem;
  const bool on_hopper = plan.partition.family == KernelFamily::kWarpSpecializedWgmma;  // long chunks on Hopper
  const std::int64_t packed = pr.group_size() * pr.max_q_len;
  if (on_hopper) {  // the launcher checks its tiles against the compiled instances
    if (!(plan.target.backend == Backend::kCuda))
      fail(ctx, "the plan was made for the " + to_string(plan.target.backend) + " backend",
           "plan with plan_extend(problem, cuda::target())");
  } else {
    check_partition(plan.target, plan.partition, packed, pr.head_dim, pr.kv_dtype, ctx, "plan_extend");
  }
  validate_extend(pr, t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.q, "q"}, {&t.cu_seqlens_q, "cu_seqlens_q"}, {&t.out, "out"}, {&t.lse, "lse"},
                            {&t.sinks, "sinks"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  require_cache_on_device(t.cache, ctx);
  if (on_hopper) {
    validate_workspace(workspace, plan.bounds.workspace_bytes, DeviceKind::kCuda);
    if (plan.bounds.workspace_bytes > 0) cuda_common::require_device_memory(workspace.data, ctx, "workspace");
    cuda_prefill_hopper::launch_hopper_extend(plan, t, workspace, stream);
    return;
  }
  const WorkPartition& w = plan.partition;
  DecodeParams p = base_params(pr.batch, pr.num_heads, pr.kv_heads, pr.head_dim, pr.kv_len, packed, pr.kv_dtype,
                               pr.options, pr.effective_scale(), w);
  require_small_enough(pr.cache, static_cast<std::int64_t>(p.batch) * p.kv_heads * p.passes * p.splits, ctx);
  if (!(pr.total_q_bound() * pr.num_heads < (1ll << 31)))
    fail(ctx, "the plan's query rows x heads exceed 2^31", "plan a smaller max_total_q");
  set_cache(p, pr.cache, t.cache);
  set_output(p, t.q, t.out, t.lse, t.sinks);
  p.q_scale *= t.kv_scales.k;  // an e4m3 pool's scales, as paged decode folds them
  p.v_scale = t.kv_scales.v;
  p.cu_seqlens_q = t.cu_seqlens_q.as<const std::int32_t>();
  p.max_q_len = static_cast<int>(pr.max_q_len);
  p.q_rows = static_cast<int>(t.q.shape[0]);
  p.state_rows = static_cast<int>(pr.total_q_bound());
  set_workspace(p, pr.total_q_bound(), plan.bounds.workspace_bytes, workspace, ctx);
  if (p.q_rows == 0) return;
  cuda_decode::launch_split_kv_decode_paged(p, pr.kv_dtype, /*extend=*/true, stream);
  if (p.splits > 1) cuda_decode::launch_merge_extend(p, stream);
}

}  // namespace attnkit::cuda

namespace attnkit::cuda_decode {

void launch_paged_decode_f32(const DecodeParams&, cudaStream_t);
void launch_paged_decode_f16(const DecodeParams&, cudaStream_t);
void launch_paged_decode_bf16(const DecodeParams&, cudaStream_t);
void launch_extend_f32(const DecodeParams&, cudaStream_t);
void launch_extend_f16(const DecodeParams&, cudaStream_t);
void launch_extend_bf16(const DecodeParams&, cudaStream_t);
void launch_paged_boxes_f32(const DecodeParams&, cudaStream_t);
void launch_paged_boxes_f16(const DecodeParams&, cudaStream_t);
void launch_paged_boxes_bf16(const DecodeParams&, cudaStream_t);
void launch_paged_decode_e4m3(const DecodeParams&, cudaStream_t);
void launch_paged_boxes_e4m3(const DecodeParams&, cudaStream_t);
void launch_extend_e4m3(const DecodeParams&, cudaStream_t);

void launch_split_kv_decode_paged(const DecodeParams& params, DType kv_dtype, bool extend, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // Extend, page runs as TMA boxes (their own instances) or the copy ring, per dtype.
  const int kind = extend ? 0 : params.page_boxes ? 1 : 2;
  using Launch = void (*)(const DecodeParams&, cudaStream_t);
  constexpr Launch kF32[] = {launch_extend_f32, launch_paged_boxes_f32, launch_paged_decode_f32};
  constexpr Launch kF16[] = {launch_extend_f16, launch_paged_boxes_f16, launch_paged_decode_f16};
  constexpr Launch kBF16[] = {launch_extend_bf16, launch_paged_boxes_bf16, launch_paged_decode_bf16};
  switch (kv_dtype) {
    case DType::kF32: return kF32[kind](params, s);
    case DType::kF16: return kF16[kind](params, s);
    case DType::kBF16: return kBF16[kind](params, s);
    case DType::kE4M3: {
      constexpr Launch kE4M3[] = {launch_extend_e4m3, launch_paged_boxes_e4m3, launch_paged_decode_e4m3};
      return kE4M3[kind](params, s);
    }
    default:
      fail(extend ? "cuda::extend" : "cuda::paged_decode",
           "KV dtype " + std::string(dtype_name(kv_dtype)) + " has no kernel", "use f32, f16, bf16 or e4m3");
  }
}

}  // namespace attnkit::cuda_decode
