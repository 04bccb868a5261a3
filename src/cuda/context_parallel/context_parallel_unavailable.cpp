// The context-parallel CUDA entry points of a build without nvcc: each says how to get them.
// (The planner, plan_sharded_decode and shard_slice, is host code and works in every build.)
#include "attnkit/context_parallel.hpp"
#include "attnkit/error.hpp"

namespace attnkit::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "attnkit was built without CUDA", "install the CUDA toolkit (nvcc, NCCL) and rebuild with -DATTNKIT_CUDA=ON");
}
}  // namespace

bool nccl_built() { return false; }
ShardComms::ShardComms(const std::vector<int>&) { unavailable("cuda::ShardComms"); }
ShardComms::~ShardComms() = default;
NcclId nccl_unique_id() { unavailable("cuda::nccl_unique_id"); }
void* nccl_comm_init_rank(const NcclId&, int, int) { unavailable("cuda::nccl_comm_init_rank"); }
void nccl_comm_destroy(void*) {}
void sharded_decode(const ShardedDecodePlan&, const std::vector<ShardTensors>&, std::span<const std::int32_t>,
                    const ShardComms*) {
  unavailable("cuda::sharded_decode");
}
void sharded_decode_rank(const ShardedDecodePlan&, int, const ShardTensors&, std::span<const std::int32_t>, void*) {
  unavailable("cuda::sharded_decode_rank");
}
void sharded_append_kv(const ShardedDecodePlan&, int, const ShardAppendTensors&, std::span<const std::int32_t>) {
  unavailable("cuda::sharded_append_kv");
}

}  // namespace attnkit::cuda
