// attnkit's prefill and cuDNN's fused attention timed back to back, point by point, in one process
// (development tool, not built by CMake). The sweep's peer columns come from a separate PyTorch
// process run after attnkit's bench, and on the H200 a compute-bound short call follows the clock
// under the power cap, which moves between the two (docs/perf-notes.md, "Short shapes: two speeds
// between processes"); here each point's two implementations alternate `rounds` times, under the
// bench protocol (bench/cuda/device_support.cuh: warm-up, 256 MiB memset before every repetition,
// CUDA events, median of 50), so a ratio never spans the two states. cuDNN runs the SDPA graph of
// cudnn-frontend (the graph PyTorch's cuDNN backend builds: bf16 in and out, f32 softmax, no
// stats, heuristics mode A). The two outputs are also compared (max |difference|), a cross-check
// of the kernels beside the float64 golden of the tests.
//   pip download nvidia-cudnn-frontend --no-deps -d /tmp/fe && unzip -q -o /tmp/fe/*.whl 'include/*' -d /tmp/fe
//   nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Ibench \
//     -I.deps/devprefix/include -I/tmp/fe/include -diag-suppress 128,2810 dev/hopper/cudnn_peer.cu \
//     bench/cuda/prefill_bench.cu build/<cuda build>/libattnkit.a -L/usr/local/cuda/lib64 -lcudnn -lnvrtc -lcuda \
//     -lcublas -lcublasLt -Xcompiler=-fopenmp -o cudnn_peer
//   (cudnn-frontend 1.32; ~5 minutes on the 2-core host: compile with -c, then link.) On the device
//   the toolkit's libcudnn is 9.14; PyTorch's (9.19, the sweep's torch column) is taken first with
//   LD_LIBRARY_PATH=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0] + '/lib')")
//   ./cudnn_peer [--head-dim D] [--min-seq S] [--max-seq S] [--rounds R]   (bf16 points of the sweep)
//   (results: bench/results/prefill_cudnn_inprocess_h200.md, session 16)
// Prints one JSON line per point: both medians per round, TFLOP/s of the medians (FLOPs = 4 x
// batch x heads x visible pairs x head_dim, as bench/peers/torch_prefill.py counts), the ratio
// cudnn / attnkit of the times, and the outputs' max |difference|.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "attnkit/attnkit.hpp"
#include "cuda/device_support.cuh"
#include "cuda/prefill_bench.hpp"

namespace fe = cudnn_frontend;
using namespace attnkit;
namespace dev = attnkit::bench::device;

namespace {

void fail(const std::string& what) {
  std::fprintf(stderr, "cudnn_peer: %s\n", what.c_str());
  std::exit(1);
}

void check_fe(fe::error_t status, const char* step) {
  if (!status.is_good()) fail(std::string(step) + ": " + status.get_message());
}

// cuDNN's SDPA forward for one bf16 BHSD problem (q_len = kv_len, kv_heads = heads), built once.
class CudnnSdpa {
 public:
  CudnnSdpa(cudnnHandle_t handle, const bench::Case& c) : handle_(handle) {
    const std::int64_t b = c.batch, h = c.num_heads, hk = c.kv_heads, s = c.q_len, skv = c.kv_len, d = c.head_dim;
    graph_.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char* name, std::int64_t uid, std::int64_t heads, std::int64_t len) {
      return graph_.tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({b, heads, len, d})
                               .set_stride({heads * len * d, len * d, d, 1}));
    };
    auto q = tensor("Q", kQ, h, s), k = tensor("K", kK, hk, skv), v = tensor("V", kV, hk, skv);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("sdpa")
                       .set_generate_stats(false)
                       .set_attn_scale(1.0f / std::sqrt(static_cast<float>(d)))
                       .set_causal_mask(c.causal);
    auto [o, stats] = graph_.sdpa(q, k, v, options);
    (void)stats;
    o->set_output(true).set_uid(kO).set_dim({b, h, s, d}).set_stride({h * s * d, s * d, d, 1});
    check_fe(graph_.validate(), "validate");
    check_fe(graph_.build_operation_graph(handle_), "build_operation_graph");
    check_fe(graph_.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
    check_fe(graph_.check_support(handle_), "check_support");
    check_fe(graph_.build_plans(handle_), "build_plans");
    std::int64_t bytes = 0;
    check_fe(graph_.get_workspace_size(bytes), "get_workspace_size");
    workspace_ = std::make_unique<dev::Buffer>(static_cast<std::size_t>(std::max<std::int64_t>(bytes, 256)));
  }

  void run(void* q, void* k, void* v, void* o) {
    std::unordered_map<std::int64_t, void*> pack{{kQ, q}, {kK, k}, {kV, v}, {kO, o}};
    check_fe(graph_.execute(handle_, pack, workspace_->data), "execute");
  }

 private:
  static constexpr std::int64_t kQ = 1, kK = 2, kV = 3, kO = 4;
  cudnnHandle_t handle_;
  fe::graph::Graph graph_;
  std::unique_ptr<dev::Buffer> workspace_;
};

double visible_flops(const bench::Case& c) {
  const double s = static_cast<double>(c.q_len);
  const double pairs = c.causal ? s * (s + 1) / 2 : s * s;
  return 4.0 * static_cast<double>(c.batch * c.num_heads) * pairs * static_cast<double>(c.head_dim);
}

double max_abs_difference(const void* a, const void* b, std::int64_t n) {
  std::vector<__nv_bfloat16> x(n), y(n);
  dev::check(cudaMemcpy(x.data(), a, n * 2, cudaMemcpyDeviceToHost), "cudnn_peer", "copy out");
  dev::check(cudaMemcpy(y.data(), b, n * 2, cudaMemcpyDeviceToHost), "cudnn_peer", "copy out");
  double worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(__bfloat162float(x[i])) - __bfloat162float(y[i]));
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  long head_dim = 0, min_seq = 0, max_seq = 1L << 30;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--head-dim") == 0) head_dim = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--min-seq") == 0) min_seq = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--max-seq") == 0) max_seq = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[++i]));
  }
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) fail("cudnnCreate failed (is libcudnn 9 on the library path?)");
  cudnnSetStream(handle, nullptr);  // the default stream, as the bench times attnkit
  std::fprintf(stderr, "cudnn_peer: cuDNN %zu, cudnn-frontend %d\n", cudnnGetVersion(), CUDNN_FRONTEND_VERSION);
  const bench::Options options;
  dev::Buffer flush(dev::kFlushBytes);
  for (const bench::Case& c : bench::prefill_sweep_cases()) {
    if (c.dtype != DType::kBF16 || (head_dim != 0 && c.head_dim != head_dim) || c.q_len < min_seq || c.q_len > max_seq) {
      continue;
    }
    PrefillProblem p;
    p.batch = c.batch, p.num_heads = c.num_heads, p.kv_heads = c.kv_heads, p.head_dim = c.head_dim;
    p.q_len = c.q_len, p.kv_len = c.kv_len, p.causal = c.causal;
    p.dtype = p.out_dtype = DType::kBF16;
    const PrefillPlan plan = plan_prefill(p, cuda::target());
    const std::int64_t q_elems = p.batch * p.num_heads * p.q_len * p.head_dim;
    const std::int64_t kv_elems = p.batch * p.kv_heads * p.kv_len * p.head_dim;
    dev::Buffer q(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2), ours(q_elems * 2), theirs(q_elems * 2);
    dev::Buffer ws(plan.evidence.workspace_bytes);
    dev::fill_random(q.data, p.dtype, q_elems, 11);
    dev::fill_random(k.data, p.dtype, kv_elems, 12);
    dev::fill_random(v.data, p.dtype, kv_elems, 13);
    auto view = [&](void* data, std::int64_t heads, std::int64_t len) {
      return TensorView::contiguous(data, p.dtype, {p.batch, heads, len, p.head_dim}, DeviceKind::kCuda);
    };
    const PrefillTensors t{view(q.data, p.num_heads, p.q_len), view(k.data, p.kv_heads, p.kv_len),
                           view(v.data, p.kv_heads, p.kv_len), view(ours.data, p.num_heads, p.q_len), {}, {}, {}};
    const Workspace workspace{ws.data, plan.evidence.workspace_bytes, DeviceKind::kCuda};
    CudnnSdpa cudnn(handle, c);

    std::vector<double> a_s, c_s;
    for (int r = 0; r < rounds; ++r) {
      a_s.push_back(dev::time_events(options, nullptr, flush.data, [&] { cuda::prefill(plan, t, workspace); }).median_s);
      c_s.push_back(dev::time_events(options, nullptr, flush.data, [&] { cudnn.run(q.data, k.data, v.data, theirs.data); }).median_s);
    }
    dev::check(cudaDeviceSynchronize(), "cudnn_peer", "the timed calls");
    const double diff = max_abs_difference(ours.data, theirs.data, q_elems);
    auto median = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    auto list = [](const std::vector<double>& x) {
      std::string out;
      for (double s : x) out += (out.empty() ? "" : ", ") + std::to_string(s * 1e6);
      return "[" + out + "]";
    };
    const double a = median(a_s), cu = median(c_s), flops = visible_flops(c);
    std::printf(
        "{\"head_dim\": %lld, \"causal\": %s, \"seq_len\": %lld, \"batch\": %lld, \"heads\": %lld, \"attnkit_us\": %s, "
        "\"cudnn_us\": %s, \"attnkit_tflops\": %.1f, \"cudnn_tflops\": %.1f, \"cudnn_over_attnkit\": %.3f, "
        "\"max_abs_difference\": %.4g}\n",
        static_cast<long long>(c.head_dim), c.causal ? "true" : "false", static_cast<long long>(c.q_len),
        static_cast<long long>(c.batch), static_cast<long long>(c.num_heads), list(a_s).c_str(), list(c_s).c_str(),
        flops / a / 1e12, flops / cu / 1e12, cu / a, diff);
    std::fflush(stdout);
  }
  cudnnDestroy(handle);
  return 0;
}
