// Launcher of the Hopper warp-specialized prefill kernel (hopper_prefill.cuh): TMA descriptors
// made on the host (cuda/common/tensor_map.hpp), and one instantiation per kHopperConfigs entry x
// {f16, bf16} and per kHopperFp8Configs entry for e4m3 (after the V^T staging, fp8_v_transpose.cuh).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/prefill_hopper/fp8_v_transpose.cuh"
#include "cuda/prefill_hopper/hopper_launch.hpp"
#include "cuda/prefill_hopper/hopper_prefill.cuh"

namespace attnkit::cuda_prefill_hopper {
namespace {

constexpr const char* kContext = "cuda::prefill (hopper)";

// A 4-D map (D, rows, heads, batch) of a [batch, heads, rows, D] view, boxes of one 128-byte
// swizzled row chunk x box_rows rows x box_heads heads (GQA-packed Q tiles: a group's heads, which
// land in shared memory as box_heads x box_rows consecutive rows); rows past the end read as zeros.
CUtensorMap make_map(const TensorView& v, DType dtype, int box_rows, const char* name, int box_heads = 1) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(v.shape[3]), static_cast<cuuint64_t>(v.shape[2]),
                              static_cast<cuuint64_t>(v.shape[1]), static_cast<cuuint64_t>(v.shape[0])};
  cuuint64_t strides[3];
  // Size-1 dimensions may carry any stride; TMA wants multiples of 16 bytes, so give them the span
  // of the dimensions inside them.
  std::int64_t span = v.shape[3];
  for (int d = 2; d >= 0; --d) {
    const std::int64_t s = v.shape[d] == 1 ? span : v.strides[d];
    if (!(s > 0 && (s * elem) % 16 == 0 && s * elem < (1LL << 40)))
      fail(kContext,
           std::string(name) + " " + v.describe() + " has a stride TMA cannot use (" + std::to_string(s) + " elements)",
           "pass tensors whose row, head and batch strides are positive multiples of 16 bytes");
    strides[2 - d] = static_cast<cuuint64_t>(s * elem);
    span = std::max<std::int64_t>(span, s * v.shape[d]);
  }
  if (!(reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0))
    fail(kContext, std::string(name) + " is not 16-byte aligned", "pass 16-byte aligned tensors");
  cuda_common::TensorMapSpec spec;
  spec.dtype = dtype == DType::kBF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
               : dtype == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                      : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.data = v.data;
  spec.dims = {dims[0], dims[1], dims[2], dims[3]};
  spec.byte_strides = {strides[0], strides[1], strides[2]};
  spec.box = {static_cast<std::uint32_t>(128 / elem), static_cast<std::uint32_t>(box_rows),
              static_cast<std::uint32_t>(box_heads), 1};
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return cuda_common::make_tensor_map_4d(spec, kContext, name);
}

// The V^T staging (fp8_v_transpose.cuh) as a 4-D map (keys, D, kv_heads, batch): boxes of 128 keys
// x D rows, 128-byte swizzle.
CUtensorMap make_vt_map(void* vt, const VtParams& vp) {
  cuda_common::TensorMapSpec spec;
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.data = vt;
  spec.dims = {static_cast<cuuint64_t>(vp.row_keys), static_cast<cuuint64_t>(vp.head_dim),
               static_cast<cuuint64_t>(vp.kv_heads), static_cast<cuuint64_t>(vp.batch)};
  const cuuint64_t row = static_cast<cuuint64_t>(vp.row_keys);
  spec.byte_strides = {row, row * vp.head_dim, row * vp.head_dim * vp.kv_heads};
  spec.box = {static_cast<std::uint32_t>(kVtTileKeys), static_cast<std::uint32_t>(vp.head_dim), 1, 1};
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return cuda_common::make_tensor_map_4d(spec, kContext, "v^T staging");
}

template <int D>
void launch_v_transpose(const VtParams& vp, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(vp.row_keys / kVtTileKeys), static_cast<unsigned>(vp.kv_heads),
                  static_cast<unsigned>(vp.batch));
  fp8_v_transpose_kernel<D><<<grid, kVtThreads, 0, stream>>>(vp);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(kContext, std::string("fp8_v_transpose_kernel failed to launch: ") + cudaGetErrorString(err),
         "check that the device is a Hopper GPU (sm_90a) and the tensors are device memory");
}

template <const HopperConfig* kTable, int kIndex, HopperInput In, bool TensorSums>
void launch_instance(const HopperParams& hp, cudaStream_t stream) {
  constexpr HopperConfig c = kTable[kIndex];
  auto kernel = hopper_prefill_kernel<c.head_dim, c.keys_per_tile, c.stages, In, c.consumer_warpgroups, TensorSums>;
  constexpr int smem = static_cast<int>(In == HopperInput::kE4M3 ? hopper_fp8_shared_bytes(c) : hopper_shared_bytes(c));
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(kContext, "cannot reserve " + std::to_string(smem) + " bytes of shared memory: " + cudaGetErrorString(attr),
         "run on a Hopper GPU (H100/H200), or plan the cooperative_tiled family");
  kernel<<<static_cast<unsigned>(hp.walk.grid), threads_per_block(c.consumer_warpgroups), smem, stream>>>(hp);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(kContext, std::string("hopper_prefill_kernel failed to launch: ") + cudaGetErrorString(err),
         "check that the device is a Hopper GPU (sm_90a) and the tensors are device memory");
}

// A config with row sums on the tensor core (hopper_config.hpp) has two instances: the one that
// uses them, for calls that write neither an LSE nor split states, and one that sums P in f32.
template <const HopperConfig* kTable, int kIndex, HopperInput In>
void launch_config(const HopperParams& hp, cudaStream_t stream) {
  constexpr HopperConfig c = kTable[kIndex];
  if constexpr (In != HopperInput::kE4M3 && tensor_row_sums(c.head_dim, c.consumer_warpgroups)) {
    if (hp.p.lse == nullptr && hp.p.splits == 1) return launch_instance<kTable, kIndex, In, true>(hp, stream);
  }
  launch_instance<kTable, kIndex, In, false>(hp, stream);
}

template <const HopperConfig* kTable, HopperInput In, std::size_t... kIndex>
void launch_any(const HopperParams& hp, const HopperConfig& config, cudaStream_t stream,
                std::index_sequence<kIndex...>) {
  bool launched = false;
  ((kTable[kIndex].head_dim == config.head_dim && kTable[kIndex].keys_per_tile == config.keys_per_tile &&
            kTable[kIndex].consumer_warpgroups == config.consumer_warpgroups && !launched
        ? (launch_config<kTable, static_cast<int>(kIndex), In>(hp, stream), launched = true)
        : false),
   ...);
  if (!(launched && config.head_dim == hp.p.head_dim))
    fail(kContext,
         "no Hopper kernel for head_dim=" + std::to_string(hp.p.head_dim) + " with " +
             std::to_string(config.keys_per_tile) + "-key tiles",
         "plan again: the planner only picks configs listed in kHopperConfigs / kHopperFp8Configs");
}

}  // namespace

void launch_hopper_prefill(const cuda_prefill::PrefillParams& p, const PrefillTensors& t, DType dtype, DType out_dtype,
                           const HopperConfig& config, std::uint64_t grid_blocks, std::uint32_t heads_per_group,
                           std::uint32_t tiles_per_unit, std::uint32_t tail_pairs, std::uint32_t packed_heads,
                           Workspace workspace, void* stream) {
  const bool fp8 = dtype == DType::kE4M3;
  if (!(dtype == DType::kBF16 || dtype == DType::kF16 || fp8))
    fail(kContext, "inputs are " + std::string(dtype_name(dtype)),
         "use f16, bf16 or e4m3 inputs (f32 runs on the cooperative_tiled family)");
  if (p.softcap != 0.0f)
    fail(kContext, "the plan asks for a soft-cap", "plan again with plan_prefill (the Hopper family has none)");
  if (!(p.splits == 1 || (!fp8 && p.partial_out != nullptr && p.partial_lse != nullptr && p.tiles_per_split > 0)))
    fail(kContext, "the plan splits keys for e4m3 inputs, or without split states in the workspace",
         "plan again with plan_prefill (e4m3 plans do not split keys)");
  HopperParams hp{};
  hp.p = p;
  hp.qk_scale = fp8 ? t.scales.q * t.scales.k : 1.0f;
  hp.v_scale = fp8 ? t.scales.v : 1.0f;
  hp.out_bf16 = out_dtype == DType::kBF16 ? 1 : 0;
  // 16-bit rows written as whole 16-byte blocks when every row starts 16-byte aligned.
  bool vec16 = dtype_size(out_dtype) == 2 && reinterpret_cast<std::uintptr_t>(t.out.data) % 16 == 0;
  for (int d = 0; d < 3; ++d) vec16 = vec16 && (t.out.strides[d] % 8 == 0 || t.out.shape[d] == 1);
  hp.out_vec16 = vec16 ? 1 : 0;
  const int rows = rows_per_block(config);
  // GQA packing (the plan's): one tile holds a group's heads x q_len query rows, a work tile's
  // "head" is its KV head.
  const bool packed = packed_heads > 1;
  if (packed && !(static_cast<int>(packed_heads) == p.group_size && !fp8 && p.q_len * p.group_size <= rows))
    fail(kContext,
         "the plan packs " + std::to_string(packed_heads) + " heads of q_len " + std::to_string(p.q_len) + " into " +
             std::to_string(rows) + "-row tiles (group " + std::to_string(p.group_size) + ")",
         "plan again with plan_prefill (it packs a whole group, 16-bit inputs, q_len x group <= rows per tile)");
  const int tile_heads = packed ? p.num_heads / p.group_size : p.num_heads;
  hp.packed_rows = packed ? p.q_len : 0;
  hp.packed_div = cuda_common::FastDivider(static_cast<std::uint32_t>(packed ? p.q_len : 1));
  hp.q_tile_bytes = static_cast<std::uint32_t>((packed ? p.q_len * p.group_size : rows) * p.head_dim * dtype_size(dtype));
  const int m_tiles = packed ? 1 : (p.q_len + rows - 1) / rows;
  const std::int64_t total = static_cast<std::int64_t>(m_tiles) * tile_heads * p.batch;
  if (total > INT32_MAX)
    fail(kContext, "too many work tiles (" + std::to_string(total) + ")", "split the call into smaller batches");
  const int pairs = tile_heads * p.batch;  // (sequence, head) pairs; packed: (sequence, KV head)
  // The plan's units: causal pairs of equal work, then the tail's single tiles (hopper_walk.hpp),
  // or single tiles (one per split with key splits).
  if (!(tiles_per_unit == 1 || (tiles_per_unit == 2 && p.causal && p.splits == 1)))
    fail(kContext, "the plan asks for " + std::to_string(tiles_per_unit) + " query tiles per unit",
         "plan again with plan_prefill (units are single tiles, or causal pairs without key splits)");
  if (!(tail_pairs == 0 || (tiles_per_unit == 2 && tail_pairs <= static_cast<std::uint32_t>(pairs))))
    fail(kContext,
         "the plan walks " + std::to_string(tail_pairs) + " of " + std::to_string(pairs) +
             " (sequence, head) pairs as its tail, with " + std::to_string(tiles_per_unit) + " query tile(s) per unit",
         "plan again with plan_prefill (a tail only follows causal pairs, and holds at most every pair)");
  const std::int64_t units = walk_units_per_pair(m_tiles, static_cast<int>(tiles_per_unit), p.splits) * pairs;
  if (units > INT32_MAX)
    fail(kContext, "too many work units (" + std::to_string(units) + ")", "split the call into smaller batches");
  hp.walk = make_walk(m_tiles, pairs, heads_per_group, static_cast<int>(tiles_per_unit), p.splits,
                      static_cast<int>(tail_pairs), static_cast<std::int64_t>(grid_blocks));
  if (total == 0) return;
  hp.heads = cuda_common::FastDivider(static_cast<std::uint32_t>(tile_heads));
  // Every descriptor is made (and every tensor checked) before anything runs.
  hp.q_map = packed ? make_map(t.q, dtype, p.q_len, "q", p.group_size) : make_map(t.q, dtype, rows, "q");
  hp.k_map = make_map(t.k, dtype, config.keys_per_tile, "k");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!fp8) {
    hp.v_map = make_map(t.v, dtype, config.keys_per_tile, "v");
    // The staged O's TMA store (hopper_prefill.cuh; head_dim 128 and 256 stage O).
    if (call_stages_o(hp) && p.head_dim >= 128) {
      hp.o_map = make_map(t.out, out_dtype, 64, "out");
      hp.o_tma = 1;
    }
    const auto configs = std::make_index_sequence<std::size(kHopperConfigs)>{};
    if (dtype == DType::kBF16) {
      launch_any<kHopperConfigs, HopperInput::kBF16>(hp, config, s, configs);
    } else {
      launch_any<kHopperConfigs, HopperInput::kF16>(hp, config, s, configs);
    }
    return;
  }
  // e4m3: V^T staged first (fp8_v_transpose.cuh) at the start of the caller's workspace, whose
  // size cuda::prefill has checked against the plan.
  if (!(p.head_dim == 128 || p.head_dim == 256))
    fail(kContext, "no e4m3 kernel for head_dim=" + std::to_string(p.head_dim),
         "use head_dim 128 or 256 with e4m3 inputs");
  if (!(reinterpret_cast<std::uintptr_t>(workspace.data) % 128 == 0))
    fail(kContext, "the workspace is not 128-byte aligned", "pass a 128-byte aligned workspace (cudaMalloc's are)");
  bool rows_ok = reinterpret_cast<std::uintptr_t>(t.v.data) % 16 == 0;
  for (int d = 0; d < 3; ++d) rows_ok = rows_ok && (t.v.strides[d] % 16 == 0 || t.v.shape[d] == 1);
  if (!rows_ok)
    fail(kContext, "v " + t.v.describe() + " is not 16-byte aligned per row",
         "pass e4m3 v whose base and row, head and batch strides are multiples of 16 bytes");
  VtParams vp{};
  vp.v = static_cast<const std::uint8_t*>(t.v.data);
  vp.v_batch_stride = t.v.strides[0], vp.v_head_stride = t.v.strides[1], vp.v_row_stride = t.v.strides[2];
  vp.cu_seqlens_k = p.cu_seqlens_k;
  vp.vt = static_cast<std::uint8_t*>(workspace.data);
  vp.batch = p.batch, vp.kv_heads = p.num_heads / p.group_size, vp.head_dim = p.head_dim, vp.kv_len = p.kv_len;
  vp.row_keys = static_cast<int>(hopper_fp8_vt_row_keys(p.kv_len));
  hp.v_map = make_vt_map(workspace.data, vp);
  if (p.head_dim == 128) {
    launch_v_transpose<128>(vp, s);
  } else {
    launch_v_transpose<256>(vp, s);
  }
  launch_any<kHopperFp8Configs, HopperInput::kE4M3>(hp, config, s,
                                                     std::make_index_sequence<std::size(kHopperFp8Configs)>{});
}

#ifdef ATTNKIT_HOPPER_STAMPS
// The probe's buffer (dev/hopper/boundary_timeline.cu): [block][warpgroup (4)][kStampSteps][kStampEvents]
// clock64 values, or nullptr to stop recording.
extern "C" void attnkit_hopper_set_stamps(long long* device_buffer) {
  cudaMemcpyToSymbol(hopper_stamps, &device_buffer, sizeof(device_buffer));
}
#endif

}  // namespace attnkit::cuda_prefill_hopper
