// The NCCL side of context-parallel decode: communicator set-up and the all-gather of the shards'
// partial states. NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set in the process
// before any communicator is made, unless the caller set it already.
#include "cuda/context_parallel/nccl_collectives.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"

namespace attnkit::context_parallel {
namespace {

void check_nccl(ncclResult_t status, const char* context, const char* what) {
  if (status != ncclSuccess) {
    fail(context, std::string(what) + " failed: " + ncclGetErrorString(status) + " (" + ncclGetLastError(nullptr) + ")",
         "check that every rank calls the same collective with the same plan, and NCCL_DEBUG=WARN for details");
  }
}

void keep_nvls_off() {
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) setenv("NCCL_NVLS_ENABLE", "0", 0);
}

}  // namespace

bool nccl_available() { return true; }

void all_gather_states(const std::vector<GatherRank>& ranks) {
  const char* ctx = "sharded decode";
  int saved = 0;
  cuda_common::check(cudaGetDevice(&saved), ctx, "cudaGetDevice");
  check_nccl(ncclGroupStart(), ctx, "ncclGroupStart");
  for (const GatherRank& r : ranks) {
    cuda_common::check(cudaSetDevice(r.device), ctx, "cudaSetDevice");
    auto comm = static_cast<ncclComm_t>(r.comm);
    auto stream = static_cast<cudaStream_t>(r.stream);
    // In place: the send buffer is the rank's own slot of the receive buffer.
    check_nccl(ncclAllGather(r.out + r.rank * r.out_count, r.out, r.out_count, ncclFloat32, comm, stream), ctx,
               "ncclAllGather(out)");
    check_nccl(ncclAllGather(r.lse + r.rank * r.lse_count, r.lse, r.lse_count, ncclFloat32, comm, stream), ctx,
               "ncclAllGather(lse)");
  }
  check_nccl(ncclGroupEnd(), ctx, "ncclGroupEnd");
  cuda_common::check(cudaSetDevice(saved), ctx, "cudaSetDevice");
}

void check_comm(void* comm, int ranks, int rank, int device, const char* context) {
  if (comm == nullptr) fail(context, "the NCCL communicator is null", "pass an ncclComm_t made with ncclCommInitRank");
  auto c = static_cast<ncclComm_t>(comm);
  int count = 0, user_rank = 0, comm_device = 0;
  check_nccl(ncclCommCount(c, &count), context, "ncclCommCount");
  check_nccl(ncclCommUserRank(c, &user_rank), context, "ncclCommUserRank");
  check_nccl(ncclCommCuDevice(c, &comm_device), context, "ncclCommCuDevice");
  if (count != ranks)
    fail(context,
         "the communicator has " + std::to_string(count) + " ranks but the plan has " + std::to_string(ranks) +
             " shards",
         "plan one shard per rank (plan_sharded_decode with the communicator's size)");
  if (user_rank != rank)
    fail(context,
         "this process is rank " + std::to_string(user_rank) + " of the communicator but runs shard " +
             std::to_string(rank),
         "run shard i on rank i");
  if (comm_device != device)
    fail(context,
         "the communicator lives on device " + std::to_string(comm_device) + " but the shard's tensors on device " +
             std::to_string(device),
         "allocate the shard's tensors on the communicator's device");
}

std::vector<void*> comm_init_all(const std::vector<int>& devices) {
  keep_nvls_off();
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), "cuda::ShardComms",
             "ncclCommInitAll");
  return {comms.begin(), comms.end()};
}

cuda::NcclId unique_id() {
  keep_nvls_off();
  static_assert(sizeof(ncclUniqueId) == sizeof(cuda::NcclId::bytes), "NcclId must hold an ncclUniqueId");
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "cuda::nccl_unique_id", "ncclGetUniqueId");
  cuda::NcclId out;
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return out;
}

void* comm_init_rank(const cuda::NcclId& id, int ranks, int rank) {
  keep_nvls_off();
  if (!(ranks >= 1 && rank >= 0 && rank < ranks))
    fail("cuda::nccl_comm_init_rank", "rank " + std::to_string(rank) + " of " + std::to_string(ranks),
         "pass 0 <= rank < ranks");
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof nid);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, ranks, nid, rank), "cuda::nccl_comm_init_rank", "ncclCommInitRank");
  return comm;
}

void comm_destroy(void* comm) {
  if (comm != nullptr) (void)ncclCommDestroy(static_cast<ncclComm_t>(comm));
}

}  // namespace attnkit::context_parallel
