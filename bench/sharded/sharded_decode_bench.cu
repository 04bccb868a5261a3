// Context-parallel decode latency on 1..8 GPUs of one host (docs/context-parallel.md).
//
// For each GPU count g: plan_sharded_decode over devices 0..g-1 (one target each), shard caches
// filled with random values on their GPUs, then `reps` timed steps after a warm-up. Before every
// step each GPU writes a 256 MiB buffer (no step reads warm L2) and all GPUs synchronise; the step
// is timed with CUDA events on every GPU around its whole share (lengths, decode, all-gather,
// merge) and the step's latency is the largest of them (every GPU's merge waits for the gather,
// which waits for every decode). Modes: "process" (one thread drives every GPU through
// cuda::sharded_decode and ShardComms) and "threads" (one thread per rank, sharded_decode_rank, as
// one process per rank would). The 1-GPU baseline is the plain cuda::decode over the whole cache
// (plan_decode, no NCCL), timed the same way. NCCL_NVLS_ENABLE=0 is set before any communicator.
// Host work: before each start event every GPU runs a hold kernel (--hold-us of device time), so the
// host's validation and launches for the step happen while the GPU is busy, as in an engine whose CPU
// runs ahead of the GPU (or replays a graph); the window then holds device time only. --hold-us 0
// times the host work too (the GPU idles from the start event until the first kernel arrives).
// Output: one JSON object (stdout or --json FILE) with the plan's prediction beside each median.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/context_parallel.hpp"
#include "cuda/device_support.cuh"

namespace {

using namespace attnkit;
namespace dev = attnkit::bench::device;
using json = nlohmann::json;
constexpr const char* kCtx = "sharded bench";

void check(cudaError_t e, const char* what) { dev::check(e, kCtx, what); }

struct Settings {
  std::vector<int> gpus{1, 2, 4, 8};
  std::int64_t kv_len = 1 << 20, batch = 1, heads = 32, kv_heads = 8, head_dim = 128;
  std::string dtype = "bf16";
  std::vector<std::string> modes{"process", "threads"};
  int reps = 50, warmup = 10;
  int hold_us = 500;  // device time queued before each start event (0 = none)
  std::string json_path;
};

struct Stats {
  double median = 0, min = 0, p90 = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

// One GPU's buffers for one shard.
struct ShardBuffers {
  int device = 0;
  std::unique_ptr<dev::Buffer> q, k, v, out, lse, ws, flush;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda::ShardTensors tensors;
};

DecodeProblem problem_of(const Settings& s) {
  DecodeProblem p;
  p.batch = s.batch, p.num_heads = s.heads, p.kv_heads = s.kv_heads, p.head_dim = s.head_dim;
  p.max_seq = p.kv_len = s.kv_len;
  p.kv_dtype = p.q_dtype = p.out_dtype = parse_dtype(s.dtype);
  return p;
}

std::unique_ptr<ShardBuffers> make_shard(const DecodeProblem& g, int device, std::int64_t capacity, std::uint64_t ws_bytes,
                                         std::uint32_t seed) {
  auto b = std::make_unique<ShardBuffers>();
  b->device = device;
  check(cudaSetDevice(device), "cudaSetDevice");
  const std::size_t e = dtype_size(g.kv_dtype);
  const std::int64_t cache_elems = g.batch * g.kv_heads * capacity * g.head_dim;
  const std::int64_t q_elems = g.batch * g.num_heads * g.head_dim;
  b->q = std::make_unique<dev::Buffer>(static_cast<std::size_t>(q_elems) * e);
  b->k = std::make_unique<dev::Buffer>(static_cast<std::size_t>(cache_elems) * e);
  b->v = std::make_unique<dev::Buffer>(static_cast<std::size_t>(cache_elems) * e);
  b->out = std::make_unique<dev::Buffer>(static_cast<std::size_t>(q_elems) * e);
  b->lse = std::make_unique<dev::Buffer>(static_cast<std::size_t>(g.batch * g.num_heads) * 4);
  b->ws = std::make_unique<dev::Buffer>(ws_bytes);
  b->flush = std::make_unique<dev::Buffer>(dev::kFlushBytes);
  dev::fill_random(b->q->data, g.q_dtype, q_elems, 7);  // the same q on every GPU
  dev::fill_random(b->k->data, g.kv_dtype, cache_elems, seed);
  dev::fill_random(b->v->data, g.kv_dtype, cache_elems, seed + 1);
  check(cudaDeviceSynchronize(), "fill");
  check(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&b->start), "cudaEventCreate");
  check(cudaEventCreate(&b->stop), "cudaEventCreate");
  auto& t = b->tensors;
  t.q = TensorView::contiguous(b->q->data, g.q_dtype, {g.batch, g.num_heads, g.head_dim}, DeviceKind::kCuda, device);
  t.k_cache = TensorView::contiguous(b->k->data, g.kv_dtype, {g.batch, g.kv_heads, capacity, g.head_dim}, DeviceKind::kCuda, device);
  t.v_cache = TensorView::contiguous(b->v->data, g.kv_dtype, {g.batch, g.kv_heads, capacity, g.head_dim}, DeviceKind::kCuda, device);
  t.out = TensorView::contiguous(b->out->data, g.out_dtype, {g.batch, g.num_heads, g.head_dim}, DeviceKind::kCuda, device);
  t.lse = TensorView::contiguous(b->lse->data, DType::kF32, {g.batch, g.num_heads}, DeviceKind::kCuda, device);
  t.workspace = Workspace{b->ws->data, ws_bytes, DeviceKind::kCuda};
  t.stream = b->stream;
  return b;
}

// Keeps the stream busy for `ns` of device time (the %globaltimer clock): the host queues the timed
// step's work behind it.
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(500);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

void hold(const Settings& s, cudaStream_t stream) {
  if (s.hold_us <= 0) return;
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(s.hold_us) * 1000ULL);
  check(cudaGetLastError(), "hold_kernel");
}

float elapsed(const ShardBuffers& b) {
  float ms = 0;
  check(cudaEventSynchronize(b.stop), "cudaEventSynchronize");
  check(cudaEventElapsedTime(&ms, b.start, b.stop), "cudaEventElapsedTime");
  return ms * 1e-3f;
}

void flush_and_sync(ShardBuffers& b, int rep) {
  check(cudaSetDevice(b.device), "cudaSetDevice");
  check(cudaMemsetAsync(b.flush->data, rep & 0xff, dev::kFlushBytes, b.stream), "flush");
  check(cudaStreamSynchronize(b.stream), "sync");
}

// The plain single-GPU decode over the whole cache: the baseline of the speed-up.
json bench_single(const Settings& s) {
  const DecodeProblem g = problem_of(s);
  check(cudaSetDevice(0), "cudaSetDevice");
  const DecodePlan plan = plan_decode(g, cuda::target(0));
  auto b = make_shard(g, 0, g.max_seq, plan.evidence.workspace_bytes, 11);
  dev::Buffer lengths(static_cast<std::size_t>(g.batch) * 4);
  std::vector<std::int32_t> host(static_cast<std::size_t>(g.batch), static_cast<std::int32_t>(g.kv_len));
  check(cudaMemcpy(lengths.data, host.data(), host.size() * 4, cudaMemcpyHostToDevice), "lengths");
  DecodeTensors t{b->tensors.q, b->tensors.k_cache, b->tensors.v_cache,
                  TensorView::contiguous(lengths.data, DType::kI32, {g.batch}, DeviceKind::kCuda, 0), b->tensors.out, b->tensors.lse};
  const Workspace ws{b->ws->data, plan.evidence.workspace_bytes, DeviceKind::kCuda};
  std::vector<double> times;
  for (int rep = -s.warmup; rep < s.reps; ++rep) {
    flush_and_sync(*b, rep);
    hold(s, b->stream);
    check(cudaEventRecord(b->start, b->stream), "record");
    cuda::decode(plan, t, ws, b->stream);
    check(cudaEventRecord(b->stop, b->stream), "record");
    const double sec = elapsed(*b);
    if (rep >= 0) times.push_back(sec);
  }
  const Stats st = stats(times);
  return {{"gpus", 1},
          {"mode", "single_gpu_decode"},
          {"median_s", st.median},
          {"min_s", st.min},
          {"p90_s", st.p90},
          {"read_bytes", plan.evidence.traffic.global_read_bytes},
          {"achieved_read_bytes_per_s", static_cast<double>(plan.evidence.traffic.global_read_bytes) / st.median},
          {"predicted_s", plan.evidence.predicted_seconds},
          {"sequence_splits", plan.partition.sequence_splits}};
}

json bench_sharded(const Settings& s, int gpus, const std::string& mode) {
  const DecodeProblem g = problem_of(s);
  ShardedDecodeProblem sp;
  sp.decode = g;
  std::vector<Target> targets;
  for (int d = 0; d < gpus; ++d) targets.push_back(cuda::target(d));
  const ShardedDecodePlan plan = plan_sharded_decode(sp, targets);
  std::vector<std::unique_ptr<ShardBuffers>> shards;
  std::vector<cuda::ShardTensors> tensors;
  for (const ShardSpec& spec : plan.shards) {
    shards.push_back(make_shard(g, spec.index, spec.capacity, spec.workspace_bytes, 100 + 2 * static_cast<std::uint32_t>(spec.index)));
    tensors.push_back(shards.back()->tensors);
  }
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  cuda::ShardComms comms(devices);
  const std::vector<std::int32_t> lengths(static_cast<std::size_t>(g.batch), static_cast<std::int32_t>(g.kv_len));
  std::vector<double> times;
  if (mode == "process") {
    for (int rep = -s.warmup; rep < s.reps; ++rep) {
      for (auto& b : shards) flush_and_sync(*b, rep);
      for (auto& b : shards) {
        check(cudaSetDevice(b->device), "cudaSetDevice");
        hold(s, b->stream);
        check(cudaEventRecord(b->start, b->stream), "record");
      }
      cuda::sharded_decode(plan, tensors, lengths, &comms);
      for (auto& b : shards) {
        check(cudaSetDevice(b->device), "cudaSetDevice");
        check(cudaEventRecord(b->stop, b->stream), "record");
      }
      double worst = 0;
      for (auto& b : shards) worst = std::max<double>(worst, elapsed(*b));
      if (rep >= 0) times.push_back(worst);
    }
  } else {
    std::vector<std::vector<double>> per_rank(static_cast<std::size_t>(gpus));
    std::barrier sync(gpus);
    std::vector<std::thread> threads;
    for (int r = 0; r < gpus; ++r) {
      threads.emplace_back([&, r] {
        ShardBuffers& b = *shards[static_cast<std::size_t>(r)];
        try {
          for (int rep = -s.warmup; rep < s.reps; ++rep) {
            flush_and_sync(b, rep);
            sync.arrive_and_wait();
            hold(s, b.stream);
            check(cudaEventRecord(b.start, b.stream), "record");
            cuda::sharded_decode_rank(plan, r, b.tensors, lengths, comms.comm(r));
            check(cudaEventRecord(b.stop, b.stream), "record");
            const double sec = elapsed(b);
            if (rep >= 0) per_rank[static_cast<std::size_t>(r)].push_back(sec);
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          std::abort();  // the other ranks would wait in the collective forever
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int rep = 0; rep < s.reps; ++rep) {
      double worst = 0;
      for (const auto& v : per_rank) worst = std::max(worst, v[static_cast<std::size_t>(rep)]);
      times.push_back(worst);
    }
  }
  for (auto& b : shards) {
    check(cudaSetDevice(b->device), "cudaSetDevice");
    cudaEventDestroy(b->start);
    cudaEventDestroy(b->stop);
    cudaStreamDestroy(b->stream);
  }
  const Stats st = stats(times);
  std::uint64_t max_read = 0;
  for (const ShardSpec& spec : plan.shards) max_read = std::max(max_read, spec.read_bytes);
  return {{"gpus", gpus},
          {"mode", mode},
          {"median_s", st.median},
          {"min_s", st.min},
          {"p90_s", st.p90},
          {"largest_shard_read_bytes", max_read},
          {"achieved_read_bytes_per_s_per_gpu", static_cast<double>(max_read) / st.median},
          {"predicted_s", plan.predicted_seconds},
          {"predicted_decode_s", plan.predicted_decode_seconds},
          {"predicted_comm_s", plan.predicted_comm_seconds},
          {"bytes_communicated", plan.bytes_communicated},
          {"plan", json::parse(to_json(plan))}};
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) setenv("NCCL_NVLS_ENABLE", "0", 1);
  Settings s;
  CLI::App app{"attnkit context-parallel decode benchmark (1..8 GPUs)"};
  app.add_option("--gpus", s.gpus, "GPU counts")->delimiter(',')->capture_default_str();
  app.add_option("--kv-len", s.kv_len, "context length (keys)")->capture_default_str();
  app.add_option("--batch", s.batch)->capture_default_str();
  app.add_option("--heads", s.heads)->capture_default_str();
  app.add_option("--kv-heads", s.kv_heads)->capture_default_str();
  app.add_option("--head-dim", s.head_dim)->capture_default_str();
  app.add_option("--dtype", s.dtype, "f32, f16 or bf16")->capture_default_str();
  app.add_option("--mode", s.modes, "process, threads")->delimiter(',')->capture_default_str();
  app.add_option("--reps", s.reps)->capture_default_str();
  app.add_option("--warmup", s.warmup)->capture_default_str();
  app.add_option("--hold-us", s.hold_us, "device time queued before each start event, hiding host launch work (0 = none)")
      ->capture_default_str();
  app.add_option("--json", s.json_path, "write the JSON here (default stdout)");
  CLI11_PARSE(app, argc, argv);
  try {
    const int available = cuda::device_count();
    if (available <= 0) fail(kCtx, "no CUDA device", "run on a machine with GPUs");
    if (!cuda::nccl_built()) fail(kCtx, "attnkit was built without NCCL", "install NCCL and rebuild");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    json rows = json::array();
    const json single = bench_single(s);
    rows.push_back(single);
    std::fprintf(stderr, "1 GPU plain decode: %.1f us\n", single["median_s"].get<double>() * 1e6);
    for (int gpus : s.gpus) {
      if (gpus > available) {
        rows.push_back({{"gpus", gpus}, {"skipped", "only " + std::to_string(available) + " GPUs"}});
        continue;
      }
      for (const std::string& mode : s.modes) {
        json row = bench_sharded(s, gpus, mode);
        row["speedup_vs_single_gpu_decode"] = single["median_s"].get<double>() / row["median_s"].get<double>();
        std::fprintf(stderr, "%d GPU(s) %-8s: %.1f us (predicted %.1f us), %.2fx vs 1 GPU\n", gpus, mode.c_str(),
                     row["median_s"].get<double>() * 1e6, row["predicted_s"].get<double>() * 1e6,
                     row["speedup_vs_single_gpu_decode"].get<double>());
        rows.push_back(std::move(row));
      }
    }
    const char* commit = std::getenv("ATTNKIT_COMMIT");
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    const json doc = {{"device", prop.name},
                      {"devices_available", available},
                      {"commit", commit ? commit : "unknown"},
                      {"command", command},
                      {"nccl_nvls_enable", std::getenv("NCCL_NVLS_ENABLE")},
                      {"problem", {{"kv_len", s.kv_len}, {"batch", s.batch}, {"heads", s.heads}, {"kv_heads", s.kv_heads},
                                   {"head_dim", s.head_dim}, {"dtype", s.dtype}}},
                      {"repetitions", s.reps},
                      {"hold_us", s.hold_us},
                      {"rows", rows}};
    if (s.json_path.empty()) {
      std::printf("%s\n", doc.dump(2).c_str());
    } else {
      std::ofstream(s.json_path) << doc.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
