// What the Hopper prefill launchers share (hopper_prefill.cu: contiguous and ragged inputs;
// hopper_extend.cu: extend over a paged cache): the TMA maps of 4-D views, and the dispatch from a
// plan's config to the kernel instance compiled for it. Included by those two files only.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/prefill_hopper/hopper_prefill.cuh"

namespace attnkit::cuda_prefill_hopper::instances {

// A 4-D map (D, rows, heads, batch) of a [batch, heads, rows, D] view, boxes of one 128-byte
// swizzled row chunk x box_rows rows x box_heads heads (GQA-packed Q tiles: a group's heads, which
// land in shared memory as box_heads x box_rows consecutive rows); rows past the end read as zeros.
inline CUtensorMap make_map(const char* kContext, const TensorView& v, DType dtype, int box_rows, const char* name,
                            int box_heads = 1) {
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

template <const HopperConfig* kTable, int kIndex, HopperInput In, bool TensorSums, bool Paged>
void launch_instance(const char* kContext, const HopperParams& hp, cudaStream_t stream) {
  constexpr HopperConfig c = kTable[kIndex];
  auto kernel = hopper_prefill_kernel<c.head_dim, c.keys_per_tile, c.stages, In, c.consumer_warpgroups, TensorSums, Paged>;
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
template <const HopperConfig* kTable, int kIndex, HopperInput In, bool Paged>
void launch_config(const char* kContext, const HopperParams& hp, cudaStream_t stream) {
  constexpr HopperConfig c = kTable[kIndex];
  if constexpr (In != HopperInput::kE4M3 && tensor_row_sums(c.head_dim, c.consumer_warpgroups)) {
    if (hp.p.lse == nullptr && hp.p.splits == 1) return launch_instance<kTable, kIndex, In, true, Paged>(kContext, hp, stream);
  }
  launch_instance<kTable, kIndex, In, false, Paged>(kContext, hp, stream);
}

template <const HopperConfig* kTable, HopperInput In, bool Paged, std::size_t... kIndex>
void launch_any(const char* kContext, const HopperParams& hp, const HopperConfig& config, cudaStream_t stream,
                std::index_sequence<kIndex...>) {
  bool launched = false;
  ((kTable[kIndex].head_dim == config.head_dim && kTable[kIndex].keys_per_tile == config.keys_per_tile &&
            kTable[kIndex].consumer_warpgroups == config.consumer_warpgroups && !launched
        ? (launch_config<kTable, static_cast<int>(kIndex), In, Paged>(kContext, hp, stream), launched = true)
        : false),
   ...);
  if (!(launched && config.head_dim == hp.p.head_dim))
    fail(kContext,
         "no Hopper kernel for head_dim=" + std::to_string(hp.p.head_dim) + " with " +
             std::to_string(config.keys_per_tile) + "-key tiles",
         "plan again: the planner only picks configs listed in kHopperConfigs / kHopperFp8Configs");
}

}  // namespace attnkit::cuda_prefill_hopper::instances
