// Context-parallel decode on CUDA (label gpu): the simulated multi-shard run (several shards on
// device 0, merged there), the one-rank NCCL runs (ShardComms and the per-rank entry), routed
// append, rejects, and, with two or more GPUs, the real multi-GPU runs (one thread driving every
// GPU, and one thread per rank). Each compares the merged output on every shard against the
// float64 golden and against the single-GPU cuda::decode of the whole cache. Global cache rows a
// sequence must not see hold NaN, so a shard that reads outside its slice fails. Skips, visibly,
// without a GPU (and the NCCL parts without NCCL or without enough GPUs).
#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "attnkit/context_parallel.hpp"
#include "cuda/decode_support.hpp"

namespace attnkit::testing::cuda_decode_tests {
namespace {

void nvls_off() { setenv("NCCL_NVLS_ENABLE", "0", 1); }

struct GlobalCase {
  DecodeProblem problem;
  std::vector<std::int32_t> lengths;
  HostTensor q, k, v, lengths_host;
  std::uint64_t seed = 0;
};

// q random; cache rows random where the sequence sees them, NaN elsewhere (and everywhere when
// `all_live`, for append tests that later grow the visible range).
GlobalCase make_case(const DecodeProblem& p, std::vector<std::int32_t> lengths, bool all_live = false) {
  GlobalCase c;
  c.problem = p;
  c.lengths = std::move(lengths);
  c.seed = fresh_seed();
  std::mt19937_64 rng(c.seed);
  c.q = HostTensor(p.q_dtype, {p.batch, p.num_heads, p.head_dim});
  c.k = HostTensor(p.kv_dtype, {p.batch, p.kv_heads, p.max_seq, p.head_dim});
  c.v = HostTensor(p.kv_dtype, {p.batch, p.kv_heads, p.max_seq, p.head_dim});
  c.lengths_host = HostTensor(DType::kI32, {p.batch});
  fill_normal(c.q, rng);
  fill_normal(c.k, rng);
  fill_normal(c.v, rng);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int32_t len = c.lengths[static_cast<std::size_t>(b)];
    c.lengths_host.i32()[b] = len;
    if (all_live) continue;
    const KeyRange vis = visible_keys(len - 1, len, true, p.options.window);
    for (std::int64_t g = 0; g < p.kv_heads; ++g) {
      for (std::int64_t s = 0; s < p.max_seq; ++s) {
        if (s >= vis.begin && s < vis.end) continue;
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          const auto i = static_cast<std::size_t>(((b * p.kv_heads + g) * p.max_seq + s) * p.head_dim + d);
          c.k.set(i, std::numeric_limits<float>::quiet_NaN());
          c.v.set(i, std::numeric_limits<float>::quiet_NaN());
        }
      }
    }
  }
  return c;
}

// Shard `s`'s cache: rows [begin, begin + capacity) of the global cache, NaN past max_seq.
HostTensor shard_cache(const HostTensor& global, const DecodeProblem& p, const ShardSpec& s) {
  HostTensor c(p.kv_dtype, {p.batch, p.kv_heads, s.capacity, p.head_dim});
  poison(c);
  const std::size_t e = dtype_size(p.kv_dtype);
  const std::int64_t keys = std::min(s.capacity, p.max_seq - s.begin);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t g = 0; g < p.kv_heads; ++g) {
      const auto src = static_cast<std::size_t>(((b * p.kv_heads + g) * p.max_seq + s.begin) * p.head_dim);
      const auto dst = static_cast<std::size_t>((b * p.kv_heads + g) * s.capacity * p.head_dim);
      std::memcpy(c.bytes.data() + dst * e, global.bytes.data() + src * e, static_cast<std::size_t>(keys * p.head_dim) * e);
    }
  }
  return c;
}

// One shard's device buffers on `device`.
struct DeviceShard {
  int device = 0;
  std::unique_ptr<DeviceTensor> q, k, v, out, lse;
  std::unique_ptr<DeviceWorkspace> ws;
  HostTensor out_host, lse_host;
  cuda::ShardTensors tensors(cuda::Stream stream = nullptr) const {
    cuda::ShardTensors t;
    t.q = q->view, t.k_cache = k->view, t.v_cache = v->view, t.out = out->view, t.lse = lse->view;
    t.q.device_index = t.k_cache.device_index = t.v_cache.device_index = t.out.device_index = t.lse.device_index = device;
    t.workspace = ws->view();
    t.stream = stream;
    return t;
  }
  void download() {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    out->copy_to(out_host);
    lse->copy_to(lse_host);
  }
};

std::vector<std::unique_ptr<DeviceShard>> upload(const ShardedDecodePlan& plan, const GlobalCase& c,
                                                 const std::vector<int>& devices) {
  const DecodeProblem& p = c.problem;
  std::vector<std::unique_ptr<DeviceShard>> shards;
  for (const ShardSpec& s : plan.shards) {
    auto d = std::make_unique<DeviceShard>();
    d->device = devices[static_cast<std::size_t>(s.index)];
    EXPECT_EQ(cudaSetDevice(d->device), cudaSuccess);
    HostTensor k = shard_cache(c.k, p, s), v = shard_cache(c.v, p, s);
    d->out_host = HostTensor(p.out_dtype, {p.batch, p.num_heads, p.head_dim});
    d->lse_host = HostTensor(DType::kF32, {p.batch, p.num_heads});
    poison(d->out_host);
    poison(d->lse_host);
    d->q = std::make_unique<DeviceTensor>(c.q);
    d->k = std::make_unique<DeviceTensor>(k);
    d->v = std::make_unique<DeviceTensor>(v);
    d->out = std::make_unique<DeviceTensor>(d->out_host);
    d->lse = std::make_unique<DeviceTensor>(d->lse_host);
    d->ws = std::make_unique<DeviceWorkspace>(s.workspace_bytes);
    shards.push_back(std::move(d));
  }
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  return shards;
}

// The single-GPU answer: cuda::decode over the whole global cache on device 0. Its plan covers the
// longest sequence: a sequence that grew past the sharded plan's kv_len (into the last shard) is
// still attended in full there, while a single-GPU plan clamps lengths to its kv_len.
HostTensor single_gpu(const GlobalCase& c) {
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  DecodeProblem whole = c.problem;
  for (std::int32_t len : c.lengths) whole.kv_len = std::max<std::int64_t>(whole.kv_len, len);
  const DecodePlan plan = plan_decode(whole, cuda::target(0));
  HostTensor out(c.problem.out_dtype, {c.problem.batch, c.problem.num_heads, c.problem.head_dim});
  HostTensor lse(DType::kF32, {c.problem.batch, c.problem.num_heads});
  poison(out);
  poison(lse);
  DeviceTensor q(c.q), k(c.k), v(c.v), len(c.lengths_host), d_out(out), d_lse(lse);
  DeviceWorkspace ws(plan.evidence.workspace_bytes);
  cuda::decode(plan, {q.view, k.view, v.view, len.view, d_out.view, d_lse.view}, ws.view());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_out.copy_to(out);
  return out;
}

void expect_all_shards_match(const GlobalCase& c, std::vector<std::unique_ptr<DeviceShard>>& shards, const std::string& name) {
  const DecodeProblem& p = c.problem;
  const reference::Result golden = reference::decode(p, {c.q.view, c.k.view, c.v.view, c.lengths_host.view, {}, {}});
  const HostTensor single = single_gpu(c);
  std::vector<double> single_d(single.numel());
  for (std::size_t i = 0; i < single_d.size(); ++i) single_d[i] = single.get(i);
  const double lse_rel = std::max(rel_l2_tolerance_for(p.kv_dtype), rel_l2_tolerance_for(p.q_dtype));
  for (auto& s : shards) {
    s->download();
    const std::string note = name + " (shard on device " + std::to_string(s->device) + ", ATTNKIT_TEST_SEED=" +
                             std::to_string(c.seed) + ")";
    expect_matches_golden(s->out_host, golden.out, p.kv_dtype, p.q_dtype, p.out_dtype, note + " vs golden");
    expect_matches_golden(s->out_host, single_d, p.kv_dtype, p.q_dtype, p.out_dtype, note + " vs single GPU");
    expect_lse_matches(s->lse_host, golden.lse, note, lse_rel);
  }
}

DecodeProblem problem(std::int64_t B, std::int64_t H, std::int64_t G, std::int64_t D, std::int64_t max_seq,
                      std::int64_t kv_len, DType kv, DType q, std::int64_t window = 0, float softcap = 0) {
  DecodeProblem p;
  p.batch = B, p.num_heads = H, p.kv_heads = G, p.head_dim = D, p.max_seq = max_seq, p.kv_len = kv_len;
  p.kv_dtype = kv, p.q_dtype = q, p.out_dtype = kv;
  p.options.window = window;
  p.options.softcap = softcap;
  return p;
}

ShardedDecodePlan plan_on(const DecodeProblem& p, const std::vector<int>& devices) {
  ShardedDecodeProblem sp;
  sp.decode = p;
  std::vector<Target> targets;
  for (int d : devices) targets.push_back(cuda::target(d));
  return plan_sharded_decode(sp, targets);
}

struct SimCase {
  const char* name;
  DecodeProblem problem;
  int shards;
  std::vector<std::int32_t> lengths;
};

TEST(ShardedDecodeCuda, SimulatedShardsOnOneGpuMatchGoldenAndSingleGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::vector<SimCase> cases = {
      {"bf16 gqa4 4 shards", problem(1, 32, 8, 128, 9000, 9000, DType::kBF16, DType::kBF16), 4, {9000}},
      {"f16 ragged 3 shards", problem(3, 8, 2, 64, 4100, 4100, DType::kF16, DType::kF16), 3, {4100, 1377, 1}},
      {"f32 window across a boundary, one window", problem(1, 4, 4, 80, 3000, 3000, DType::kF32, DType::kF32, 700), 3, {2100}},
      {"bf16 ragged windows (per-sequence launches)", problem(3, 16, 2, 96, 5000, 5000, DType::kBF16, DType::kBF16, 900), 4,
       {5000, 2600, 1300}},
      {"f16 softcap, growth past kv_len into the last shard", problem(2, 12, 4, 128, 6000, 4096, DType::kF16, DType::kF16, 0, 25.0f),
       2, {5999, 0}},
      {"bf16 d256 one shard", problem(1, 8, 1, 256, 2500, 2500, DType::kBF16, DType::kBF16), 1, {2500}},
  };
  for (const SimCase& sc : cases) {
    const GlobalCase c = make_case(sc.problem, sc.lengths);
    const std::vector<int> devices(static_cast<std::size_t>(sc.shards), 0);
    const ShardedDecodePlan plan = plan_on(sc.problem, devices);
    auto shards = upload(plan, c, devices);
    std::vector<cuda::ShardTensors> tensors;
    for (auto& s : shards) tensors.push_back(s->tensors());
    cuda::sharded_decode(plan, tensors, c.lengths);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << sc.name;
    expect_all_shards_match(c, shards, sc.name);
  }
}

TEST(ShardedDecodeCuda, OneRankNcclRuns) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!cuda::nccl_built()) GTEST_SKIP() << "attnkit was built without NCCL";
  nvls_off();
  const DecodeProblem p = problem(2, 16, 4, 128, 3333, 3333, DType::kBF16, DType::kBF16, 1000);
  const GlobalCase c = make_case(p, {3333, 2048});
  const ShardedDecodePlan plan = plan_on(p, {0});
  {  // one process driving "several" devices: ShardComms of one
    auto shards = upload(plan, c, {0});
    cuda::ShardComms comms({0});
    cuda::sharded_decode(plan, std::vector<cuda::ShardTensors>{shards[0]->tensors()}, c.lengths, &comms);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_all_shards_match(c, shards, "ShardComms, one rank");
  }
  {  // one process per rank, with a communicator of one rank
    auto shards = upload(plan, c, {0});
    void* comm = cuda::nccl_comm_init_rank(cuda::nccl_unique_id(), 1, 0);
    cuda::sharded_decode_rank(plan, 0, shards[0]->tensors(), c.lengths, comm);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_all_shards_match(c, shards, "per-rank, one rank");
    // A communicator of the wrong size is refused before anything is written.
    const ShardedDecodePlan two = plan_on(p, {0, 0});
    auto shards2 = upload(two, c, {0, 0});
    EXPECT_THROW(cuda::sharded_decode_rank(two, 0, shards2[0]->tensors(), c.lengths, comm), Error);
    cuda::nccl_comm_destroy(comm);
  }
}

TEST(ShardedDecodeCuda, AppendGoesToTheOwningShardThenDecodeSeesIt) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DecodeProblem p = problem(3, 8, 2, 64, 3000, 2048, DType::kBF16, DType::kBF16);
  GlobalCase c = make_case(p, {0, 0, 0}, /*all_live=*/true);
  const std::vector<int> devices{0, 0, 0};
  const ShardedDecodePlan plan = plan_on(p, devices);
  auto shards = upload(plan, c, devices);
  // A boundary key, a key past kv_len (the last shard grows), a key in the first shard.
  const std::vector<std::int32_t> positions = {static_cast<std::int32_t>(plan.shards[1].begin), 2999, 17};
  std::mt19937_64 rng(c.seed + 1);
  HostTensor k_new(p.kv_dtype, {p.batch, p.kv_heads, p.head_dim}), v_new(p.kv_dtype, {p.batch, p.kv_heads, p.head_dim});
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  DeviceTensor dk(k_new), dv(v_new);
  for (const ShardSpec& s : plan.shards) {
    cuda::ShardAppendTensors t;
    t.k_new = dk.view, t.v_new = dv.view;
    t.k_cache = shards[static_cast<std::size_t>(s.index)]->k->view;
    t.v_cache = shards[static_cast<std::size_t>(s.index)]->v->view;
    cuda::sharded_append_kv(plan, s.index, t, positions);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Expected: the global cache with the rows written, re-cut into shards; compared byte for byte.
  const std::size_t e = dtype_size(p.kv_dtype);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t g = 0; g < p.kv_heads; ++g) {
      const auto dst = static_cast<std::size_t>(((b * p.kv_heads + g) * p.max_seq + positions[static_cast<std::size_t>(b)]) * p.head_dim);
      const auto src = static_cast<std::size_t>((b * p.kv_heads + g) * p.head_dim);
      std::memcpy(c.k.bytes.data() + dst * e, k_new.bytes.data() + src * e, static_cast<std::size_t>(p.head_dim) * e);
      std::memcpy(c.v.bytes.data() + dst * e, v_new.bytes.data() + src * e, static_cast<std::size_t>(p.head_dim) * e);
    }
  }
  for (const ShardSpec& s : plan.shards) {
    HostTensor want_k = shard_cache(c.k, p, s), want_v = shard_cache(c.v, p, s);
    HostTensor got_k(p.kv_dtype, {p.batch, p.kv_heads, s.capacity, p.head_dim}), got_v(p.kv_dtype, {p.batch, p.kv_heads, s.capacity, p.head_dim});
    shards[static_cast<std::size_t>(s.index)]->k->copy_to(got_k);
    shards[static_cast<std::size_t>(s.index)]->v->copy_to(got_v);
    // NaN poison past max_seq compares by bytes too (both sides hold the same NaN pattern).
    EXPECT_EQ(got_k.bytes, want_k.bytes) << "k of shard " << s.index;
    EXPECT_EQ(got_v.bytes, want_v.bytes) << "v of shard " << s.index;
  }
  // Then decode with lengths position + 1: the new keys are the last ones each sequence sees.
  for (std::int64_t b = 0; b < p.batch; ++b) {
    c.lengths[static_cast<std::size_t>(b)] = positions[static_cast<std::size_t>(b)] + 1;
    c.lengths_host.i32()[b] = c.lengths[static_cast<std::size_t>(b)];
  }
  std::vector<cuda::ShardTensors> tensors;
  for (auto& s : shards) tensors.push_back(s->tensors());
  cuda::sharded_decode(plan, tensors, c.lengths);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_all_shards_match(c, shards, "decode after routed append");
}

TEST(ShardedDecodeCuda, RejectsBeforeWriting) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const DecodeProblem p = problem(1, 8, 2, 64, 2000, 2000, DType::kBF16, DType::kBF16);
  const GlobalCase c = make_case(p, {2000});
  const ShardedDecodePlan plan = plan_on(p, {0, 0});
  auto shards = upload(plan, c, {0, 0});
  std::vector<cuda::ShardTensors> good;
  for (auto& s : shards) good.push_back(s->tensors());
  auto expect_rejected = [&](const std::vector<cuda::ShardTensors>& t, std::vector<std::int32_t> lengths, const char* what) {
    try {
      cuda::sharded_decode(plan, t, lengths);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << what << ": " << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto& s : shards) {
      s->download();
      for (std::size_t i = 0; i < s->out_host.numel(); ++i) ASSERT_TRUE(std::isnan(s->out_host.get(i))) << what << " wrote out";
    }
  };
  auto small_ws = good;
  small_ws[1].workspace.bytes -= 256;
  expect_rejected(small_ws, {2000}, "workspace too small");
  expect_rejected(good, {2001}, "length past max_seq");
  expect_rejected(good, {2000, 5}, "too many lengths");
  expect_rejected({good[0]}, {2000}, "one shard missing");
  auto host_q = good;
  HostTensor q_host(p.q_dtype, {p.batch, p.num_heads, p.head_dim});
  host_q[0].q = q_host.view;
  expect_rejected(host_q, {2000}, "q in host memory");
  auto wrong_capacity = good;
  wrong_capacity[0].k_cache = good[1].k_cache;
  wrong_capacity[0].v_cache = good[1].v_cache;
  if (plan.shards[0].capacity != plan.shards[1].capacity) expect_rejected(wrong_capacity, {2000}, "cache of the wrong capacity");
  const ShardedDecodePlan cpu_plan = plan_sharded_decode(ShardedDecodeProblem{p}, cpu_target(1), 2);
  EXPECT_THROW(cuda::sharded_decode(cpu_plan, good, std::vector<std::int32_t>{2000}), Error);
}

// Real multi-GPU runs: every available GPU up to 8, one thread driving all of them, then one
// thread per rank (as one process per rank would).
TEST(ShardedDecodeCuda, MultiGpuMatchesGoldenAndSingleGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!cuda::nccl_built()) GTEST_SKIP() << "attnkit was built without NCCL";
  const int n = std::min(cuda::device_count(), 8);
  if (n < 2) GTEST_SKIP() << "needs two or more GPUs, found " << n;
  nvls_off();
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  const DecodeProblem p = problem(2, 32, 8, 128, 20000, 16384, DType::kBF16, DType::kBF16, 0);
  const GlobalCase c = make_case(p, {19999, 7000});
  const ShardedDecodePlan plan = plan_on(p, devices);
  {
    auto shards = upload(plan, c, devices);
    cuda::ShardComms comms(devices);
    std::vector<cuda::ShardTensors> tensors;
    for (auto& s : shards) tensors.push_back(s->tensors());
    cuda::sharded_decode(plan, tensors, c.lengths, &comms);
    for (int d : devices) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    expect_all_shards_match(c, shards, std::to_string(n) + " GPUs, one thread");
  }
  {
    auto shards = upload(plan, c, devices);
    const cuda::NcclId id = cuda::nccl_unique_id();
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          if (cudaSetDevice(r) != cudaSuccess) throw std::runtime_error("cudaSetDevice");
          void* comm = cuda::nccl_comm_init_rank(id, n, r);
          cuda::sharded_decode_rank(plan, r, shards[static_cast<std::size_t>(r)]->tensors(), c.lengths, comm);
          if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("cudaDeviceSynchronize");
          cuda::nccl_comm_destroy(comm);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    expect_all_shards_match(c, shards, std::to_string(n) + " GPUs, a thread per rank");
  }
}

}  // namespace
}  // namespace attnkit::testing::cuda_decode_tests
