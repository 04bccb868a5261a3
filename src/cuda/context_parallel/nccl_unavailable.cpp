// The NCCL side of context-parallel decode in a CUDA build where CMake found no NCCL: the
// single-device simulated run still works; each multi-GPU entry says how to get NCCL.
#include "attnkit/error.hpp"
#include "cuda/context_parallel/nccl_collectives.hpp"

namespace attnkit::context_parallel {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "attnkit was built without NCCL", "install NCCL (libnccl-dev, or the CUDA toolkit's) and reconfigure");
}
}  // namespace

bool nccl_available() { return false; }
void all_gather_states(const std::vector<GatherRank>&) { unavailable("sharded decode"); }
void check_comm(void*, int, int, int, const char* context) { unavailable(context); }
std::vector<void*> comm_init_all(const std::vector<int>&) { unavailable("cuda::ShardComms"); }
cuda::NcclId unique_id() { unavailable("cuda::nccl_unique_id"); }
void* comm_init_rank(const cuda::NcclId&, int, int) { unavailable("cuda::nccl_comm_init_rank"); }
void comm_destroy(void*) {}

}  // namespace attnkit::context_parallel
