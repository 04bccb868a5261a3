// Context-parallel decode: one sequence's KV cache split by key position across the GPUs of one
// host (docs/context-parallel.md).
//
// A shard is a contiguous key range [begin, begin + capacity) of every sequence of the batch, held
// on one GPU as its own cache [batch, kv_heads, capacity, head_dim]. Shards fill in order; the last
// one runs to the problem's max_seq, so a sequence that outgrows the planned kv_len grows there.
// Each GPU runs the ordinary split-KV decode over its shard and writes a partial (output f32, LSE)
// state; the states are all-gathered through NCCL and merged on every GPU with the log-sum-exp
// rule, so every GPU ends with the same merged output (and LSE).
// Masking stays exact: the query sits at the global position length - 1; a shard sees only its own
// keys, and a sliding window is cut at the global position (shard_slice says what each shard reads).
// NCCL is only linked in CUDA builds that found it (cuda::nccl_built()); the single-device
// simulated run (several shards on one GPU, merged on it) needs no NCCL.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnkit/cuda.hpp"
#include "attnkit/plan.hpp"
#include "attnkit/tensors.hpp"

namespace attnkit {

// Communication leads for the predicted latency (measured values replace them in the benchmark).
// NVLink 4 on H100/H200 SXM: 18 links x 25 GB/s = 450 GB/s per direction per GPU.
inline constexpr double kNvlinkBytesPerS = 450e9;
// One small NCCL collective inside one NVLink host (launch + protocol handshake), a lead to measure.
inline constexpr double kCollectiveLatencySeconds = 12e-6;
// One small launch (the merge kernel; the lengths write), a lead.
inline constexpr double kSmallLaunchSeconds = 4e-6;
// Shard boundaries fall on multiples of this many keys (whole decode tiles on every shard).
inline constexpr std::int64_t kShardGranuleKeys = 256;

struct ShardedDecodeProblem {
  // The whole sequence: max_seq = total capacity over all shards, kv_len = planned longest
  // context (shards are sized to split kv_len; growth past it lands in the last shard).
  DecodeProblem decode;
  double link_bytes_per_s = 0;      // 0 = kNvlinkBytesPerS
  double collective_latency_s = 0;  // 0 = kCollectiveLatencySeconds
};

struct ShardSpec {
  int index = 0;
  std::int64_t begin = 0;         // first global key position it owns
  std::int64_t capacity = 0;      // it owns [begin, begin + capacity)
  std::int64_t planned_keys = 0;  // keys it holds when the sequence is kv_len long
  DecodePlan plan;                // its local decode: max_seq = kv_len = capacity, f32 out + LSE
  std::uint64_t cache_bytes = 0;  // its K and V cache on its GPU
  std::uint64_t read_bytes = 0;   // bytes one step reads at kv_len (K/V, q, partial state)
  std::uint64_t workspace_bytes = 0;       // the device workspace the caller gives it
  double predicted_decode_seconds = 0;     // its decode at kv_len (cost model of plan_decode)
  std::int64_t end() const { return begin + capacity; }
};

struct ShardedDecodePlan {
  ShardedDecodeProblem problem;
  std::vector<ShardSpec> shards;
  // Combining: the partial states are all-gathered (ncclAllGather of out and LSE in one group) and
  // merged locally on every GPU (docs/context-parallel.md says why not two all-reduces).
  std::uint64_t partial_state_bytes = 0;     // one shard's state: batch * num_heads * (head_dim + 1) * 4
  std::uint64_t bytes_sent_per_gpu = 0;      // ring all-gather: (shards - 1) * partial_state_bytes
  std::uint64_t bytes_received_per_gpu = 0;  // (shards - 1) * partial_state_bytes
  std::uint64_t bytes_communicated = 0;      // over all GPUs: shards * bytes_received_per_gpu
  double link_bytes_per_s = 0;
  double collective_latency_s = 0;
  double predicted_decode_seconds = 0;  // max over shards
  double predicted_comm_seconds = 0;    // collective latency + received bytes / link bandwidth (0 for 1 shard)
  double predicted_merge_seconds = 0;   // the merge launch
  double predicted_seconds = 0;         // decode + comm + merge
  std::vector<std::string> reasons;

  int shard_count() const { return static_cast<int>(shards.size()); }
  int owner(std::int64_t position) const;  // the shard holding global key `position` (Error if outside)
};

// One shard per target (its bandwidth lead weights its share), or `shard_count` equal shards.
ShardedDecodePlan plan_sharded_decode(const ShardedDecodeProblem& problem, const std::vector<Target>& targets);
ShardedDecodePlan plan_sharded_decode(const ShardedDecodeProblem& problem, const Target& target, int shard_count);

// What shard `shard` attends to for a sequence `global_length` keys long (query at global_length - 1):
// its decode reads local keys [0, local_length) with window local_window (0 = none), i.e. local keys
// [local_length - local_window, local_length), which are exactly the global keys `visible`.
// An empty `visible` gives local_length 0 (the shard contributes LSE -inf).
struct ShardSlice {
  std::int64_t local_length = 0;
  std::int64_t local_window = 0;
  KeyRange visible;  // global positions
};
ShardSlice shard_slice(const ShardedDecodePlan& plan, int shard, std::int64_t global_length);

std::string to_table(const ShardedDecodePlan& plan);
std::string to_json(const ShardedDecodePlan& plan);

namespace cuda {

bool nccl_built();  // the multi-GPU paths (NCCL) were compiled in

// One shard's tensors, all on the shard's GPU (the device of k_cache).
struct ShardTensors {
  TensorView q;        // [batch, num_heads, head_dim], q_dtype: the same query on every shard
  TensorView k_cache;  // [batch, kv_heads, capacity, head_dim], kv_dtype
  TensorView v_cache;  // same
  TensorView out;      // [batch, num_heads, head_dim], out_dtype: the merged output (every shard)
  TensorView lse;      // optional f32 [batch, num_heads]: the merged LSE
  Workspace workspace; // ShardSpec::workspace_bytes, device memory on the shard's GPU
  Stream stream = nullptr;
};

// NCCL communicators for one process driving several devices (ncclCommInitAll): rank i = shard i
// on devices[i]. Sets NCCL_NVLS_ENABLE=0 in the process unless it is already set.
class ShardComms {
 public:
  explicit ShardComms(const std::vector<int>& devices);
  ~ShardComms();
  ShardComms(const ShardComms&) = delete;
  ShardComms& operator=(const ShardComms&) = delete;
  void* comm(int rank) const { return comms_.at(static_cast<std::size_t>(rank)); }  // ncclComm_t
  int size() const { return static_cast<int>(comms_.size()); }

 private:
  std::vector<void*> comms_;
};

// One process per rank: helpers so callers need no NCCL header. The id comes from rank 0 and is
// shared with the other ranks by the caller (a file, a socket, MPI).
struct NcclId {
  std::array<char, 128> bytes{};
};
NcclId nccl_unique_id();
void* nccl_comm_init_rank(const NcclId& id, int ranks, int rank);  // on the current device; ncclComm_t
void nccl_comm_destroy(void* comm);

// One process, every shard. `lengths` are the global lengths per sequence (host, 0..max_seq).
// comms == nullptr: every shard must live on one device (the simulated multi-shard run, merged
// there, no NCCL); otherwise comms->size() == shard count and shard i lives on comms' device i.
// Asynchronous on each shard's stream; nothing is allocated.
void sharded_decode(const ShardedDecodePlan& plan, const std::vector<ShardTensors>& shards,
                    std::span<const std::int32_t> lengths, const ShardComms* comms = nullptr);

// One process per rank: this process holds shard `rank`; `nccl_comm` is an ncclComm_t of
// plan.shard_count() ranks in which this process is `rank`. Every rank must call it.
void sharded_decode_rank(const ShardedDecodePlan& plan, int rank, const ShardTensors& shard,
                         std::span<const std::int32_t> lengths, void* nccl_comm);

// Append one new token per sequence at global positions[b] (host, 0..max_seq-1): shard `shard`
// writes the rows whose position it owns (at position - begin) and leaves the rest untouched.
// Call it on every shard with the same k_new / v_new (replicated, on the shard's GPU).
struct ShardAppendTensors {
  TensorView k_new;    // optional [batch, kv_heads, head_dim], kv_dtype
  TensorView v_new;    // optional, same; at least one
  TensorView k_cache;  // [batch, kv_heads, capacity, head_dim] (with k_new)
  TensorView v_cache;  // (with v_new)
  Stream stream = nullptr;
};
void sharded_append_kv(const ShardedDecodePlan& plan, int shard, const ShardAppendTensors& tensors,
                       std::span<const std::int32_t> positions);

}  // namespace cuda
}  // namespace attnkit
