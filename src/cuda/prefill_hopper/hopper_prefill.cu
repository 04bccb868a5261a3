// Launcher of the Hopper warp-specialized prefill kernel (hopper_prefill.cuh): TMA descriptors
// made on the host (cuda/common/tensor_map.hpp), and one instantiation per kHopperConfigs entry x
// {f16, bf16}.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/prefill_hopper/hopper_launch.hpp"
#include "cuda/prefill_hopper/hopper_prefill.cuh"

namespace attnkit::cuda_prefill_hopper {
namespace {

constexpr const char* kContext = "cuda::prefill (hopper)";

// A 4-D map (D, rows, heads, batch) of a [batch, heads, rows, D] view with 16-bit elements, boxes
// of 64 columns x box_rows rows, 128-byte swizzle; rows past the end read as zeros.
CUtensorMap make_map(const TensorView& v, DType dtype, int box_rows, const char* name) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(v.shape[3]), static_cast<cuuint64_t>(v.shape[2]),
                              static_cast<cuuint64_t>(v.shape[1]), static_cast<cuuint64_t>(v.shape[0])};
  cuuint64_t strides[3];
  // Size-1 dimensions may carry any stride; TMA wants multiples of 16 bytes, so give them the span
  // of the dimensions inside them.
  std::int64_t span = v.shape[3];
  for (int d = 2; d >= 0; --d) {
    const std::int64_t s = v.shape[d] == 1 ? span : v.strides[d];
    require(s > 0 && s % 8 == 0 && s < (1LL << 39), kContext,
            std::string(name) + " " + v.describe() + " has a stride TMA cannot use (" + std::to_string(s) + " elements)",
            "pass tensors whose row, head and batch strides are positive multiples of 8 elements");
    strides[2 - d] = static_cast<cuuint64_t>(s) * 2;
    span = std::max<std::int64_t>(span, s * v.shape[d]);
  }
  require(reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0, kContext, std::string(name) + " is not 16-byte aligned",
          "pass 16-byte aligned tensors");
  cuda_common::TensorMapSpec spec;
  spec.dtype = dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  spec.data = v.data;
  spec.dims = {dims[0], dims[1], dims[2], dims[3]};
  spec.byte_strides = {strides[0], strides[1], strides[2]};
  spec.box = {static_cast<std::uint32_t>(kSwizzleElements), static_cast<std::uint32_t>(box_rows), 1, 1};
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  const CUtensorMap map = cuda_common::make_tensor_map_4d(spec, kContext, name);
  return map;
}

template <int kIndex, bool Bf16>
void launch_config(HopperParams& hp, const PrefillTensors& t, DType dtype, std::uint64_t grid_blocks,
                   cudaStream_t stream) {
  constexpr HopperConfig c = kHopperConfigs[kIndex];
  hp.q_map = make_map(t.q, dtype, kRowsPerBlock, "q");
  hp.k_map = make_map(t.k, dtype, c.keys_per_tile, "k");
  hp.v_map = make_map(t.v, dtype, c.keys_per_tile, "v");
  auto kernel = hopper_prefill_kernel<c.head_dim, c.keys_per_tile, c.stages, Bf16>;
  constexpr int smem = static_cast<int>(hopper_shared_bytes(c));
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  require(attr == cudaSuccess, kContext,
          "cannot reserve " + std::to_string(smem) + " bytes of shared memory: " + cudaGetErrorString(attr),
          "run on a Hopper GPU (H100/H200), or plan the cooperative_tiled family");
  const unsigned blocks = static_cast<unsigned>(std::min<std::uint64_t>(grid_blocks, static_cast<std::uint64_t>(hp.total_units)));
  kernel<<<std::max(1u, blocks), kThreadsPerBlock, smem, stream>>>(hp);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, kContext, std::string("hopper_prefill_kernel failed to launch: ") + cudaGetErrorString(err),
          "check that the device is a Hopper GPU (sm_90a) and the tensors are device memory");
}

template <bool Bf16, std::size_t... kIndex>
void launch_any(HopperParams& hp, const PrefillTensors& t, DType dtype, const HopperConfig& config,
                std::uint64_t grid_blocks, cudaStream_t stream, std::index_sequence<kIndex...>) {
  bool launched = false;
  ((kHopperConfigs[kIndex].head_dim == config.head_dim && kHopperConfigs[kIndex].keys_per_tile == config.keys_per_tile &&
            !launched
        ? (launch_config<static_cast<int>(kIndex), Bf16>(hp, t, dtype, grid_blocks, stream), launched = true)
        : false),
   ...);
  require(launched && config.head_dim == hp.p.head_dim, kContext,
          "no Hopper kernel for head_dim=" + std::to_string(hp.p.head_dim) + " with " +
              std::to_string(config.keys_per_tile) + "-key tiles",
          "plan again: the planner only picks configs listed in kHopperConfigs");
}

}  // namespace

void launch_hopper_prefill(const cuda_prefill::PrefillParams& p, const PrefillTensors& t, DType dtype,
                           const HopperConfig& config, std::uint64_t grid_blocks, std::uint32_t heads_per_group,
                           void* stream) {
  require(dtype == DType::kBF16 || dtype == DType::kF16, kContext, "inputs are " + std::string(dtype_name(dtype)),
          "use f16 or bf16 inputs (f32 runs on the cooperative_tiled family)");
  require(p.softcap == 0.0f && p.splits == 1, kContext, "the plan asks for a soft-cap or key splits",
          "plan again with plan_prefill (the Hopper family has neither)");
  HopperParams hp{};
  hp.p = p;
  hp.m_tiles = (p.q_len + kRowsPerBlock - 1) / kRowsPerBlock;
  const std::int64_t total = static_cast<std::int64_t>(hp.m_tiles) * p.num_heads * p.batch;
  require(total <= INT32_MAX, kContext, "too many work tiles (" + std::to_string(total) + ")",
          "split the call into smaller batches");
  hp.total_tiles = static_cast<int>(total);
  hp.heads_per_group = static_cast<int>(std::clamp<std::int64_t>(heads_per_group, 1, std::int64_t{p.num_heads} * p.batch));
  hp.tiles_per_unit = p.causal ? 2 : 1;  // causal: equal work per unit (hopper_prefill.cuh)
  hp.total_units = p.num_heads * p.batch * (p.causal ? (hp.m_tiles + 1) / 2 : hp.m_tiles);
  if (hp.total_tiles == 0) return;
  const auto configs = std::make_index_sequence<std::size(kHopperConfigs)>{};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kBF16) {
    launch_any<true>(hp, t, dtype, config, grid_blocks, s, configs);
  } else {
    launch_any<false>(hp, t, dtype, config, grid_blocks, s, configs);
  }
}

}  // namespace attnkit::cuda_prefill_hopper
