// The CUDA prefill benchmark (called by the bench/cuda/ driver): times attnkit's prefill on each
// "prefill" case under DESIGN.md's protocol (CUDA events, warm-up, L2 flushed before every
// repetition, median), and measures the tensor-core ceiling in the same run: a cuBLAS bf16 GEMM
// (8192^3, f32 accumulation), and for e4m3 cases a cuBLASLt e4m3 GEMM (same size, bf16 out).
// PyTorch's SDPA backends are timed by bench/peers/torch_prefill.py (no fp8 there).
#pragma once
#include <string>
#include <vector>

#include "bench.hpp"

namespace attnkit::bench {

// Rows: one "cublas-bf16-gemm" ceiling row (and a "cublaslt-e4m3-gemm" row when a case has e4m3
// inputs), then one "attnkit" row per prefill case (others are skipped), each with its FLOP rate
// as a % of the ceiling of its input dtype.
std::vector<Row> run_cuda_prefill(const std::vector<Case>& cases, const Options& options);

// The same with a forced kernel family (nullptr = the planner's choice), rows named `impl`, and
// the GEMM ceiling given (> 0: no ceiling row, no new measurement) or measured (0).
std::vector<Row> run_cuda_prefill_family(const std::vector<Case>& cases, const Options& options,
                                         const KernelFamily* family, const std::string& impl, double gemm);

// The bf16 GEMM ceiling alone (FLOP/s), m = n = k = `size`.
double cuda_bf16_gemm_ceiling(const Options& options, int size = 8192);
// The e4m3 GEMM ceiling (FLOP/s): cuBLASLt, A transposed (its fp8 layout), f32 accumulation, bf16 out.
double cuda_e4m3_gemm_ceiling(const Options& options, int size = 8192);

// The prefill sweep of BASELINES.md: 16k tokens per batch, hidden 2048 (heads = 2048 / head_dim,
// kv_heads = heads), head_dim 64 / 128 / 256, causal and not, seq_len 512 .. 16384, bf16; and the
// same points in e4m3 at head_dim 128 and 256.
std::vector<Case> prefill_sweep_cases();

}  // namespace attnkit::bench
