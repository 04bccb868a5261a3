// GPU hardening (label gpu; SKIPPED without a device): independent decode and prefill runs on
// several streams at once give the bytes of serial runs, and rejected calls leave every device
// buffer (caches, outputs, workspace) byte-for-byte unchanged.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::testing {
namespace {

#define HARDENING_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// A device copy of a host tensor (same shape, contiguous), freed on destruction.
struct DeviceCopy {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  TensorView view;
  explicit DeviceCopy(const HostTensor& h) : bytes(h.bytes.size()), view(h.view) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.bytes.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    view.data = ptr;
    view.device = DeviceKind::kCuda;
    view.device_index = 0;
  }
  // A scratch buffer (workspace): filled with a poison byte, so reading it back (the rejection test
  // compares every buffer before and after) reads defined memory (compute-sanitizer initcheck).
  explicit DeviceCopy(std::size_t n) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<std::size_t>(n, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0xA5, n), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(ptr); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  Workspace workspace() const { return Workspace{ptr, bytes, DeviceKind::kCuda}; }
};

bool have_device() { return cuda::built() && cuda::device_count() > 0; }

// One decode problem's inputs on the device and a fresh output set per run.
struct DecodeJob {
  DecodeProblem problem;
  DecodePlan plan;
  HostTensor q, k, v, lengths, out0, lse0;
  std::unique_ptr<DeviceCopy> dq, dk, dv, dlengths;
  DecodeJob(std::int64_t batch, std::int64_t kv_len, std::int64_t window, std::uint64_t seed) {
    problem.batch = batch, problem.num_heads = 16, problem.kv_heads = 4, problem.head_dim = 128;
    problem.max_seq = kv_len, problem.kv_len = kv_len, problem.options.window = window;
    plan = plan_decode(problem, cuda::target());
    const std::int64_t B = batch, H = 16, G = 4, D = 128, S = kv_len;
    q = HostTensor(DType::kBF16, {B, H, D});
    k = HostTensor(DType::kBF16, {B, G, S, D});
    v = HostTensor(DType::kBF16, {B, G, S, D});
    lengths = HostTensor(DType::kI32, {B});
    out0 = HostTensor(DType::kBF16, {B, H, D});
    lse0 = HostTensor(DType::kF32, {B, H});
    std::mt19937_64 rng(seed);
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
    for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = static_cast<std::int32_t>(kv_len - (37 * b) % kv_len);
    poison(out0);
    poison(lse0);
    dq = std::make_unique<DeviceCopy>(q);
    dk = std::make_unique<DeviceCopy>(k);
    dv = std::make_unique<DeviceCopy>(v);
    dlengths = std::make_unique<DeviceCopy>(lengths);
  }
  // Output buffers of one run (poisoned), its workspace, and the tensors naming them.
  struct Run {
    std::unique_ptr<DeviceCopy> out, lse, workspace;
  };
  Run make_run() const {
    Run r;
    r.out = std::make_unique<DeviceCopy>(out0);
    r.lse = std::make_unique<DeviceCopy>(lse0);
    r.workspace = std::make_unique<DeviceCopy>(static_cast<std::size_t>(plan.evidence.workspace_bytes));
    return r;
  }
  DecodeTensors tensors(const Run& r) const {
    return {dq->view, dk->view, dv->view, dlengths->view, r.out->view, r.lse->view};
  }
};

TEST(HardeningCuda, DecodesOnSeveralStreamsAtOnceEqualSerialRuns) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::unique_ptr<DecodeJob>> jobs;
  jobs.push_back(std::make_unique<DecodeJob>(1, 8192, 0, 11));   // split across the SMs
  jobs.push_back(std::make_unique<DecodeJob>(4, 1000, 0, 12));
  jobs.push_back(std::make_unique<DecodeJob>(2, 3000, 257, 13));  // sliding window
  jobs.push_back(std::make_unique<DecodeJob>(8, 200, 0, 14));
  // Serial: one job at a time on the default stream.
  std::vector<std::vector<std::uint8_t>> serial_out, serial_lse;
  for (const auto& job : jobs) {
    const auto run = job->make_run();
    cuda::decode(job->plan, job->tensors(run), run.workspace->workspace());
    HARDENING_CUDA_OK(cudaDeviceSynchronize());
    serial_out.push_back(run.out->read());
    serial_lse.push_back(run.lse->read());
  }
  // Concurrent: every job on its own stream, several rounds queued before one synchronisation.
  constexpr int kRounds = 4;
  std::vector<cudaStream_t> streams(jobs.size());
  for (auto& s : streams) HARDENING_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<std::vector<DecodeJob::Run>> runs(jobs.size());
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      runs[j].push_back(jobs[j]->make_run());
      const auto& run = runs[j].back();
      cuda::decode(jobs[j]->plan, jobs[j]->tensors(run), run.workspace->workspace(), streams[j]);
    }
  }
  HARDENING_CUDA_OK(cudaDeviceSynchronize());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    for (int round = 0; round < kRounds; ++round) {
      EXPECT_EQ(runs[j][static_cast<std::size_t>(round)].out->read(), serial_out[j]) << "job " << j << " round " << round;
      EXPECT_EQ(runs[j][static_cast<std::size_t>(round)].lse->read(), serial_lse[j]) << "job " << j << " round " << round;
    }
  }
  for (auto& s : streams) HARDENING_CUDA_OK(cudaStreamDestroy(s));
}

TEST(HardeningCuda, PrefillsOnSeveralStreamsAtOnceEqualSerialRuns) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  struct Job {
    PrefillProblem p;
    PrefillPlan plan;
    HostTensor q, k, v, out0, lse0;
    std::unique_ptr<DeviceCopy> dq, dk, dv;
  };
  std::vector<std::unique_ptr<Job>> jobs;
  for (auto [q_len, kv_len, causal] : {std::tuple{300, 300, true}, std::tuple{77, 2500, false}, std::tuple{129, 400, true}}) {
    auto job = std::make_unique<Job>();
    job->p.batch = 1, job->p.num_heads = 8, job->p.kv_heads = 2, job->p.head_dim = 128;
    job->p.q_len = q_len, job->p.kv_len = kv_len, job->p.causal = causal;
    job->plan = plan_prefill(job->p, cuda::target());
    job->q = HostTensor(DType::kBF16, {1, 8, q_len, 128});
    job->k = HostTensor(DType::kBF16, {1, 2, kv_len, 128});
    job->v = HostTensor(DType::kBF16, {1, 2, kv_len, 128});
    job->out0 = HostTensor(DType::kBF16, {1, 8, q_len, 128});
    job->lse0 = HostTensor(DType::kF32, {1, 8, q_len});
    std::mt19937_64 rng(static_cast<std::uint64_t>(q_len) * 31 + static_cast<std::uint64_t>(kv_len));
    fill_normal(job->q, rng);
    fill_normal(job->k, rng);
    fill_normal(job->v, rng);
    poison(job->out0);
    poison(job->lse0);
    job->dq = std::make_unique<DeviceCopy>(job->q);
    job->dk = std::make_unique<DeviceCopy>(job->k);
    job->dv = std::make_unique<DeviceCopy>(job->v);
    jobs.push_back(std::move(job));
  }
  auto launch = [](const Job& job, DeviceCopy& out, DeviceCopy& lse, DeviceCopy& ws, cudaStream_t stream) {
    cuda::prefill(job.plan, {job.dq->view, job.dk->view, job.dv->view, out.view, lse.view, {}, {}}, ws.workspace(), stream);
  };
  std::vector<std::vector<std::uint8_t>> serial;
  for (const auto& job : jobs) {
    DeviceCopy out(job->out0), lse(job->lse0), ws(static_cast<std::size_t>(job->plan.evidence.workspace_bytes));
    launch(*job, out, lse, ws, nullptr);
    HARDENING_CUDA_OK(cudaDeviceSynchronize());
    serial.push_back(out.read());
  }
  std::vector<cudaStream_t> streams(jobs.size());
  for (auto& s : streams) HARDENING_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<std::unique_ptr<DeviceCopy>> outs, lses, wss;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    outs.push_back(std::make_unique<DeviceCopy>(jobs[j]->out0));
    lses.push_back(std::make_unique<DeviceCopy>(jobs[j]->lse0));
    wss.push_back(std::make_unique<DeviceCopy>(static_cast<std::size_t>(jobs[j]->plan.evidence.workspace_bytes)));
    launch(*jobs[j], *outs[j], *lses[j], *wss[j], streams[j]);
  }
  HARDENING_CUDA_OK(cudaDeviceSynchronize());
  for (std::size_t j = 0; j < jobs.size(); ++j) EXPECT_EQ(outs[j]->read(), serial[j]) << "prefill job " << j;
  for (auto& s : streams) HARDENING_CUDA_OK(cudaStreamDestroy(s));
}

TEST(HardeningCuda, RejectedCallsLeaveEveryDeviceBufferUnchanged) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  DecodeJob job(2, 512, 0, 21);
  const auto run = job.make_run();
  HostTensor kn(DType::kBF16, {2, 4, 128}), kn32(DType::kF32, {2, 4, 128}), pos(DType::kI32, {2});
  std::mt19937_64 rng(22);
  fill_normal(kn, rng);
  fill_normal(kn32, rng);
  pos.i32()[0] = 3, pos.i32()[1] = 5;
  DeviceCopy dkn(kn), dkn32(kn32), dpos(pos);
  const std::vector<const DeviceCopy*> watched = {job.dk.get(), job.dv.get(), run.out.get(), run.lse.get(),
                                                  run.workspace.get()};
  std::vector<std::vector<std::uint8_t>> before;
  for (const DeviceCopy* d : watched) before.push_back(d->read());
  auto expect_rejected = [&](const std::function<void()>& call, const std::string& what) {
    try {
      call();
      ADD_FAILURE() << what << ": no Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Fix:"), std::string::npos) << what << ": " << e.what();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    for (std::size_t i = 0; i < watched.size(); ++i) EXPECT_EQ(watched[i]->read(), before[i]) << what << ": buffer " << i;
  };
  const DecodeTensors good = job.tensors(run);
  expect_rejected([&] { DecodeTensors t = good; t.q.shape[1] = 15; cuda::decode(job.plan, t, run.workspace->workspace()); },
                  "q of the wrong shape");
  expect_rejected([&] { DecodeTensors t = good; t.out.data = nullptr; cuda::decode(job.plan, t, run.workspace->workspace()); },
                  "null out");
  expect_rejected([&] { DecodeTensors t = good; t.lse.dtype = DType::kF16; cuda::decode(job.plan, t, run.workspace->workspace()); },
                  "lse not f32");
  expect_rejected([&] { DecodeTensors t = good; t.k_cache.device = DeviceKind::kCpu; cuda::decode(job.plan, t, run.workspace->workspace()); },
                  "k_cache claimed on the host");
  if (job.plan.evidence.workspace_bytes > 0) {
    expect_rejected([&] { cuda::decode(job.plan, good, Workspace{run.workspace->ptr, 1, DeviceKind::kCuda}); },
                    "a workspace too small");
  }
  expect_rejected([&] { cuda::append_kv({dkn32.view, {}, job.dk->view, {}, dpos.view}); }, "append k_new of another dtype");
  expect_rejected([&] { cuda::append_kv({{}, {}, job.dk->view, job.dv->view, dpos.view}); }, "append with nothing to write");
  expect_rejected([&] { AppendTensors t{dkn.view, {}, job.dk->view, {}, dpos.view}; t.k_new.shape[2] = 64; cuda::append_kv(t); },
                  "append k_new of another head_dim");
  expect_rejected([&] {
    DecodePlan cpu_plan = plan_decode(job.problem, cpu_target(1));
    cuda::decode(cpu_plan, good, run.workspace->workspace());
  }, "a plan made for the CPU");
}

}  // namespace
}  // namespace attnkit::testing
