// The float64 golden: every option, written for clarity, not speed.
// Inputs: host views of any storage dtype (prefill inputs and decode caches: e4m3 too, times their
// per-tensor scales) and any strides. Each query row gathers its visible keys (the masking convention of problem.hpp: masked
// keys are skipped, never scored), takes scores in double, applies the soft-cap, then a two-pass
// softmax (max, then sum) and the weighted sum of V. A row with no visible key gives zeros and an
// LSE of -inf.
#include "attnkit/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"

namespace attnkit::reference {
namespace {

double element(const TensorView& t, std::int64_t offset) {
  return static_cast<double>(load_as_float(t.data, t.dtype, static_cast<std::size_t>(offset)));
}

std::int64_t offset3(const TensorView& t, std::int64_t i0, std::int64_t i1, std::int64_t i2) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}
std::int64_t offset4(const TensorView& t, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

std::int64_t read_i32(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]];
}

// A tensor of no elements may come without memory (a ragged batch of empty sequences).
void require_host_input(const char* context, const char* name, const TensorView& t, int rank) {
  if (!((t.data != nullptr || (t.rank == rank && t.numel() == 0)) && t.device == DeviceKind::kCpu))
    fail(context, std::string(name) + " is not a host tensor (" + t.describe() + ")",
         "copy the inputs to host memory before calling the reference");
  if (t.rank != rank)
    fail(context, std::string(name) + " has rank " + std::to_string(t.rank),
         "pass the shapes documented in tensors.hpp");
}

// One query row against its keys [begin, end) of one KV head. `key_at(j)` and `value_at(j, d)`
// read key j; `q` holds the row. `sink`: the head's attention-sink logit, one more score in the
// softmax whose value is zero (-inf: none). Writes head_dim outputs and returns the LSE.
template <class KeyDot, class ValueAt>
double attend_row(std::int64_t head_dim, std::int64_t begin, std::int64_t end, double scale, double softcap,
                  double sink, KeyDot key_dot, ValueAt value_at, double* out) {
  for (std::int64_t d = 0; d < head_dim; ++d) out[d] = 0.0;
  if (end <= begin) return sink;
  std::vector<double> scores(static_cast<std::size_t>(end - begin));
  double max_score = sink;
  for (std::int64_t j = begin; j < end; ++j) {
    double s = scale * key_dot(j);
    if (softcap > 0.0) s = softcap * std::tanh(s / softcap);
    scores[static_cast<std::size_t>(j - begin)] = s;
    max_score = std::max(max_score, s);
  }
  double sum = std::exp(sink - max_score);
  for (double& s : scores) {
    s = std::exp(s - max_score);
    sum += s;
  }
  for (std::int64_t j = begin; j < end; ++j) {
    const double p = scores[static_cast<std::size_t>(j - begin)] / sum;
    for (std::int64_t d = 0; d < head_dim; ++d) out[d] += p * value_at(j, d);
  }
  return max_score + std::log(sum);
}

// sinks[h] as a double, -inf where no sinks are given.
double sink_of(const TensorView& sinks, std::int64_t h) {
  return sinks.empty() ? -std::numeric_limits<double>::infinity() : element(sinks, h * sinks.strides[0]);
}

}  // namespace

Result decode(const DecodeProblem& p, const DecodeTensors& t) {
  p.validate();
  const char* ctx = "reference::decode";
  require_host_input(ctx, "q", t.q, 3);
  require_host_input(ctx, "k_cache", t.k_cache, 4);
  require_host_input(ctx, "v_cache", t.v_cache, 4);
  require_host_input(ctx, "lengths", t.lengths, 1);
  if (!t.sinks.empty()) require_host_input(ctx, "sinks", t.sinks, 1);
  if (!t.key_starts.empty()) require_host_input(ctx, "key_starts", t.key_starts, 1);
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  // e4m3 caches: stored values times their per-tensor scales (1 for other caches).
  const double k_scale = t.kv_scales.k, v_scale = t.kv_scales.v;
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim, group = p.group_size();
  const double scale = p.effective_scale(), softcap = p.options.softcap;
  Result r;
  r.out.assign(static_cast<std::size_t>(B * H * D), 0.0);
  r.lse.assign(static_cast<std::size_t>(B * H), 0.0);
  std::vector<double> q(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = read_i32(t.lengths, b);
    if (!(len >= 0 && len <= p.max_seq))
      fail(ctx, "lengths[" + std::to_string(b) + "] is outside 0..max_seq", "pass valid lengths");
    // The query is the newest token: position len - 1, sees keys [len - window, len), from its
    // first real key on.
    const std::int64_t start = t.key_starts.empty() ? 0 : read_i32(t.key_starts, b);
    const KeyRange keys = decode_keys(len, p.options.window, start);
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t kvh = h / group;
      for (std::int64_t d = 0; d < D; ++d) q[d] = element(t.q, offset3(t.q, b, h, d));
      auto key_dot = [&](std::int64_t j) {
        double acc = 0.0;
        for (std::int64_t d = 0; d < D; ++d) acc += q[d] * element(t.k_cache, offset4(t.k_cache, b, kvh, j, d));
        return acc * k_scale;
      };
      auto value_at = [&](std::int64_t j, std::int64_t d) {
        return v_scale * element(t.v_cache, offset4(t.v_cache, b, kvh, j, d));
      };
      const std::size_t row = static_cast<std::size_t>(b * H + h);
      r.lse[row] =
          attend_row(D, keys.begin, keys.end, scale, softcap, sink_of(t.sinks, h), key_dot, value_at, &r.out[row * D]);
    }
  }
  return r;
}

Result prefill(const PrefillProblem& p, const PrefillTensors& t) {
  p.validate();
  const char* ctx = "reference::prefill";
  validate_fp8_scales(p, t.scales, ctx);
  require_host_input(ctx, "q", t.q, 4);
  require_host_input(ctx, "k", t.k, 4);
  require_host_input(ctx, "v", t.v, 4);
  const bool ragged = !t.cu_seqlens_q.empty();
  if (ragged) {
    require_host_input(ctx, "cu_seqlens_q", t.cu_seqlens_q, 1);
    require_host_input(ctx, "cu_seqlens_k", t.cu_seqlens_k, 1);
  }
  if (!t.sinks.empty()) require_host_input(ctx, "sinks", t.sinks, 1);
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim, group = p.group_size();
  const std::int64_t rows_per_head = ragged ? t.q.shape[2] : p.q_len;
  const std::int64_t outer = ragged ? 1 : B;
  const double scale = p.effective_scale(), softcap = p.options.softcap;
  // e4m3 inputs: the real values are the stored ones times their per-tensor scales (1 otherwise).
  const double q_scale = t.scales.q, k_scale = t.scales.k, v_scale = t.scales.v;
  Result r;
  r.out.assign(static_cast<std::size_t>(outer * H * rows_per_head * D), 0.0);
  r.lse.assign(static_cast<std::size_t>(outer * H * rows_per_head), 0.0);
  std::vector<double> q(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    // Sequence b's rows and keys inside the (possibly packed) tensors.
    const std::int64_t tb = ragged ? 0 : b;
    const std::int64_t q0 = ragged ? read_i32(t.cu_seqlens_q, b) : 0;
    const std::int64_t k0 = ragged ? read_i32(t.cu_seqlens_k, b) : 0;
    const std::int64_t lq = ragged ? read_i32(t.cu_seqlens_q, b + 1) - q0 : p.q_len;
    const std::int64_t lk = ragged ? read_i32(t.cu_seqlens_k, b + 1) - k0 : p.kv_len;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t kvh = h / group;
      for (std::int64_t i = 0; i < lq; ++i) {
        // Bottom-right alignment: the last query row sits at the last key.
        const KeyRange keys = visible_keys(i + (lk - lq), lk, p.causal, p.options.window);
        for (std::int64_t d = 0; d < D; ++d) q[d] = q_scale * element(t.q, offset4(t.q, tb, h, q0 + i, d));
        auto key_dot = [&](std::int64_t j) {
          double acc = 0.0;
          for (std::int64_t d = 0; d < D; ++d) {
            acc += q[d] * (k_scale * element(t.k, offset4(t.k, tb, kvh, k0 + j, d)));
          }
          return acc;
        };
        auto value_at = [&](std::int64_t j, std::int64_t d) {
          return v_scale * element(t.v, offset4(t.v, tb, kvh, k0 + j, d));
        };
        const std::size_t row = static_cast<std::size_t>((tb * H + h) * rows_per_head + q0 + i);
        r.lse[row] = attend_row(D, keys.begin, keys.end, scale, softcap, sink_of(t.sinks, h), key_dot, value_at,
                                &r.out[row * D]);
      }
    }
  }
  return r;
}

void rope(double* x, std::int64_t head_dim, std::int64_t pos, const RopeSpec& spec) {
  if (!(head_dim > 0 && head_dim % 2 == 0))
    fail("reference::rope", "head_dim=" + std::to_string(head_dim) + " is not even", "use an even head_dim");
  if (pos < 0) fail("reference::rope", "position " + std::to_string(pos) + " is negative", "pass positions >= 0");
  const bool tables = spec.cos_table != nullptr;
  if (tables && pos >= spec.table_positions)
    fail("reference::rope",
         "position " + std::to_string(pos) + " is beyond the tables (" + std::to_string(spec.table_positions) + ")",
         "extend the cos/sin tables");
  const std::int64_t half = head_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    double c, s;
    if (tables) {
      c = spec.cos_table[pos * half + i];
      s = spec.sin_table[pos * half + i];
    } else {
      const double angle = static_cast<double>(pos) *
                           std::pow(static_cast<double>(spec.theta), -2.0 * static_cast<double>(i) / head_dim);
      c = std::cos(angle);
      s = std::sin(angle);
    }
    const std::int64_t a = spec.style == RopeStyle::kHalf ? i : 2 * i;
    const std::int64_t b = spec.style == RopeStyle::kHalf ? i + half : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

Result merge_states(const MergeTensors& t) {
  const char* ctx = "reference::merge_states";
  require_host_input(ctx, "out_partial", t.out_partial, 3);
  require_host_input(ctx, "lse_partial", t.lse_partial, 2);
  const std::int64_t S = t.out_partial.shape[0], R = t.out_partial.shape[1], D = t.out_partial.shape[2];
  Result r;
  r.out.assign(static_cast<std::size_t>(R * D), 0.0);
  r.lse.assign(static_cast<std::size_t>(R), -std::numeric_limits<double>::infinity());
  auto lse_of = [&](std::int64_t s, std::int64_t row) {
    return element(t.lse_partial, s * t.lse_partial.strides[0] + row * t.lse_partial.strides[1]);
  };
  for (std::int64_t row = 0; row < R; ++row) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t s = 0; s < S; ++s) m = std::max(m, lse_of(s, row));
    if (std::isinf(m)) continue;  // no split saw a key: zeros and -inf
    double total = 0.0;
    for (std::int64_t s = 0; s < S; ++s) {
      if (std::isinf(lse_of(s, row))) continue;  // its output is never read
      const double w = std::exp(lse_of(s, row) - m);
      total += w;
      for (std::int64_t d = 0; d < D; ++d) r.out[static_cast<std::size_t>(row * D + d)] += w * element(t.out_partial, offset3(t.out_partial, s, row, d));
    }
    for (std::int64_t d = 0; d < D; ++d) r.out[static_cast<std::size_t>(row * D + d)] /= total;
    r.lse[static_cast<std::size_t>(row)] = m + std::log(total);
  }
  return r;
}

}  // namespace attnkit::reference
