#include "cuda/common/device_pointer.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"

namespace attnkit::cuda_common {

DeviceMemory device_of_memory(const void* data, const std::string& context, const std::string& name) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later launches are not blamed
    fail(context, name + " is not CUDA memory (" + cudaGetErrorName(status) + ")",
         "allocate " + name + " with cudaMalloc (or a framework's CUDA allocator) before passing it to attnkit::cuda");
  }
  if (attributes.type == cudaMemoryTypeManaged) return {attributes.device, true};
  if (attributes.type != cudaMemoryTypeDevice)
    fail(context,
         name + " points to host memory (" +
             (attributes.type == cudaMemoryTypeHost ? std::string("pinned host") : std::string("pageable host")) + ")",
         "copy " + name + " to the device (cudaMemcpy) and pass the device pointer, or call the CPU backend");
  return {attributes.device, false};
}

void require_device_memory(const void* data, const std::string& context, const std::string& name) {
  if (data == nullptr) return;
  const DeviceMemory memory = device_of_memory(data, context, name);
  // Kernels launch on the current device; another device's memory would be read over the link
  // if peer access is on, or fault if it is not.
  int current = -1;
  check(cudaGetDevice(&current), context, "cudaGetDevice");
  if (!memory.managed && memory.device != current)
    fail(context,
         name + " is memory of CUDA device " + std::to_string(memory.device) + " but device " + std::to_string(current) +
             " is current",
         "make the tensors' device current before the call (cudaSetDevice; in torch, torch.cuda.set_device or "
         "`with torch.cuda.device(i)`), or move " + name + " there");
}

void require_vector_aligned(const TensorView& t, const std::string& context, const std::string& name) {
  if (t.empty()) return;
  const std::size_t elem = dtype_size(t.dtype);
  if (!(reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0))
    fail(context, name + " is not 16-byte aligned",
         "pass a buffer whose start is a multiple of 16 bytes (cudaMalloc returns 256-byte aligned memory)");
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (!(static_cast<std::size_t>(t.strides[d]) * elem % 16 == 0))
      fail(context,
           name + " stride of dimension " + std::to_string(d) + " (" + std::to_string(t.strides[d]) +
               " elements) is not a multiple of 16 bytes",
           "lay out " + name +
               " so every row starts on a 16-byte boundary (head_dim a multiple of 8 does it "
               "for contiguous tensors)");
  }
}

}  // namespace attnkit::cuda_common
