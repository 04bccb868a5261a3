// Context-parallel decode on CUDA (include/attnkit/context_parallel.hpp): per shard, the local
// lengths (shard_slice) go to its workspace, the ordinary cuda::decode writes the shard's partial
// (out f32, LSE) into its slot of the gather buffers, the slots are all-gathered (NCCL, or device
// copies when every shard lives on one device) and merged on every shard into its out/lse.
// Everything the host can check is checked for every shard before the first launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "attnkit/context_parallel.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/context_parallel/nccl_collectives.hpp"
#include "cuda/context_parallel/shard_kernels.hpp"
#include "cuda/context_parallel/shard_workspace.hpp"

namespace attnkit::cuda {
namespace {

namespace cp = attnkit::context_parallel;

// Restores the caller's current device however the call ends.
class DeviceGuard {
 public:
  DeviceGuard() { cuda_common::check(cudaGetDevice(&saved_), "sharded decode", "cudaGetDevice"); }
  ~DeviceGuard() { (void)cudaSetDevice(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = 0;
};

// The device a shard tensor lives on (managed memory: the one it was allocated against). Not
// require_device_memory: one thread drives every shard, so most are not on the current device.
int device_of(const void* data, const std::string& ctx, const std::string& name) {
  return cuda_common::device_of_memory(data, ctx, name).device;  // host memory rejected with its Fix
}

TensorView batch_slice(TensorView v, std::int64_t b) {
  if (v.empty()) return v;
  v.data = static_cast<std::uint8_t*>(v.data) + b * v.strides[0] * static_cast<std::int64_t>(dtype_size(v.dtype));
  v.shape[0] = 1;
  return v;
}

// One shard's validated state for this call.
struct ShardRun {
  const ShardSpec* spec = nullptr;
  const ShardTensors* tensors = nullptr;
  int device = 0;
  cp::ShardWorkspaceLayout layout;
  std::uint8_t* ws = nullptr;
  std::vector<std::int32_t> local_lengths;
  std::vector<std::int64_t> local_windows;

  float* gather_out() const { return reinterpret_cast<float*>(ws + layout.gather_out_offset); }
  float* gather_lse() const { return reinterpret_cast<float*>(ws + layout.gather_lse_offset); }
  std::int32_t* lengths() const { return reinterpret_cast<std::int32_t*>(ws + layout.lengths_offset); }
};

void check_lengths(const ShardedDecodePlan& plan, std::span<const std::int32_t> lengths, const char* ctx) {
  const DecodeProblem& g = plan.problem.decode;
  if (!(static_cast<std::int64_t>(lengths.size()) == g.batch))
    fail(ctx, std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(g.batch),
         "pass one global length per sequence");
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    if (!(lengths[b] >= 0 && lengths[b] <= g.max_seq))
      fail(ctx,
           "lengths[" + std::to_string(b) + "]=" + std::to_string(lengths[b]) +
               " is outside [0, max_seq=" + std::to_string(g.max_seq) + "]",
           "pass each sequence's current length (keys in the cache), at most the planned max_seq");
  }
}

ShardRun validate_shard(const ShardedDecodePlan& plan, int index, const ShardTensors& t,
                        std::span<const std::int32_t> lengths, const char* ctx) {
  const ShardSpec& spec = plan.shards[static_cast<std::size_t>(index)];
  const std::string where = std::string(ctx) + " (shard " + std::to_string(index) + ")";
  ShardRun r;
  r.spec = &spec;
  r.tensors = &t;
  r.device = device_of(t.k_cache.data, where, "k_cache");
  // The shard's tensors against its local problem with the caller's out dtype (shapes, dtypes,
  // strides, one device), the workspace against the plan.
  DecodeProblem local = spec.plan.problem;
  local.out_dtype = plan.problem.decode.out_dtype;
  if (!(t.workspace.bytes >= spec.workspace_bytes && t.workspace.data != nullptr &&
        t.workspace.device == DeviceKind::kCuda))
    fail(where,
         "the workspace has " + std::to_string(t.workspace.bytes) + " bytes, the shard needs " +
             std::to_string(spec.workspace_bytes),
         "allocate ShardSpec::workspace_bytes of device memory on the shard's GPU");
  if (!(reinterpret_cast<std::uintptr_t>(t.workspace.data) % cp::kWorkspaceAlign == 0))
    fail(where, "the workspace is not 256-byte aligned", "pass a workspace from cudaMalloc");
  if (device_of(t.workspace.data, where, "workspace") != r.device)
    fail(where, "the workspace is not on the device of k_cache (" + std::to_string(r.device) + ")",
         "allocate every tensor of a shard on the shard's GPU");
  r.ws = static_cast<std::uint8_t*>(t.workspace.data);
  const DecodeProblem& g = plan.problem.decode;
  r.layout = cp::shard_workspace_layout(spec.plan.evidence.workspace_bytes, static_cast<std::uint64_t>(plan.shard_count()),
                                        static_cast<std::uint64_t>(g.batch), static_cast<std::uint64_t>(g.num_heads),
                                        static_cast<std::uint64_t>(g.head_dim));
  DecodeTensors dt{t.q, t.k_cache, t.v_cache, TensorView::contiguous(r.lengths(), DType::kI32, {g.batch}, DeviceKind::kCuda, r.device),
                   t.out, t.lse};
  validate_decode(local, dt, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.q, "q"}, {&t.v_cache, "v_cache"}, {&t.out, "out"}, {&t.lse, "lse"}}) {
    if (view->empty()) continue;
    if (device_of(view->data, where, name) != r.device)
      fail(where, std::string(name) + " is not on the device of k_cache (" + std::to_string(r.device) + ")",
           "allocate every tensor of a shard on the shard's GPU");
  }
  cuda_common::require_vector_aligned(t.k_cache, where, "k_cache");
  cuda_common::require_vector_aligned(t.v_cache, where, "v_cache");
  for (std::int64_t b = 0; b < g.batch; ++b) {
    const ShardSlice s = shard_slice(plan, index, lengths[static_cast<std::size_t>(b)]);
    r.local_lengths.push_back(static_cast<std::int32_t>(s.local_length));
    r.local_windows.push_back(s.local_window);
  }
  return r;
}

// The shard's partial state: local lengths into the workspace, then cuda::decode into slot `slot`.
void decode_shard(const ShardedDecodePlan& plan, const ShardRun& r, int slot, Stream stream) {
  const DecodeProblem& g = plan.problem.decode;
  for (std::int64_t first = 0; first < g.batch; first += cp::kMaxSequencesPerLaunch) {
    cp::I32Chunk chunk;
    chunk.count = static_cast<int>(std::min<std::int64_t>(cp::kMaxSequencesPerLaunch, g.batch - first));
    std::copy_n(r.local_lengths.begin() + first, chunk.count, chunk.values);
    cp::launch_write_i32(chunk, r.lengths() + first, stream);
  }
  const std::int64_t rows = g.batch * g.num_heads;
  DecodeTensors t;
  t.q = r.tensors->q;
  t.k_cache = r.tensors->k_cache;
  t.v_cache = r.tensors->v_cache;
  t.lengths = TensorView::contiguous(r.lengths(), DType::kI32, {g.batch}, DeviceKind::kCuda, r.device);
  t.out = TensorView::contiguous(r.gather_out() + slot * rows * g.head_dim, DType::kF32, {g.batch, g.num_heads, g.head_dim},
                                 DeviceKind::kCuda, r.device);
  t.lse = TensorView::contiguous(r.gather_lse() + slot * rows, DType::kF32, {g.batch, g.num_heads}, DeviceKind::kCuda, r.device);
  const Workspace ws{r.ws + r.layout.decode_offset, r.layout.decode_bytes, DeviceKind::kCuda};
  // One launch when every sequence that sees keys here shares one local window (always for batch 1
  // or no window); otherwise one launch per sequence, each with its own window.
  std::set<std::int64_t> windows;
  for (std::size_t b = 0; b < r.local_windows.size(); ++b) {
    if (r.local_lengths[b] > 0) windows.insert(r.local_windows[b]);
  }
  DecodePlan p = r.spec->plan;
  p.reasons.clear();
  if (windows.size() <= 1) {
    p.problem.options.window = windows.empty() ? 0 : *windows.begin();
    decode(p, t, ws, stream);
    return;
  }
  p.problem.batch = 1;
  for (std::int64_t b = 0; b < g.batch; ++b) {
    p.problem.options.window = r.local_windows[static_cast<std::size_t>(b)];
    DecodeTensors one{batch_slice(t.q, b), batch_slice(t.k_cache, b), batch_slice(t.v_cache, b),
                      batch_slice(t.lengths, b), batch_slice(t.out, b), batch_slice(t.lse, b)};
    decode(p, one, ws, stream);
  }
}

void merge_into(const ShardedDecodePlan& plan, const ShardRun& r, Stream stream) {
  const DecodeProblem& g = plan.problem.decode;
  const ShardTensors& t = *r.tensors;
  cp::MergeShardsParams m;
  m.gather_out = r.gather_out();
  m.gather_lse = r.gather_lse();
  m.shards = plan.shard_count();
  m.batch = static_cast<int>(g.batch);
  m.num_heads = static_cast<int>(g.num_heads);
  m.head_dim = static_cast<int>(g.head_dim);
  m.out = t.out.data;
  m.out_dtype = t.out.dtype;
  m.out_stride_b = t.out.strides[0];
  m.out_stride_h = t.out.strides[1];
  if (!t.lse.empty()) m.lse = t.lse.as<float>(), m.lse_stride_b = t.lse.strides[0], m.lse_stride_h = t.lse.strides[1];
  cp::launch_merge_shards(m, stream);
}

cp::GatherRank gather_rank(const ShardedDecodePlan& plan, const ShardRun& r, int rank, void* comm) {
  const DecodeProblem& g = plan.problem.decode;
  cp::GatherRank gr;
  gr.comm = comm;
  gr.stream = r.tensors->stream;
  gr.device = r.device;
  gr.rank = rank;
  gr.out = r.gather_out();
  gr.out_count = static_cast<std::size_t>(g.batch * g.num_heads * g.head_dim);
  gr.lse = r.gather_lse();
  gr.lse_count = static_cast<std::size_t>(g.batch * g.num_heads);
  return gr;
}

void require_plan(const ShardedDecodePlan& plan, const char* ctx) {
  if (plan.shard_count() < 1) fail(ctx, "the plan has no shards", "make the plan with plan_sharded_decode");
  for (const ShardSpec& s : plan.shards) {
    if (s.plan.target.backend != Backend::kCuda)
      fail(ctx,
           "shard " + std::to_string(s.index) + " was planned for the " + to_string(s.plan.target.backend) + " backend",
           "plan with attnkit::cuda::target() (or known_target(\"h200\")) per GPU");
  }
}

}  // namespace

bool nccl_built() { return cp::nccl_available(); }

ShardComms::ShardComms(const std::vector<int>& devices) {
  if (devices.empty()) fail("cuda::ShardComms", "no devices given", "pass one device index per shard");
  comms_ = cp::comm_init_all(devices);
}

ShardComms::~ShardComms() {
  for (void* c : comms_) cp::comm_destroy(c);
}

NcclId nccl_unique_id() { return cp::unique_id(); }
void* nccl_comm_init_rank(const NcclId& id, int ranks, int rank) { return cp::comm_init_rank(id, ranks, rank); }
void nccl_comm_destroy(void* comm) { cp::comm_destroy(comm); }

void sharded_decode(const ShardedDecodePlan& plan, const std::vector<ShardTensors>& shards,
                    std::span<const std::int32_t> lengths, const ShardComms* comms) {
  const char* ctx = "cuda::sharded_decode";
  require_plan(plan, ctx);
  const int n = plan.shard_count();
  if (!(static_cast<int>(shards.size()) == n))
    fail(ctx, std::to_string(shards.size()) + " shard tensor sets for a plan of " + std::to_string(n) + " shards",
         "pass one ShardTensors per planned shard, in shard order");
  check_lengths(plan, lengths, ctx);
  DeviceGuard guard;
  std::vector<ShardRun> runs;
  for (int i = 0; i < n; ++i) runs.push_back(validate_shard(plan, i, shards[static_cast<std::size_t>(i)], lengths, ctx));
  if (comms == nullptr) {
    for (const ShardRun& r : runs) {
      if (r.device != runs[0].device)
        fail(ctx,
             "without communicators every shard must live on one device; shard " + std::to_string(r.spec->index) +
                 " is on device " + std::to_string(r.device) + ", shard 0 on " + std::to_string(runs[0].device),
             "pass cuda::ShardComms for shards on several devices");
    }
  } else {
    if (comms->size() != n)
      fail(ctx,
           "the communicators have " + std::to_string(comms->size()) + " ranks for " + std::to_string(n) + " shards",
           "make ShardComms with one device per planned shard");
    for (int i = 0; i < n; ++i) cp::check_comm(comms->comm(i), n, i, runs[static_cast<std::size_t>(i)].device, ctx);
  }
  if (plan.problem.decode.batch == 0) return;

  if (comms == nullptr) {
    // Simulated run on one device: everything on shard 0's stream, the gather is device copies.
    cuda_common::check(cudaSetDevice(runs[0].device), ctx, "cudaSetDevice");
    const Stream stream = shards[0].stream;
    const DecodeProblem& g = plan.problem.decode;
    const std::size_t out_bytes = static_cast<std::size_t>(g.batch * g.num_heads * g.head_dim) * 4;
    const std::size_t lse_bytes = static_cast<std::size_t>(g.batch * g.num_heads) * 4;
    for (int i = 0; i < n; ++i) decode_shard(plan, runs[static_cast<std::size_t>(i)], i, stream);
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        const ShardRun& a = runs[static_cast<std::size_t>(src)];
        const ShardRun& b = runs[static_cast<std::size_t>(dst)];
        auto s = static_cast<cudaStream_t>(stream);
        cuda_common::check(cudaMemcpyAsync(b.gather_out() + src * out_bytes / 4, a.gather_out() + src * out_bytes / 4,
                                           out_bytes, cudaMemcpyDeviceToDevice, s), ctx, "cudaMemcpyAsync");
        cuda_common::check(cudaMemcpyAsync(b.gather_lse() + src * lse_bytes / 4, a.gather_lse() + src * lse_bytes / 4,
                                           lse_bytes, cudaMemcpyDeviceToDevice, s), ctx, "cudaMemcpyAsync");
      }
    }
    for (const ShardRun& r : runs) merge_into(plan, r, stream);
    return;
  }

  std::vector<cp::GatherRank> gather;
  for (int i = 0; i < n; ++i) {
    const ShardRun& r = runs[static_cast<std::size_t>(i)];
    cuda_common::check(cudaSetDevice(r.device), ctx, "cudaSetDevice");
    decode_shard(plan, r, i, r.tensors->stream);
    gather.push_back(gather_rank(plan, r, i, comms->comm(i)));
  }
  cp::all_gather_states(gather);
  for (const ShardRun& r : runs) {
    cuda_common::check(cudaSetDevice(r.device), ctx, "cudaSetDevice");
    merge_into(plan, r, r.tensors->stream);
  }
}

void sharded_decode_rank(const ShardedDecodePlan& plan, int rank, const ShardTensors& shard,
                         std::span<const std::int32_t> lengths, void* nccl_comm) {
  const char* ctx = "cuda::sharded_decode_rank";
  require_plan(plan, ctx);
  if (!(rank >= 0 && rank < plan.shard_count()))
    fail(ctx, "rank " + std::to_string(rank) + " has no shard", "pass 0 <= rank < plan.shard_count()");
  check_lengths(plan, lengths, ctx);
  DeviceGuard guard;
  const ShardRun r = validate_shard(plan, rank, shard, lengths, ctx);
  cp::check_comm(nccl_comm, plan.shard_count(), rank, r.device, ctx);
  if (plan.problem.decode.batch == 0) return;
  cuda_common::check(cudaSetDevice(r.device), ctx, "cudaSetDevice");
  decode_shard(plan, r, rank, shard.stream);
  cp::all_gather_states({gather_rank(plan, r, rank, nccl_comm)});
  merge_into(plan, r, shard.stream);
}

void sharded_append_kv(const ShardedDecodePlan& plan, int shard, const ShardAppendTensors& t,
                       std::span<const std::int32_t> positions) {
  const char* ctx = "cuda::sharded_append_kv";
  require_plan(plan, ctx);
  if (!(shard >= 0 && shard < plan.shard_count()))
    fail(ctx, "shard " + std::to_string(shard) + " does not exist", "pass 0 <= shard < plan.shard_count()");
  const DecodeProblem& g = plan.problem.decode;
  const ShardSpec& spec = plan.shards[static_cast<std::size_t>(shard)];
  if (!(static_cast<std::int64_t>(positions.size()) == g.batch))
    fail(ctx, std::to_string(positions.size()) + " positions for a batch of " + std::to_string(g.batch),
         "pass one global position per sequence");
  for (std::size_t b = 0; b < positions.size(); ++b) {
    if (!(positions[b] >= 0 && positions[b] < g.max_seq))
      fail(ctx,
           "positions[" + std::to_string(b) + "]=" + std::to_string(positions[b]) +
               " is outside [0, max_seq=" + std::to_string(g.max_seq) + ")",
           "append below the planned max_seq (plan a larger max_seq for a longer context)");
  }
  // Shapes, dtypes and devices through the shared append validation, with a placeholder positions
  // tensor (the real ones are host values, routed here).
  const TensorView& any_cache = t.k_cache.empty() ? t.v_cache : t.k_cache;
  if (any_cache.empty()) fail(ctx, "no cache given", "pass k_cache with k_new and/or v_cache with v_new");
  const int device = device_of(any_cache.data, ctx, any_cache.data == t.k_cache.data ? "k_cache" : "v_cache");
  AppendTensors at{t.k_new, t.v_new, t.k_cache, t.v_cache,
                   TensorView::contiguous(any_cache.data, DType::kI32, {g.batch}, DeviceKind::kCuda, device)};
  validate_append(at, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.k_new, "k_new"}, {&t.v_new, "v_new"}, {&t.k_cache, "k_cache"}, {&t.v_cache, "v_cache"}}) {
    if (view->empty()) continue;
    if (device_of(view->data, ctx, name) != device)
      fail(ctx, std::string(name) + " is on another device than the cache", "allocate the shard's tensors on its GPU");
    if (view == &t.k_cache || view == &t.v_cache) {
      if (!(view->shape[0] == g.batch && view->shape[1] == g.kv_heads && view->shape[2] == spec.capacity &&
            view->shape[3] == g.head_dim && view->dtype == g.kv_dtype))
        fail(ctx,
             std::string(name) + " is " + view->describe() + ", shard " + std::to_string(shard) + " needs " +
                 std::string(dtype_name(g.kv_dtype)) + "[" + std::to_string(g.batch) + ", " +
                 std::to_string(g.kv_heads) + ", " + std::to_string(spec.capacity) + ", " + std::to_string(g.head_dim) +
                 "]",
             "allocate each shard's cache with its planned capacity (ShardSpec::capacity)");
    }
  }
  DeviceGuard guard;
  cuda_common::check(cudaSetDevice(device), ctx, "cudaSetDevice");
  cp::RoutedAppendParams p;
  p.k_new = t.k_new.data;
  p.v_new = t.v_new.data;
  if (!t.k_new.empty()) p.k_new_stride_b = t.k_new.strides[0], p.k_new_stride_h = t.k_new.strides[1];
  if (!t.v_new.empty()) p.v_new_stride_b = t.v_new.strides[0], p.v_new_stride_h = t.v_new.strides[1];
  p.k_cache = t.k_cache.data;
  p.v_cache = t.v_cache.data;
  if (!t.k_cache.empty()) p.k_stride_b = t.k_cache.strides[0], p.k_stride_h = t.k_cache.strides[1], p.k_stride_s = t.k_cache.strides[2];
  if (!t.v_cache.empty()) p.v_stride_b = t.v_cache.strides[0], p.v_stride_h = t.v_cache.strides[1], p.v_stride_s = t.v_cache.strides[2];
  p.kv_heads = static_cast<int>(g.kv_heads);
  p.head_dim = static_cast<int>(g.head_dim);
  p.element_bytes = static_cast<int>(dtype_size(g.kv_dtype));
  for (std::int64_t first = 0; first < g.batch; first += cp::kMaxSequencesPerLaunch) {
    p.first = static_cast<int>(first);
    p.positions.count = static_cast<int>(std::min<std::int64_t>(cp::kMaxSequencesPerLaunch, g.batch - first));
    bool any = false;
    for (int i = 0; i < p.positions.count; ++i) {
      const std::int64_t pos = positions[static_cast<std::size_t>(first + i)];
      const bool mine = pos >= spec.begin && pos < spec.end();
      p.positions.values[i] = mine ? static_cast<std::int32_t>(pos - spec.begin) : -1;
      any = any || mine;
    }
    if (any) cp::launch_routed_append(p, t.stream);  // a shard that owns none of the tokens launches nothing
  }
}

}  // namespace attnkit::cuda
