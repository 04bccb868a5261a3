// libFuzzer target: the CPU kernels (scalar online, and the fast families on every instruction
// set this CPU has) on tiny random problems against the float64 golden, with the tolerances of
// DESIGN.md: decode, prefill, and over a page pool paged decode and extend. The fuzzer picks the
// shape, options, family, threads, ISA, layout (padded strides; HND / NHD pages of any size, dealt
// in any order, a shared prefix), lengths, left padding, query rows per sequence, magnitudes,
// attention sinks and the seed of the values; outputs are poisoned with NaN first, so an element
// left unwritten is a finding too, and so are the pool's unowned slots, so a stale key that
// reached the softmax is one.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/fast_isa.hpp"
#include "fuzz_support.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::fuzz {
namespace {

using testing::HostTensor;

// A buffer holding a view with padded strides (rows `pad` elements apart beyond head_dim).
struct Padded {
  std::vector<std::uint8_t> bytes;
  TensorView view;
  Padded(DType dtype, std::vector<std::int64_t> shape, std::int64_t pad) {
    view.dtype = dtype;
    view.rank = static_cast<int>(shape.size());
    std::int64_t stride = 1;
    for (int i = view.rank - 1; i >= 0; --i) {
      view.shape[i] = shape[static_cast<std::size_t>(i)];
      view.strides[i] = stride;
      stride *= view.shape[i] + (i == view.rank - 1 ? pad : 0);
    }
    bytes.resize(static_cast<std::size_t>(std::max<std::int64_t>(stride, 1)) * dtype_size(dtype));
    view.data = bytes.data();
  }
  std::size_t offset(std::int64_t flat) const {  // row-major logical index -> element offset
    std::size_t off = 0;
    for (int i = view.rank - 1; i >= 0; --i) {
      off += static_cast<std::size_t>(flat % view.shape[i] * view.strides[i]);
      flat /= view.shape[i];
    }
    return off;
  }
  std::int64_t numel() const { return view.numel(); }
  float get(std::int64_t i) const { return load_as_float(view.data, view.dtype, offset(i)); }
  void set(std::int64_t i, float x) { store_from_float(view.data, view.dtype, offset(i), x); }
};

void fill(Padded& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
}
void poison(Padded& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, std::nanf(""));
}

// DESIGN.md parity by the coarsest storage dtype of the call; NaN never passes. `get(i)`: output i,
// stored as `out_dtype`. An output below that dtype's smallest normal number cannot carry relative
// precision (f16's is 6.1e-5: a row whose attention sink takes nearly all the weight has outputs of
// 1e-14, stored as 0), so there only the error beyond that number counts (docs/numerics.md).
template <class Get>
void check_values(Get get, const std::vector<double>& golden, DType coarsest, DType out_dtype, const std::string& what) {
  const double min_normal = out_dtype == DType::kF16 ? 6.103515625e-05 : 1.1754943508222875e-38;
  double err2 = 0, ref2 = 0, max_abs = 0;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = get(i);
    if (std::isnan(a)) finding(what + ": NaN at output " + std::to_string(i));
    double d = std::abs(a - golden[i]);
    if (std::abs(golden[i]) < min_normal) d = std::max(0.0, d - min_normal);
    max_abs = std::max(max_abs, d);
    err2 += d * d;
    ref2 += golden[i] * golden[i];
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const bool ok = coarsest == DType::kF32 ? (max_abs <= 1e-3 && rel <= 1e-5)
                  : coarsest == DType::kF16 ? rel <= 2e-3
                                            : rel <= 1e-2;
  if (!ok) finding(what + ": max_abs=" + std::to_string(max_abs) + " rel_l2=" + std::to_string(rel));
}
void check(const Padded& actual, const std::vector<double>& golden, DType coarsest, const std::string& what) {
  check_values([&](std::size_t i) { return actual.get(static_cast<std::int64_t>(i)); }, golden, coarsest,
               actual.view.dtype, what);
}
void check_host(const HostTensor& actual, const std::vector<double>& golden, DType coarsest, const std::string& what) {
  check_values([&](std::size_t i) { return actual.get(i); }, golden, coarsest, actual.view.dtype, what);
}

void check_lse(const HostTensor& lse, const std::vector<double>& golden, const std::string& what) {
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = lse.get(i);
    const bool ok = std::isinf(golden[i]) ? (std::isinf(a) && a < 0)
                                          : std::abs(a - golden[i]) <= 1e-3 * (1.0 + std::abs(golden[i]));
    if (!ok) finding(what + ": lse[" + std::to_string(i) + "]=" + std::to_string(a) + " golden " + std::to_string(golden[i]));
  }
}

DType coarsest(DType a, DType b, DType c) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    if (a == t || b == t || c == t) return t;
  }
  return DType::kF32;
}

DType storage(FuzzedDataProvider& in) {
  static constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  return in.PickValueInArray(kTypes);
}

AttentionOptions options(FuzzedDataProvider& in) {
  AttentionOptions o;
  if (in.ConsumeBool()) o.window = in.ConsumeIntegralInRange<std::int64_t>(1, 40);
  if (in.ConsumeBool()) o.scale = in.ConsumeFloatingPointInRange<float>(0.01f, 2.0f);
  if (in.ConsumeBool()) o.softcap = in.ConsumeFloatingPointInRange<float>(0.5f, 60.0f);
  return o;
}

// Magnitudes the f32 tolerances hold for (the golden reads the same stored inputs): near-equal
// scores, ordinary ones, and a few dominant keys.
float magnitude(FuzzedDataProvider& in) {
  static constexpr float kStddev[] = {1e-3f, 0.3f, 1.0f, 3.0f};
  return in.PickValueInArray(kStddev);
}

// The ISA for this input (fast families only), among those this CPU supports: every level, the
// bf16 dot products and AMX tiles (the default paths where the CPU has them) included.
void select_isa(FuzzedDataProvider& in) {
  using cpu::simd::Isa;
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (cpu::simd::isa_supported(isa)) isas.push_back(isa);
  }
  const Isa isa = isas[in.ConsumeIntegralInRange<std::size_t>(0, isas.size() - 1)];
  setenv("ATTNKIT_CPU_ISA", std::string(cpu::simd::isa_name(isa)).c_str(), 1);
}

// Attention-sink logits for some inputs (heads at -inf have none); an empty view otherwise.
TensorView maybe_sinks(FuzzedDataProvider& in, HostTensor& sinks, std::mt19937_64& rng) {
  if (!in.ConsumeBool()) return {};
  std::normal_distribution<float> logit(1.0f, 3.0f);
  for (std::size_t h = 0; h < sinks.numel(); ++h) {
    sinks.set(h, in.ConsumeBool() ? -std::numeric_limits<float>::infinity() : logit(rng));
  }
  return sinks.view;
}

// A cache's or pool's dtype: the storage dtypes, or e4m3 (then with per-tensor scales, and q / out
// of a storage dtype).
DType pool_dtype(FuzzedDataProvider& in) {
  static constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kE4M3};
  return in.PickValueInArray(kTypes);
}
KvScales pool_scales(FuzzedDataProvider& in, DType dtype) {
  if (!is_fp8(dtype)) return {};
  return {in.ConsumeFloatingPointInRange<float>(0.01f, 4.0f), in.ConsumeFloatingPointInRange<float>(0.01f, 4.0f)};
}
// e4m3 bytes are exact in f16, so an e4m3 pool is held to f16's parity (or to q's / out's coarser one).
DType parity_dtype(DType q, DType kv, DType out) { return coarsest(q, is_fp8(kv) ? DType::kF16 : kv, out); }

// The same decode (shape, options, lengths, left padding, sinks, family, threads) over an e4m3
// copy of the caches with per-tensor scales (a plan of its own), against the golden of those bytes.
void e4m3_cache(FuzzedDataProvider& in, const DecodeProblem& p, bool scalar, int threads, const DecodeTensors& t,
                const Padded& k, const Padded& v, const std::string& what) {
  DecodeProblem pe = p;
  pe.kv_dtype = DType::kE4M3;
  const DecodePlan plan = scalar ? plan_decode(pe, cpu_target(threads), KernelFamily::kScalarOnline)
                                 : plan_decode(pe, cpu_target(threads));
  const KvScales scales = pool_scales(in, DType::kE4M3);
  HostTensor k8(DType::kE4M3, {p.batch, p.kv_heads, p.max_seq, p.head_dim}), v8(DType::kE4M3, {p.batch, p.kv_heads, p.max_seq, p.head_dim});
  for (std::size_t i = 0; i < k8.numel(); ++i) {
    k8.set(i, k.get(static_cast<std::int64_t>(i)) / scales.k);
    v8.set(i, v.get(static_cast<std::int64_t>(i)) / scales.v);
  }
  HostTensor out(p.out_dtype, {p.batch, p.num_heads, p.head_dim}), lse(DType::kF32, {p.batch, p.num_heads});
  testing::poison(out);
  testing::poison(lse);
  DecodeTensors te = t;
  te.k_cache = k8.view, te.v_cache = v8.view, te.out = out.view, te.lse = lse.view, te.kv_scales = scales;
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  cpu::decode(plan, te, Workspace{workspace.data(), workspace.size()});
  const reference::Result golden = reference::decode(pe, te);
  const std::string ewhat = what + " e4m3 cache";
  check_host(out, golden.out, parity_dtype(p.q_dtype, pe.kv_dtype, p.out_dtype), ewhat);
  check_lse(lse, golden.lse, ewhat);
}

// The decode of `t` in two key ranges, [0, m_b) and [m_b, length_b) (lengths, then key_starts), their
// (out, LSE) merged by merge_states, against the same golden: cascade attention's recipe.
void split_and_merge(FuzzedDataProvider& in, const DecodeProblem& p, const DecodePlan& plan, const DecodeTensors& t,
                     const reference::Result& golden, std::vector<std::uint8_t>& workspace, const std::string& what) {
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
  const auto* lengths = static_cast<const std::int32_t*>(t.lengths.data);
  HostTensor split_lengths(DType::kI32, {B}), split_starts(DType::kI32, {B});
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int32_t m = in.ConsumeIntegralInRange<std::int32_t>(0, lengths[b]);
    split_lengths.i32()[b] = m;
    split_starts.i32()[b] = m;
  }
  HostTensor partial(p.out_dtype, {2, B, H, D}), partial_lse(DType::kF32, {2, B, H});
  testing::poison(partial);
  testing::poison(partial_lse);
  const std::size_t part = static_cast<std::size_t>(B * H * D) * dtype_size(p.out_dtype);
  for (int s = 0; s < 2; ++s) {
    DecodeTensors st = t;
    st.out = TensorView::contiguous(partial.bytes.data() + s * part, p.out_dtype, {B, H, D});
    st.lse = TensorView::contiguous(partial_lse.bytes.data() + s * B * H * 4, DType::kF32, {B, H});
    if (s == 0) st.lengths = split_lengths.view;
    else st.key_starts = split_starts.view;
    cpu::decode(plan, st, Workspace{workspace.data(), workspace.size()});
  }
  HostTensor merged(DType::kF32, {B * H, D}), merged_lse(DType::kF32, {B * H});
  testing::poison(merged);
  testing::poison(merged_lse);
  const TensorView partial_rows = TensorView::contiguous(partial.bytes.data(), p.out_dtype, {2, B * H, D});
  const TensorView partial_lse_rows = TensorView::contiguous(partial_lse.bytes.data(), DType::kF32, {2, B * H});
  cpu::merge_states({partial_rows, partial_lse_rows, merged.view, merged_lse.view});
  check_host(merged, golden.out, coarsest(p.q_dtype, p.kv_dtype, p.out_dtype), what + " split in two and merged");
  check_lse(merged_lse, golden.lse, what + " split in two and merged");
}

// Seed 000's fused step on the decode's plan and caches: RoPE of q and of a new key row, append it
// and a new value row at positions[b] (< kv_len), attend over positions[b] + 1 keys; against the
// golden of reference::rope, the rows written into copies of the caches, and reference::decode.
// Every cache element but the new rows stays as it was.
void fused_step(FuzzedDataProvider& in, const DecodeProblem& p, const DecodePlan& plan, const DecodeTensors& t,
                Padded& k, Padded& v, std::mt19937_64& rng, std::vector<std::uint8_t>& workspace, const std::string& what) {
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  RopeSpec rope;
  rope.style = in.ConsumeBool() ? RopeStyle::kInterleaved : RopeStyle::kHalf;
  rope.theta = in.ConsumeFloatingPointInRange<float>(100.0f, 1e6f);
  HostTensor positions(DType::kI32, {B}), lengths(DType::kI32, {B});
  for (std::int64_t b = 0; b < B; ++b) {
    positions.i32()[b] = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(p.kv_len - 1));
    lengths.i32()[b] = positions.i32()[b] + 1;
  }
  HostTensor k_new(p.kv_dtype, {B, G, D}), v_new(p.kv_dtype, {B, G, D}), out(p.out_dtype, {B, H, D}), lse(DType::kF32, {B, H});
  testing::fill_normal(k_new, rng);
  testing::fill_normal(v_new, rng);
  testing::poison(out);
  testing::poison(lse);
  // The golden's inputs first (the call writes the caches): q rotated in double and stored in q's
  // dtype (the fused step is the separate calls, whose RoPE writes q in place); the caches with the
  // rotated key row (rounded to the cache dtype) and the value row at the position.
  HostTensor q_rot(p.q_dtype, {B, H, D}), k_gold(p.kv_dtype, {B, G, S, D}), v_gold(p.kv_dtype, {B, G, S, D});
  std::vector<double> row(static_cast<std::size_t>(D));
  auto cache_index = [&](std::int64_t b, std::int64_t g, std::int64_t s, std::int64_t d) { return ((b * G + g) * S + s) * D + d; };
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t s = 0; s < S; ++s) {
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t i = cache_index(b, g, s, d);
          k_gold.set(static_cast<std::size_t>(i), k.get(i));
          v_gold.set(static_cast<std::size_t>(i), v.get(i));
        }
      }
      for (std::int64_t d = 0; d < D; ++d) row[static_cast<std::size_t>(d)] = k_new.get(static_cast<std::size_t>((b * G + g) * D + d));
      reference::rope(row.data(), D, positions.i32()[b], rope);
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t i = static_cast<std::size_t>(cache_index(b, g, positions.i32()[b], d));
        k_gold.set(i, static_cast<float>(row[static_cast<std::size_t>(d)]));
        v_gold.set(i, v_new.get(static_cast<std::size_t>((b * G + g) * D + d)));
      }
    }
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) row[static_cast<std::size_t>(d)] = load_as_float(t.q.data, t.q.dtype, static_cast<std::size_t>((b * t.q.strides[0]) + h * t.q.strides[1] + d));
      reference::rope(row.data(), D, positions.i32()[b], rope);
      for (std::int64_t d = 0; d < D; ++d) q_rot.set(static_cast<std::size_t>((b * H + h) * D + d), static_cast<float>(row[static_cast<std::size_t>(d)]));
    }
  }
  const reference::Result golden =
      reference::decode(p, {q_rot.view, k_gold.view, v_gold.view, lengths.view, out.view, lse.view, t.sinks});
  const std::vector<std::uint8_t> k_before = k.bytes, v_before = v.bytes;
  cpu::fused_rope_append_decode(plan, {t.q, k_new.view, v_new.view, k.view, v.view, positions.view, out.view, lse.view, t.sinks},
                                rope, Workspace{workspace.data(), workspace.size()});
  const std::string fwhat = what + " fused (" + to_string(rope.style) + ")";
  check_host(out, golden.out, coarsest(p.q_dtype, p.kv_dtype, p.out_dtype), fwhat);
  check_lse(lse, golden.lse, fwhat);
  // Only the new rows changed.
  std::vector<std::uint8_t> k_expect = k_before, v_expect = v_before;
  const std::size_t es = dtype_size(p.kv_dtype);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t at = k.offset(cache_index(b, g, positions.i32()[b], d)) * es;
        std::copy_n(k.bytes.begin() + static_cast<std::ptrdiff_t>(at), es, k_expect.begin() + static_cast<std::ptrdiff_t>(at));
        std::copy_n(v.bytes.begin() + static_cast<std::ptrdiff_t>(at), es, v_expect.begin() + static_cast<std::ptrdiff_t>(at));
      }
    }
  }
  if (k.bytes != k_expect || v.bytes != v_expect) finding(fwhat + ": a cache element other than the new rows changed");
}

void fuzz_decode(FuzzedDataProvider& in) {
  DecodeProblem p;
  p.batch = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.kv_heads = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.num_heads = p.kv_heads * in.ConsumeIntegralInRange<std::int64_t>(1, 5);
  p.head_dim = 8 * in.ConsumeIntegralInRange<std::int64_t>(1, 12);
  p.max_seq = in.ConsumeIntegralInRange<std::int64_t>(1, 70);
  p.kv_len = in.ConsumeIntegralInRange<std::int64_t>(1, p.max_seq);
  p.kv_dtype = storage(in);
  p.q_dtype = storage(in);
  p.out_dtype = storage(in);
  p.options = options(in);
  const bool scalar = in.ConsumeBool();
  const int threads = in.ConsumeIntegralInRange<int>(1, 3);
  const DecodePlan plan = scalar ? plan_decode(p, cpu_target(threads), KernelFamily::kScalarOnline)
                                 : plan_decode(p, cpu_target(threads));
  select_isa(in);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  const std::int64_t pad = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(1, 9) : 0;
  Padded q(p.q_dtype, {B, H, D}, pad), k(p.kv_dtype, {B, G, S, D}, pad), v(p.kv_dtype, {B, G, S, D}, pad);
  Padded out(p.out_dtype, {B, H, D}, pad);
  HostTensor lengths(DType::kI32, {B}), lse(DType::kF32, {B, H});
  for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(p.kv_len));
  const float stddev = magnitude(in);
  std::mt19937_64 rng(in.ConsumeIntegral<std::uint64_t>());
  fill(q, rng, stddev);
  fill(k, rng, stddev);
  fill(v, rng, 1.0f);
  poison(out);
  testing::poison(lse);
  HostTensor sinks(DType::kF32, {H});
  DecodeTensors t{q.view, k.view, v.view, lengths.view, out.view, lse.view, maybe_sinks(in, sinks, rng)};
  HostTensor starts(DType::kI32, {B});  // left padding, read last so older corpus inputs keep their meaning
  if (in.ConsumeBool()) {
    for (std::int64_t b = 0; b < B; ++b) starts.i32()[b] = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(p.kv_len));
    t.key_starts = starts.view;
  }
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  cpu::decode(plan, t, Workspace{workspace.data(), workspace.size()});
  const reference::Result golden = reference::decode(p, t);
  const std::string what = std::string("decode ") + (scalar ? "scalar" : "fast") + (t.sinks.empty() ? "" : " sinks") +
                           (t.key_starts.empty() ? "" : " left-padded");
  check(out, golden.out, coarsest(p.q_dtype, p.kv_dtype, p.out_dtype), what);
  check_lse(lse, golden.lse, what);

  // Then, for some inputs (read last, so older corpus inputs keep their meaning): the same decode in
  // two key ranges merged (where the ranges cannot see different things: no window, no sinks, no
  // left padding of its own), and seed 000's fused step on the same plan.
  const bool split = in.ConsumeBool();
  if (split && p.options.window == 0 && t.sinks.empty() && t.key_starts.empty())
    split_and_merge(in, p, plan, t, golden, workspace, what);
  if (in.ConsumeBool()) e4m3_cache(in, p, scalar, threads, t, k, v, what);
  if (in.ConsumeBool() && t.key_starts.empty()) fused_step(in, p, plan, t, k, v, rng, workspace, what);
}

void fuzz_prefill(FuzzedDataProvider& in) {
  PrefillProblem p;
  p.batch = in.ConsumeIntegralInRange<std::int64_t>(1, 2);
  p.kv_heads = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.num_heads = p.kv_heads * in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  p.head_dim = 8 * in.ConsumeIntegralInRange<std::int64_t>(1, 12);
  p.kv_len = in.ConsumeIntegralInRange<std::int64_t>(1, 70);
  p.causal = in.ConsumeBool();
  p.q_len = in.ConsumeIntegralInRange<std::int64_t>(1, p.causal ? p.kv_len : 70);
  p.dtype = storage(in);
  p.out_dtype = storage(in);
  p.options = options(in);
  const bool scalar = in.ConsumeBool();
  const int threads = in.ConsumeIntegralInRange<int>(1, 3);
  const PrefillPlan plan = scalar ? plan_prefill(p, cpu_target(threads), KernelFamily::kScalarOnline)
                                  : plan_prefill(p, cpu_target(threads));
  select_isa(in);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim;
  const std::int64_t pad = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(1, 9) : 0;
  Padded q(p.dtype, {B, H, p.q_len, D}, pad), k(p.dtype, {B, G, p.kv_len, D}, pad),
      v(p.dtype, {B, G, p.kv_len, D}, pad), out(p.out_dtype, {B, H, p.q_len, D}, pad);
  HostTensor lse(DType::kF32, {B, H, p.q_len});
  const float stddev = magnitude(in);
  std::mt19937_64 rng(in.ConsumeIntegral<std::uint64_t>());
  fill(q, rng, stddev);
  fill(k, rng, stddev);
  fill(v, rng, 1.0f);
  poison(out);
  testing::poison(lse);
  PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
  HostTensor sinks(DType::kF32, {H});
  t.sinks = maybe_sinks(in, sinks, rng);
  std::vector<std::uint8_t> workspace(plan.evidence.workspace_bytes);
  cpu::prefill(plan, t, Workspace{workspace.data(), workspace.size()});
  const reference::Result golden = reference::prefill(p, t);
  const std::string what = std::string("prefill ") + (scalar ? "scalar" : "fast") + (t.sinks.empty() ? "" : " sinks");
  check(out, golden.out, coarsest(p.dtype, p.dtype, p.out_dtype), what);
  check_lse(lse, golden.lse, what);

  // Then, for some inputs (read last, so older corpus inputs keep their meaning), the same plan on
  // a ragged batch: sequences of 0..q_len rows and 0..kv_len keys packed along the rows (causal:
  // rows <= keys per sequence), the problem's q_len / kv_len as the bounds.
  if (!in.ConsumeBool()) return;
  HostTensor cu_q(DType::kI32, {B + 1}), cu_k(DType::kI32, {B + 1});
  cu_q.i32()[0] = cu_k.i32()[0] = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto keys = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(p.kv_len));
    const auto rows = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(p.causal ? std::min<std::int64_t>(keys, p.q_len) : p.q_len));
    cu_q.i32()[b + 1] = cu_q.i32()[b] + rows;
    cu_k.i32()[b + 1] = cu_k.i32()[b] + keys;
  }
  const std::int64_t total_q = cu_q.i32()[B], total_k = cu_k.i32()[B];
  HostTensor rq(p.dtype, {1, H, total_q, D}), rk(p.dtype, {1, G, total_k, D}), rv(p.dtype, {1, G, total_k, D});
  HostTensor rout(p.out_dtype, {1, H, total_q, D}), rlse(DType::kF32, {1, H, total_q});
  testing::fill_normal(rq, rng, stddev);
  testing::fill_normal(rk, rng, stddev);
  testing::fill_normal(rv, rng);
  testing::poison(rout);
  testing::poison(rlse);
  PrefillTensors rt{rq.view, rk.view, rv.view, rout.view, rlse.view, cu_q.view, cu_k.view};
  rt.sinks = t.sinks;
  cpu::prefill(plan, rt, Workspace{workspace.data(), workspace.size()});
  const reference::Result rgolden = reference::prefill(p, rt);
  const std::string rwhat = what + " ragged (" + std::to_string(total_q) + " rows, " + std::to_string(total_k) + " keys)";
  check_host(rout, rgolden.out, coarsest(p.dtype, p.dtype, p.out_dtype), rwhat);
  check_lse(rlse, rgolden.lse, rwhat);
}

// A page pool of `batch` sequences of random lengths (1..90 keys of capacity), pages of 1-64 keys
// dealt in a random order, sometimes a prefix of whole pages shared by every sequence (prefix
// caching); table entries past a sequence's pages are garbage, and every slot no sequence owns is
// NaN.
struct FuzzPool {
  PagedCacheSpec spec;
  HostTensor k, v, table, lengths;
  std::int64_t kv_len = 0;  // the longest length

  FuzzPool(FuzzedDataProvider& in, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim, DType dtype,
           std::mt19937_64& rng, float stddev) {
    static constexpr std::int64_t kPages[] = {1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 64};
    spec.page_size = in.PickValueInArray(kPages);
    spec.layout = in.ConsumeBool() ? PageLayout::kNHD : PageLayout::kHND;
    const std::int64_t capacity = in.ConsumeIntegralInRange<std::int64_t>(1, 90);
    spec.max_pages_per_seq = (capacity + spec.page_size - 1) / spec.page_size;
    lengths = HostTensor(DType::kI32, {batch});
    for (std::int64_t b = 0; b < batch; ++b) {
      lengths.i32()[b] = in.ConsumeIntegralInRange<std::int32_t>(0, static_cast<std::int32_t>(capacity));
      kv_len = std::max<std::int64_t>(kv_len, lengths.i32()[b]);
    }
    kv_len = std::max<std::int64_t>(kv_len, 1);
    // A shared prefix: whole pages every sequence holds, the same pages in every row.
    std::int64_t shared = 0;
    if (batch > 1 && in.ConsumeBool()) {
      std::int64_t shortest = capacity;
      for (std::int64_t b = 0; b < batch; ++b) shortest = std::min<std::int64_t>(shortest, lengths.i32()[b]);
      shared = shortest / spec.page_size;
    }
    const std::int64_t spare = in.ConsumeIntegralInRange<std::int64_t>(0, 3);
    spec.num_pages = shared + batch * (spec.max_pages_per_seq - shared) + spare;
    std::vector<std::int32_t> order(static_cast<std::size_t>(spec.num_pages));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    table = HostTensor(DType::kI32, {batch, spec.max_pages_per_seq});
    std::size_t next = static_cast<std::size_t>(shared);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t used = (lengths.i32()[b] + spec.page_size - 1) / spec.page_size;
      for (std::int64_t i = 0; i < spec.max_pages_per_seq; ++i) {
        std::int32_t& e = table.i32()[b * spec.max_pages_per_seq + i];
        if (i < shared) e = order[static_cast<std::size_t>(i)];
        else if (i < used) e = order[next++];
        else e = static_cast<std::int32_t>(rng() % 2 ? -1 : rng() % 1000);  // never read
      }
    }
    const std::int64_t P = spec.num_pages, S = spec.page_size;
    k = spec.layout == PageLayout::kHND ? HostTensor(dtype, {P, kv_heads, S, head_dim}) : HostTensor(dtype, {P, S, kv_heads, head_dim});
    v = spec.layout == PageLayout::kHND ? HostTensor(dtype, {P, kv_heads, S, head_dim}) : HostTensor(dtype, {P, S, kv_heads, head_dim});
    testing::poison(k);
    testing::poison(v);
    // Owned slots get values (a shared page is written by each sequence, with the same draws' shape).
    std::normal_distribution<float> kd(0.0f, stddev), vd(0.0f, 1.0f);
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t pos = 0; pos < lengths.i32()[b]; ++pos) {
        const std::int64_t page = table.i32()[b * spec.max_pages_per_seq + pos / spec.page_size], slot = pos % spec.page_size;
        for (std::int64_t h = 0; h < kv_heads; ++h) {
          const std::int64_t row = spec.layout == PageLayout::kHND ? (page * kv_heads + h) * spec.page_size + slot
                                                                   : (page * spec.page_size + slot) * kv_heads + h;
          for (std::int64_t d = 0; d < head_dim; ++d) {
            k.set(static_cast<std::size_t>(row * head_dim + d), kd(rng));
            v.set(static_cast<std::size_t>(row * head_dim + d), vd(rng));
          }
        }
      }
    }
  }
  PagedKvCache cache() { return {k.view, v.view, table.view, lengths.view}; }
};

// Gathering plans (gather_keys > 0): sometimes chunks of one to three tiles, so each task merges
// the states of several chunks.
void cut_gather(FuzzedDataProvider& in, std::uint32_t& gather_keys, std::uint32_t tile) {
  if (gather_keys > 0 && in.ConsumeBool()) gather_keys = tile * in.ConsumeIntegralInRange<std::uint32_t>(1, 3);
}

void fuzz_paged_decode(FuzzedDataProvider& in) {
  PagedDecodeProblem p;
  p.batch = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.kv_heads = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.num_heads = p.kv_heads * in.ConsumeIntegralInRange<std::int64_t>(1, 5);
  p.head_dim = 8 * in.ConsumeIntegralInRange<std::int64_t>(1, 12);
  p.kv_dtype = pool_dtype(in);
  p.q_dtype = storage(in);
  p.out_dtype = storage(in);
  p.options = options(in);
  const int threads = in.ConsumeIntegralInRange<int>(1, 3);
  const float stddev = magnitude(in);
  std::mt19937_64 rng(in.ConsumeIntegral<std::uint64_t>());
  FuzzPool pool(in, p.batch, p.kv_heads, p.head_dim, p.kv_dtype, rng, stddev);
  p.cache = pool.spec;
  p.kv_len = pool.kv_len;
  PagedDecodePlan plan = plan_paged_decode(p, cpu_target(threads));
  cut_gather(in, plan.gather_keys, plan.partition.tile_size);
  select_isa(in);
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
  HostTensor q(p.q_dtype, {B, H, D}), out(p.out_dtype, {B, H, D}), lse(DType::kF32, {B, H}), sinks(DType::kF32, {H});
  testing::fill_normal(q, rng, stddev);
  testing::poison(out);
  testing::poison(lse);
  PagedDecodeTensors t{q.view, pool.cache(), out.view, lse.view, maybe_sinks(in, sinks, rng)};
  t.kv_scales = pool_scales(in, p.kv_dtype);
  std::vector<std::uint8_t> workspace(plan.bounds.workspace_bytes);
  cpu::paged_decode(plan, t, Workspace{workspace.data(), workspace.size()});
  const reference::Result golden = reference::paged_decode(p, t);
  const std::string what = "paged decode " + std::string(dtype_name(p.kv_dtype)) + " " + to_string(p.cache.layout) +
                           " page " + std::to_string(p.cache.page_size) + " gather " + std::to_string(plan.gather_keys) +
                           (t.sinks.empty() ? "" : " sinks");
  check_host(out, golden.out, parity_dtype(p.q_dtype, p.kv_dtype, p.out_dtype), what);
  check_lse(lse, golden.lse, what);
}

void fuzz_extend(FuzzedDataProvider& in) {
  ExtendProblem p;
  p.batch = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.kv_heads = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  p.num_heads = p.kv_heads * in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  p.head_dim = 8 * in.ConsumeIntegralInRange<std::int64_t>(1, 12);
  p.kv_dtype = pool_dtype(in);
  p.q_dtype = is_fp8(p.kv_dtype) ? storage(in) : p.kv_dtype;
  p.out_dtype = storage(in);
  p.options = options(in);
  const int threads = in.ConsumeIntegralInRange<int>(1, 3);
  const float stddev = magnitude(in);
  std::mt19937_64 rng(in.ConsumeIntegral<std::uint64_t>());
  FuzzPool pool(in, p.batch, p.kv_heads, p.head_dim, p.kv_dtype, rng, stddev);
  // Each sequence's new rows are the last q_len_b of its keys (0 = an idle slot).
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
  HostTensor cu(DType::kI32, {B + 1});
  cu.i32()[0] = 0;
  std::int64_t longest = 1;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int32_t q_len = in.ConsumeIntegralInRange<std::int32_t>(0, pool.lengths.i32()[b]);
    cu.i32()[b + 1] = cu.i32()[b] + q_len;
    longest = std::max<std::int64_t>(longest, q_len);
  }
  const std::int64_t rows = cu.i32()[B];
  // Padding rows past the batch's (they must stay untouched), within the plan's batch * max_q_len.
  const std::int64_t pad = std::min<std::int64_t>(in.ConsumeIntegralInRange<std::int64_t>(0, 3), B * longest - rows);
  p.cache = pool.spec;
  p.kv_len = pool.kv_len;
  p.max_q_len = longest;
  p.max_total_q = std::max<std::int64_t>(rows + pad, 1);
  ExtendPlan plan = plan_extend(p, cpu_target(threads));
  cut_gather(in, plan.gather_keys, plan.partition.tile_size);
  select_isa(in);
  HostTensor q(p.q_dtype, {rows + pad, H, D}), out(p.out_dtype, {rows + pad, H, D}), lse(DType::kF32, {rows + pad, H});
  HostTensor sinks(DType::kF32, {H});
  testing::fill_normal(q, rng, stddev);
  testing::poison(out);
  testing::poison(lse);
  ExtendTensors t{q.view, cu.view, pool.cache(), out.view, lse.view, maybe_sinks(in, sinks, rng)};
  t.kv_scales = pool_scales(in, p.kv_dtype);
  std::vector<std::uint8_t> workspace(plan.bounds.workspace_bytes);
  cpu::extend(plan, t, Workspace{workspace.data(), workspace.size()});
  const reference::Result golden = reference::extend(p, t);
  const std::string what = "extend " + std::string(dtype_name(p.kv_dtype)) + " " + to_string(p.cache.layout) +
                           " page " + std::to_string(p.cache.page_size) + " rows " + std::to_string(rows) + " gather " +
                           std::to_string(plan.gather_keys) + (t.sinks.empty() ? "" : " sinks");
  check_host(out, golden.out, parity_dtype(p.q_dtype, p.kv_dtype, p.out_dtype), what);
  check_lse(lse, golden.lse, what);
  for (std::size_t i = golden.out.size(); i < out.numel(); ++i) {
    if (!std::isnan(out.get(i))) finding(what + ": padding row element " + std::to_string(i) + " was written");
  }
}

}  // namespace
}  // namespace attnkit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnkit::fuzz;
  FuzzedDataProvider in(data, size);
  // Every problem here is valid: an Error is a finding as much as a wrong answer. One byte picks
  // the call; its low bit keeps older corpus inputs' decode (odd) / prefill (even) meaning half the time.
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: fuzz_prefill(in); break;
    case 1: fuzz_decode(in); break;
    case 2: fuzz_paged_decode(in); break;
    default: fuzz_extend(in); break;
  }
  return 0;
}
