// Host: TMA descriptors (CUtensorMap) made with cuTensorMapEncodeTiled, reached through the
// runtime's driver entry point (so nothing links libcuda). Shared by the Hopper prefill and the
// decode kernels.
#pragma once
#include <cuda.h>

#include <array>
#include <cstdint>

namespace attnkit::cuda_common {

struct TensorMapSpec {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const void* data = nullptr;
  std::array<std::uint64_t, 4> dims{};          // innermost first (elements)
  std::array<std::uint64_t, 3> byte_strides{};  // of dims 1..3 (multiples of 16 bytes)
  std::array<std::uint32_t, 4> box{};           // box extent per dim (elements; past a dim's end reads zeros)
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  // How much a missed L2 sector pulls in from DRAM (decode's K/V streams take 128 B: kv_box_map.cpp).
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// Encodes a 4-D map; throws attnkit::Error with `context` and `name` when the driver refuses it.
CUtensorMap make_tensor_map_4d(const TensorMapSpec& spec, const char* context, const char* name);

}  // namespace attnkit::cuda_common
