// DeviceBuffer in a build without CUDA: every call says how to get the real one.
#ifndef ATTNKIT_WITH_CUDA
#include "attnkit/error.hpp"
#include "device_memory.hpp"

namespace attnkit::cli {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "attnkit was built without CUDA", "install the CUDA toolkit (nvcc) and rebuild with -DATTNKIT_CUDA=ON");
}
}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t) { unavailable("check: device buffer"); }
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void*) { unavailable("check: device buffer"); }
void DeviceBuffer::download(void*) const { unavailable("check: device buffer"); }
void DeviceBuffer::fill_bytes(int) { unavailable("check: device buffer"); }
void device_synchronize(const char* context) { unavailable(context); }
int current_device() { unavailable("check: device"); }

}  // namespace attnkit::cli
#endif  // ATTNKIT_WITH_CUDA
