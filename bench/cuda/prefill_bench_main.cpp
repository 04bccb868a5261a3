// The prefill sweep as a standalone program, the CMake target attnkit_prefill_bench (the device
// scripts' prefill step): `attnkit_prefill_bench [--quick] [--also-tiled] [--head-dim D]
// [--min-seq S] [--max-seq S] [--non-causal]` prints the sweep's rows as JSON lines.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_bench.hpp"

int main(int argc, char** argv) {
  using namespace attnkit::bench;
  Options options;
  std::vector<Case> cases = prefill_sweep_cases();
  bool also_tiled = false;
  long head_dim = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) options.repetitions = 10;
    if (std::strcmp(argv[i], "--also-tiled") == 0) also_tiled = true;  // the fallback family, same run
    if (std::strcmp(argv[i], "--non-causal") == 0) std::erase_if(cases, [](const Case& c) { return c.causal; });
    if (std::strcmp(argv[i], "--head-dim") == 0 && i + 1 < argc) head_dim = std::atol(argv[++i]);
    if (std::strcmp(argv[i], "--max-seq") == 0 && i + 1 < argc) {
      const long s = std::atol(argv[++i]);
      std::erase_if(cases, [&](const Case& c) { return c.q_len > s; });
    }
    if (std::strcmp(argv[i], "--min-seq") == 0 && i + 1 < argc) {
      const long s = std::atol(argv[++i]);
      std::erase_if(cases, [&](const Case& c) { return c.q_len < s; });
    }
  }
  if (head_dim > 0) std::erase_if(cases, [&](const Case& c) { return c.head_dim != head_dim; });
  options.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  std::vector<Row> rows = run_cuda_prefill(cases, options);
  if (also_tiled) {
    const attnkit::KernelFamily tiled = attnkit::KernelFamily::kCooperativeTiled;
    std::vector<Case> tiled_cases = cases;  // the tiled family has no e4m3
    std::erase_if(tiled_cases, [](const Case& c) { return attnkit::is_fp8(c.dtype); });
    const std::vector<Row> more = run_cuda_prefill_family(tiled_cases, options, &tiled, "attnkit-tiled", rows[0].ceiling_value);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  for (const Row& r : rows) {
    const std::string family = r.plan_json.empty() ? "" : nlohmann::json::parse(r.plan_json)["partition"]["family"].get<std::string>();
    std::printf(
        "{\"impl\": \"%s\", \"family\": \"%s\", \"dtype\": \"%s\", \"head_dim\": %lld, \"causal\": %s, \"seq_len\": %lld, \"batch\": %lld, \"heads\": %lld, "
        "\"median_s\": %.9g, \"min_s\": %.9g, \"max_s\": %.9g, \"reps\": %d, \"flops\": %.6g, \"tflops\": %.3f, "
        "\"pct_of_gemm\": %.2f, \"gemm_tflops\": %.3f}\n",
        r.impl.c_str(), family.c_str(), std::string(attnkit::dtype_name(r.c.dtype)).c_str(), static_cast<long long>(r.c.head_dim), r.c.causal ? "true" : "false",
        static_cast<long long>(r.c.q_len), static_cast<long long>(r.c.batch), static_cast<long long>(r.c.num_heads),
        r.median_s, r.min_s, r.max_s, r.repetitions, r.flops, r.achieved_flops_per_s / 1e12, r.pct_of_ceiling,
        r.ceiling_value / 1e12);
  }
  return 0;
}
