// `attnkit check` for the paged cache (paged.hpp, docs/paged.md): paged decode over page pools of
// f32, f16, bf16 and e4m3 (an e4m3 pool: bf16 q and out, one dequantization scale per pool, never
// 1, as check_attention.cpp's e4m3 cache), both layouts, pages of 1 to 64 keys, against the
// float64 golden (reference::paged_decode, which reads the same bytes times the same scales);
// extend (ragged query rows, q_len 0 / 1 / up to 17 / == length, and chunks of up to 200 rows on the
// longer shapes) on the same shapes against
// reference::extend, padding rows left NaN; and
// paged append (K, V or both, runs of new tokens that cross pages; into an e4m3 pool from f32, f16
// or bf16 rows quantized with scales != 1), every pool byte compared with what the append must
// leave. Pages are dealt in a random order; for decode, every slot no sequence owns (past a
// length, spare pages) is NaN and table entries past a sequence's pages are -1, so a kernel that
// reads outside its table or past a length shows NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/cuda_paged.hpp"
#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/reference.hpp"
#include "check_support.hpp"

namespace attnkit::cli {
namespace {

struct PagedShape {
  std::int64_t batch, heads, kv_heads, head_dim, kv_len, page_size;
  PageLayout layout;
  std::int64_t window;
  float softcap;
  bool empty_sequence;  // last sequence has length 0: zeros and LSE -inf, never NaN
  bool sinks = false;   // attention-sink logits per head
};

std::string describe(const PagedShape& s) {
  std::string text = "b";  // appended piece by piece (GCC 12 warns on "b" + to_string(...))
  text += std::to_string(s.batch) + " h" + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " d" +
          std::to_string(s.head_dim) + " kv" + std::to_string(s.kv_len) + " p" + std::to_string(s.page_size) + " " +
          to_string(s.layout);
  if (s.window > 0) text += " w" + std::to_string(s.window);
  if (s.softcap > 0) text += " cap" + std::to_string(static_cast<int>(s.softcap));
  if (s.empty_sequence) text += " +empty";
  if (s.sinks) text += " +sinks";
  return text;
}

// Odd lengths (a page's worth plus a partial page), GQA groups of 1 to 8, page sizes 1 to 64.
std::vector<PagedShape> paged_shapes(bool quick) {
  std::vector<PagedShape> shapes = {
      {3, 8, 2, 128, 333, 16, PageLayout::kHND, 0, 0.0f, false},
      {2, 12, 4, 64, 150, 1, PageLayout::kNHD, 40, 30.0f, false},
      {3, 16, 4, 128, 517, 32, PageLayout::kNHD, 0, 0.0f, true, true},
  };
  if (!quick) {
    shapes.push_back({4, 16, 16, 80, 77, 16, PageLayout::kNHD, 0, 0.0f, true});
    shapes.push_back({2, 8, 1, 256, 600, 64, PageLayout::kHND, 100, 50.0f, false});
    shapes.push_back({3, 8, 2, 128, 97, 1, PageLayout::kHND, 0, 0.0f, false});
    shapes.push_back({1, 32, 8, 128, 4096, 16, PageLayout::kNHD, 0, 0.0f, false});
  }
  return shapes;
}

// A K and a V pool and their table: sequence b owns ceil(capacity[b] / page_size) pages, dealt
// from one shuffled order of the pool's pages (3 spare); the table's other entries are -1 and
// every pool element is NaN until written.
struct Pool {
  PagedCacheSpec spec;
  std::int64_t kv_heads = 0, head_dim = 0;
  HostTensor k, v, table;

  // Element offset of (sequence b, KV head h, position j), dim 0.
  std::size_t offset(std::int64_t b, std::int64_t h, std::int64_t j) const {
    const auto* pages = reinterpret_cast<const std::int32_t*>(table.bytes.data());
    const std::int64_t P = spec.page_size, G = kv_heads, D = head_dim;
    const std::int64_t page = pages[b * spec.max_pages_per_seq + j / P], slot = j % P;
    return static_cast<std::size_t>(spec.layout == PageLayout::kHND ? ((page * G + h) * P + slot) * D
                                                                    : ((page * P + slot) * G + h) * D);
  }
};

Pool make_pool(std::mt19937_64& rng, DType dtype, const std::vector<std::int64_t>& capacity, std::int64_t width,
               std::int64_t kv_heads, std::int64_t head_dim, std::int64_t page_size, PageLayout layout) {
  Pool pool;
  pool.kv_heads = kv_heads;
  pool.head_dim = head_dim;
  const auto batch = static_cast<std::int64_t>(capacity.size());
  std::int64_t owned = 0;
  for (std::int64_t c : capacity) owned += (c + page_size - 1) / page_size;
  pool.spec.page_size = page_size;
  pool.spec.layout = layout;
  pool.spec.max_pages_per_seq = width;
  pool.spec.num_pages = owned + 3;
  const std::int64_t N = pool.spec.num_pages, P = page_size, G = kv_heads, D = head_dim;
  pool.k = layout == PageLayout::kHND ? HostTensor(dtype, {N, G, P, D}) : HostTensor(dtype, {N, P, G, D});
  pool.v = layout == PageLayout::kHND ? HostTensor(dtype, {N, G, P, D}) : HostTensor(dtype, {N, P, G, D});
  testing::poison(pool.k);
  testing::poison(pool.v);
  pool.table = HostTensor(DType::kI32, {batch, width});
  std::fill_n(pool.table.i32(), pool.table.numel(), -1);
  std::vector<std::int32_t> order(static_cast<std::size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < (capacity[static_cast<std::size_t>(b)] + P - 1) / P; ++i) {
      pool.table.i32()[b * width + i] = order[next++];
    }
  }
  return pool;
}

// Normal draws into the first lengths[b] rows of every sequence of one pool; an e4m3 pool holds
// them quantized with the pool's scale max|x| / 448 (tests/support's fill_normal_e4m3 rule).
// Returns the dequantization scale (1 for other pools).
float fill_owned(HostTensor& pages, const Pool& pool, const std::vector<std::int64_t>& lengths, std::mt19937_64& rng) {
  std::vector<std::size_t> rows;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    for (std::int64_t j = 0; j < lengths[b]; ++j) {
      for (std::int64_t h = 0; h < pool.kv_heads; ++h) rows.push_back(pool.offset(static_cast<std::int64_t>(b), h, j));
    }
  }
  const auto D = static_cast<std::size_t>(pool.head_dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows.size() * D);
  float largest = 0.0f;
  for (float& value : x) {
    value = normal(rng);
    largest = std::max(largest, std::abs(value));
  }
  const bool fp8 = is_fp8(pages.view.dtype);
  const float scale = fp8 && largest > 0.0f ? largest / 448.0f : 1.0f;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t d = 0; d < D; ++d) {
      const float value = x[r * D + d];
      if (fp8) {
        pages.bytes[rows[r] + d] = float_to_e4m3_bits(value / scale);
      } else {
        pages.set(rows[r] + d, value);
      }
    }
  }
  return scale;
}

// Every element a finite value (e4m3: any code but the two NaNs), so a stray write shows.
void fill_everything(HostTensor& pages, std::mt19937_64& rng) {
  if (!is_fp8(pages.view.dtype)) {
    testing::fill_normal(pages, rng);
    return;
  }
  std::uniform_int_distribution<int> code(0, 253);
  for (std::uint8_t& byte : pages.bytes) {
    const int c = code(rng);
    byte = static_cast<std::uint8_t>(c >= 0x7F ? c + 1 : c);
  }
}

// `dtype` is the pool's; q and out follow it, bf16 for an e4m3 pool.
void check_paged_decode(CheckContext& ctx, const PagedShape& s, DType dtype) {
  const DType io_dtype = is_fp8(dtype) ? DType::kBF16 : dtype;
  CheckRow row;
  row.kernel = "paged-decode";
  row.shape = describe(s);
  row.dtype = dtype_pair(dtype, io_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    // Lengths: the first sequence full, the others random in [1, kv_len] (the last 0 if asked).
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(s.batch));
    std::uniform_int_distribution<std::int64_t> dist(1, s.kv_len);
    for (std::size_t b = 0; b < lengths.size(); ++b) lengths[b] = b == 0 ? s.kv_len : dist(ctx.rng);
    if (s.empty_sequence && s.batch > 1) lengths.back() = 0;
    // One table column more than kv_len needs, left at -1.
    const std::int64_t width = (s.kv_len + s.page_size - 1) / s.page_size + 1;
    Pool pool = make_pool(ctx.rng, dtype, lengths, width, s.kv_heads, s.head_dim, s.page_size, s.layout);

    PagedDecodeProblem p;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.cache = pool.spec;
    p.kv_len = s.kv_len;
    p.kv_dtype = dtype;
    p.q_dtype = p.out_dtype = io_dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    PagedDecodePlan plan;
    if (!try_plan(r, [&] { return plan_paged_decode(p, ctx.target); }, plan)) return;

    KvScales scales;  // e4m3: max|x| / 448 of each pool's draws, never 1 in practice
    scales.k = fill_owned(pool.k, pool, lengths, ctx.rng);
    scales.v = fill_owned(pool.v, pool, lengths, ctx.rng);
    HostTensor lens(DType::kI32, {s.batch});
    for (std::int64_t b = 0; b < s.batch; ++b) lens.i32()[b] = static_cast<std::int32_t>(lengths[static_cast<std::size_t>(b)]);
    HostTensor q(io_dtype, {s.batch, s.heads, s.head_dim});
    HostTensor out(io_dtype, {s.batch, s.heads, s.head_dim});
    HostTensor lse(DType::kF32, {s.batch, s.heads});
    testing::fill_normal(q, ctx.rng);
    testing::poison(out);
    testing::poison(lse);
    HostTensor sinks = testing::random_sinks(s.sinks ? s.heads : 0, ctx.rng);
    PagedDecodeTensors host{q.view, {pool.k.view, pool.v.view, pool.table.view, lens.view}, out.view, lse.view};
    if (s.sinks) host.sinks = sinks.view;
    host.kv_scales = scales;
    const reference::Result golden = reference::paged_decode(p, host);

    Staging stage(ctx.cuda);
    PagedDecodeTensors t{stage.put(q),
                         {stage.put(pool.k), stage.put(pool.v), stage.put(pool.table), stage.put(lens)},
                         stage.put(out),
                         stage.put(lse)};
    if (s.sinks) t.sinks = stage.put(sinks);
    t.kv_scales = scales;
    const Workspace ws = stage.workspace(plan.bounds.workspace_bytes);
    if (ctx.cuda) {
      cuda::paged_decode(plan, t, ws);
    } else {
      cpu::paged_decode(plan, t, ws);
    }
    stage.take_back();
    judge_decode(r, out, lse, golden, dtype, plan.evidence.rel_l2_tolerance);
  });
}

// Extend: ragged query rows per sequence (q_len 0 for an empty sequence, 1, up to max_q_len, and
// q_len == length where the length allows: a whole prefill), the rows of sequence b the last q_len_b
// of its keys (causal, bottom-right). Two packed rows past cu_seqlens_q[batch] must stay NaN. Chunks
// of up to `chunk` rows: 17 (speculative verification, small chunks: the decode kernel on CUDA) or
// kLongChunk (chunked prefill: the Hopper prefill kernel on Hopper GPUs).
constexpr std::int64_t kLongChunk = 200;
void check_extend(CheckContext& ctx, const PagedShape& s, DType dtype, std::int64_t chunk = 17) {
  const DType io_dtype = is_fp8(dtype) ? DType::kBF16 : dtype;
  const std::int64_t max_q_len = std::min<std::int64_t>(chunk, s.kv_len);
  CheckRow row;
  row.kernel = "extend";
  row.shape = describe(s) + " q<=" + std::to_string(max_q_len);
  row.dtype = dtype_pair(dtype, io_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(s.batch)), q_lens(lengths.size());
    std::uniform_int_distribution<std::int64_t> dist(1, s.kv_len);
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      lengths[b] = b == 0 ? s.kv_len : dist(ctx.rng);
      q_lens[b] = b == 1 ? 1 : std::uniform_int_distribution<std::int64_t>(1, std::min(max_q_len, lengths[b]))(ctx.rng);
    }
    if (s.batch > 2) lengths[2] = q_lens[2] = std::min<std::int64_t>(lengths[2], max_q_len);  // q_len == length
    if (s.empty_sequence && s.batch > 1) lengths.back() = q_lens.back() = 0;
    const std::int64_t width = (s.kv_len + s.page_size - 1) / s.page_size + 1;
    Pool pool = make_pool(ctx.rng, dtype, lengths, width, s.kv_heads, s.head_dim, s.page_size, s.layout);

    ExtendProblem p;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.cache = pool.spec;
    p.max_q_len = max_q_len;
    p.kv_len = s.kv_len;
    p.kv_dtype = dtype;
    p.q_dtype = p.out_dtype = io_dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    ExtendPlan plan;
    if (!try_plan(r, [&] { return plan_extend(p, ctx.target); }, plan)) return;

    KvScales scales;  // e4m3: max|x| / 448 of each pool's draws
    scales.k = fill_owned(pool.k, pool, lengths, ctx.rng);
    scales.v = fill_owned(pool.v, pool, lengths, ctx.rng);
    HostTensor lens(DType::kI32, {s.batch}), cu(DType::kI32, {s.batch + 1});
    cu.i32()[0] = 0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      lens.i32()[b] = static_cast<std::int32_t>(lengths[static_cast<std::size_t>(b)]);
      cu.i32()[b + 1] = cu.i32()[b] + static_cast<std::int32_t>(q_lens[static_cast<std::size_t>(b)]);
    }
    const std::int64_t rows = cu.i32()[s.batch], total = std::min(rows + 2, p.total_q_bound());
    HostTensor q(io_dtype, {total, s.heads, s.head_dim}), out(io_dtype, {total, s.heads, s.head_dim});
    HostTensor lse(DType::kF32, {total, s.heads});
    testing::fill_normal(q, ctx.rng);
    testing::poison(out);
    testing::poison(lse);
    HostTensor sinks = testing::random_sinks(s.sinks ? s.heads : 0, ctx.rng);
    ExtendTensors host{q.view, cu.view, {pool.k.view, pool.v.view, pool.table.view, lens.view}, out.view, lse.view};
    if (s.sinks) host.sinks = sinks.view;
    host.kv_scales = scales;
    const reference::Result golden = reference::extend(p, host);

    Staging stage(ctx.cuda);
    ExtendTensors t{stage.put(q), stage.put(cu),
                    {stage.put(pool.k), stage.put(pool.v), stage.put(pool.table), stage.put(lens)},
                    stage.put(out), stage.put(lse)};
    if (s.sinks) t.sinks = stage.put(sinks);
    t.kv_scales = scales;
    const Workspace ws = stage.workspace(plan.bounds.workspace_bytes);
    if (ctx.cuda) {
      cuda::extend(plan, t, ws);
    } else {
      cpu::extend(plan, t, ws);
    }
    stage.take_back();
    // The packed rows against the golden; the padding rows after them must still hold NaN.
    HostTensor head(io_dtype, {rows, s.heads, s.head_dim}), head_lse(DType::kF32, {rows, s.heads});
    std::copy_n(out.bytes.begin(), head.bytes.size(), head.bytes.begin());
    std::copy_n(lse.bytes.begin(), head_lse.bytes.size(), head_lse.bytes.begin());
    judge_decode(r, head, head_lse, golden, dtype, plan.evidence.rel_l2_tolerance);
    for (std::size_t i = head.numel(); i < out.numel(); ++i) {
      if (!std::isnan(out.get(i))) {
        r.status = Status::kFail;
        r.note += " padding row element " + std::to_string(i) + " was written;";
        break;
      }
    }
  });
}

// Paged append must write exactly the new rows and nothing else: every pool byte is compared with
// the bytes it must hold. Runs of new tokens start mid-page and cross pages (every page, at page
// size 1). An e4m3 pool (`pool_dtype`) takes `new_dtype` rows and must hold e4m3(x / scale) of each,
// bit for bit; its scales put some K rows past 448 (saturating) and V rows in e4m3's subnormals.
void check_paged_append(CheckContext& ctx, DType pool_dtype, DType new_dtype, bool with_k, bool with_v,
                        PageLayout layout, std::int64_t page_size) {
  const std::int64_t kv_heads = 2, head_dim = 80;
  const std::vector<std::int64_t> before = {14, 0, 31}, added = {20, 3, 1};
  const bool fp8 = is_fp8(pool_dtype);
  CheckRow row;
  row.kernel = std::string("paged-append/") + (with_k && with_v ? "k+v" : with_k ? "k" : "v");
  row.shape = "b3 kv2 d80 p";
  row.shape += std::to_string(page_size) + " " + to_string(layout) + " +24 rows";
  row.dtype = dtype_pair(new_dtype, pool_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    const auto batch = static_cast<std::int64_t>(before.size());
    std::vector<std::int64_t> capacity(before.size());
    std::int64_t width = 1, rows = 0;
    for (std::size_t b = 0; b < before.size(); ++b) {
      capacity[b] = before[b] + added[b];
      width = std::max(width, (capacity[b] + page_size - 1) / page_size + 1);
      rows += added[b];
    }
    Pool pool = make_pool(ctx.rng, pool_dtype, capacity, width, kv_heads, head_dim, page_size, layout);
    fill_everything(pool.k, ctx.rng);
    fill_everything(pool.v, ctx.rng);
    HostTensor k_new(new_dtype, {rows, kv_heads, head_dim});
    HostTensor v_new(new_dtype, {rows, kv_heads, head_dim});
    testing::fill_normal(k_new, ctx.rng);
    testing::fill_normal(v_new, ctx.rng);
    KvScales scales;
    if (fp8) {
      scales.k = std::uniform_real_distribution<float>(0.002f, 0.02f)(ctx.rng);  // |x| > 0.9-9 saturates
      scales.v = std::uniform_real_distribution<float>(0.5f, 4.0f)(ctx.rng);     // small x: subnormals
    }
    HostTensor cu(DType::kI32, {batch + 1});
    HostTensor starts(DType::kI32, {batch});
    // The bytes each pool must hold afterwards: its old bytes with every new element in its slot
    // (the element's own bytes, or its e4m3 code in an e4m3 pool).
    std::vector<std::uint8_t> k_want = pool.k.bytes, v_want = pool.v.bytes;
    const std::size_t es = dtype_size(pool_dtype);
    auto place = [&](std::vector<std::uint8_t>& want, const HostTensor& src, float scale, std::int64_t b,
                     std::int64_t src_row, std::int64_t pos) {
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        const std::size_t dst = pool.offset(b, h, pos);
        const auto from = static_cast<std::size_t>((src_row * kv_heads + h) * head_dim);
        for (std::size_t d = 0; d < static_cast<std::size_t>(head_dim); ++d) {
          if (fp8) {
            want[dst + d] = float_to_e4m3_bits(src.get(from + d) / scale);
          } else {
            std::memcpy(&want[(dst + d) * es], &src.bytes[(from + d) * es], es);
          }
        }
      }
    };
    std::int64_t next_row = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto i = static_cast<std::size_t>(b);
      cu.i32()[b] = static_cast<std::int32_t>(next_row);
      starts.i32()[b] = static_cast<std::int32_t>(before[i]);
      for (std::int64_t n = 0; n < added[i]; ++n, ++next_row) {
        if (with_k) place(k_want, k_new, scales.k, b, next_row, before[i] + n);
        if (with_v) place(v_want, v_new, scales.v, b, next_row, before[i] + n);
      }
    }
    cu.i32()[batch] = static_cast<std::int32_t>(rows);

    Staging stage(ctx.cuda);
    PagedAppendTensors t;
    if (with_k) t.k_new = stage.put(k_new);
    if (with_v) t.v_new = stage.put(v_new);
    t.cu_seqlens_new = stage.put(cu);
    t.start_positions = stage.put(starts);
    t.k_pages = stage.put(pool.k);
    t.v_pages = stage.put(pool.v);
    t.page_table = stage.put(pool.table);
    t.kv_scales = scales;
    if (ctx.cuda) {
      cuda::paged_append_kv(pool.spec, t);
    } else {
      cpu::paged_append_kv(pool.spec, t);
    }
    stage.take_back();
    // Values for the row's max_abs (exact tolerance), then every byte (a -0 for +0 shows too).
    auto values_of = [&](const std::vector<std::uint8_t>& bytes) {
      std::vector<double> values(bytes.size() / es);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = load_as_float(bytes.data(), pool_dtype, i);
      return values;
    };
    const testing::Comparison kc = testing::compare(pool.k, values_of(k_want));
    const testing::Comparison vc = testing::compare(pool.v, values_of(v_want));
    judge(r, kc.max_abs >= vc.max_abs ? kc : vc, exact_tolerance());
    if (kc.nan_count + vc.nan_count > 0) r.status = Status::kFail;
    std::size_t differing = 0;
    for (std::size_t i = 0; i < k_want.size(); ++i) differing += (pool.k.bytes[i] != k_want[i]) + (pool.v.bytes[i] != v_want[i]);
    if (differing > 0) {
      r.status = Status::kFail;
      r.note += std::to_string(differing) + " pool bytes differ from what the append must leave; ";
    }
  });
}

}  // namespace

void check_paged(CheckContext& ctx) {
  if (!wants_op(ctx, "paged")) return;
  const std::vector<DType> storage = storage_dtypes(ctx);
  const bool e4m3 = wants_dtype(ctx, DType::kE4M3);
  std::vector<DType> pool_dtypes = storage;  // an e4m3 pool too (bf16 q and out)
  if (e4m3) pool_dtypes.push_back(DType::kE4M3);
  for (const PagedShape& s : paged_shapes(ctx.quick)) {
    for (DType dtype : pool_dtypes) check_paged_decode(ctx, s, dtype);
  }
  for (const PagedShape& s : paged_shapes(ctx.quick)) {
    for (DType dtype : pool_dtypes) check_extend(ctx, s, dtype);
  }
  // Long chunks over the shapes whose sequences hold them, in the 16-bit dtypes the Hopper kernel takes.
  for (const PagedShape& s : paged_shapes(true)) {
    if (s.kv_len < kLongChunk) continue;
    for (DType dtype : storage) {
      if (dtype == DType::kF16 || dtype == DType::kBF16) check_extend(ctx, s, dtype, kLongChunk);
    }
  }
  for (DType dtype : storage) {
    check_paged_append(ctx, dtype, dtype, true, true, PageLayout::kHND, 16);
    if (!ctx.quick) {
      check_paged_append(ctx, dtype, dtype, true, false, PageLayout::kNHD, 1);
      check_paged_append(ctx, dtype, dtype, false, true, PageLayout::kNHD, 16);
    }
  }
  if (e4m3) {
    check_paged_append(ctx, DType::kE4M3, DType::kBF16, true, true, PageLayout::kHND, 16);
    check_paged_append(ctx, DType::kE4M3, DType::kF32, true, true, PageLayout::kNHD, 1);
    if (!ctx.quick) {
      check_paged_append(ctx, DType::kE4M3, DType::kF16, true, false, PageLayout::kNHD, 16);
      check_paged_append(ctx, DType::kE4M3, DType::kBF16, false, true, PageLayout::kHND, 1);
    }
  }
}

}  // namespace attnkit::cli
