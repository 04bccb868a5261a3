// CUDA prefill benchmark and the bf16 GEMM ceiling (see prefill_bench.hpp).
// Protocol (DESIGN.md): inputs filled on the device, warm-up runs, then `repetitions` timed runs,
// each preceded by a 256 MiB memset so no run reads warm L2 (the H200's L2 is 60 MB), timed with
// CUDA events around the launch alone; median, min and max reported.
//
// The standalone program of the device scripts' prefill step is prefill_bench_main.cpp.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "cuda/prefill_bench.hpp"
#include "cuda/device_support.cuh"

namespace attnkit::bench {
namespace {

constexpr const char* kContext = "bench (cuda prefill)";
using device::kFlushBytes;
using device::Timing;
using Buffer = device::Buffer;

void fill(void* data, DType t, std::int64_t n, std::uint32_t seed) { device::fill_random(data, t, n, seed); }
void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail(kContext, std::string(what) + " failed (cuBLAS status " + std::to_string(st) + ")",
         "check the cuBLAS installation and the device");
}

// Times `run` (which enqueues work on the default stream) under the protocol.
template <class Run>
Timing time_events(const Options& options, Buffer& flush, Run&& run) {
  return device::time_events(options, nullptr, flush.data, run);
}

}  // namespace

double cuda_bf16_gemm_ceiling(const Options& options, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  Buffer a(n * n * 2), b(n * n * 2), c(n * n * 2), flush(kFlushBytes);
  fill(a.data, DType::kBF16, static_cast<std::int64_t>(n * n), 1);
  fill(b.data, DType::kBF16, static_cast<std::int64_t>(n * n), 2);
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  const float alpha = 1.0f, beta = 0.0f;
  Options o = options;
  o.repetitions = std::min(options.repetitions, 20);
  const Timing t = time_events(o, flush, [&] {
    check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, a.data, CUDA_R_16BF, size, b.data,
                       CUDA_R_16BF, size, &beta, c.data, CUDA_R_16BF, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  });
  cublasDestroy(handle);
  return 2.0 * static_cast<double>(n) * n * n / t.median_s;
}

double cuda_e4m3_gemm_ceiling(const Options& options, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  Buffer a(n * n), b(n * n), c(n * n * 2), flush(kFlushBytes);
  const std::size_t ws_bytes = 64 << 20;
  Buffer ws(ws_bytes);
  fill(a.data, DType::kE4M3, static_cast<std::int64_t>(n * n), 1);
  fill(b.data, DType::kE4M3, static_cast<std::int64_t>(n * n), 2);
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  cublasLtMatmulDesc_t op;
  check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;  // fp8 GEMMs take A transposed ("TN")
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n), "layout a");
  check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n), "layout b");
  check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n), "layout c");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heuristic, &found), "heuristic");
  if (found <= 0)
    fail(kContext, "cuBLASLt has no e4m3 GEMM algorithm here", "run on a Hopper GPU (sm_90) with CUDA 12+");
  const float alpha = 1.0f, beta = 0.0f;
  Options o = options;
  o.repetitions = std::min(options.repetitions, 20);
  const Timing t = time_events(o, flush, [&] {
    check(cublasLtMatmul(lt, op, &alpha, a.data, la, b.data, lb, &beta, c.data, lc, c.data, lc, &heuristic.algo, ws.data,
                         ws_bytes, nullptr),
          "cublasLtMatmul");
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  return 2.0 * static_cast<double>(n) * n * n / t.median_s;
}

std::vector<Case> prefill_sweep_cases() {
  std::vector<Case> cases;
  for (std::int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      for (std::int64_t s = 512; s <= 16384; s *= 2) {
        Case c;
        c.op = "prefill";
        c.head_dim = d;
        c.num_heads = c.kv_heads = 2048 / d;
        c.q_len = c.kv_len = s;
        c.batch = 16384 / s;
        c.causal = causal;
        c.dtype = DType::kBF16;
        cases.push_back(c);
        // e4m3 inputs at the head dims the Hopper kernel has them for (kHopperFp8Configs).
        if (d == 128 || d == 256) {
          c.dtype = DType::kE4M3;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

std::vector<Row> run_cuda_prefill(const std::vector<Case>& cases, const Options& options) {
  return run_cuda_prefill_family(cases, options, options.family ? &*options.family : nullptr, "attnkit", 0.0);
}

std::vector<Row> run_cuda_prefill_family(const std::vector<Case>& cases, const Options& options,
                                         const KernelFamily* family, const std::string& impl, double gemm) {
  if (!(cuda::built() && cuda::device_count() > 0))
    fail(kContext, "no CUDA device", "run the CUDA benchmark on a GPU machine");
  std::vector<Row> rows;
  // A GEMM ceiling as a row of its own (8192^3).
  auto ceiling_row = [](const char* impl, const char* name, double rate) {
    Row r;
    r.backend = "cuda";
    r.impl = impl;
    r.timing = "events";
    r.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
    r.achieved_flops_per_s = rate;
    r.median_s = r.flops / rate;
    r.ceiling_name = name;
    r.ceiling_value = rate;
    r.pct_of_ceiling = 100.0;
    return r;
  };
  if (gemm <= 0.0) {
    gemm = cuda_bf16_gemm_ceiling(options);
    rows.push_back(ceiling_row("cublas-bf16-gemm", "bf16-gemm", gemm));
  }
  // e4m3 rows are measured against an e4m3 GEMM of the same run.
  double gemm_e4m3 = 0.0;
  if (std::any_of(cases.begin(), cases.end(), [](const Case& c) { return c.op == "prefill" && is_fp8(c.dtype); })) {
    gemm_e4m3 = cuda_e4m3_gemm_ceiling(options);
    rows.push_back(ceiling_row("cublaslt-e4m3-gemm", "e4m3-gemm", gemm_e4m3));
  }
  const Target target = cuda::target();
  Buffer flush(kFlushBytes);
  for (const Case& c : cases) {
    if (c.op != "prefill") continue;
    if (options.progress) options.progress("prefill d" + std::to_string(c.head_dim) + " s" + std::to_string(c.q_len));
    const PrefillProblem p = prefill_problem(c);
    PrefillPlan plan;
    try {
      plan = family != nullptr ? plan_prefill(p, target, *family) : plan_prefill(p, target);
    } catch (const Error& e) {  // a family asked for that cannot run this case: reported, not timed
      Row r;
      r.c = c;
      r.backend = "cuda";
      r.impl = impl;
      r.skipped = e.what();
      rows.push_back(r);
      continue;
    }
    const std::int64_t q_elems = p.batch * p.num_heads * p.q_len * p.head_dim;
    const std::int64_t kv_elems = p.batch * p.kv_heads * p.kv_len * p.head_dim;
    const std::size_t es = dtype_size(p.dtype);
    Buffer q(q_elems * es), k(kv_elems * es), v(kv_elems * es), out(q_elems * dtype_size(p.out_dtype));
    Buffer ws(plan.evidence.workspace_bytes);
    fill(q.data, p.dtype, q_elems, 11);
    fill(k.data, p.dtype, kv_elems, 12);
    fill(v.data, p.dtype, kv_elems, 13);
    auto view = [&](void* data, DType t, std::int64_t heads, std::int64_t len) {
      return TensorView::contiguous(data, t, {p.batch, heads, len, p.head_dim}, DeviceKind::kCuda);
    };
    PrefillTensors t{view(q.data, p.dtype, p.num_heads, p.q_len), view(k.data, p.dtype, p.kv_heads, p.kv_len),
                     view(v.data, p.dtype, p.kv_heads, p.kv_len), view(out.data, p.out_dtype, p.num_heads, p.q_len),
                     {}, {}, {}};
    Buffer sinks(options.sinks ? p.num_heads * 4 : 0);
    if (options.sinks) {
      fill(sinks.data, DType::kF32, p.num_heads, 14);
      t.sinks = TensorView::contiguous(sinks.data, DType::kF32, {p.num_heads}, DeviceKind::kCuda);
    }
    const Workspace workspace{ws.data, plan.evidence.workspace_bytes, DeviceKind::kCuda};
    const Timing tm = time_events(options, flush, [&] { cuda::prefill(plan, t, workspace); });

    Row r;
    r.c = c;
    r.backend = "cuda";
    r.impl = impl;
    r.timing = "events";
    r.median_s = tm.median_s;
    r.min_s = tm.min_s;
    r.max_s = tm.max_s;
    r.repetitions = tm.repetitions;
    r.bytes = static_cast<double>(plan.evidence.traffic.global_read_bytes + plan.evidence.traffic.global_write_bytes);
    r.flops = static_cast<double>(plan.evidence.matmul_flops);
    r.achieved_bytes_per_s = r.bytes / tm.median_s;
    r.achieved_flops_per_s = r.flops / tm.median_s;
    const double ceiling = is_fp8(p.dtype) ? gemm_e4m3 : gemm;
    r.ceiling_name = is_fp8(p.dtype) ? "e4m3-gemm" : "bf16-gemm";
    r.ceiling_value = ceiling;
    r.pct_of_ceiling = 100.0 * r.achieved_flops_per_s / ceiling;
    r.predicted_s = r.flops / ceiling;
    r.plan_json = to_json(plan);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace attnkit::bench
