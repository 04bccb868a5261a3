// DeviceBuffer over the CUDA runtime (cudaMalloc / cudaMemcpy). Only built with CUDA.
#include "device_memory.hpp"

#include <cuda_runtime.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cli {
namespace {
void check(cudaError_t status, const char* context, const char* what) {
  if (status != cudaSuccess) {
    fail(context, std::string(what) + " failed: " + cudaGetErrorString(status),
         "check that the GPU is free and healthy (nvidia-smi), then rerun");
  }
}
}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  // cudaMalloc(0) may return nullptr; keep one byte so the view is "given".
  check(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), "check: device buffer", "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

void DeviceBuffer::upload(const void* host) {
  check(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice), "check: device buffer", "cudaMemcpy H2D");
}

void DeviceBuffer::download(void* host) const {
  check(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost), "check: device buffer", "cudaMemcpy D2H");
}

void DeviceBuffer::fill_bytes(int value) {
  check(cudaMemset(data_, value, bytes_), "check: device buffer", "cudaMemset");
}

void device_synchronize(const char* context) {
  check(cudaGetLastError(), context, "kernel launch");
  check(cudaDeviceSynchronize(), context, "kernel execution");
}

int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "check: device", "cudaGetDevice");
  return device;
}

}  // namespace attnkit::cli
