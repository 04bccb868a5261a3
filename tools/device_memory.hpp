// Device buffers for `attnkit check` on the GPU. The CUDA runtime is used only in
// cuda/device_memory.cpp (compiled when ATTNKIT_WITH_CUDA is defined); without CUDA every call
// throws Error, and check never gets here because cuda::device_count() is 0.
#pragma once
#include <cstddef>

namespace attnkit::cli {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);  // on the current device
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host);   // bytes() bytes, synchronous
  void download(void* host) const; // bytes() bytes, synchronous
  void fill_bytes(int value);      // memset, e.g. 0xFF to poison with NaN patterns

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Waits for all work on the current device; throws Error naming any asynchronous kernel error.
void device_synchronize(const char* context);
int current_device();

}  // namespace attnkit::cli
