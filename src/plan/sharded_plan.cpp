// The context-parallel planner (include/attnkit/context_parallel.hpp): shard boundaries, each
// shard's local decode plan, bytes per GPU, bytes communicated and the predicted latency
//   max over shards (decode at kv_len) + collective latency + received bytes / link bandwidth + merge.
// Pure host code; the workspace cut is shared with the run through shard_workspace.hpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "attnkit/context_parallel.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/context_parallel/shard_workspace.hpp"

namespace attnkit {
namespace {

constexpr const char* kCtx = "plan_sharded_decode";
constexpr int kMaxShards = 64;  // the merge keeps one weight per shard in shared memory

std::string us(double s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  return buf;
}

// Shard starts for kv_len keys split in proportion to `weights`, on multiples of `granule`, every
// shard non-empty.
std::vector<std::int64_t> shard_begins(std::int64_t kv_len, const std::vector<double>& weights, std::int64_t granule) {
  const int n = static_cast<int>(weights.size());
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::int64_t> begins(static_cast<std::size_t>(n), 0);
  double cumulative = 0;
  for (int i = 1; i < n; ++i) {
    cumulative += weights[static_cast<std::size_t>(i - 1)];
    auto b = static_cast<std::int64_t>(std::llround(static_cast<double>(kv_len) * cumulative / total /
                                                    static_cast<double>(granule))) * granule;
    b = std::max(b, begins[static_cast<std::size_t>(i - 1)] + granule);  // non-empty
    b = std::min(b, kv_len - static_cast<std::int64_t>(n - i) * granule);  // room for the rest
    begins[static_cast<std::size_t>(i)] = b;
  }
  return begins;
}

std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

}  // namespace

int ShardedDecodePlan::owner(std::int64_t position) const {
  if (!(position >= 0 && position < problem.decode.max_seq))
    fail("sharded decode",
         "position " + std::to_string(position) + " is outside the cache [0, " +
             std::to_string(problem.decode.max_seq) + ")",
         "append only below the problem's max_seq (plan a larger max_seq for longer contexts)");
  for (const ShardSpec& s : shards) {
    if (position >= s.begin && position < s.end()) return s.index;
  }
  fail("sharded decode", "no shard owns position " + std::to_string(position), "plan with plan_sharded_decode");
}

ShardSlice shard_slice(const ShardedDecodePlan& plan, int shard, std::int64_t global_length) {
  if (!(shard >= 0 && shard < plan.shard_count()))
    fail("shard_slice", "shard " + std::to_string(shard) + " does not exist",
         "pass 0 <= shard < " + std::to_string(plan.shard_count()));
  if (!(global_length >= 0 && global_length <= plan.problem.decode.max_seq))
    fail("shard_slice",
         "length " + std::to_string(global_length) +
             " is outside [0, max_seq=" + std::to_string(plan.problem.decode.max_seq) + "]",
         "pass the sequence's current length, at most the planned max_seq");
  const ShardSpec& s = plan.shards[static_cast<std::size_t>(shard)];
  const KeyRange global = visible_keys(global_length - 1, global_length, true, plan.problem.decode.options.window);
  const std::int64_t a = std::max(global.begin, s.begin);
  const std::int64_t e = std::min(global.end, s.end());
  ShardSlice slice;
  if (e <= a) return slice;  // nothing visible here: the shard writes LSE -inf
  slice.local_length = e - s.begin;
  // The kernel's window keeps [len - w, len): w = e - a cuts at the global window start, which for
  // every shard but the one holding the query lies inside the shard, not at its own last key.
  slice.local_window = a > s.begin ? e - a : 0;
  slice.visible = {a, e};
  return slice;
}

ShardedDecodePlan plan_sharded_decode(const ShardedDecodeProblem& problem, const std::vector<Target>& targets) {
  const DecodeProblem& g = problem.decode;
  g.validate();
  reject_fp8_cache(g.kv_dtype, kCtx);
  const int n = static_cast<int>(targets.size());
  if (!(n >= 1 && n <= kMaxShards))
    fail(kCtx, "asked for " + std::to_string(n) + " shards",
         "pass 1.." + std::to_string(kMaxShards) + " targets (one per GPU)");
  if (g.kv_len < n)
    fail(kCtx, "kv_len=" + std::to_string(g.kv_len) + " is shorter than the shard count " + std::to_string(n),
         "plan fewer shards or a longer kv_len (every shard must own at least one key)");
  if (!(problem.link_bytes_per_s >= 0 && problem.collective_latency_s >= 0))
    fail(kCtx, "a negative communication lead",
         "leave link_bytes_per_s and collective_latency_s at 0 for the defaults, or pass measured values");

  ShardedDecodePlan plan;
  plan.problem = problem;
  plan.link_bytes_per_s = problem.link_bytes_per_s > 0 ? problem.link_bytes_per_s : kNvlinkBytesPerS;
  plan.collective_latency_s = problem.collective_latency_s > 0 ? problem.collective_latency_s : kCollectiveLatencySeconds;

  // Shares follow each GPU's bandwidth lead: decode is bound by reading K and V. A lead that is
  // missing, non-finite or not positive makes the shares equal; known leads are scaled by the
  // largest, so their sum stays finite (found by the planner fuzzer: two leads near DBL_MAX summed
  // to inf and the shard starts overflowed).
  std::vector<double> weights;
  bool all_known = true;
  double largest = 0;
  for (const Target& t : targets) {
    all_known = all_known && std::isfinite(t.peak_read_bytes_per_s) && t.peak_read_bytes_per_s > 0;
    if (all_known) largest = std::max(largest, t.peak_read_bytes_per_s);
  }
  for (const Target& t : targets) weights.push_back(all_known ? t.peak_read_bytes_per_s / largest : 1.0);
  const std::int64_t granule = g.kv_len >= static_cast<std::int64_t>(n) * kShardGranuleKeys ? kShardGranuleKeys : 1;
  const std::vector<std::int64_t> begins = shard_begins(g.kv_len, weights, granule);
  plan.reasons.push_back(std::to_string(n) + " shard(s) of kv_len=" + std::to_string(g.kv_len) + ", boundaries on " +
                         std::to_string(granule) + "-key multiples, shares " +
                         (all_known ? "proportional to each target's read bandwidth" : "equal (a bandwidth lead is unknown)"));
  plan.reasons.push_back("the last shard runs to max_seq=" + std::to_string(g.max_seq) +
                         ": tokens past kv_len grow there");

  const std::uint64_t rows = u64(g.batch) * u64(g.num_heads);
  plan.partial_state_bytes = rows * (u64(g.head_dim) + 1) * 4;
  for (int i = 0; i < n; ++i) {
    ShardSpec s;
    s.index = i;
    s.begin = begins[static_cast<std::size_t>(i)];
    s.capacity = (i + 1 < n ? begins[static_cast<std::size_t>(i + 1)] : g.max_seq) - s.begin;
    s.planned_keys = std::min(g.kv_len, s.end()) - s.begin;
    DecodeProblem local = g;
    local.max_seq = s.capacity;
    local.kv_len = s.capacity;  // lengths up to the capacity run with this plan (the kernel clamps to it)
    local.out_dtype = DType::kF32;
    local.options.window = 0;   // set per call from shard_slice
    const Target& t = targets[static_cast<std::size_t>(i)];
    s.plan = plan_decode(local, t);
    s.cache_bytes = 2 * u64(g.batch) * u64(g.kv_heads) * u64(s.capacity) * u64(g.head_dim) * dtype_size(g.kv_dtype);
    s.workspace_bytes = context_parallel::shard_workspace_layout(s.plan.evidence.workspace_bytes, u64(n), u64(g.batch),
                                                                 u64(g.num_heads), u64(g.head_dim))
                            .total;
    s.predicted_decode_seconds = 0;
    plan.shards.push_back(std::move(s));
  }

  // Prediction at the planned length: each shard reads only what its slice makes visible.
  for (ShardSpec& s : plan.shards) {
    const ShardSlice slice = shard_slice(plan, s.index, g.kv_len);
    if (slice.visible.size() == 0) {
      s.read_bytes = u64(g.batch) * u64(g.num_heads) * u64(g.head_dim) * dtype_size(g.q_dtype);
      s.predicted_decode_seconds = kSmallLaunchSeconds;
      continue;
    }
    DecodeProblem at_len = g;
    at_len.max_seq = at_len.kv_len = slice.visible.size();
    at_len.options.window = 0;
    at_len.out_dtype = DType::kF32;
    const DecodePlan p = plan_decode(at_len, targets[static_cast<std::size_t>(s.index)]);
    s.read_bytes = p.evidence.traffic.global_read_bytes;
    s.predicted_decode_seconds = p.evidence.predicted_seconds;
  }
  for (const ShardSpec& s : plan.shards) plan.predicted_decode_seconds = std::max(plan.predicted_decode_seconds, s.predicted_decode_seconds);

  // All-gather of the partial states (ring): each GPU sends and receives (n - 1) states.
  plan.bytes_sent_per_gpu = u64(n - 1) * plan.partial_state_bytes;
  plan.bytes_received_per_gpu = u64(n - 1) * plan.partial_state_bytes;
  plan.bytes_communicated = u64(n) * plan.bytes_received_per_gpu;
  if (n > 1) {
    plan.predicted_comm_seconds =
        plan.collective_latency_s + static_cast<double>(plan.bytes_received_per_gpu) / plan.link_bytes_per_s;
  }
  double slowest_read = 0;
  for (const Target& t : targets) {
    if (t.peak_read_bytes_per_s > 0) slowest_read = slowest_read == 0 ? t.peak_read_bytes_per_s : std::min(slowest_read, t.peak_read_bytes_per_s);
  }
  const double merge_bytes = static_cast<double>(u64(n) * plan.partial_state_bytes + rows * u64(g.head_dim) * dtype_size(g.out_dtype));
  plan.predicted_merge_seconds = kSmallLaunchSeconds + (slowest_read > 0 ? merge_bytes / slowest_read : 0.0);
  plan.predicted_seconds = plan.predicted_decode_seconds + plan.predicted_comm_seconds + plan.predicted_merge_seconds;

  plan.reasons.push_back("combine: all-gather of (out f32, LSE f32) then a local merge on every GPU: one collective "
                         "(latency-bound at " + std::to_string(plan.partial_state_bytes) +
                         " bytes per state) instead of two all-reduces");
  plan.reasons.push_back("communication lead: " + us(plan.collective_latency_s) + " per collective + " +
                         std::to_string(plan.bytes_received_per_gpu) + " bytes at " +
                         std::to_string(static_cast<long long>(plan.link_bytes_per_s / 1e9)) +
                         " GB/s (NVLink 4, per direction) = " + us(plan.predicted_comm_seconds));
  if (g.options.window > 0 && g.options.window < g.kv_len) {
    int busy = 0;
    for (const ShardSpec& s : plan.shards) busy += shard_slice(plan, s.index, g.kv_len).visible.size() > 0 ? 1 : 0;
    plan.reasons.push_back("window=" + std::to_string(g.options.window) + ": at kv_len only " + std::to_string(busy) +
                           " shard(s) see keys; sharding a windowed decode buys little");
  }
  return plan;
}

ShardedDecodePlan plan_sharded_decode(const ShardedDecodeProblem& problem, const Target& target, int shard_count) {
  if (!(shard_count >= 1 && shard_count <= kMaxShards))
    fail(kCtx, "shard_count=" + std::to_string(shard_count), "pass 1.." + std::to_string(kMaxShards) + " shards");
  return plan_sharded_decode(problem, std::vector<Target>(static_cast<std::size_t>(shard_count), target));
}

std::string to_table(const ShardedDecodePlan& plan) {
  const DecodeProblem& g = plan.problem.decode;
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line, "sharded decode: batch %lld, heads %lld/%lld, head_dim %lld, kv_len %lld, max_seq %lld, %s\n",
                static_cast<long long>(g.batch), static_cast<long long>(g.num_heads), static_cast<long long>(g.kv_heads),
                static_cast<long long>(g.head_dim), static_cast<long long>(g.kv_len), static_cast<long long>(g.max_seq),
                std::string(dtype_name(g.kv_dtype)).c_str());
  out += line;
  out += "shard  begin        capacity     planned_keys  splits  cache_bytes    read_bytes     workspace   decode\n";
  for (const ShardSpec& s : plan.shards) {
    std::snprintf(line, sizeof line, "%-6d %-12lld %-12lld %-13lld %-7u %-14llu %-14llu %-11llu %s\n", s.index,
                  static_cast<long long>(s.begin), static_cast<long long>(s.capacity),
                  static_cast<long long>(s.planned_keys), s.plan.partition.sequence_splits,
                  static_cast<unsigned long long>(s.cache_bytes), static_cast<unsigned long long>(s.read_bytes),
                  static_cast<unsigned long long>(s.workspace_bytes), us(s.predicted_decode_seconds).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "communicated: %llu bytes per GPU received, %llu in all; predicted: decode %s + comm %s + merge %s = %s\n",
                static_cast<unsigned long long>(plan.bytes_received_per_gpu),
                static_cast<unsigned long long>(plan.bytes_communicated), us(plan.predicted_decode_seconds).c_str(),
                us(plan.predicted_comm_seconds).c_str(), us(plan.predicted_merge_seconds).c_str(),
                us(plan.predicted_seconds).c_str());
  out += line;
  for (const std::string& r : plan.reasons) out += "  - " + r + "\n";
  return out;
}

std::string to_json(const ShardedDecodePlan& plan) {
  using json = nlohmann::json;
  const DecodeProblem& g = plan.problem.decode;
  json shards = json::array();
  for (const ShardSpec& s : plan.shards) {
    shards.push_back({{"index", s.index},
                      {"begin", s.begin},
                      {"capacity", s.capacity},
                      {"planned_keys", s.planned_keys},
                      {"sequence_splits", s.plan.partition.sequence_splits},
                      {"target", s.plan.target.name},
                      {"cache_bytes", s.cache_bytes},
                      {"read_bytes", s.read_bytes},
                      {"workspace_bytes", s.workspace_bytes},
                      {"predicted_decode_seconds", s.predicted_decode_seconds}});
  }
  const json j = {{"problem",
                   {{"batch", g.batch},
                    {"num_heads", g.num_heads},
                    {"kv_heads", g.kv_heads},
                    {"head_dim", g.head_dim},
                    {"max_seq", g.max_seq},
                    {"kv_len", g.kv_len},
                    {"window", g.options.window},
                    {"kv_dtype", dtype_name(g.kv_dtype)},
                    {"q_dtype", dtype_name(g.q_dtype)},
                    {"out_dtype", dtype_name(g.out_dtype)}}},
                  {"combine", "all_gather_then_merge"},
                  {"shards", shards},
                  {"partial_state_bytes", plan.partial_state_bytes},
                  {"bytes_sent_per_gpu", plan.bytes_sent_per_gpu},
                  {"bytes_received_per_gpu", plan.bytes_received_per_gpu},
                  {"bytes_communicated", plan.bytes_communicated},
                  {"link_bytes_per_s", plan.link_bytes_per_s},
                  {"collective_latency_s", plan.collective_latency_s},
                  {"predicted_decode_seconds", plan.predicted_decode_seconds},
                  {"predicted_comm_seconds", plan.predicted_comm_seconds},
                  {"predicted_merge_seconds", plan.predicted_merge_seconds},
                  {"predicted_seconds", plan.predicted_seconds},
                  {"reasons", plan.reasons}};
  return j.dump(2);
}

}  // namespace attnkit
