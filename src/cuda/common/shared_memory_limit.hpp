// Raising a kernel's dynamic shared-memory limit to the device's opt-in maximum (less the kernel's
// static shared memory: the two together may not exceed it). The attribute
// belongs to the (kernel, device) pair: a process that drives several GPUs (context-parallel decode)
// must raise it on each device it launches on, so "once" is remembered per pair, not per kernel.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

namespace attnkit::cuda_common {

// Raises `kernel`'s limit on the current device the first time it is called there; later calls on
// that device return the first status without touching the driver (a mutex and a map lookup).
inline cudaError_t raise_shared_memory_limit(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, cudaError_t> raised;
  int device = 0;
  if (const cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  if (const auto it = raised.find(key); it != raised.end()) return it->second;
  int optin = 0;
  cudaError_t status = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaFuncAttributes attributes{};
  if (status == cudaSuccess) status = cudaFuncGetAttributes(&attributes, kernel);
  if (status == cudaSuccess) {
    const int dynamic_limit = optin - static_cast<int>(attributes.sharedSizeBytes);
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit);
  }
  if (status != cudaSuccess) (void)cudaGetLastError();  // the status is returned, not left for the next launch
  raised.emplace(key, status);
  return status;
}

}  // namespace attnkit::cuda_common
