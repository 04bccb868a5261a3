// Concurrency: plans and runs from many threads at once. Each thread plans its own calls (the
// planner is pure), runs them on inputs every thread shares read-only, into outputs of its own,
// and must get exactly the bytes a serial run got. Also built and run under ThreadSanitizer
// (preset "tsan"), where a data race is a failure even when the bytes come out right.
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "hardening_support.hpp"

namespace attnkit::testing {
namespace {

// Small on purpose: under ThreadSanitizer every access is checked.
constexpr int kThreads = 8;
constexpr int kRounds = 3;

// Worker threads inside one fast-kernel call (OpenMP). GCC's libgomp synchronises its teams with
// futexes ThreadSanitizer cannot see, so under TSan a team of 2 reports false races on the
// region's shared variables; there each call runs a team of one and TSan checks what this file
// is about: many caller threads at once. The normal build runs teams of 2 from every thread.
#if defined(__SANITIZE_THREAD__)
constexpr int kTeam = 1;
#else
constexpr int kTeam = 2;
#endif

// One call with shared inputs and its serial result.
struct SharedCall {
  std::string name;
  std::function<void(HostTensor& out, HostTensor& lse)> run;  // plans and runs into out/lse
  std::function<std::pair<HostTensor, HostTensor>()> make_outputs;
  std::vector<std::uint8_t> serial_out, serial_lse;
};

std::vector<std::unique_ptr<SharedCall>> make_calls(std::vector<std::unique_ptr<DecodeCase>>& decodes,
                                                    std::vector<std::unique_ptr<DensePrefill>>& prefills) {
  std::vector<std::unique_ptr<SharedCall>> calls;
  // Decode: both families, GQA, windows, soft-cap, bf16/f16, one and two worker threads per plan.
  struct D {
    DecodeProblem p;
    std::vector<std::int32_t> lengths;
  };
  std::vector<D> ds;
  {
    DecodeProblem p = decode_problem(2, 8, 2, 64, 300, DType::kBF16);
    ds.push_back({p, {300, 77}});
    p = decode_problem(3, 4, 4, 128, 50, DType::kF16);
    p.options.window = 9;
    p.options.softcap = 30.0f;
    ds.push_back({p, {50, 0, 1}});
    p = decode_problem(1, 4, 1, 32, 1000);
    ds.push_back({p, {1000}});
  }
  for (const D& d : ds) decodes.push_back(std::make_unique<DecodeCase>(d.p, d.lengths));
  for (std::size_t i = 0; i < decodes.size(); ++i) {
    for (bool fast : {false, true}) {
      const std::vector<int> teams = fast && kTeam > 1 ? std::vector<int>{1, kTeam} : std::vector<int>{1};
      for (int threads : teams) {
        const DecodeCase* c = decodes[i].get();
        auto call = std::make_unique<SharedCall>();
        call->name = "decode " + std::to_string(i) + (fast ? " fast" : " scalar") + " threads=" + std::to_string(threads);
        call->make_outputs = [c] {
          return std::pair{HostTensor(c->problem.out_dtype, {c->problem.batch, c->problem.num_heads, c->problem.head_dim}),
                           HostTensor(DType::kF32, {c->problem.batch, c->problem.num_heads})};
        };
        call->run = [c, fast, threads](HostTensor& out, HostTensor& lse) {
          const DecodePlan plan = fast ? plan_decode(c->problem, cpu_target(threads))
                                       : plan_decode(c->problem, cpu_target(threads), KernelFamily::kScalarOnline);
          DecodeTensors t = c->tensors();
          t.out = out.view;
          t.lse = lse.view;
          run_decode(plan, t);
        };
        calls.push_back(std::move(call));
      }
    }
  }
  // Prefill: causal GQA, non-causal with a window.
  {
    PrefillProblem p = prefill_problem(1, 4, 2, 64, 70, 90, true, DType::kBF16);
    prefills.push_back(std::make_unique<DensePrefill>(p));
    p = prefill_problem(2, 2, 1, 32, 40, 33, false);
    p.options.window = 7;
    prefills.push_back(std::make_unique<DensePrefill>(p));
  }
  for (std::size_t i = 0; i < prefills.size(); ++i) {
    for (bool fast : {false, true}) {
      const DensePrefill* c = prefills[i].get();
      auto call = std::make_unique<SharedCall>();
      call->name = "prefill " + std::to_string(i) + (fast ? " fast" : " scalar");
      call->make_outputs = [c] {
        const PrefillProblem& p = c->problem;
        return std::pair{HostTensor(p.out_dtype, {p.batch, p.num_heads, p.q_len, p.head_dim}),
                         HostTensor(DType::kF32, {p.batch, p.num_heads, p.q_len})};
      };
      call->run = [c, fast](HostTensor& out, HostTensor& lse) {
        const PrefillPlan plan = fast ? plan_prefill(c->problem, cpu_target(kTeam))
                                      : plan_prefill(c->problem, cpu_target(1), KernelFamily::kScalarOnline);
        PrefillTensors t = c->tensors();
        t.out = out.view;
        t.lse = lse.view;
        run_prefill(plan, t);
      };
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

TEST(Concurrency, ManyThreadsPlanAndRunSharedInputsWithSerialResults) {
  std::vector<std::unique_ptr<DecodeCase>> decodes;
  std::vector<std::unique_ptr<DensePrefill>> prefills;
  auto calls = make_calls(decodes, prefills);
  for (auto& call : calls) {
    auto [out, lse] = call->make_outputs();
    poison(out);
    poison(lse);
    call->run(out, lse);
    call->serial_out = out.bytes;
    call->serial_lse = lse.bytes;
  }
  // The inputs must not change under the threads either.
  std::vector<std::vector<std::uint8_t>> inputs_before;
  for (auto& c : decodes) inputs_before.push_back(c->k_cache.bytes);
  for (auto& c : prefills) inputs_before.push_back(c->k.bytes);

  std::mutex mutex;
  std::vector<std::string> mismatches;
  std::atomic<int> runs{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < kRounds; ++round) {
        for (std::size_t i = 0; i < calls.size(); ++i) {
          SharedCall& call = *calls[(i * 7 + static_cast<std::size_t>(w) * 3 + static_cast<std::size_t>(round)) % calls.size()];
          auto [out, lse] = call.make_outputs();
          poison(out);
          poison(lse);
          try {
            call.run(out, lse);
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            mismatches.push_back(call.name + ": threw " + e.what());
            continue;
          }
          runs.fetch_add(1);
          if (out.bytes != call.serial_out || lse.bytes != call.serial_lse) {
            std::lock_guard lock(mutex);
            mismatches.push_back(call.name + " on thread " + std::to_string(w) + " differs from the serial run");
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(runs.load(), kThreads * kRounds * static_cast<int>(calls.size()));
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  std::size_t i = 0;
  for (auto& c : decodes) EXPECT_EQ(c->k_cache.bytes, inputs_before[i++]) << "a shared k_cache changed";
  for (auto& c : prefills) EXPECT_EQ(c->k.bytes, inputs_before[i++]) << "a shared k changed";
}

// Each thread owns a KV cache and runs a decode loop (fused RoPE + append + decode) on it while the
// others do the same: every thread's caches and outputs equal the same loop run serially.
TEST(Concurrency, IndependentDecodeLoopsOnTheirOwnCachesMatchSerialLoops) {
  DecodeProblem p = decode_problem(2, 4, 2, 64, 24, DType::kBF16);
  const int steps = 12;
  auto loop = [&](std::uint64_t seed, bool fast, std::vector<std::uint8_t>& k_final, std::vector<std::uint8_t>& outs) {
    const DecodePlan plan =
        fast ? plan_decode(p, cpu_target(kTeam)) : plan_decode(p, cpu_target(1), KernelFamily::kScalarOnline);
    const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
    HostTensor q(p.q_dtype, {B, H, D}), kn(p.kv_dtype, {B, G, D}), vn(p.kv_dtype, {B, G, D});
    HostTensor kc(p.kv_dtype, {B, G, S, D}), vc(p.kv_dtype, {B, G, S, D}), pos(DType::kI32, {B});
    HostTensor out(p.out_dtype, {B, H, D}), lse(DType::kF32, {B, H});
    std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
    std::mt19937_64 rng(seed);
    for (int step = 0; step < steps; ++step) {
      fill_normal(q, rng);
      fill_normal(kn, rng);
      fill_normal(vn, rng);
      for (std::int64_t b = 0; b < B; ++b) pos.i32()[b] = static_cast<std::int32_t>(step + b);
      cpu::fused_rope_append_decode(plan, {q.view, kn.view, vn.view, kc.view, vc.view, pos.view, out.view, lse.view},
                                    RopeSpec{}, Workspace{workspace.data(), workspace.size()});
      outs.insert(outs.end(), out.bytes.begin(), out.bytes.end());
    }
    k_final = kc.bytes;
  };
  std::vector<std::vector<std::uint8_t>> serial_k(kThreads), serial_out(kThreads);
  for (int w = 0; w < kThreads; ++w) loop(1000 + static_cast<std::uint64_t>(w), w % 2 == 1, serial_k[static_cast<std::size_t>(w)], serial_out[static_cast<std::size_t>(w)]);
  std::vector<std::vector<std::uint8_t>> k(kThreads), out(kThreads);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      loop(1000 + static_cast<std::uint64_t>(w), w % 2 == 1, k[static_cast<std::size_t>(w)], out[static_cast<std::size_t>(w)]);
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kThreads; ++w) {
    EXPECT_EQ(k[static_cast<std::size_t>(w)], serial_k[static_cast<std::size_t>(w)]) << "thread " << w << ": cache differs";
    EXPECT_EQ(out[static_cast<std::size_t>(w)], serial_out[static_cast<std::size_t>(w)]) << "thread " << w << ": outputs differ";
  }
}

}  // namespace
}  // namespace attnkit::testing
