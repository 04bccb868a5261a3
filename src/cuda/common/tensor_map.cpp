// Host: cuTensorMapEncodeTiled through the runtime's driver entry point (tensor_map.hpp).
#include "cuda/common/tensor_map.hpp"

#include <cuda_runtime.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda_common {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled(const char* context) {
  static const EncodeTiled fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
    return (err == cudaSuccess && status == cudaDriverEntryPointSuccess) ? reinterpret_cast<EncodeTiled>(ptr) : nullptr;
  }();
  if (fn == nullptr)
    fail(context, "the driver does not provide cuTensorMapEncodeTiled",
         "use a CUDA 12+ driver on a Hopper (sm_90) GPU");
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map_4d(const TensorMapSpec& s, const char* context, const char* name) {
  const cuuint64_t dims[4] = {s.dims[0], s.dims[1], s.dims[2], s.dims[3]};
  const cuuint64_t strides[3] = {s.byte_strides[0], s.byte_strides[1], s.byte_strides[2]};
  const cuuint32_t box[4] = {s.box[0], s.box[1], s.box[2], s.box[3]};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r =
      encode_tiled(context)(&map, s.dtype, 4, const_cast<void*>(s.data), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle, s.l2_promotion,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(context,
         std::string("cuTensorMapEncodeTiled failed for ") + name + " (CUresult " +
             std::to_string(static_cast<int>(r)) + ")",
         "pass 16-byte aligned tensors whose strides are multiples of 16 bytes and below 2^40 bytes");
  return map;
}

}  // namespace attnkit::cuda_common
