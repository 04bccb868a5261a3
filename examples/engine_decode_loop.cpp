// An engine-style decode loop on the CPU: plan once, then per generated token and per layer one
// fused call (RoPE q and the new k, append k and v to the layer's cache, attend).
// The model is llama-like in shape only: no weights; each layer's q, k and v for a step are
// fresh random vectors. The two sequences of the batch start at different positions.
// At the last step every layer's output is checked against the float64 golden; a mismatch exits 1.
//
//   example_engine_decode_loop            # the planner's choice of kernel
//   example_engine_decode_loop --scalar   # the scalar online baseline
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "host_buffer.hpp"

namespace {

using attnkit::DType;
using attnkit::TensorView;
using examples::Buffer;

constexpr std::int64_t kLayers = 4, kBatch = 2, kHeads = 16, kKvHeads = 4, kHeadDim = 64, kMaxSeq = 256;
constexpr int kSteps = 64, kPrintEvery = 16;
constexpr DType kDType = DType::kBF16;

struct Layer {
  Buffer k_cache{kDType, {kBatch, kKvHeads, kMaxSeq, kHeadDim}};
  Buffer v_cache{kDType, {kBatch, kKvHeads, kMaxSeq, kHeadDim}};
  Buffer q{kDType, {kBatch, kHeads, kHeadDim}};
  Buffer k_new{kDType, {kBatch, kKvHeads, kHeadDim}};
  Buffer v_new{kDType, {kBatch, kKvHeads, kHeadDim}};
  Buffer out{kDType, {kBatch, kHeads, kHeadDim}};
};

// rel-L2 of one layer's output against the golden: q rotated in double, the layer's cache as written.
double check_layer(const attnkit::DecodeProblem& problem, const Layer& layer, const Buffer& positions,
                   const attnkit::RopeSpec& rope, bool& has_nan) {
  Buffer q_rotated(DType::kF32, {kBatch, kHeads, kHeadDim});
  Buffer lengths(DType::kI32, {kBatch});
  std::vector<double> row(kHeadDim);
  for (std::int64_t b = 0; b < kBatch; ++b) {
    const std::int32_t pos = reinterpret_cast<const std::int32_t*>(positions.bytes.data())[b];
    reinterpret_cast<std::int32_t*>(lengths.bytes.data())[b] = pos + 1;
    for (std::int64_t h = 0; h < kHeads; ++h) {
      const std::size_t base = static_cast<std::size_t>((b * kHeads + h) * kHeadDim);
      for (std::int64_t d = 0; d < kHeadDim; ++d) row[d] = layer.q.get(base + d);
      attnkit::reference::rope(row.data(), kHeadDim, pos, rope);
      for (std::int64_t d = 0; d < kHeadDim; ++d) q_rotated.set(base + d, static_cast<float>(row[d]));
    }
  }
  attnkit::DecodeProblem golden_problem = problem;
  golden_problem.q_dtype = DType::kF32;
  attnkit::DecodeTensors t;
  t.q = q_rotated.view;
  t.k_cache = layer.k_cache.view;
  t.v_cache = layer.v_cache.view;
  t.lengths = lengths.view;
  const attnkit::reference::Result golden = attnkit::reference::decode(golden_problem, t);
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < golden.out.size(); ++i) {
    const double a = layer.out.get(i);
    if (std::isnan(a)) has_nan = true;
    err2 += (a - golden.out[i]) * (a - golden.out[i]);
    ref2 += golden.out[i] * golden.out[i];
  }
  return std::sqrt(err2 / ref2);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    attnkit::DecodeProblem problem;
    problem.batch = kBatch;
    problem.num_heads = kHeads;
    problem.kv_heads = kKvHeads;
    problem.head_dim = kHeadDim;
    problem.max_seq = kMaxSeq;
    problem.kv_len = kMaxSeq;  // one plan covers every step up to the cache's capacity
    problem.kv_dtype = problem.q_dtype = problem.out_dtype = kDType;
    attnkit::RopeSpec rope;  // half rotation, theta 10000 (Llama)

    const bool scalar = argc > 1 && std::string(argv[1]) == "--scalar";
    const attnkit::DecodePlan plan =
        scalar ? attnkit::plan_decode(problem, attnkit::cpu_target(), attnkit::KernelFamily::kScalarOnline)
               : attnkit::plan_decode(problem, attnkit::cpu_target());
    std::printf("plan: %s, %u split(s) of %u keys, %u task(s), workspace %llu bytes\n",
                attnkit::to_string(plan.partition.family).c_str(), plan.partition.sequence_splits,
                plan.partition.keys_per_split, static_cast<unsigned>(plan.partition.grid_blocks),
                static_cast<unsigned long long>(plan.evidence.workspace_bytes));
    std::vector<std::uint8_t> workspace_bytes(plan.evidence.workspace_bytes);
    const attnkit::Workspace workspace{workspace_bytes.data(), workspace_bytes.size(), attnkit::DeviceKind::kCpu};

    std::mt19937_64 rng(20240601);
    std::vector<Layer> layers(kLayers);
    // Sequence 1 arrives with a 37-token prompt already in its caches; sequence 0 starts empty.
    const std::int32_t prompt[kBatch] = {0, 37};
    for (Layer& layer : layers) {
      layer.k_cache.fill(rng);
      layer.v_cache.fill(rng);
    }
    Buffer positions(DType::kI32, {kBatch});
    auto* pos = reinterpret_cast<std::int32_t*>(positions.bytes.data());
    for (std::int64_t b = 0; b < kBatch; ++b) pos[b] = prompt[b];

    double worst_rel_l2 = 0;
    bool has_nan = false;
    auto started = std::chrono::steady_clock::now();
    for (int step = 1; step <= kSteps; ++step) {
      for (Layer& layer : layers) {
        layer.q.fill(rng);
        layer.k_new.fill(rng);
        layer.v_new.fill(rng);
        attnkit::FusedDecodeTensors t;
        t.q = layer.q.view;
        t.k_new = layer.k_new.view;
        t.v_new = layer.v_new.view;
        t.k_cache = layer.k_cache.view;
        t.v_cache = layer.v_cache.view;
        t.positions = positions.view;
        t.out = layer.out.view;
        attnkit::cpu::fused_rope_append_decode(plan, t, rope, workspace);
      }
      if (step == kSteps) {
        for (const Layer& layer : layers) {
          worst_rel_l2 = std::max(worst_rel_l2, check_layer(problem, layer, positions, rope, has_nan));
        }
      }
      if (step % kPrintEvery == 0) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        double mean_abs = 0;
        for (std::size_t i = 0; i < layers.back().out.size(); ++i) mean_abs += std::abs(layers.back().out.get(i));
        mean_abs /= static_cast<double>(layers.back().out.size());
        std::printf("step %3d  positions [%d, %d]  mean|out| %.4f  %.3f ms/step (%lld layers)\n", step, pos[0],
                    pos[1], mean_abs, ms / kPrintEvery, static_cast<long long>(kLayers));
        started = std::chrono::steady_clock::now();
      }
      for (std::int64_t b = 0; b < kBatch; ++b) ++pos[b];
    }

    const double tolerance = attnkit::rel_l2_tolerance_for(kDType);
    std::printf("last step vs float64 golden: worst rel-L2 over %lld layers = %.3e (tolerance %.0e)%s\n",
                static_cast<long long>(kLayers), worst_rel_l2, tolerance, has_nan ? ", NaN in output" : "");
    if (has_nan || !(worst_rel_l2 <= tolerance)) {
      std::fprintf(stderr, "engine_decode_loop: MISMATCH against the golden\n");
      return 1;
    }
    std::printf("ok\n");
    return 0;
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "engine_decode_loop: %s\n", e.what());
    return 1;
  }
}
