// `attnkit bench`: cases from the defaults or from sweep flags, run by the backend's driver
// (bench::run_cpu / bench::run_cuda), printed as a table or as one JSON document.
#include "bench_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "bench.hpp"
#include "build_info.hpp"
#include "model_presets.hpp"
#include "shape_flags.hpp"

namespace attnkit::cli {
namespace {

constexpr int kCudaRepetitions = 50;  // DESIGN.md's GPU protocol
constexpr int kCpuRepetitions = 20;   // CPU repetitions run for up to seconds each

struct BenchFlags {
  std::string backend;
  std::string op = "all";
  std::string model = "llama3-8b";
  std::vector<std::int64_t> batches, kv_lens;
  std::vector<std::string> dtypes;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;  // 0: the model's
  std::int64_t q_len = 0;
  std::int64_t window = -1;  // -1: the preset's
  bool no_causal = false;
  std::string family;
  int threads = 0, reps = 0, warmup = 5;
  std::int64_t ceiling_mib = 0;
  std::string pages = "huge";
  std::int64_t page_size = 16;
  std::string layout = "hnd";
  bool json = false;
  bool sinks = false;
  std::int64_t left_pad = 0;
  CLI::Option* model_opt = nullptr;
};

bool is_sweep(const BenchFlags& f) {
  return f.op != "all" || !f.batches.empty() || !f.kv_lens.empty() || !f.dtypes.empty() || f.q_len > 0 ||
         f.window >= 0 || f.no_causal || f.heads > 0 || f.kv_heads > 0 || f.head_dim > 0 || f.left_pad > 0;
}

// The model's shape, then any explicit --heads/--kv-heads/--head-dim/--window over it.
void apply_model(bench::Case& c, const ModelPreset& m, const BenchFlags& f) {
  c.num_heads = f.heads > 0 ? f.heads : m.num_heads;
  c.kv_heads = f.kv_heads > 0 ? f.kv_heads : m.kv_heads;
  c.head_dim = f.head_dim > 0 ? f.head_dim : m.head_dim;
  c.window = f.window >= 0 ? f.window : m.window;
}

// The defaults (bench::default_cases), or the cross product of the sweep flags.
constexpr std::int64_t kDefaultExtendRows = 256;  // --op extend without --q-len: a chunk of 256 new rows

std::vector<bench::Case> make_cases(const BenchFlags& f) {
  const ModelPreset& model = find_model_preset(f.model);
  std::vector<bench::Case> cases;
  if (!is_sweep(f)) {
    cases = bench::default_cases();
    if (f.model_opt != nullptr && f.model_opt->count() > 0) {
      for (bench::Case& c : cases) apply_model(c, model, f);
    }
    return cases;
  }
  std::vector<std::string> ops = f.op == "all" ? std::vector<std::string>{"decode", "prefill"} : std::vector<std::string>{f.op};
  for (const std::string& op : ops) {
    const bool decode = op != "prefill";  // decode, paged decode and extend: decode-like batches and caches
    const std::vector<std::int64_t> batches = !f.batches.empty() ? f.batches : decode ? std::vector<std::int64_t>{1, 8} : std::vector<std::int64_t>{1};
    const std::vector<std::int64_t> kv_lens = !f.kv_lens.empty() ? f.kv_lens : std::vector<std::int64_t>{decode ? 4096 : 1024};
    const std::vector<std::string> dtypes = !f.dtypes.empty() ? f.dtypes : std::vector<std::string>{"bf16"};
    for (const std::string& dtype : dtypes) {
      for (std::int64_t kv_len : kv_lens) {
        for (std::int64_t batch : batches) {
          bench::Case c;
          c.op = op;
          c.batch = batch;
          c.kv_len = kv_len;
          c.q_len = op == "extend" ? (f.q_len > 0 ? f.q_len : kDefaultExtendRows) : decode ? 1 : (f.q_len > 0 ? f.q_len : kv_len);
          c.causal = decode || !f.no_causal;
          c.dtype = parse_dtype(dtype);
          c.page_size = f.page_size;
          c.page_layout = f.layout == "nhd" ? PageLayout::kNHD : PageLayout::kHND;
          c.left_pad = op == "decode" ? f.left_pad : 0;
          apply_model(c, model, f);
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

std::string si(double value, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (value >= 1000.0 && i < 5) {
    value /= 1000.0;
    ++i;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%.3g %s%s", value, prefixes[i], unit);
  return text;
}

std::string case_shape(const bench::Case& c) {
  std::string text = "b" + std::to_string(c.batch) + " h" + std::to_string(c.num_heads) + "/" + std::to_string(c.kv_heads) +
                     " d" + std::to_string(c.head_dim);
  if (c.op == "prefill" || c.op == "extend") text += " q" + std::to_string(c.q_len);
  text += " kv" + std::to_string(c.kv_len);
  if (c.op == "prefill") text += c.causal ? " causal" : " full";
  if (c.window > 0) text += " w" + std::to_string(c.window);
  if (c.op == "paged-decode" || c.op == "extend") text += " page" + std::to_string(c.page_size) + " " + to_string(c.page_layout);
  if (c.left_pad > 0) text += " pad" + std::to_string(c.left_pad);
  return text;
}

// Drivers return their ceilings as rows whose impl is not "attnkit" (bench.hpp).
bool is_ceiling(const bench::Row& r) { return r.impl != "attnkit"; }

// The planned family: the row's, or (for drivers that leave it empty) the one in its plan.
std::string family_of(const bench::Row& r) {
  if (!r.family.empty() || r.plan_json.empty()) return r.family;
  const nlohmann::json plan = nlohmann::json::parse(r.plan_json, nullptr, false);
  if (plan.is_discarded() || !plan.contains("partition")) return {};
  return plan["partition"].value("family", std::string());
}

void print_table(const std::vector<bench::Row>& rows, const std::string& device, const bench::Options& options) {
  const std::string backend = rows.empty() ? "?" : rows.front().backend;
  std::printf("# attnkit bench on %s (%s), commit %s, %d repetitions after %d warm-up, median shown%s%s\n",
              backend.c_str(), device.c_str(), git_commit().c_str(), options.repetitions, options.warmup,
              backend != "cpu" ? "" : options.huge_pages ? ", inputs on huge pages" : ", inputs on 4 KiB pages",
              options.sinks ? ", attnkit with attention sinks" : "");
  std::string ceilings;
  for (const bench::Row& r : rows) {
    if (!is_ceiling(r)) continue;
    const bool rate = r.ceiling_name.find("fma") != std::string::npos || r.ceiling_name.find("gemm") != std::string::npos;
    ceilings += (ceilings.empty() ? "" : ", ") + r.ceiling_name + " " + si(r.ceiling_value, rate ? "FLOP/s" : "B/s");
  }
  std::printf("# ceilings measured in this run: %s\n", ceilings.c_str());
  const bool beside = std::any_of(rows.begin(), rows.end(), [](const bench::Row& r) { return r.read_probe_beside > 0; });
  if (beside) {
    std::printf("# %%probe: each repetition's rate over the read probe's pass right after it (median), on a\n"
                "#   shared host steadier than %%ceil, which holds every row against the run's best pass\n");
  }
  std::printf("%-12s %-36s %-5s %-22s %-6s %10s %10s %14s %7s%s %12s %10s\n", "op", "shape", "dtype", "family", "timing",
              "median_ms", "min_ms", "achieved", "%ceil", beside ? "  %probe" : "", "predicted_ms", "plan_MB");
  for (const bench::Row& r : rows) {
    if (is_ceiling(r)) continue;
    if (!r.skipped.empty()) {
      std::printf("%-12s %-36s %-5s SKIPPED: %s\n", r.c.op.c_str(), case_shape(r.c).c_str(),
                  std::string(dtype_name(r.c.dtype)).c_str(), r.skipped.c_str());
      continue;
    }
    // In the unit of the row's ceiling: bytes for the read-bound rows, FLOPs for the others.
    const bool read_bound = r.ceiling_name == "read-bandwidth";
    const std::string achieved = read_bound ? si(r.achieved_bytes_per_s, "B/s") : si(r.achieved_flops_per_s, "FLOP/s");
    char probe[16] = "";
    if (beside) {
      if (r.read_probe_beside > 0) std::snprintf(probe, sizeof probe, " %6.1f%%", r.pct_of_probe_beside);
      else std::snprintf(probe, sizeof probe, " %7s", "-");
    }
    std::printf("%-12s %-36s %-5s %-22s %-6s %10.3f %10.3f %14s %6.1f%%%s %12.3f %10.1f\n", r.c.op.c_str(),
                case_shape(r.c).c_str(), std::string(dtype_name(r.c.dtype)).c_str(), family_of(r).c_str(),
                r.timing.c_str(), r.median_s * 1e3, r.min_s * 1e3, achieved.c_str(), r.pct_of_ceiling, probe,
                r.predicted_s * 1e3, r.bytes / (1 << 20));
  }
}

nlohmann::json row_json(const bench::Row& r) {
  if (is_ceiling(r)) {
    // A ceiling has no attention shape: only what was measured.
    return {{"impl", r.impl}, {"backend", r.backend}, {"timing", r.timing}, {"ceiling_name", r.ceiling_name},
            {"ceiling_value", r.ceiling_value}, {"median_s", r.median_s}, {"bytes", r.bytes}};
  }
  nlohmann::json j = {
      {"op", r.c.op}, {"batch", r.c.batch}, {"num_heads", r.c.num_heads}, {"kv_heads", r.c.kv_heads},
      {"head_dim", r.c.head_dim}, {"q_len", r.c.q_len}, {"kv_len", r.c.kv_len}, {"causal", r.c.causal},
      {"window", r.c.window}, {"dtype", std::string(dtype_name(r.c.dtype))}, {"backend", r.backend},
      {"impl", r.impl}, {"family", family_of(r)}, {"timing", r.timing}, {"median_s", r.median_s},
      {"min_s", r.min_s}, {"max_s", r.max_s}, {"repetitions", r.repetitions}, {"bytes", r.bytes},
      {"flops", r.flops}, {"achieved_bytes_per_s", r.achieved_bytes_per_s},
      {"achieved_flops_per_s", r.achieved_flops_per_s}, {"ceiling_name", r.ceiling_name},
      {"ceiling_value", r.ceiling_value}, {"pct_of_ceiling", r.pct_of_ceiling}, {"predicted_s", r.predicted_s}};
  if (r.read_probe_beside > 0) {
    j["read_probe_beside"] = r.read_probe_beside;
    j["pct_of_probe_beside"] = r.pct_of_probe_beside;
  }
  if (r.c.left_pad > 0) j["left_pad"] = r.c.left_pad;
  if (r.c.op == "paged-decode" || r.c.op == "extend") {
    j["page_size"] = r.c.page_size;
    j["page_layout"] = to_string(r.c.page_layout);
  }
  if (!r.skipped.empty()) j["skipped"] = r.skipped;
  if (!r.plan_json.empty()) {
    // Embedded as an object when it parses (it should); as the raw text otherwise.
    nlohmann::json plan = nlohmann::json::parse(r.plan_json, nullptr, false);
    j["plan"] = plan.is_discarded() ? nlohmann::json(r.plan_json) : plan;
  }
  return j;
}

// Rejects bad flags before any measurement (a case the planner cannot take is reported per row).
void validate_flags(const BenchFlags& f, const std::string& backend, const std::vector<bench::Case>& cases) {
  if (f.reps < 0)
    fail("attnkit bench", "--reps " + std::to_string(f.reps) + " is negative",
         "pass --reps N with N >= 1 (or leave it out for the default)");
  if (f.warmup < 0)
    fail("attnkit bench", "--warmup " + std::to_string(f.warmup) + " is negative", "pass --warmup N with N >= 0");
  if (f.ceiling_mib < 0) fail("attnkit bench", "--ceiling-mib is negative", "pass a size in MiB, or leave it out");
  if (f.op == "paged-decode" || f.op == "extend") {
    const std::string cmd = "attnkit bench --op " + f.op;
    if (backend == "cuda")
      fail(cmd, "the CUDA paged decode and extend have their own benchmark programs",
           f.op == "extend" ? std::string("run attnkit_extend_bench (scripts/device-extend.sh; the Hopper kernel, the "
                                          "decode kernel and contiguous prefill side by side), or pass --backend cpu")
                            : std::string("run attnkit_paged_bench (scripts/device-paged.sh; paged beside contiguous and "
                                          "PyTorch), or pass --backend cpu"));
    if (!f.family.empty())
      fail(cmd, "--family applies to decode and prefill", "drop --family");
  }
  if (f.left_pad < 0 || (f.left_pad > 0 && f.op != "decode"))
    fail("attnkit bench", "--left-pad " + std::to_string(f.left_pad) + (f.left_pad < 0 ? " is negative" : " with --op " + f.op),
         "pass --op decode --left-pad N with 0 <= N < every --kv-len (left-padded caches are a decode option)");
  for (const bench::Case& c : cases) {
    if (c.left_pad >= c.kv_len)
      fail("attnkit bench", "--left-pad " + std::to_string(c.left_pad) + " leaves no key of --kv-len " + std::to_string(c.kv_len),
           "pass a padding below every --kv-len");
    if (c.op == "paged-decode") {
      bench::paged_decode_problem(c).validate();  // e4m3: an e4m3 pool, q and out bf16
    } else if (c.op == "extend") {
      bench::extend_problem(c).validate();  // --q-len above --kv-len: an Error with its fix
    } else if (c.op == "decode") {
      bench::decode_problem(c).validate();  // e4m3: an e4m3 cache, q and out bf16
    } else {
      bench::prefill_problem(c).validate();
    }
  }
}

void run_bench(const BenchFlags& f, const std::string& command_line, int& exit_code) {
  const bool have_cuda = cuda::built() && cuda::device_count() > 0;
  std::string backend = f.backend;
  if (backend.empty()) backend = have_cuda ? "cuda" : "cpu";
  // The flags first (their errors do not depend on the machine), then the device.
  const std::vector<bench::Case> cases = make_cases(f);
  validate_flags(f, backend, cases);
  if (backend == "cuda") {
    if (!cuda::built())
      fail("attnkit bench --backend cuda", "built without CUDA",
           "rebuild with -DATTNKIT_CUDA=ON on a machine with nvcc, or pass --backend cpu");
    if (!have_cuda)
      fail("attnkit bench --backend cuda", "no CUDA device is visible",
           "run on a machine with an NVIDIA GPU, or pass --backend cpu");
  }
  bench::Options options;
  options.repetitions = f.reps > 0 ? f.reps : (backend == "cuda" ? kCudaRepetitions : kCpuRepetitions);
  options.warmup = f.warmup;
  options.threads = f.threads;
  options.family = parse_family(f.family);
  options.ceiling_bytes = f.ceiling_mib << 20;
  options.huge_pages = f.pages == "huge";
  options.sinks = f.sinks;
  // Progress on stderr once a run has lasted a couple of seconds (always on a terminal).
  const auto start = std::chrono::steady_clock::now();
  const bool terminal = isatty(STDERR_FILENO) != 0;
  options.progress = [start, terminal](const std::string& message) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (terminal || elapsed >= 2.0) std::fprintf(stderr, "[%6.1fs] %s\n", elapsed, message.c_str());
  };
  const std::string device = backend == "cuda" ? cuda::target().name : cpu_target(f.threads).name;
  const std::vector<bench::Row> rows = backend == "cuda" ? bench::run_cuda(cases, options) : bench::run_cpu(cases, options);

  if (f.json) {
    nlohmann::json doc = {{"commit", git_commit()},
                          {"device", device},
                          {"backend", backend},
                          {"command", command_line},
                          {"repetitions", options.repetitions},
                          {"warmup", options.warmup},
                          {"threads", backend == "cpu" ? cpu_target(f.threads).threads : 0},
                          {"pages", backend == "cpu" ? f.pages : ""},
                          {"sinks", options.sinks},
                          {"rows", nlohmann::json::array()}};
    for (const bench::Row& r : rows) doc["rows"].push_back(row_json(r));
    std::cout << doc.dump(2) << '\n';
  } else {
    print_table(rows, device, options);
  }
  // A case that could not be measured is not a result: say so and fail the command. Cases over the
  // sweep's size limit are skipped by design (their rows say so) and do not fail it.
  int skipped = 0;
  for (const bench::Row& r : rows) skipped += r.skipped.empty() || r.skipped_by_limit ? 0 : 1;
  if (skipped > 0) {
    std::fprintf(stderr, "attnkit bench: %d case(s) skipped (see their rows). Fix: pass --family scalar, or wait for the kernels named there\n", skipped);
    exit_code = 1;
  }
}

}  // namespace

void add_bench_command(CLI::App& app, const std::string& command_line, int& exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Time attnkit's kernels against ceilings measured in the same run");
  cmd->add_option("--backend", f->backend, "cpu or cuda (default: cuda when built and a device is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--op", f->op, "decode, paged-decode (CPU), extend (CPU), prefill or all (decode and prefill)")
      ->check(CLI::IsMember({"decode", "paged-decode", "extend", "prefill", "all"}))
      ->capture_default_str();
  f->model_opt = cmd->add_option("--model", f->model, "shape preset: " + model_preset_names())->capture_default_str();
  cmd->add_option("--batch", f->batches, "batch sizes, comma-separated (default: decode 1,8; prefill 1)")->delimiter(',');
  cmd->add_option("--kv-len", f->kv_lens, "key counts, comma-separated (default: decode 4096; prefill 1024)")->delimiter(',');
  cmd->add_option("--dtype", f->dtypes,
                  "dtypes, comma-separated: f32, f16, bf16, e4m3 (decode and paged-decode: an e4m3 KV cache or "
                  "page pool with bf16 q and output; prefill on Hopper, bf16 output; no peers) (default: bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "f16", "bf16", "e4m3"}));
  cmd->add_option("--heads", f->heads, "query heads (default: the model's)");
  cmd->add_option("--kv-heads", f->kv_heads, "KV heads (default: the model's)");
  cmd->add_option("--head-dim", f->head_dim, "head dimension (default: the model's)");
  cmd->add_option("--q-len", f->q_len,
                  "prefill query rows (default: = kv-len); extend: new rows per sequence, the last of its --kv-len "
                  "keys (default: 256)");
  cmd->add_option("--window", f->window, "sliding window (default: the model's)");
  cmd->add_flag("--no-causal", f->no_causal, "prefill without the causal mask");
  cmd->add_option("--family", f->family, "force a kernel family: scalar, tiled, split-kv, wgmma (Hopper prefill)")
      ->check(CLI::IsMember({"scalar", "tiled", "split-kv", "wgmma"}));
  cmd->add_option("--threads", f->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--reps", f->reps, "timed repetitions, median reported (default: cuda 50, cpu 20)");
  cmd->add_option("--warmup", f->warmup, "untimed repetitions first")->capture_default_str();
  cmd->add_option("--ceiling-mib", f->ceiling_mib, "CPU read-ceiling buffer in MiB (default: 4x LLC, 256..2048)");
  cmd->add_option("--pages", f->pages,
                  "CPU inputs of 2 MiB and more on huge pages (huge, as an engine would place a KV cache) or "
                  "4k (the allocator's pages); the read ceiling is the best of both either way")
      ->check(CLI::IsMember({"huge", "4k"}))
      ->capture_default_str();
  cmd->add_option("--page-size", f->page_size, "paged-decode, extend: keys per page (pages dealt in a random order)")
      ->capture_default_str();
  cmd->add_option("--layout", f->layout, "paged-decode, extend: page layout hnd or nhd")
      ->check(CLI::IsMember({"hnd", "nhd"}))
      ->capture_default_str();
  cmd->add_option("--left-pad", f->left_pad,
                  "decode: every sequence's first N keys are left padding (key_starts), so N fewer keys are read; "
                  "bytes and ceilings count the real keys (peers: none)");
  cmd->add_flag("--sinks", f->sinks, "attnkit's calls take attention-sink logits (gpt-oss), to time their cost; peers run without");
  cmd->add_flag("--json", f->json, "one JSON document: commit, device, command, rows");
  cmd->callback([f, command_line, &exit_code] { run_bench(*f, command_line, exit_code); });
}

}  // namespace attnkit::cli
