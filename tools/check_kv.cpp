// `attnkit check` for the cache and state kernels: KV append (K, V or both; into an e4m3 cache from
// bf16 rows, quantized with scales != 1), RoPE (half and interleaved, theta or caller tables) and
// the merge of split softmax states, against float64.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/reference.hpp"
#include "check_support.hpp"

namespace attnkit::cli {
namespace {

// Distinct random positions would hide nothing here; any position in [0, max_seq) is valid.
void fill_positions(HostTensor& positions, std::int64_t limit, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> dist(0, limit - 1);
  for (std::size_t b = 0; b < positions.numel(); ++b) positions.i32()[b] = static_cast<std::int32_t>(dist(rng));
  positions.i32()[0] = static_cast<std::int32_t>(limit - 1);  // the last slot is always exercised
}

// Append must write exactly the new rows and nothing else: every cache element is compared. An
// e4m3 cache (`dtype`) takes bf16 rows and must hold e4m3(x / scale) of each, bit for bit; its
// scales put some rows past 448 (saturating) and some in e4m3's subnormals.
void check_append(CheckContext& ctx, DType dtype, bool with_k, bool with_v) {
  const std::int64_t batch = 3, kv_heads = 2, head_dim = 72, max_seq = 50;
  const bool fp8 = is_fp8(dtype);
  const DType new_dtype = fp8 ? DType::kBF16 : dtype;
  CheckRow row;
  row.kernel = std::string("append/") + (with_k && with_v ? "k+v" : with_k ? "k" : "v");
  row.shape = "b3 kv2 d72 max_seq50";
  row.dtype = dtype_pair(new_dtype, dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    HostTensor k_new(new_dtype, {batch, kv_heads, head_dim});
    HostTensor v_new(new_dtype, {batch, kv_heads, head_dim});
    HostTensor k(dtype, {batch, kv_heads, max_seq, head_dim});
    HostTensor v(dtype, {batch, kv_heads, max_seq, head_dim});
    HostTensor positions(DType::kI32, {batch});
    for (HostTensor* t : {&k_new, &v_new, &k, &v}) testing::fill_normal(*t, ctx.rng);
    fill_positions(positions, max_seq, ctx.rng);
    KvScales scales;
    if (fp8) {
      scales.k = std::uniform_real_distribution<float>(0.002f, 0.02f)(ctx.rng);  // |x| > 0.9-9 saturates
      scales.v = std::uniform_real_distribution<float>(0.5f, 4.0f)(ctx.rng);     // small x: subnormals
    }
    // What the cache holds for new element x: x itself, or its e4m3 code's value.
    auto stored = [&](float x, float scale) {
      return fp8 ? static_cast<double>(e4m3_bits_to_float(float_to_e4m3_bits(x / scale))) : static_cast<double>(x);
    };
    std::vector<double> k_gold(k.numel()), v_gold(v.numel());
    for (std::size_t i = 0; i < k.numel(); ++i) {
      k_gold[i] = k.get(i);
      v_gold[i] = v.get(i);
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        const std::size_t src = static_cast<std::size_t>((b * kv_heads + h) * head_dim);
        const std::size_t dst = static_cast<std::size_t>(((b * kv_heads + h) * max_seq + positions.i32()[b]) * head_dim);
        for (std::int64_t d = 0; d < head_dim; ++d) {
          if (with_k) k_gold[dst + d] = stored(k_new.get(src + d), scales.k);
          if (with_v) v_gold[dst + d] = stored(v_new.get(src + d), scales.v);
        }
      }
    }
    Staging stage(ctx.cuda);
    AppendTensors t;
    if (with_k) t.k_new = stage.put(k_new);
    if (with_v) t.v_new = stage.put(v_new);
    t.k_cache = stage.put(k);
    t.v_cache = stage.put(v);
    t.positions = stage.put(positions);
    t.kv_scales = scales;
    if (ctx.cuda) {
      cuda::append_kv(t);
    } else {
      cpu::append_kv(t);
    }
    stage.take_back();
    const testing::Comparison kc = testing::compare(k, k_gold);
    const testing::Comparison vc = testing::compare(v, v_gold);
    judge(r, kc.max_abs >= vc.max_abs ? kc : vc, exact_tolerance());
    if (kc.nan_count + vc.nan_count > 0) r.status = Status::kFail;
  });
}

void check_rope(CheckContext& ctx, DType dtype, RopeStyle style, bool tables) {
  const std::int64_t batch = 3, heads = 5, head_dim = 128, max_position = 4096;
  CheckRow row;
  row.kernel = "rope/" + to_string(style) + (tables ? "/tables" : "");
  row.shape = "b3 h5 d128 pos<4096";
  row.dtype = dtype_pair(dtype, dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    HostTensor x(dtype, {batch, heads, head_dim});
    HostTensor positions(DType::kI32, {batch});
    testing::fill_normal(x, ctx.rng);
    fill_positions(positions, max_position, ctx.rng);
    RopeSpec spec;
    spec.style = style;
    HostTensor cos_table(DType::kF32, {max_position, head_dim / 2}), sin_table(DType::kF32, {max_position, head_dim / 2});
    if (tables) {
      // Tables of an unusual base (500000, Llama 3's), built in float64 then rounded to f32.
      const double theta = 500000.0;
      spec.theta = static_cast<float>(theta);
      for (std::int64_t pos = 0; pos < max_position; ++pos) {
        for (std::int64_t i = 0; i < head_dim / 2; ++i) {
          const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * i / head_dim);
          cos_table.set(static_cast<std::size_t>(pos * head_dim / 2 + i), static_cast<float>(std::cos(angle)));
          sin_table.set(static_cast<std::size_t>(pos * head_dim / 2 + i), static_cast<float>(std::sin(angle)));
        }
      }
      spec.cos_table = cos_table.view.as<const float>();
      spec.sin_table = sin_table.view.as<const float>();
      spec.table_positions = max_position;
    }
    std::vector<double> golden(x.numel());
    std::vector<double> row_values(static_cast<std::size_t>(head_dim));
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::size_t base = static_cast<std::size_t>((b * heads + h) * head_dim);
        for (std::int64_t d = 0; d < head_dim; ++d) row_values[d] = x.get(base + d);
        reference::rope(row_values.data(), head_dim, positions.i32()[b], spec);
        for (std::int64_t d = 0; d < head_dim; ++d) golden[base + d] = row_values[d];
      }
    }
    Staging stage(ctx.cuda);
    const TensorView xv = stage.put(x), pv = stage.put(positions);
    if (ctx.cuda) {
      RopeSpec on_device = spec;
      if (tables) {
        on_device.cos_table = stage.put(cos_table).as<const float>();
        on_device.sin_table = stage.put(sin_table).as<const float>();
      }
      cuda::apply_rope(xv, pv, on_device);
    } else {
      cpu::apply_rope(xv, pv, spec);
    }
    stage.take_back();
    judge(r, testing::compare(x, golden), tolerance_for(dtype, dtype));
  });
}

// Split states of `splits` partial rows; some splits saw no key (LSE -inf, NaN output that must not
// be read), and the last row saw none at all (merged output zeros, LSE -inf).
void check_merge(CheckContext& ctx, DType partial_dtype, DType out_dtype) {
  const std::int64_t splits = 5, rows = 37, head_dim = 128;
  CheckRow row;
  row.kernel = "merge-states";
  row.shape = "splits5 rows37 d128";
  row.dtype = dtype_pair(partial_dtype, out_dtype);
  guarded(ctx, row, [&](CheckRow& r) {
    HostTensor out_partial(partial_dtype, {splits, rows, head_dim});
    HostTensor lse_partial(DType::kF32, {splits, rows});
    HostTensor out(out_dtype, {rows, head_dim});
    HostTensor lse(DType::kF32, {rows});
    testing::fill_normal(out_partial, ctx.rng);
    testing::fill_normal(lse_partial, ctx.rng, 4.0f);
    constexpr float kNoKey = -std::numeric_limits<float>::infinity();
    auto empty_split = [&](std::int64_t s, std::int64_t rw) {
      lse_partial.set(static_cast<std::size_t>(s * rows + rw), kNoKey);
      for (std::int64_t d = 0; d < head_dim; ++d) {
        out_partial.set(static_cast<std::size_t>((s * rows + rw) * head_dim + d), std::numeric_limits<float>::quiet_NaN());
      }
    };
    for (std::int64_t rw = 0; rw < rows; rw += 3) empty_split(rw % splits, rw);
    for (std::int64_t s = 0; s < splits; ++s) empty_split(s, rows - 1);
    testing::poison(out);
    testing::poison(lse);
    const reference::Result golden = reference::merge_states({out_partial.view, lse_partial.view, {}, {}});
    Staging stage(ctx.cuda);
    const MergeTensors t{stage.put(out_partial), stage.put(lse_partial), stage.put(out), stage.put(lse)};
    if (ctx.cuda) {
      cuda::merge_states(t);
    } else {
      cpu::merge_states(t);
    }
    stage.take_back();
    judge(r, testing::compare(out, golden.out), tolerance_for(partial_dtype, out_dtype));
    const std::string lse_problem = check_lse(lse, golden.lse, tolerance_for(DType::kF32, DType::kF32).rel);
    if (!lse_problem.empty()) {
      r.status = Status::kFail;
      r.note += lse_problem;
    }
  });
}

}  // namespace

void check_kv(CheckContext& ctx) {
  if (!wants_op(ctx, "kv")) return;
  for (DType dtype : storage_dtypes(ctx)) {
    check_append(ctx, dtype, true, true);
    if (!ctx.quick) {
      check_append(ctx, dtype, true, false);
      check_append(ctx, dtype, false, true);
    }
  }
  if (wants_dtype(ctx, DType::kE4M3)) {
    check_append(ctx, DType::kE4M3, true, true);
    if (!ctx.quick) check_append(ctx, DType::kE4M3, true, false);
  }
  for (DType dtype : storage_dtypes(ctx)) {
    for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) check_rope(ctx, dtype, style, false);
  }
  if (wants_dtype(ctx, DType::kF32)) check_rope(ctx, DType::kF32, RopeStyle::kHalf, true);
  if (wants_dtype(ctx, DType::kF32)) check_merge(ctx, DType::kF32, DType::kF32);
  if (wants_dtype(ctx, DType::kBF16)) {
    check_merge(ctx, DType::kF32, DType::kBF16);
    check_merge(ctx, DType::kBF16, DType::kBF16);  // a cascade's partials: its attention calls' outputs
  }
}

}  // namespace attnkit::cli
