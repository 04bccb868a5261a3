// The CUDA backend's entry points (include/attnkit/cuda.hpp), except cuda::prefill (src/cuda/prefill/).
// Each call validates everything the host can see before anything is launched: the shared
// validation (validate.hpp), then CUDA-specific checks (device memory, 16-byte alignment of the
// K/V rows, workspace size against the plan). Launches are asynchronous: no sync, no allocation.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/kv_box_map.hpp"

namespace attnkit::cuda {
namespace {

namespace geo = attnkit::cuda_decode;
using cuda_decode::DecodeParams;

constexpr double kH200ReadBytesPerS = 4.8e12;   // datasheet leads for known parts
constexpr double kH100ReadBytesPerS = 3.35e12;

// The plan must be a CUDA split-KV plan whose partition matches decode_geometry.hpp.
void check_plan(const DecodePlan& plan, const char* ctx) {
  const WorkPartition& w = plan.partition;
  if (plan.target.backend != Backend::kCuda)
    fail(ctx, "the plan was made for the " + to_string(plan.target.backend) + " backend",
         "plan with attnkit::cuda::target() (or known_target(\"h200\"))");
  if (w.family != KernelFamily::kSplitKvDecode)
    fail(ctx, "the plan's family is " + to_string(w.family),
         "plan the CUDA decode with KernelFamily::kSplitKvDecode (or no family)");
  const std::int64_t kv_bytes = static_cast<std::int64_t>(dtype_size(plan.problem.kv_dtype));
  const std::int64_t rows = std::min<std::int64_t>(plan.problem.group_size(), geo::max_rows_per_block(kv_bytes));
  const int chunks = geo::head_chunks(rows, kv_bytes);
  const bool consistent = w.rows_per_block == rows && w.warps_per_block > geo::kProducerWarps &&
                          (w.warps_per_block - geo::kProducerWarps) % chunks == 0 && w.sequence_splits >= 1 &&
                          w.sequence_splits <= static_cast<unsigned>(geo::kMaxSplits) && w.keys_per_split > 0 &&
                          w.pipeline_stages >= 2 && w.pipeline_stages <= static_cast<unsigned>(geo::kMaxStages) &&
                          w.tile_size == static_cast<unsigned>(geo::tile_keys(geo::head_dim_capacity(plan.problem.head_dim),
                                                                              geo::key_warps_of(w.warps_per_block, chunks),
                                                                              kv_bytes)) &&
                          w.keys_per_split % w.tile_size == 0 &&
                          (w.merge_cluster == 0 || (w.merge_cluster == w.sequence_splits && w.merge_cluster >= 2 &&
                                                    w.merge_cluster <= static_cast<unsigned>(geo::kMaxClusterSplits)));
  if (!consistent)
    fail(ctx, "the plan's partition does not match this build's decode kernel",
         "make the plan with attnkit::plan_decode of this build and do not edit its partition");
}

DecodeParams base_params(const DecodePlan& plan) {
  const DecodeProblem& pr = plan.problem;
  const WorkPartition& w = plan.partition;
  DecodeParams p;
  p.batch = static_cast<int>(pr.batch);
  p.num_heads = static_cast<int>(pr.num_heads);
  p.kv_heads = static_cast<int>(pr.kv_heads);
  p.group = static_cast<int>(pr.group_size());
  p.head_dim = static_cast<int>(pr.head_dim);
  p.kv_len = static_cast<int>(pr.kv_len);
  p.max_seq = static_cast<int>(pr.max_seq);
  p.window = pr.options.window;
  const float scale = pr.effective_scale();
  p.softcap = pr.options.softcap;
  p.q_scale = pr.options.softcap > 0 ? scale : scale * 1.44269504088896340736f;
  p.rows_per_block = static_cast<int>(w.rows_per_block);
  p.head_chunks = geo::head_chunks(w.rows_per_block, static_cast<std::int64_t>(dtype_size(pr.kv_dtype)));
  p.key_warps = geo::key_warps_of(w.warps_per_block, p.head_chunks);
  p.tile = static_cast<int>(w.tile_size);
  p.stages = static_cast<int>(w.pipeline_stages);
  p.splits = static_cast<int>(w.sequence_splits);
  p.keys_per_split = static_cast<int>(w.keys_per_split);
  p.passes = static_cast<int>((pr.group_size() + w.rows_per_block - 1) / w.rows_per_block);
  p.cluster_merge = w.merge_cluster > 1;
  p.kv_evict_first = w.kv_evict_first;
  p.resident_blocks = static_cast<int>(w.resident_blocks);
  p.shared_bytes = static_cast<int>(geo::shared_bytes(geo::head_dim_capacity(pr.head_dim), p.tile, p.stages,
                                                      static_cast<std::int64_t>(dtype_size(pr.kv_dtype)),
                                                      p.rows_per_block, p.key_warps));
  return p;
}

// The TMA descriptor of a [batch, kv_heads, max_seq, head_dim] cache (kv_box_map.hpp): boxes of
// one 128-byte row segment x tile rows.
void set_kv_map(unsigned char (&dst)[128], const TensorView& kv, const DecodeParams& p, const char* ctx,
                const char* name) {
  cuda_decode::KvBoxTensor t;
  t.data = kv.data;
  t.dtype = kv.dtype;
  t.head_dim = kv.shape[3], t.rows = kv.shape[2], t.kv_heads = kv.shape[1], t.outer = kv.shape[0];
  t.row_stride = kv.strides[2], t.head_stride = kv.strides[1], t.outer_stride = kv.strides[0];
  cuda_decode::make_kv_box_map(dst, t, p.tile, ctx, (std::string(name) + " " + kv.describe()).c_str());
}

void set_io(DecodeParams& p, const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
            const TensorView& lse, const TensorView& sinks) {
  p.q = q.data, p.q_dtype = q.dtype, p.q_stride_b = q.strides[0], p.q_stride_h = q.strides[1];
  p.k = k.data, p.k_stride_b = k.strides[0], p.k_stride_h = k.strides[1], p.k_stride_s = k.strides[2];
  p.v = v.data, p.v_stride_b = v.strides[0], p.v_stride_h = v.strides[1], p.v_stride_s = v.strides[2];
  p.out = out.data, p.out_dtype = out.dtype, p.out_stride_b = out.strides[0], p.out_stride_h = out.strides[1];
  if (!lse.empty()) p.lse = lse.as<float>(), p.lse_stride_b = lse.strides[0], p.lse_stride_h = lse.strides[1];
  p.sinks = sinks.empty() ? nullptr : sinks.as<const float>();
  if (p.batch > 0) {
    set_kv_map(p.k_map, k, p, "cuda::decode", "k_cache");
    set_kv_map(p.v_map, v, p, "cuda::decode", "v_cache");
  }
}

// Split states in the caller's workspace: exactly what the plan reported, never more.
void set_workspace(DecodeParams& p, const DecodePlan& plan, const Workspace& ws, const char* ctx) {
  validate_workspace(ws, plan.evidence.workspace_bytes, DeviceKind::kCuda);
  if (p.splits <= 1 || p.cluster_merge) return;  // cluster merges keep their states in shared memory
  const std::uint64_t rows = static_cast<std::uint64_t>(p.batch) * static_cast<std::uint64_t>(p.num_heads);
  const std::uint64_t needed = static_cast<std::uint64_t>(p.splits) * rows * (static_cast<std::uint64_t>(p.head_dim) + 1) * 4;
  if (!(needed <= plan.evidence.workspace_bytes && needed <= ws.bytes))
    fail(ctx,
         "the split states need " + std::to_string(needed) + " bytes, the plan reports " +
             std::to_string(plan.evidence.workspace_bytes) + " and the workspace has " + std::to_string(ws.bytes),
         "pass a device workspace of at least plan.evidence.workspace_bytes bytes from this build's planner");
  cuda_common::require_device_memory(ws.data, ctx, "workspace");
  if (!(reinterpret_cast<std::uintptr_t>(ws.data) % 16 == 0))
    fail(ctx, "the workspace is not 16-byte aligned", "pass a workspace from cudaMalloc (256-byte aligned)");
  p.partial_out = static_cast<float*>(ws.data);
  p.partial_lse = p.partial_out + static_cast<std::uint64_t>(p.splits) * rows * static_cast<std::uint64_t>(p.head_dim);
}

void require_small_enough(const DecodePlan& plan, const char* ctx) {
  const DecodeProblem& pr = plan.problem;
  if (!(pr.max_seq < (1ll << 31) && pr.batch * pr.kv_heads * plan.partition.sequence_splits < (1ll << 31)))
    fail(ctx, "the problem exceeds the kernel's 32-bit key and block indices",
         "split the batch into smaller calls (max_seq and blocks below 2^31)");
}

void launch(const DecodeParams& p, DType kv_dtype, Stream stream) {
  cuda_decode::launch_split_kv_decode(p, kv_dtype, stream);
  if (p.splits > 1 && !p.cluster_merge) cuda_decode::launch_merge_splits(p, stream);
}

}  // namespace

bool built() { return true; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

Target target(int device) {
  const char* ctx = "cuda::target";
  if (device < 0) cuda_common::check(cudaGetDevice(&device), ctx, "cudaGetDevice");
  cudaDeviceProp prop{};
  cuda_common::check(cudaGetDeviceProperties(&prop, device), ctx, "cudaGetDeviceProperties");
  Target t;
  t.backend = Backend::kCuda;
  t.name = prop.name;
  t.threads = 1;
  t.cache_bytes = prop.l2CacheSize;
  t.sm_count = prop.multiProcessorCount;
  t.cc_major = prop.major;
  t.cc_minor = prop.minor;
  t.shared_bytes_per_block = static_cast<std::int64_t>(prop.sharedMemPerBlockOptin);
  t.shared_bytes_per_sm = static_cast<std::int64_t>(prop.sharedMemPerMultiprocessor);
  t.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  const std::string name = prop.name;
  if (name.find("H200") != std::string::npos) {
    t.peak_read_bytes_per_s = kH200ReadBytesPerS;
  } else if (name.find("H100") != std::string::npos) {
    t.peak_read_bytes_per_s = kH100ReadBytesPerS;
  }
  if (prop.major == 9) t.peak_matmul_flops_per_s = 989e12;
  return t;
}

void decode(const DecodePlan& plan, const DecodeTensors& t, Workspace workspace, Stream stream) {
  const char* ctx = "cuda::decode";
  check_plan(plan, ctx);
  require_small_enough(plan, ctx);
  validate_decode(plan.problem, t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.q, "q"}, {&t.k_cache, "k_cache"}, {&t.v_cache, "v_cache"},
                            {&t.lengths, "lengths"}, {&t.out, "out"}, {&t.lse, "lse"}, {&t.sinks, "sinks"},
                            {&t.key_starts, "key_starts"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  cuda_common::require_vector_aligned(t.k_cache, ctx, "k_cache");
  cuda_common::require_vector_aligned(t.v_cache, ctx, "v_cache");
  DecodeParams p = base_params(plan);
  set_io(p, t.q, t.k_cache, t.v_cache, t.out, t.lse, t.sinks);
  p.lengths = t.lengths.as<const std::int32_t>();
  p.key_starts = t.key_starts.empty() ? nullptr : t.key_starts.as<const std::int32_t>();
  // An e4m3 cache's dequantization scales (1 otherwise): K's joins the score scale, V's the output's.
  p.q_scale *= t.kv_scales.k;
  p.v_scale = t.kv_scales.v;
  set_workspace(p, plan, workspace, ctx);
  if (p.batch == 0) return;
  launch(p, plan.problem.kv_dtype, stream);
}

void fused_rope_append_decode(const DecodePlan& plan, const FusedDecodeTensors& t, const RopeSpec& rope,
                              Workspace workspace, Stream stream) {
  const char* ctx = "cuda::fused_rope_append_decode";
  check_plan(plan, ctx);
  require_small_enough(plan, ctx);
  validate_fused(plan.problem, t, rope, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.q, "q"}, {&t.k_new, "k_new"}, {&t.v_new, "v_new"}, {&t.k_cache, "k_cache"},
                            {&t.v_cache, "v_cache"}, {&t.positions, "positions"}, {&t.out, "out"}, {&t.lse, "lse"},
                            {&t.sinks, "sinks"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  cuda_common::require_device_memory(rope.cos_table, ctx, "rope.cos_table");
  cuda_common::require_device_memory(rope.sin_table, ctx, "rope.sin_table");
  cuda_common::require_vector_aligned(t.k_cache, ctx, "k_cache");
  cuda_common::require_vector_aligned(t.v_cache, ctx, "v_cache");
  DecodeParams p = base_params(plan);
  set_io(p, t.q, t.k_cache, t.v_cache, t.out, t.lse, t.sinks);
  p.fused = true;
  p.positions = t.positions.as<const std::int32_t>();
  p.k_new = t.k_new.data, p.k_new_stride_b = t.k_new.strides[0], p.k_new_stride_h = t.k_new.strides[1];
  p.v_new = t.v_new.data, p.v_new_stride_b = t.v_new.strides[0], p.v_new_stride_h = t.v_new.strides[1];
  p.k_cache_out = t.k_cache.data;
  p.v_cache_out = t.v_cache.data;
  p.rope_style = rope.style;
  p.rope_theta = rope.theta;
  p.cos_table = rope.cos_table;
  p.sin_table = rope.sin_table;
  p.table_positions = rope.table_positions;
  set_workspace(p, plan, workspace, ctx);
  if (p.batch == 0) return;
  launch(p, plan.problem.kv_dtype, stream);
}

}  // namespace attnkit::cuda

namespace attnkit::cuda_decode {

void launch_split_kv_decode_f32(const DecodeParams&, cudaStream_t);
void launch_split_kv_decode_f16(const DecodeParams&, cudaStream_t);
void launch_split_kv_decode_bf16(const DecodeParams&, cudaStream_t);
void launch_split_kv_decode_e4m3(const DecodeParams&, cudaStream_t);

void launch_split_kv_decode(const DecodeParams& params, DType kv_dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (kv_dtype) {
    case DType::kF32: return launch_split_kv_decode_f32(params, s);
    case DType::kF16: return launch_split_kv_decode_f16(params, s);
    case DType::kBF16: return launch_split_kv_decode_bf16(params, s);
    case DType::kE4M3: return launch_split_kv_decode_e4m3(params, s);
    default: fail("cuda::decode", "KV dtype " + std::string(dtype_name(kv_dtype)) + " has no kernel", "use f32, f16, bf16 or e4m3");
  }
}

}  // namespace attnkit::cuda_decode
