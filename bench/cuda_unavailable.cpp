// The CUDA benchmark driver of a build without CUDA (the real one lives in bench/cuda/).
#ifndef ATTNKIT_WITH_CUDA
#include "attnkit/error.hpp"
#include "bench.hpp"

namespace attnkit::bench {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "built without CUDA", "install the CUDA toolkit (nvcc), rebuild with -DATTNKIT_CUDA=ON, or pass --backend cpu");
}
}  // namespace

double cuda_read_ceiling(const Options&) { unavailable("bench::cuda_read_ceiling"); }
std::vector<Row> run_cuda(const std::vector<Case>&, const Options&) { unavailable("bench::run_cuda"); }

}  // namespace attnkit::bench
#endif  // ATTNKIT_WITH_CUDA
