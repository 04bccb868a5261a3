// Internal: the NCCL calls of context-parallel decode, behind plain C++ so the rest of the backend
// needs no NCCL header. nccl_collectives.cpp implements them when CMake found NCCL;
// nccl_unavailable.cpp (CUDA builds without NCCL) makes each one an Error with a Fix.
#pragma once
#include <cstddef>
#include <vector>

#include "attnkit/context_parallel.hpp"

namespace attnkit::context_parallel {

bool nccl_available();

// One rank's share of the all-gather: its state sits in slot `rank` of out/lse already (in place).
struct GatherRank {
  void* comm = nullptr;    // ncclComm_t
  void* stream = nullptr;  // cudaStream_t
  int device = 0;
  int rank = 0;
  float* out = nullptr;    // [ranks, out_count]
  std::size_t out_count = 0;
  float* lse = nullptr;    // [ranks, lse_count]
  std::size_t lse_count = 0;
};
// Both all-gathers of every listed rank in one NCCL group (one launch per rank).
void all_gather_states(const std::vector<GatherRank>& ranks);

// Error with a Fix unless `comm` has `ranks` ranks, this process is `rank` in it, on `device`.
void check_comm(void* comm, int ranks, int rank, int device, const char* context);

std::vector<void*> comm_init_all(const std::vector<int>& devices);
cuda::NcclId unique_id();
void* comm_init_rank(const cuda::NcclId& id, int ranks, int rank);
void comm_destroy(void* comm);

}  // namespace attnkit::context_parallel
