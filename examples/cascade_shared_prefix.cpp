// Cascade attention on the CPU: n sequences share a long prefix (a system prompt, or the parallel
// samples of one prompt) and each has its own suffix. The prefix is stored once and attended once
// for all n queries (a prefill of n query rows against it, non-causal); each sequence's suffix is
// attended by a decode; merge_states joins the two partial states by their LSEs. The result is
// attention over prefix + suffix, which the example checks against the float64 golden over
// per-sequence caches holding both (a mismatch exits 1), and the prefix's K/V bytes are read once
// instead of n times. The same three calls exist on CUDA (cuda::prefill, cuda::decode,
// cuda::merge_states).
//
//   example_cascade_shared_prefix
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "host_buffer.hpp"

namespace {

using attnkit::DType;
using attnkit::TensorView;
using examples::Buffer;

constexpr std::int64_t kSequences = 6, kHeads = 16, kKvHeads = 4, kHeadDim = 64;
constexpr std::int64_t kPrefix = 600, kMaxSuffix = 160;
constexpr DType kCache = DType::kBF16;

}  // namespace

int main() {
  try {
    std::mt19937_64 rng(7);
    const std::int32_t suffix_len[kSequences] = {160, 1, 0, 97, 33, 128};  // one sequence has no own keys yet
    Buffer q(kCache, {kSequences, kHeads, kHeadDim});  // each sequence's query token
    Buffer k_prefix(kCache, {1, kKvHeads, kPrefix, kHeadDim}), v_prefix(kCache, {1, kKvHeads, kPrefix, kHeadDim});
    Buffer k_suffix(kCache, {kSequences, kKvHeads, kMaxSuffix, kHeadDim});
    Buffer v_suffix(kCache, {kSequences, kKvHeads, kMaxSuffix, kHeadDim});
    Buffer lengths(DType::kI32, {kSequences});
    for (Buffer* b : {&q, &k_prefix, &v_prefix, &k_suffix, &v_suffix}) b->fill(rng);
    std::memcpy(lengths.i32(), suffix_len, sizeof(suffix_len));

    // Both partial states as f32 rows in the decode's order (sequence, head): [2, n * heads, head_dim].
    const std::int64_t rows = kSequences * kHeads;
    Buffer states(DType::kF32, {2, rows, kHeadDim}), lses(DType::kF32, {2, rows});
    Buffer prefix_lse(DType::kF32, {1, kHeads, kSequences});

    // 1. The prefix, once: the n query tokens are the q_len rows of one non-causal prefill. q and out
    //    are [1, heads, n, head_dim] views of the (sequence, head)-ordered buffers.
    attnkit::PrefillProblem shared;
    shared.batch = 1, shared.num_heads = kHeads, shared.kv_heads = kKvHeads, shared.head_dim = kHeadDim;
    shared.q_len = kSequences, shared.kv_len = kPrefix, shared.causal = false;
    shared.dtype = kCache, shared.out_dtype = DType::kF32;
    const attnkit::PrefillPlan prefix_plan = attnkit::plan_prefill(shared, attnkit::cpu_target());
    auto by_sequence = [](void* data, DType dtype) {
      TensorView v = TensorView::contiguous(data, dtype, {1, kHeads, kSequences, kHeadDim});
      v.strides = {kSequences * kHeads * kHeadDim, kHeadDim, kHeads * kHeadDim, 1, 0};
      return v;
    };
    attnkit::PrefillTensors p;
    p.q = by_sequence(q.bytes.data(), kCache);
    p.k = k_prefix.view, p.v = v_prefix.view;
    p.out = by_sequence(states.bytes.data(), DType::kF32);
    p.lse = prefix_lse.view;  // [1, heads, n]: (head, sequence) order, transposed below
    std::vector<std::uint8_t> prefix_ws(prefix_plan.evidence.workspace_bytes);
    attnkit::cpu::prefill(prefix_plan, p, {prefix_ws.data(), prefix_ws.size(), attnkit::DeviceKind::kCpu});
    auto* lse_rows = reinterpret_cast<float*>(lses.bytes.data());
    for (std::int64_t s = 0; s < kSequences; ++s)
      for (std::int64_t h = 0; h < kHeads; ++h) lse_rows[s * kHeads + h] = prefix_lse.get(static_cast<std::size_t>(h * kSequences + s));

    // 2. Each sequence's own keys: a decode with per-sequence lengths, into the second state.
    attnkit::DecodeProblem own;
    own.batch = kSequences, own.num_heads = kHeads, own.kv_heads = kKvHeads, own.head_dim = kHeadDim;
    own.max_seq = own.kv_len = kMaxSuffix;
    own.kv_dtype = own.q_dtype = kCache, own.out_dtype = DType::kF32;
    const attnkit::DecodePlan suffix_plan = attnkit::plan_decode(own, attnkit::cpu_target());
    attnkit::DecodeTensors d;
    d.q = q.view, d.k_cache = k_suffix.view, d.v_cache = v_suffix.view, d.lengths = lengths.view;
    d.out = TensorView::contiguous(states.bytes.data() + rows * kHeadDim * 4, DType::kF32, {kSequences, kHeads, kHeadDim});
    d.lse = TensorView::contiguous(lse_rows + rows, DType::kF32, {kSequences, kHeads});
    std::vector<std::uint8_t> suffix_ws(suffix_plan.evidence.workspace_bytes);
    attnkit::cpu::decode(suffix_plan, d, {suffix_ws.data(), suffix_ws.size(), attnkit::DeviceKind::kCpu});

    // 3. The merge: out [n * heads, head_dim] in bf16, as a model's next layer reads it.
    Buffer out(kCache, {rows, kHeadDim});
    attnkit::cpu::merge_states({states.view, lses.view, out.view, {}});

    // The golden: each sequence's cache holding its prefix copy and then its own keys.
    Buffer k_all(kCache, {kSequences, kKvHeads, kPrefix + kMaxSuffix, kHeadDim});
    Buffer v_all(kCache, {kSequences, kKvHeads, kPrefix + kMaxSuffix, kHeadDim});
    Buffer all_lengths(DType::kI32, {kSequences});
    const std::size_t row_bytes = kHeadDim * attnkit::dtype_size(kCache);
    for (std::int64_t s = 0; s < kSequences; ++s) {
      all_lengths.i32()[s] = static_cast<std::int32_t>(kPrefix + suffix_len[s]);
      for (std::int64_t g = 0; g < kKvHeads; ++g) {
        const std::size_t dst = static_cast<std::size_t>((s * kKvHeads + g) * (kPrefix + kMaxSuffix)) * row_bytes;
        const std::size_t from_prefix = static_cast<std::size_t>(g * kPrefix) * row_bytes;
        const std::size_t from_suffix = static_cast<std::size_t>((s * kKvHeads + g) * kMaxSuffix) * row_bytes;
        std::memcpy(&k_all.bytes[dst], &k_prefix.bytes[from_prefix], kPrefix * row_bytes);
        std::memcpy(&v_all.bytes[dst], &v_prefix.bytes[from_prefix], kPrefix * row_bytes);
        std::memcpy(&k_all.bytes[dst + kPrefix * row_bytes], &k_suffix.bytes[from_suffix], kMaxSuffix * row_bytes);
        std::memcpy(&v_all.bytes[dst + kPrefix * row_bytes], &v_suffix.bytes[from_suffix], kMaxSuffix * row_bytes);
      }
    }
    attnkit::DecodeProblem whole = own;
    whole.max_seq = whole.kv_len = kPrefix + kMaxSuffix;
    attnkit::DecodeTensors w;
    w.q = q.view, w.k_cache = k_all.view, w.v_cache = v_all.view, w.lengths = all_lengths.view;
    const attnkit::reference::Result golden = attnkit::reference::decode(whole, w);
    double err2 = 0, ref2 = 0;
    bool has_nan = false;
    for (std::size_t i = 0; i < golden.out.size(); ++i) {
      const double a = out.get(i);
      has_nan = has_nan || std::isnan(a);
      err2 += (a - golden.out[i]) * (a - golden.out[i]);
      ref2 += golden.out[i] * golden.out[i];
    }
    const double rel_l2 = std::sqrt(err2 / ref2), tolerance = attnkit::rel_l2_tolerance_for(kCache);
    const double shared_mb = 2.0 * kKvHeads * kPrefix * row_bytes / 1e6;
    std::printf("%lld sequences share a %lld-key prefix: its K/V (%.2f MB) read once, not %lld times\n",
                static_cast<long long>(kSequences), static_cast<long long>(kPrefix), shared_mb,
                static_cast<long long>(kSequences));
    std::printf("prefix: %s; own keys: %s; merged vs float64 golden: rel-L2 %.3e (tolerance %.0e)%s\n",
                attnkit::to_string(prefix_plan.partition.family).c_str(),
                attnkit::to_string(suffix_plan.partition.family).c_str(), rel_l2, tolerance,
                has_nan ? ", NaN in output" : "");
    if (has_nan || !(rel_l2 <= tolerance)) {
      std::fprintf(stderr, "cascade_shared_prefix: MISMATCH against the golden\n");
      return 1;
    }
    std::printf("ok\n");
    return 0;
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "cascade_shared_prefix: %s\n", e.what());
    return 1;
  }
}
