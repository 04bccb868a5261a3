// The benchmark interface shared by `attnkit bench` and the device script. Each backend's driver
// times attnkit's kernels (and, on the GPU, the ceilings) under DESIGN.md's protocol and returns
// rows; the CLI prints them as a table or JSON. Peers that live in Python (PyTorch SDPA) are
// measured by bench/peers/*.py in the same run and merged by bench/render.py.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"

namespace attnkit::bench {

struct Case {
  std::string op = "decode";  // "decode", "paged-decode", "extend" or "prefill"
  std::int64_t batch = 1, num_heads = 32, kv_heads = 8, head_dim = 128;
  std::int64_t q_len = 1, kv_len = 4096;
  bool causal = true;
  std::int64_t window = 0;
  DType dtype = DType::kBF16;  // storage dtype of q, k, v ((paged) decode: KV; q and out follow it, bf16 for e4m3)
  // extend: every sequence's last q_len of its kv_len keys are new query rows (a chunk of chunked
  // prefill), the keys in a page pool as paged-decode's.
  // paged-decode and extend: the pool's page size and layout (each sequence's pages drawn in a random order).
  std::int64_t page_size = 16;
  PageLayout page_layout = PageLayout::kHND;
  // decode: every sequence's first left_pad keys are padding (DecodeTensors::key_starts), so the
  // kernel reads kv_len - left_pad keys; the row's bytes are those of the real keys.
  std::int64_t left_pad = 0;
};

// The output dtype of a prefill case: its input dtype, except e4m3 (input-only), which writes bf16
// (unit scales: the benchmark times the kernel, the values do not matter).
constexpr DType prefill_out_dtype(DType input) { return is_fp8(input) ? DType::kBF16 : input; }
// The q and output dtype of a decode case over a `kv` cache: the cache's, except e4m3 (a cache-only
// dtype), whose decode takes bf16 q and writes bf16, the usual fp8-cache serving setup.
constexpr DType decode_query_dtype(DType kv) { return is_fp8(kv) ? DType::kBF16 : kv; }

// The problem a case describes, as its planner takes it (case_problems.cpp). Paged decode: every
// sequence's kv_len keys in pages of page_size, the pool exactly batch x ceil(kv_len / page_size).
DecodeProblem decode_problem(const Case& c);
// The same decode over only its real keys (kv_len - left_pad): what a left-padded case reads.
DecodeProblem real_keys_problem(const Case& c);
PagedDecodeProblem paged_decode_problem(const Case& c);
// Extend: every sequence q_len new rows at the end of kv_len keys, the pool as paged decode's.
ExtendProblem extend_problem(const Case& c);
PrefillProblem prefill_problem(const Case& c);

struct Row {
  Case c;
  std::string backend;   // "cpu" or "cuda"
  std::string impl;      // "attnkit" or a ceiling's name
  std::string family;    // the planned kernel family (to_string), empty for ceilings
  std::string timing;    // "events", "graph" (CUDA-graph replay) or "wall" (CPU)
  double median_s = 0, min_s = 0, max_s = 0;
  int repetitions = 0;
  double bytes = 0;             // the plan's predicted global bytes (read + write)
  double flops = 0;             // the plan's matmul FLOPs
  double achieved_bytes_per_s = 0, achieved_flops_per_s = 0;
  std::string ceiling_name;     // "read-bandwidth", "bf16-gemm", ...
  double ceiling_value = 0;     // bytes/s or FLOP/s, measured in the same run
  double pct_of_ceiling = 0;
  double predicted_s = 0;       // bytes / ceiling (or flops / ceiling, whichever is larger)
  // CPU decode rows: the read probe passed again right after each timed repetition (median
  // bytes/s), and the median over repetitions of the repetition's rate over that pass's, in %.
  double read_probe_beside = 0, pct_of_probe_beside = 0;
  std::string plan_json;        // the plan's evidence, as to_json()
  std::string skipped;          // non-empty: the case did not run (e.g. kernel not implemented), why
  bool skipped_by_limit = false;  // ...because it is over the sweep's size limit (by design, not a failure)
};

struct Options {
  int repetitions = 50;
  int warmup = 5;
  int threads = 0;  // CPU threads (0 = all)
  std::function<void(const std::string&)> progress;  // called between cases of long sweeps
  std::optional<KernelFamily> family;  // force a kernel family (default: the planner's choice)
  std::int64_t ceiling_bytes = 0;      // read-ceiling buffer size (0 = 4x the LLC, 256 MiB..2 GiB)
  bool huge_pages = true;  // CPU inputs of 2 MiB and more on huge pages (cpu::advise_huge_pages)
  bool sinks = false;      // attnkit's calls take attention-sink logits (gpt-oss); peers run without
};

// A ceiling measured in this run: what it is and its value (bytes/s or FLOP/s).
struct Ceiling {
  std::string name;
  double value = 0;
};

// Peak f32 FMA rate of this CPU (all threads, widest ISA present), in FLOP/s (2 per FMA lane).
Ceiling cpu_fma_ceiling(const Options& options);
std::vector<Row> run_cpu(const std::vector<Case>& cases, const Options& options);

// Present only when built with CUDA (attnkit::cuda::built()); they throw Error otherwise.
double cuda_read_ceiling(const Options& options);
std::vector<Row> run_cuda(const std::vector<Case>& cases, const Options& options);

// The default problem: llama3-8b-like decode and prefill.
std::vector<Case> default_cases();

}  // namespace attnkit::bench
