// Seed 004's scalar online-softmax baseline on the CPU.
// Inputs: validated views (any storage dtype, any strides with head_dim contiguous; decode: an
//   e4m3 cache too, read exactly by load_row, its scales folded into the score scale and the
//   output row).
// Layout: decode reads the cache [batch, kv_heads, max_seq, head_dim]; prefill reads
//   [batch, heads, rows, head_dim] or the packed ragged form [1, heads, total_rows, head_dim].
// Parallelism: none on purpose; one query row at a time, its visible keys in one pass with a
//   running max and sum (masked keys are skipped, not scored). It is the baseline the fast
//   kernels are measured against, so it stays simple.
// Bound: memory latency; every query head re-reads its KV head's keys.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/attention_sinks.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu::detail {
namespace {

// Rows j of one KV head: row j starts at base_offset + j * row_stride elements.
struct KeyRows {
  const void* data;
  DType dtype;
  std::int64_t base_offset;
  std::int64_t row_stride;
};

struct RowScratch {
  explicit RowScratch(std::int64_t head_dim)
      : q(static_cast<std::size_t>(head_dim)), k(q.size()), v(q.size()), acc(q.size()) {}
  std::vector<float> q, k, v, acc;
};

// One query row (already in s.q) over keys [begin, end). Leaves the normalised output in s.acc
// and returns the natural-log sum-exp of the final scores (-inf when no key is visible).
float online_row(std::int64_t head_dim, std::int64_t begin, std::int64_t end, float scale, float softcap,
                 const KeyRows& keys, const KeyRows& values, RowScratch& s) {
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  for (std::int64_t j = begin; j < end; ++j) {
    load_row(keys.data, keys.dtype, keys.base_offset + j * keys.row_stride, head_dim, s.k.data());
    // The dot in double: one sequential f32 chain over head_dim loses up to ~1e-5 relative on
    // large scores (ScalarOnlineDecode.AdversarialScores failed ~1% of seeds at f32's 1e-5 rel-L2).
    double dot = 0.0;
    for (std::int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(s.q[d]) * s.k[d];
    float score = static_cast<float>(dot * scale);
    if (softcap > 0.0f) score = softcap * std::tanh(score / softcap);
    // A key scored -inf has weight 0: skip it (exp(-inf - -inf) would be NaN on the first keys).
    if (score == -std::numeric_limits<float>::infinity()) continue;
    if (score > running_max) {
      // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first key).
      const float correction = std::exp(running_max - score);
      running_sum *= correction;
      for (std::int64_t d = 0; d < head_dim; ++d) s.acc[d] *= correction;
      running_max = score;
    }
    const float weight = std::exp(score - running_max);
    running_sum += weight;
    load_row(values.data, values.dtype, values.base_offset + j * values.row_stride, head_dim, s.v.data());
    for (std::int64_t d = 0; d < head_dim; ++d) s.acc[d] += weight * s.v[d];
  }
  if (running_sum == 0.0f) return -std::numeric_limits<float>::infinity();  // acc is all zeros
  const float inv = 1.0f / running_sum;
  for (std::int64_t d = 0; d < head_dim; ++d) s.acc[d] *= inv;
  return running_max + std::log(running_sum);
}

}  // namespace

void scalar_online_decode(const DecodePlan& plan, const DecodeTensors& t) {
  const DecodeProblem& p = plan.problem;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  const std::int64_t D = p.head_dim, group = p.group_size();
  const float scale = p.effective_scale() * t.kv_scales.k, softcap = p.options.softcap;
  const float v_scale = t.kv_scales.v;  // 1 unless the cache is e4m3
  RowScratch s(D);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = index_at(t.lengths, b);
    // The query is the newest token (position len - 1).
    const KeyRange range = decode_keys(len, p.options.window, t.key_starts.empty() ? 0 : index_at(t.key_starts, b));
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const std::int64_t kvh = h / group;
      load_row(t.q.data, t.q.dtype, b * t.q.strides[0] + h * t.q.strides[1], D, s.q.data());
      const KeyRows keys{t.k_cache.data, t.k_cache.dtype, b * t.k_cache.strides[0] + kvh * t.k_cache.strides[1],
                         t.k_cache.strides[2]};
      const KeyRows values{t.v_cache.data, t.v_cache.dtype,
                           b * t.v_cache.strides[0] + kvh * t.v_cache.strides[1], t.v_cache.strides[2]};
      float lse = online_row(D, range.begin, range.end, scale, softcap, keys, values, s);
      if (v_scale != 1.0f) {
        for (float& x : s.acc) x *= v_scale;
      }
      if (sinks) attnkit::detail::fold_sink_into_row(s.acc.data(), D, &lse, sinks[h]);
      store_row(t.out.data, t.out.dtype, b * t.out.strides[0] + h * t.out.strides[1], D, s.acc.data());
      if (!t.lse.empty()) static_cast<float*>(t.lse.data)[b * t.lse.strides[0] + h * t.lse.strides[1]] = lse;
    }
  }
}

void scalar_online_prefill(const PrefillPlan& plan, const PrefillTensors& t) {
  const PrefillProblem& p = plan.problem;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  const std::int64_t D = p.head_dim, group = p.group_size();
  const float scale = p.effective_scale(), softcap = p.options.softcap;
  const bool ragged = !t.cu_seqlens_q.empty();
  RowScratch s(D);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    // Sequence b inside the (possibly packed) tensors: batch index, first row, first key, lengths.
    const std::int64_t tb = ragged ? 0 : b;
    const std::int64_t q0 = ragged ? index_at(t.cu_seqlens_q, b) : 0;
    const std::int64_t k0 = ragged ? index_at(t.cu_seqlens_k, b) : 0;
    const std::int64_t lq = ragged ? index_at(t.cu_seqlens_q, b + 1) - q0 : p.q_len;
    const std::int64_t lk = ragged ? index_at(t.cu_seqlens_k, b + 1) - k0 : p.kv_len;
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const std::int64_t kvh = h / group;
      const KeyRows keys{t.k.data, t.k.dtype, tb * t.k.strides[0] + kvh * t.k.strides[1] + k0 * t.k.strides[2],
                         t.k.strides[2]};
      const KeyRows values{t.v.data, t.v.dtype,
                           tb * t.v.strides[0] + kvh * t.v.strides[1] + k0 * t.v.strides[2], t.v.strides[2]};
      for (std::int64_t i = 0; i < lq; ++i) {
        // Bottom-right aligned: row i sits at absolute key position i + (lk - lq).
        const KeyRange range = visible_keys(i + (lk - lq), lk, p.causal, p.options.window);
        const std::int64_t row = q0 + i;
        load_row(t.q.data, t.q.dtype, tb * t.q.strides[0] + h * t.q.strides[1] + row * t.q.strides[2], D,
                 s.q.data());
        float lse = online_row(D, range.begin, range.end, scale, softcap, keys, values, s);
        if (sinks) attnkit::detail::fold_sink_into_row(s.acc.data(), D, &lse, sinks[h]);
        store_row(t.out.data, t.out.dtype, tb * t.out.strides[0] + h * t.out.strides[1] + row * t.out.strides[2],
                  D, s.acc.data());
        if (!t.lse.empty()) {
          static_cast<float*>(t.lse.data)[tb * t.lse.strides[0] + h * t.lse.strides[1] + row * t.lse.strides[2]] =
              lse;
        }
      }
    }
  }
}

}  // namespace attnkit::cpu::detail
