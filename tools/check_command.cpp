// `attnkit check`: runs the CPU kernels, then the CUDA ones when a device is visible.
#include "check_command.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "check_support.hpp"

namespace attnkit::cli {
namespace {

struct CheckFlags {
  bool quick = false;
  std::string backend = "all";
  std::string op = "all";
  std::vector<std::string> dtypes;
  std::uint64_t seed = 0;
  int threads = 0;
  bool verbose = false;
};

struct Tally {
  int passed = 0, failed = 0, skipped = 0;
};

const char* status_name(Status s) {
  switch (s) {
    case Status::kPass: return "PASS";
    case Status::kFail: return "FAIL";
    case Status::kSkipped: return "SKIPPED";
  }
  return "?";
}

std::string tolerance_text(const CheckRow& r) {
  if (r.tol_abs == 0 && r.tol_rel == 0) return "exact";
  char text[64];
  if (std::isinf(r.tol_abs)) {
    std::snprintf(text, sizeof text, "rel<=%.0e", r.tol_rel);
  } else {
    std::snprintf(text, sizeof text, "abs<=%.0e rel<=%.0e", r.tol_abs, r.tol_rel);
  }
  return text;
}

void print_header() {
  std::printf("%-5s %-46s %-36s %-11s %10s %10s  %-20s %s\n", "back", "kernel", "shape", "dtype", "max_abs",
              "rel_l2", "tolerance", "status");
}

void print_row(const CheckRow& r, bool verbose) {
  if (r.status == Status::kSkipped) {
    std::printf("%-5s %-46s %-36s %-11s %10s %10s  %-20s %s\n", r.backend.c_str(), r.kernel.c_str(), r.shape.c_str(),
                r.dtype.c_str(), "-", "-", "-", "SKIPPED");
  } else {
    std::printf("%-5s %-46s %-36s %-11s %10.3e %10.3e  %-20s %s\n", r.backend.c_str(), r.kernel.c_str(),
                r.shape.c_str(), r.dtype.c_str(), r.max_abs, r.rel_l2, tolerance_text(r).c_str(),
                status_name(r.status));
  }
  if (!r.note.empty() && (r.status != Status::kPass || verbose)) std::printf("      -> %s\n", r.note.c_str());
  std::fflush(stdout);
}

void run_backend(const CheckFlags& f, bool cuda, Tally& tally) {
  CheckContext ctx;
  ctx.cuda = cuda;
  ctx.quick = f.quick;
  ctx.op = f.op;
  for (const std::string& name : f.dtypes) ctx.dtypes.push_back(parse_dtype(name));
  ctx.rng.seed(f.seed);
  ctx.report = [&](CheckRow row) {
    print_row(row, f.verbose);
    if (row.status == Status::kPass) ++tally.passed;
    if (row.status == Status::kFail) ++tally.failed;
    if (row.status == Status::kSkipped) ++tally.skipped;
  };
  ctx.target = cuda ? cuda::target() : cpu_target(f.threads);
  std::printf("# backend %s: %s\n", cuda ? "cuda" : "cpu", ctx.target.name.c_str());
  check_attention(ctx);
  check_kv(ctx);
  check_paged(ctx);
}

void run_check(const CheckFlags& flags, int& exit_code) {
  CheckFlags f = flags;
  if (f.seed == 0) f.seed = testing::fresh_seed();
  const bool e4m3 = std::find(f.dtypes.begin(), f.dtypes.end(), "e4m3") != f.dtypes.end();
  if (e4m3 && f.op == "fused")
    fail("attnkit check", "--dtype e4m3 with --op fused: the fused rope+append+decode step takes no e4m3 cache",
         "pass --op decode (an e4m3 cache), kv (append into one), paged (an e4m3 page pool), prefill or all with "
         "--dtype e4m3");
  const bool want_cpu = f.backend == "all" || f.backend == "cpu";
  const bool have_cuda = cuda::built() && cuda::device_count() > 0;
  if (f.backend == "cuda") {
    if (!have_cuda)
      fail("attnkit check --backend cuda",
           cuda::built() ? "no CUDA device is visible" : "attnkit was built without CUDA",
           cuda::built() ? "run on a machine with an NVIDIA GPU (nvidia-smi lists it)"
                         : "rebuild with -DATTNKIT_CUDA=ON on a machine with the CUDA toolkit");
  }
  std::printf("# attnkit check%s, seed %" PRIu64 " (replay: --seed %" PRIu64 ")\n", f.quick ? " --quick" : "", f.seed,
              f.seed);
  print_header();
  Tally tally;
  if (want_cpu) run_backend(f, false, tally);
  if (f.backend != "cpu") {
    if (have_cuda) {
      run_backend(f, true, tally);
    } else {
      std::printf("# backend cuda: SKIPPED (%s)\n",
                  cuda::built() ? "no CUDA device is visible" : "attnkit was built without CUDA");
    }
  }
  std::printf("# %d passed, %d failed, %d skipped\n", tally.passed, tally.failed, tally.skipped);
  exit_code = tally.failed > 0 ? 1 : 0;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<CheckFlags>();
  CLI::App* cmd = app.add_subcommand("check", "Run every kernel present against the float64 golden");
  cmd->add_flag("--quick", flags->quick, "a small set of shapes and dtypes (seconds)");
  cmd->add_option("--backend", flags->backend, "cpu, cuda or all (all: cuda too when a device is visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}))
      ->capture_default_str();
  cmd->add_option("--op", flags->op, "only these kernels: decode, prefill, fused (rope+append+decode), kv (append, "
                                     "RoPE, merge), paged (paged decode and paged append) or all")
      ->check(CLI::IsMember({"all", "decode", "prefill", "fused", "kv", "paged"}))
      ->capture_default_str();
  cmd->add_option("--dtype", flags->dtypes,
                  "only these input dtypes, comma-separated: f32, f16, bf16, e4m3 (decode: an e4m3 KV cache "
                  "with bf16 q and out; kv: append into one; paged: an e4m3 page pool, decoded and appended to; "
                  "prefill on Hopper) (default: all; --quick: f32, bf16 and e4m3)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "f16", "bf16", "e4m3"}));
  cmd->add_option("--seed", flags->seed, "random seed (default: fresh; printed for replay)");
  cmd->add_option("--threads", flags->threads, "CPU worker threads (0 = all cores)");
  cmd->add_flag("--verbose", flags->verbose, "print the notes of passing rows too");
  cmd->callback([flags, &exit_code] { run_check(*flags, exit_code); });
}

}  // namespace attnkit::cli
