// cuda::prefill: validates the call, resolves the plan's tensors into kernel arguments and
// launches the kernel the plan names (the Hopper warp-specialized kernel, src/cuda/prefill_hopper/,
// or the tensor-core tiled kernel, each followed by the split merge when the plan splits keys; or
// the SIMT tiled kernel for f32). Decides nothing: every size comes from the plan.
//
// The tiled instantiations are listed once, in kTiledConfigs (prefill_config.hpp) x {f16, bf16}.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/prefill/prefill_config.hpp"
#include "cuda/prefill/prefill_params.cuh"
#include "cuda/prefill/simt_tiled_prefill.cuh"
#include "cuda/prefill/split_merge.cuh"
#include "cuda/prefill/split_merge_launch.hpp"
#include "cuda/prefill/tiled_prefill.cuh"
#include "cuda/prefill_hopper/hopper_config.hpp"
#include "cuda/prefill_hopper/hopper_launch.hpp"

namespace attnkit::cuda_prefill {
namespace {

template <class T>
void launch_merge(const PrefillParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.q_len + cuda_prefill::kMergeWarpsPerBlock - 1) /
                                        cuda_prefill::kMergeWarpsPerBlock),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  cuda_prefill::split_merge_kernel<T><<<grid, cuda_prefill::kMergeWarpsPerBlock * 32, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail("cuda::prefill", std::string("split_merge_kernel failed to launch: ") + cudaGetErrorString(err),
         "check the device and the tensors' device pointers");
}

}  // namespace

// The split merge after a kernel that split keys (f16 or bf16 out; nothing when unsplit).
void merge_split_states(const PrefillParams& p, DType dtype, cudaStream_t stream) {
  if (p.splits == 1) return;
  if (dtype == DType::kF16) {
    launch_merge<__half>(p, stream);
  } else {
    launch_merge<__nv_bfloat16>(p, stream);
  }
}

// The plan's key splits: their partial states go to the start of the caller's workspace
// ([splits, heads, workspace_rows, head_dim] outputs, then [splits, heads, workspace_rows] LSEs).
void bind_split_states(PrefillParams& p, const WorkPartition& part, std::int64_t num_heads, std::int64_t head_dim,
                       Workspace workspace, const char* context) {
  p.splits = static_cast<int>(part.sequence_splits);
  p.tiles_per_split = static_cast<int>(part.tiles_per_split);
  if (!(p.splits >= 1 && p.splits <= 65535 / std::max<int>(1, p.batch)))
    fail(context,
         "sequence_splits=" + std::to_string(p.splits) + " is out of range for batch " + std::to_string(p.batch),
         "plan again");
  if (p.splits == 1) return;
  const std::uint64_t rows = static_cast<std::uint64_t>(p.splits) * num_heads * p.workspace_rows;
  const std::uint64_t needed = rows * (head_dim + 1) * sizeof(float);
  validate_workspace(workspace, needed, DeviceKind::kCuda);
  if (workspace.bytes < needed)
    fail(context,
         "workspace holds " + std::to_string(workspace.bytes) + " bytes, the key splits need " + std::to_string(needed),
         "allocate plan.evidence.workspace_bytes of device memory");
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % 16 != 0)
    fail(context, "workspace is not 16-byte aligned", "pass a cudaMalloc'ed workspace");
  p.partial_out = static_cast<float*>(workspace.data);
  p.partial_lse = p.partial_out + rows * head_dim;
}

}  // namespace attnkit::cuda_prefill

namespace attnkit::cuda {
namespace {

using cuda_prefill::bind_split_states;
using cuda_prefill::merge_split_states;
using cuda_prefill::OutKind;
using cuda_prefill::PrefillParams;
constexpr const char* kContext = "cuda::prefill";

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(kContext, std::string(what) + " failed to launch: " + cudaGetErrorString(err),
         "check the device, the tensors' device pointers and the shared-memory limit (sm_90a build)");
}

// The stride of dimension `dim` of a tensor of rank 4 (or 3 for LSE).
void set_strides(const TensorView& t, std::int64_t& batch, std::int64_t& head, std::int64_t& row) {
  batch = t.strides[0];
  head = t.strides[1];
  row = t.strides[2];
}

template <class T>
void launch_simt(const PrefillParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.q_len + cuda_prefill::kSimtWarpsPerBlock - 1) /
                                        cuda_prefill::kSimtWarpsPerBlock),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  cuda_prefill::simt_tiled_prefill_kernel<T><<<grid, cuda_prefill::kSimtWarpsPerBlock * 32, 0, stream>>>(p);
  check_launch("simt_tiled_prefill_kernel");
}

template <int kIndex, class T>
void launch_tiled_config(const PrefillParams& p, cudaStream_t stream) {
  constexpr cuda_prefill::TiledConfig c = cuda_prefill::kTiledConfigs[kIndex];
  static_assert(c.rows_per_block == 16 * c.row_tiles * c.warps, "kTiledConfigs: rows_per_block = 16 * row_tiles * warps");
  auto kernel = p.softcap > 0.0f
                    ? cuda_prefill::tiled_prefill_kernel<c.head_dim, c.keys_per_tile, c.warps, c.row_tiles, c.stages,
                                                         c.q_in_registers, true, T>
                    : cuda_prefill::tiled_prefill_kernel<c.head_dim, c.keys_per_tile, c.warps, c.row_tiles, c.stages,
                                                         c.q_in_registers, false, T>;
  constexpr int smem = static_cast<int>(cuda_prefill::tiled_shared_bytes(c));
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(kContext, "cannot reserve " + std::to_string(smem) + " bytes of shared memory: " + cudaGetErrorString(attr),
         "run on a GPU with at least that much shared memory per block (H100/H200)");
  const dim3 grid(static_cast<unsigned>((p.q_len + c.rows_per_block - 1) / c.rows_per_block),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch * p.splits));
  kernel<<<grid, c.warps * 32, smem, stream>>>(p);
  check_launch("tiled_prefill_kernel");
}

template <class T, std::size_t... kIndex>
void launch_tiled(const PrefillParams& p, cudaStream_t stream, std::index_sequence<kIndex...>) {
  bool launched = false;
  ((cuda_prefill::kTiledConfigs[kIndex].head_dim == p.head_dim && !launched
        ? (launch_tiled_config<static_cast<int>(kIndex), T>(p, stream), launched = true)
        : false),
   ...);
  if (!launched)
    fail(kContext, "no tiled kernel for head_dim=" + std::to_string(p.head_dim),
         "plan again: the planner only picks head dims listed in kTiledConfigs");
}

bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void prefill(const PrefillPlan& plan, const PrefillTensors& t, Workspace workspace, Stream stream_handle) {
  const PrefillProblem& pr = plan.problem;
  if (plan.target.backend != Backend::kCuda)
    fail(kContext, "the plan was made for the " + to_string(plan.target.backend),
         "plan with a CUDA target (cuda::target())");
  validate_prefill(pr, t, DeviceKind::kCuda);
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"q", &t.q}, {"k", &t.k}, {"v", &t.v},
                                   {"out", &t.out}, {"lse", &t.lse}, {"cu_seqlens_q", &t.cu_seqlens_q},
                                   {"cu_seqlens_k", &t.cu_seqlens_k}, {"sinks", &t.sinks}}) {
    cuda_common::require_device_memory(*view, kContext, name);
  }
  const WorkPartition& part = plan.partition;
  const bool ragged = !t.cu_seqlens_q.empty();
  const std::int64_t rows_total = ragged ? t.q.shape[2] : pr.batch * pr.q_len;
  if (!(pr.q_len <= INT32_MAX && pr.kv_len <= INT32_MAX && rows_total <= INT32_MAX))
    fail(kContext, "sequence lengths above 2^31", "split the call into shorter sequences");

  PrefillParams p{};
  p.q = t.q.data;
  p.k = t.k.data;
  p.v = t.v.data;
  p.out = t.out.data;
  p.lse = t.lse.empty() ? nullptr : t.lse.as<float>();
  p.sinks = t.sinks.empty() ? nullptr : t.sinks.as<const float>();
  set_strides(t.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride);
  set_strides(t.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
  set_strides(t.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
  set_strides(t.out, p.o_batch_stride, p.o_head_stride, p.o_row_stride);
  if (!t.lse.empty()) set_strides(t.lse, p.lse_batch_stride, p.lse_head_stride, p.lse_row_stride);
  p.cu_seqlens_q = ragged ? t.cu_seqlens_q.as<const int>() : nullptr;
  p.cu_seqlens_k = ragged ? t.cu_seqlens_k.as<const int>() : nullptr;
  p.batch = static_cast<int>(pr.batch);
  p.num_heads = static_cast<int>(pr.num_heads);
  p.group_size = static_cast<int>(pr.group_size());
  p.head_dim = static_cast<int>(pr.head_dim);
  p.q_len = static_cast<int>(pr.q_len);
  p.kv_len = static_cast<int>(pr.kv_len);
  p.causal = pr.causal;
  p.window = pr.options.window;
  p.scale = pr.effective_scale();
  p.softcap = pr.options.softcap;
  const bool fp8 = pr.dtype == DType::kE4M3;
  if (!(pr.out_dtype == pr.dtype || pr.out_dtype == DType::kF32 ||
        (fp8 && (pr.out_dtype == DType::kBF16 || pr.out_dtype == DType::kF16))))
    fail(kContext,
         "out_dtype " + std::string(dtype_name(pr.out_dtype)) + " with inputs " + std::string(dtype_name(pr.dtype)),
         "use out_dtype equal to the input dtype, or f32 (e4m3 inputs: bf16, f16 or f32)");
  p.out_kind = pr.out_dtype == DType::kF32 ? OutKind::kF32 : OutKind::kInput;  // e4m3: the launcher picks bf16/f16
  p.splits = 1;
  p.tiles_per_split = 0;
  p.workspace_rows = pr.batch * pr.q_len;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);

  if (part.family == KernelFamily::kWarpSpecializedWgmma) {  // Hopper: src/cuda/prefill_hopper/
    const cuda_prefill_hopper::HopperConfig* hc =
        fp8 ? cuda_prefill_hopper::find_hopper_fp8_config(pr.head_dim)
            : cuda_prefill_hopper::find_hopper_config(pr.head_dim, part.tile_size, part.rows_per_block);
    if (!(hc == nullptr || hc->keys_per_tile == static_cast<int>(part.tile_size)))
      fail(kContext, "the plan's key tile (" + std::to_string(part.tile_size) + ") is not the e4m3 kernel's",
           "plan with plan_prefill from this build of attnkit");
    if (!(hc != nullptr &&
          part.rows_per_block == static_cast<std::uint32_t>(cuda_prefill_hopper::rows_per_block(*hc)) &&
          (part.sequence_splits == 1 || !fp8)))
      fail(kContext,
           "the plan's tiles do not match a compiled Hopper kernel (head_dim=" + std::to_string(pr.head_dim) + ")",
           "plan with plan_prefill from this build of attnkit");
    const std::int64_t unit = 2;  // paired stores
    bool ok = reinterpret_cast<std::uintptr_t>(t.out.data) % (unit * dtype_size(pr.out_dtype)) == 0;
    for (int d = 0; d < 3; ++d) ok = ok && (t.out.strides[d] % unit == 0 || t.out.shape[d] == 1);
    if (!ok)
      fail(kContext, "out " + t.out.describe() + " is not aligned for paired stores",
           "pass out with even strides and an aligned base pointer");
    if (fp8) {
      validate_workspace(workspace,
                         static_cast<std::uint64_t>(cuda_prefill_hopper::hopper_fp8_vt_bytes(pr.batch, pr.kv_heads,
                                                                                             pr.head_dim, pr.kv_len)),
                         DeviceKind::kCuda);
    } else {
      bind_split_states(p, part, pr.num_heads, pr.head_dim, workspace, kContext);
    }
    cuda_prefill_hopper::launch_hopper_prefill(p, t, pr.dtype, pr.out_dtype, *hc, part.grid_blocks,
                                               part.heads_per_tile_group, part.tiles_per_unit, part.tail_pairs,
                                               part.packed_heads, workspace, stream);
    merge_split_states(p, pr.dtype, stream);
    return;
  }
  if (part.family != KernelFamily::kCooperativeTiled)
    fail(kContext, "the plan names the " + to_string(part.family) + " family, which CUDA prefill does not run",
         "plan prefill with plan_prefill (cooperative_tiled or warp_specialized_wgmma)");
  const cuda_prefill::TiledConfig* config = cuda_prefill::find_tiled_config(pr.head_dim);
  const bool half_inputs = pr.dtype == DType::kF16 || pr.dtype == DType::kBF16;
  if (!half_inputs || config == nullptr) {  // the SIMT variant (f32 inputs, other head dims)
    if (!(part.rows_per_block == static_cast<std::uint32_t>(cuda_prefill::kSimtWarpsPerBlock) &&
          part.tile_size == static_cast<std::uint32_t>(cuda_prefill::kSimtKeysPerTile) && part.sequence_splits == 1))
      fail(kContext, "the plan's tiles do not match the SIMT tiled kernel", "plan with plan_prefill from this build");
    switch (pr.dtype) {
      case DType::kF32: launch_simt<float>(p, stream); break;
      case DType::kF16: launch_simt<__half>(p, stream); break;
      case DType::kBF16: launch_simt<__nv_bfloat16>(p, stream); break;
      default: fail(kContext, "unsupported input dtype", "use f32, f16 or bf16");
    }
    return;
  }
  if (!(part.rows_per_block == static_cast<std::uint32_t>(config->rows_per_block) &&
        part.tile_size == static_cast<std::uint32_t>(config->keys_per_tile) &&
        part.warps_per_block == static_cast<std::uint32_t>(config->warps)))
    fail(kContext,
         "the plan's tiles do not match a compiled tiled kernel (head_dim=" + std::to_string(pr.head_dim) + ")",
         "plan with plan_prefill from this build of attnkit");
  // cp.async moves 16-byte rows: every base pointer and row/head/batch stride must keep that.
  for (const TensorView* tv : {&t.q, &t.k, &t.v}) {
    bool ok = aligned16(tv->data);
    for (int d = 0; d < 3; ++d) ok = ok && (tv->strides[d] % 8 == 0 || tv->shape[d] == 1);
    if (!ok)
      fail(kContext, "tensor " + tv->describe() + " has rows that are not 16-byte aligned",
           "pass 16-byte aligned tensors whose strides are multiples of 8 elements, or use f32 inputs (SIMT path)");
  }
  {
    const std::int64_t unit = pr.out_dtype == DType::kF32 ? 2 : 2;  // two elements per store
    bool ok = reinterpret_cast<std::uintptr_t>(t.out.data) % (unit * dtype_size(pr.out_dtype)) == 0;
    for (int d = 0; d < 3; ++d) ok = ok && (t.out.strides[d] % unit == 0 || t.out.shape[d] == 1);
    if (!ok)
      fail(kContext, "out " + t.out.describe() + " is not aligned for paired stores",
           "pass out with even strides and an aligned base pointer");
  }

  bind_split_states(p, part, pr.num_heads, pr.head_dim, workspace, kContext);

  const auto configs = std::make_index_sequence<std::size(cuda_prefill::kTiledConfigs)>{};
  if (pr.dtype == DType::kF16) {
    launch_tiled<__half>(p, stream, configs);
  } else {
    launch_tiled<__nv_bfloat16>(p, stream, configs);
  }
  merge_split_states(p, pr.dtype, stream);
}

}  // namespace attnkit::cuda
