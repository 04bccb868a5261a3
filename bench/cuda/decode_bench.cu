// The CUDA benchmark driver (bench.hpp's run_cuda and cuda_read_ceiling): decode cases here,
// prefill cases handed to run_cuda_prefill (prefill_bench.cu, the prefill engineer's).
//
// Protocol (DESIGN.md): K/V filled on the device with random values, warm-up runs, then
// `repetitions` timed runs, each preceded by a 256 MiB memset so no run reads warm L2 (the H200's
// L2 is 60 MB) and timed with CUDA events around the call; median, min, max. Batch-1 points are
// also timed as CUDA-graph replays (decode + merge captured once), which removes the launch gaps.
// The read ceiling is a 16-byte-load streaming kernel over a 4 GiB buffer, measured in the same run;
// each row carries the plan's predicted bytes and predicted time (bytes / ceiling) beside the
// measured time. Points whose K/V cache exceeds 40 GB are skipped (row.skipped says so).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "bench.hpp"
#include "cuda/prefill_bench.hpp"
#include "cuda/device_support.cuh"

namespace attnkit::bench {
namespace {

constexpr const char* kContext = "bench (cuda decode)";
constexpr std::size_t kCeilingBytes = std::size_t{4} << 30;
constexpr double kMaxCaseBytes = 40e9;
using device::kFlushBytes;
using device::time_events;
using device::Timing;
using DeviceBuffer = device::Buffer;

void check(cudaError_t err, const char* what) { device::check(err, kContext, what); }
void fill(void* data, DType t, std::int64_t n, std::uint32_t seed) { device::fill_random(data, t, n, seed); }

__global__ void fill_i32(std::int32_t* x, std::int64_t n, std::int32_t value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

// Streams the buffer with 16-byte loads, four in flight per thread; the sum is written only if it
// matches an impossible value, so the loads cannot be removed.
__global__ void read_ceiling_kernel(const uint4* data, std::int64_t n, unsigned* sink) {
  unsigned acc = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride], d = data[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = data[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

Row base_row(const Case& c, const DecodePlan& plan, double ceiling) {
  Row r;
  r.c = c;
  r.backend = "cuda";
  r.impl = "attnkit";
  r.family = to_string(plan.partition.family);
  // A left-padded case reads only its real keys: the bytes a plan of those would move.
  const DecodePlan& read = c.left_pad > 0 ? plan_decode(real_keys_problem(c), plan.target) : plan;
  r.bytes = static_cast<double>(read.evidence.traffic.global_read_bytes + read.evidence.traffic.global_write_bytes);
  r.flops = static_cast<double>(plan.evidence.matmul_flops);
  r.ceiling_name = "read-bandwidth";
  r.ceiling_value = ceiling;
  r.predicted_s = r.bytes / ceiling;
  r.plan_json = to_json(plan);
  return r;
}

void set_timing(Row& r, const Timing& t) {
  r.median_s = t.median_s;
  r.min_s = t.min_s;
  r.max_s = t.max_s;
  r.repetitions = t.repetitions;
  r.achieved_bytes_per_s = r.bytes / t.median_s;
  r.achieved_flops_per_s = r.flops / t.median_s;
  r.pct_of_ceiling = 100.0 * r.achieved_bytes_per_s / r.ceiling_value;
}

std::vector<Row> run_decode_cases(const std::vector<Case>& cases, const Options& options, double ceiling) {
  std::vector<Row> rows;
  const Target target = cuda::target();
  DeviceBuffer flush(kFlushBytes);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (const Case& c : cases) {
    if (c.op != "decode") continue;
    if (options.progress) {
      options.progress("decode " + std::string(dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " kv" +
                       std::to_string(c.kv_len));
    }
    const DecodeProblem p = decode_problem(c);
    DecodePlan plan;
    try {
      plan = options.family ? plan_decode(p, target, *options.family) : plan_decode(p, target);
    } catch (const Error& e) {  // a family asked for that cannot run this case: reported, not timed
      Row r;
      r.c = c;
      r.backend = "cuda";
      r.impl = "attnkit";
      r.skipped = e.what();
      rows.push_back(r);
      continue;
    }
    Row r = base_row(c, plan, ceiling);
    const std::int64_t q_elems = p.batch * p.num_heads * p.head_dim;
    const std::int64_t kv_elems = p.batch * p.kv_heads * p.max_seq * p.head_dim;
    const double cache_bytes = 2.0 * static_cast<double>(kv_elems) * dtype_size(p.kv_dtype);
    if (cache_bytes > kMaxCaseBytes) {
      r.skipped = "K/V cache of " + std::to_string(cache_bytes / 1e9) + " GB exceeds the 40 GB limit of the sweep";
      r.skipped_by_limit = true;
      rows.push_back(r);
      continue;
    }
    const std::size_t es = dtype_size(p.kv_dtype);
    DeviceBuffer q(q_elems * dtype_size(p.q_dtype)), k(kv_elems * es), v(kv_elems * es),
        out(q_elems * dtype_size(p.out_dtype)), lengths(p.batch * 4);
    DeviceBuffer ws(plan.evidence.workspace_bytes);
    fill(q.data, p.q_dtype, q_elems, 21);
    fill(k.data, p.kv_dtype, kv_elems, 22);
    fill(v.data, p.kv_dtype, kv_elems, 23);
    fill_i32<<<64, 256>>>(static_cast<std::int32_t*>(lengths.data), p.batch, static_cast<std::int32_t>(p.kv_len));
    check(cudaDeviceSynchronize(), "fill");
    DeviceBuffer sinks(options.sinks ? p.num_heads * 4 : 0);
    if (options.sinks) fill(sinks.data, DType::kF32, p.num_heads, 24);
    DeviceBuffer starts(c.left_pad > 0 ? p.batch * 4 : 0);
    if (c.left_pad > 0) {
      fill_i32<<<64, 256>>>(static_cast<std::int32_t*>(starts.data), p.batch, static_cast<std::int32_t>(c.left_pad));
      check(cudaDeviceSynchronize(), "fill");
    }
    DecodeTensors t{
        TensorView::contiguous(q.data, p.q_dtype, {p.batch, p.num_heads, p.head_dim}, DeviceKind::kCuda),
        TensorView::contiguous(k.data, p.kv_dtype, {p.batch, p.kv_heads, p.max_seq, p.head_dim}, DeviceKind::kCuda),
        TensorView::contiguous(v.data, p.kv_dtype, {p.batch, p.kv_heads, p.max_seq, p.head_dim}, DeviceKind::kCuda),
        TensorView::contiguous(lengths.data, DType::kI32, {p.batch}, DeviceKind::kCuda),
        TensorView::contiguous(out.data, p.out_dtype, {p.batch, p.num_heads, p.head_dim}, DeviceKind::kCuda),
        {}};
    if (options.sinks) t.sinks = TensorView::contiguous(sinks.data, DType::kF32, {p.num_heads}, DeviceKind::kCuda);
    if (c.left_pad > 0) t.key_starts = TensorView::contiguous(starts.data, DType::kI32, {p.batch}, DeviceKind::kCuda);
    // An e4m3 cache's scales: not 1, so the timed path is a quantized cache's (speed does not depend on them).
    if (is_fp8(p.kv_dtype)) t.kv_scales = {0.5f, 0.25f};
    const Workspace workspace{ws.data, plan.evidence.workspace_bytes, DeviceKind::kCuda};
    const Timing plain = time_events(options, stream, flush.data, [&] { cuda::decode(plan, t, workspace, stream); });
    r.timing = "events";
    set_timing(r, plain);
    rows.push_back(r);

    if (c.batch == 1) {
      // The same call captured once as a CUDA graph (decode + merge) and replayed.
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
      cuda::decode(plan, t, workspace, stream);
      check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
      const Timing replay = time_events(options, stream, flush.data, [&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); });
      Row g = base_row(c, plan, ceiling);
      g.timing = "graph";
      set_timing(g, replay);
      rows.push_back(g);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaStreamDestroy(stream);
  return rows;
}

}  // namespace

double cuda_read_ceiling(const Options& options) {
  if (!(cuda::built() && cuda::device_count() > 0))
    fail(kContext, "no CUDA device", "run the CUDA benchmark on a GPU machine");
  DeviceBuffer data(kCeilingBytes), sink(16), flush(kFlushBytes);
  check(cudaMemset(data.data, 1, kCeilingBytes), "cudaMemset");
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const std::int64_t vectors = static_cast<std::int64_t>(kCeilingBytes / 16);
  Options o = options;
  o.repetitions = std::min(std::max(options.repetitions, 5), 20);
  const Timing t = time_events(o, nullptr, flush.data, [&] {
    read_ceiling_kernel<<<sms * 8, 512>>>(static_cast<const uint4*>(data.data), vectors, static_cast<unsigned*>(sink.data));
  });
  check(cudaGetLastError(), "read_ceiling_kernel");
  return static_cast<double>(kCeilingBytes) / t.median_s;
}

std::vector<Row> run_cuda(const std::vector<Case>& cases, const Options& options) {
  if (!(cuda::built() && cuda::device_count() > 0))
    fail(kContext, "no CUDA device", "run the CUDA benchmark on a GPU machine");
  std::vector<Row> rows;
  std::vector<Case> prefill_cases;
  bool any_decode = false;
  for (const Case& c : cases) {
    if (c.op == "prefill") prefill_cases.push_back(c);
    any_decode = any_decode || c.op == "decode";
  }
  if (any_decode) {
    const double ceiling = cuda_read_ceiling(options);
    Row ceiling_row;
    ceiling_row.backend = "cuda";
    ceiling_row.impl = "read-ceiling";
    ceiling_row.timing = "events";
    ceiling_row.bytes = static_cast<double>(kCeilingBytes);
    ceiling_row.median_s = ceiling_row.bytes / ceiling;
    ceiling_row.achieved_bytes_per_s = ceiling;
    ceiling_row.ceiling_name = "read-bandwidth";
    ceiling_row.ceiling_value = ceiling;
    ceiling_row.pct_of_ceiling = 100.0;
    rows.push_back(ceiling_row);
    std::vector<Row> decode_rows = run_decode_cases(cases, options, ceiling);
    rows.insert(rows.end(), decode_rows.begin(), decode_rows.end());
  }
  if (!prefill_cases.empty()) {
    std::vector<Row> prefill_rows = run_cuda_prefill(prefill_cases, options);
    rows.insert(rows.end(), prefill_rows.begin(), prefill_rows.end());
  }
  return rows;
}

}  // namespace attnkit::bench
