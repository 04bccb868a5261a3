// The float64 golden of the paged calls, written for clarity, not speed.
// Inputs: host views of any storage dtype and any strides (an e4m3 pool too, its stored values times
// kv_scales). Each key is found through the page
// table (page_table[b][j / page_size], slot j % page_size) in the layout of the problem's spec.
// Query row i of a sequence with q_len rows and len keys sits at position len - q_len + i (decode:
// q_len = 1); its visible keys follow problem.hpp's convention (masked keys are skipped). Scores in
// double, soft-cap, two-pass softmax, weighted sum of V. No visible key: zeros and an LSE of -inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/reference.hpp"
#include "attnkit/validate.hpp"

namespace attnkit::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double element(const TensorView& t, std::int64_t offset) {
  return static_cast<double>(load_as_float(t.data, t.dtype, static_cast<std::size_t>(offset)));
}
std::int64_t read_i32(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]];
}

// A tensor of no elements may come without memory (an idle extend step's q and out).
void require_host(const char* ctx, const char* name, const TensorView& t, int rank) {
  if (!((t.data != nullptr || (t.rank == rank && t.numel() == 0)) && t.device == DeviceKind::kCpu && t.rank == rank))
    fail(ctx, std::string(name) + " is not a rank-" + std::to_string(rank) + " host tensor (" + t.describe() + ")",
         "copy the inputs to host memory and pass the shapes of paged.hpp");
}

// Element offset of (key j, KV head h, dim 0) of sequence b in a pool.
struct PagedKeys {
  const PagedCacheSpec* spec;
  const TensorView* table;
  std::int64_t b;
  std::int64_t offset(const TensorView& pool, std::int64_t h, std::int64_t j) const {
    const std::int64_t page = static_cast<const std::int32_t*>(
        table->data)[b * table->strides[0] + (j / spec->page_size) * table->strides[1]];
    const std::int64_t slot = j % spec->page_size;
    return spec->layout == PageLayout::kHND
               ? page * pool.strides[0] + h * pool.strides[1] + slot * pool.strides[2]
               : page * pool.strides[0] + slot * pool.strides[1] + h * pool.strides[2];
  }
};

// sinks[h] as a double, -inf where no sinks are given.
double sink_of(const TensorView& sinks, std::int64_t h) {
  return sinks.empty() ? kNegInf : element(sinks, h * sinks.strides[0]);
}

// One sequence's q rows [row0, row0 + q_len) (q is [rows, heads, head_dim]) against its len keys;
// sinks (optional, [heads]): one more score per row whose value is zero.
void attend_sequence(const PagedCacheSpec& spec, std::int64_t num_heads, std::int64_t group, std::int64_t D,
                     double scale, double softcap, std::int64_t window, const TensorView& q, const PagedKvCache& c,
                     const TensorView& sinks, const KvScales& kv_scales, std::int64_t b, std::int64_t row0,
                     std::int64_t q_len, std::int64_t len, Result& r) {
  const double k_scale = kv_scales.k, v_scale = kv_scales.v;
  const PagedKeys keys{&spec, &c.page_table, b};
  std::vector<double> qv(static_cast<std::size_t>(D)), scores;
  for (std::int64_t i = 0; i < q_len; ++i) {
    const KeyRange range = visible_keys(len - q_len + i, len, true, window);
    for (std::int64_t h = 0; h < num_heads; ++h) {
      const std::int64_t kvh = h / group;
      const std::size_t row = static_cast<std::size_t>((row0 + i) * num_heads + h);
      double* out = &r.out[row * static_cast<std::size_t>(D)];
      std::fill(out, out + D, 0.0);
      const double sink = sink_of(sinks, h);
      if (range.size() == 0) {
        r.lse[row] = sink;
        continue;
      }
      for (std::int64_t d = 0; d < D; ++d) qv[d] = element(q, (row0 + i) * q.strides[0] + h * q.strides[1] + d);
      scores.assign(static_cast<std::size_t>(range.size()), 0.0);
      double max_score = sink;
      for (std::int64_t j = range.begin; j < range.end; ++j) {
        const std::int64_t k_off = keys.offset(c.k_pages, kvh, j);
        double dot = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dot += qv[d] * element(c.k_pages, k_off + d);
        double s = scale * (k_scale * dot);
        if (softcap > 0.0) s = softcap * std::tanh(s / softcap);
        scores[static_cast<std::size_t>(j - range.begin)] = s;
        max_score = std::max(max_score, s);
      }
      double sum = std::exp(sink - max_score);
      for (double& s : scores) sum += (s = std::exp(s - max_score));
      for (std::int64_t j = range.begin; j < range.end; ++j) {
        const double p = scores[static_cast<std::size_t>(j - range.begin)] / sum * v_scale;
        const std::int64_t v_off = keys.offset(c.v_pages, kvh, j);
        for (std::int64_t d = 0; d < D; ++d) out[d] += p * element(c.v_pages, v_off + d);
      }
      r.lse[row] = max_score + std::log(sum);
    }
  }
}

void require_host_cache(const char* ctx, const PagedKvCache& c) {
  require_host(ctx, "k_pages", c.k_pages, 4);
  require_host(ctx, "v_pages", c.v_pages, 4);
  require_host(ctx, "page_table", c.page_table, 2);
  require_host(ctx, "lengths", c.lengths, 1);
}

}  // namespace

Result paged_decode(const PagedDecodeProblem& p, const PagedDecodeTensors& t) {
  p.validate();
  const char* ctx = "reference::paged_decode";
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  require_host(ctx, "q", t.q, 3);
  require_host_cache(ctx, t.cache);
  validate_paged_indices_host(p.cache, t.cache.page_table, t.cache.lengths, p.batch, p.cache.capacity(), ctx);
  Result r;
  r.out.assign(static_cast<std::size_t>(p.batch * p.num_heads * p.head_dim), 0.0);
  r.lse.assign(static_cast<std::size_t>(p.batch * p.num_heads), kNegInf);
  if (!t.sinks.empty()) require_host(ctx, "sinks", t.sinks, 1);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = read_i32(t.cache.lengths, b);
    // The query is the newest token: a sequence with no keys gives zeros and -inf (the sink's
    // logit with sinks).
    attend_sequence(p.cache, p.num_heads, p.group_size(), p.head_dim, p.effective_scale(), p.options.softcap,
                    p.options.window, t.q, t.cache, t.sinks, t.kv_scales, b, b, len > 0 ? 1 : 0, len, r);
    for (std::int64_t h = 0; len == 0 && h < p.num_heads; ++h) r.lse[static_cast<std::size_t>(b * p.num_heads + h)] = sink_of(t.sinks, h);
  }
  return r;
}

Result extend(const ExtendProblem& p, const ExtendTensors& t) {
  p.validate();
  const char* ctx = "reference::extend";
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  require_host(ctx, "q", t.q, 3);
  require_host(ctx, "cu_seqlens_q", t.cu_seqlens_q, 1);
  require_host_cache(ctx, t.cache);
  if (!t.sinks.empty()) require_host(ctx, "sinks", t.sinks, 1);
  validate_paged_indices_host(p.cache, t.cache.page_table, t.cache.lengths, p.batch, p.cache.capacity(), ctx);
  const std::int64_t rows = read_i32(t.cu_seqlens_q, p.batch);
  if (!(rows >= 0 && rows <= t.q.shape[0]))
    fail(ctx, "cu_seqlens_q[batch] is outside the rows of q", "pass valid prefix offsets");
  Result r;
  r.out.assign(static_cast<std::size_t>(rows * p.num_heads * p.head_dim), 0.0);
  r.lse.assign(static_cast<std::size_t>(rows * p.num_heads), kNegInf);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t row0 = read_i32(t.cu_seqlens_q, b), q_len = read_i32(t.cu_seqlens_q, b + 1) - row0;
    const std::int64_t len = read_i32(t.cache.lengths, b);
    if (!(q_len >= 0 && q_len <= len))
      fail(ctx,
           "sequence " + std::to_string(b) + " has " + std::to_string(q_len) + " query rows and " +
               std::to_string(len) + " keys",
           "pass non-decreasing offsets and q rows <= keys per sequence");
    attend_sequence(p.cache, p.num_heads, p.group_size(), p.head_dim, p.effective_scale(), p.options.softcap,
                    p.options.window, t.q, t.cache, t.sinks, t.kv_scales, b, row0, q_len, len, r);
  }
  return r;
}

}  // namespace attnkit::reference
