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
#include "cuda/prefill_hopper/hopper_instances.cuh"

namespace attnkit::cuda_prefill_hopper {
namespace {

using instances::launch_any;
constexpr const char* kContext = "cuda::prefill (hopper)";

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
  hp.q_map = packed ? instances::make_map(kContext, t.q, dtype, p.q_len, "q", p.group_size) : instances::make_map(kContext, t.q, dtype, rows, "q");
  hp.k_map = instances::make_map(kContext, t.k, dtype, config.keys_per_tile, "k");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!fp8) {
    hp.v_map = instances::make_map(kContext, t.v, dtype, config.keys_per_tile, "v");
    // The staged O's TMA store (hopper_prefill.cuh; head_dim 128 and 256 stage O).
    if (call_stages_o(hp) && p.head_dim >= 128) {
      hp.o_map = instances::make_map(kContext, t.out, out_dtype, 64, "out");
      hp.o_tma = 1;
    }
    const auto configs = std::make_index_sequence<std::size(kHopperConfigs)>{};
    if (dtype == DType::kBF16) {
      launch_any<kHopperConfigs, HopperInput::kBF16, false>(kContext, hp, config, s, configs);
    } else {
      launch_any<kHopperConfigs, HopperInput::kF16, false>(kContext, hp, config, s, configs);
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
  launch_any<kHopperFp8Configs, HopperInput::kE4M3, false>(kContext, hp, config, s,
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
