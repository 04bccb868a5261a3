// Argument validation at the public boundary, shared by the CPU and CUDA backends.
// Every check runs before a kernel writes anything; each failure names the tensor, what was
// expected and what was passed, and says how to fix it. Index tensors (lengths, positions,
// cu_seqlens) are read only when they live on the host.
#include "attnkit/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "common/size_checks.hpp"

namespace attnkit {
namespace {

// Offsets and byte counts must fit in int64 with room to spare (as in problem.cpp).
using detail::kMaxElements;

std::string device_name(DeviceKind d) { return d == DeviceKind::kCpu ? "cpu" : "cuda"; }

std::string shape_string(std::initializer_list<std::int64_t> shape) {
  std::string s = "[";
  int i = 0;
  for (std::int64_t v : shape) s += (i++ ? ", " : "") + std::to_string(v);
  return s + "]";
}

std::int64_t checked_product(const char* context, const std::string& what,
                             std::initializer_list<std::int64_t> factors) {
  return detail::checked_product(context, what + " overflows (more than 2^62 elements)",
                                 "split the call into smaller batches or shorter sequences", factors);
}

struct Expect {
  const char* name;
  std::initializer_list<std::int64_t> shape;
  bool optional = false;
};

// The checks every tensor of a call gets: given, rank and shape, dtype, device, strides.
// `dtype_ok` decides the dtype; `dtype_text` says what was wanted.
template <class DTypeOk>
void check_tensor(const char* context, const TensorView& t, const Expect& e, DTypeOk dtype_ok,
                  const std::string& dtype_text, DeviceKind device) {
  const std::string name = e.name;
  // A tensor of no elements may come without memory (torch.empty(0, ...) has a null data pointer):
  // a ragged batch whose sequences are all empty.
  const bool shape_empty = std::find(e.shape.begin(), e.shape.end(), std::int64_t{0}) != e.shape.end();
  if (t.data == nullptr && !shape_empty)
    fail(context, name + " has a null data pointer",
         "pass a " + dtype_text + shape_string(e.shape) + " tensor with allocated memory");
  const int rank = static_cast<int>(e.shape.size());
  if (t.rank != rank)
    fail(context,
         name + " has rank " + std::to_string(t.rank) + " (" + t.describe() + "), expected rank " +
             std::to_string(rank) + " " + shape_string(e.shape),
         "pass " + name + " with shape " + shape_string(e.shape));
  int d = 0;
  for (std::int64_t want : e.shape) {
    if (t.shape[d] != want)
      fail(context, name + " has shape " + t.describe() + ", expected " + shape_string(e.shape),
           "pass " + name + " with shape " + shape_string(e.shape) + " (the problem's sizes)");
    ++d;
  }
  if (!(reinterpret_cast<std::uintptr_t>(t.data) % dtype_size(t.dtype) == 0))
    fail(context,
         name + " points to an address not aligned to its " + std::to_string(dtype_size(t.dtype)) + "-byte elements",
         "pass " + name + " from an allocation aligned to its element size (any allocator's memory is)");
  if (!dtype_ok(t.dtype))
    fail(context, name + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected " + dtype_text,
         "convert " + name + " to " + dtype_text + " or change the problem's dtype to match");
  if (t.device != device)
    fail(context, name + " lives on " + device_name(t.device) + " but the kernel runs on " + device_name(device),
         "copy " + name + " to " + device_name(device) + " memory or call the " + device_name(t.device) + " backend");
  if (!(rank == 0 || t.strides[rank - 1] == 1 || t.numel() == 0))
    fail(context, name + " has stride " + std::to_string(rank ? t.strides[rank - 1] : 0) + " in its last dimension",
         "make the last dimension of " + name + " contiguous (stride 1), e.g. with .contiguous()");
  std::int64_t span = 0;
  const bool no_elements = t.numel() == 0;
  for (int i = 0; i < rank; ++i) {
    // A dimension of extent 1 (or an empty tensor) never steps, so its stride is free.
    if (no_elements || t.shape[i] == 1) continue;
    if (t.strides[i] <= 0)
      fail(context, name + " has stride " + std::to_string(t.strides[i]) + " in dimension " + std::to_string(i),
           "pass positive strides (in elements); broadcasting and reversed views are not supported");
    if (t.shape[i] > 0) {
      if (!(t.strides[i] <= kMaxElements / t.shape[i] && span <= kMaxElements - t.strides[i] * t.shape[i]))
        fail(context, name + " strides overflow the addressable range",
             "pass strides whose span fits in 2^62 elements");
      span += t.strides[i] * (t.shape[i] - 1);
    }
  }
}

void check_exact(const char* context, const TensorView& t, const Expect& e, DType dtype, DeviceKind device) {
  if (e.optional && t.empty()) return;
  check_tensor(context, t, e, [dtype](DType x) { return x == dtype; }, std::string(dtype_name(dtype)), device);
}

void check_storage(const char* context, const TensorView& t, const Expect& e, DeviceKind device) {
  if (e.optional && t.empty()) return;
  check_tensor(context, t, e, [](DType x) { return is_storage_dtype(x); }, "f32, f16 or bf16", device);
}

// On CUDA every tensor of one call must also be on the same GPU.
void check_same_gpu(const char* context, std::initializer_list<std::pair<const char*, const TensorView*>> ts) {
  int index = -1;
  const char* first = nullptr;
  for (auto [name, t] : ts) {
    if (t->empty() || t->device != DeviceKind::kCuda) continue;
    if (index < 0) {
      index = t->device_index;
      first = name;
    } else {
      if (t->device_index != index)
        fail(context,
             std::string(name) + " is on cuda:" + std::to_string(t->device_index) + " but " + first +
                 " is on cuda:" + std::to_string(index),
             "put every tensor of one call on the same GPU");
    }
  }
}

std::int32_t read_i32(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]];
}

void validate_positions_host(const TensorView& positions, std::int64_t batch, std::int64_t max_seq,
                             std::int64_t max_attend, const char* context) {
  if (positions.device != DeviceKind::kCpu) return;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t p = read_i32(positions, b);
    if (!(p >= 0 && p < max_seq))
      fail(context,
           "positions[" + std::to_string(b) + "]=" + std::to_string(p) +
               " is outside the cache [0, max_seq=" + std::to_string(max_seq) + ")",
           "pass positions in 0..max_seq-1, or allocate a larger cache");
    if (p + 1 > max_attend)
      fail(context,
           "positions[" + std::to_string(b) + "]=" + std::to_string(p) + " needs " + std::to_string(p + 1) +
               " keys but the plan covers kv_len=" + std::to_string(max_attend),
           "plan with kv_len >= position + 1 (e.g. kv_len = max_seq)");
  }
}

void validate_rope_spec(const RopeSpec& rope, std::int64_t head_dim, const char* context) {
  if (head_dim % 2 != 0)
    fail(context, "head_dim=" + std::to_string(head_dim) + " is odd", "RoPE rotates pairs: use an even head_dim");
  if (!((rope.cos_table == nullptr) == (rope.sin_table == nullptr)))
    fail(context, "only one of the RoPE cos/sin tables is given", "pass both cos_table and sin_table, or neither");
  if (rope.cos_table) {
    if (rope.table_positions <= 0)
      fail(context, "RoPE tables given with table_positions=" + std::to_string(rope.table_positions),
           "set table_positions to the number of rows of the cos/sin tables");
  } else {
    if (!(std::isfinite(rope.theta) && rope.theta > 0.0f))
      fail(context, "RoPE theta is not positive and finite", "pass theta > 0 (e.g. 10000) or caller cos/sin tables");
  }
}

void validate_rope_positions_host(const TensorView& positions, std::int64_t batch, const RopeSpec& rope,
                                  const char* context) {
  if (positions.device != DeviceKind::kCpu) return;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t p = read_i32(positions, b);
    if (p < 0)
      fail(context, "positions[" + std::to_string(b) + "]=" + std::to_string(p) + " is negative",
           "pass positions >= 0");
    if (rope.cos_table) {
      if (p >= rope.table_positions)
        fail(context,
             "positions[" + std::to_string(b) + "]=" + std::to_string(p) +
                 " is beyond the RoPE tables (table_positions=" + std::to_string(rope.table_positions) + ")",
             "extend the cos/sin tables to cover every position, or use theta");
    }
  }
}

// Ragged prefill offsets: i32 [batch + 1], 0 first, non-decreasing, last = total rows, and each
// sequence within the plan's bounds.
void validate_cu_seqlens_host(const PrefillProblem& p, const PrefillTensors& t, std::int64_t total_q,
                              std::int64_t total_k) {
  const char* ctx = "prefill";
  if (t.cu_seqlens_q.device != DeviceKind::kCpu || t.cu_seqlens_k.device != DeviceKind::kCpu) return;
  struct Side {
    const char* name;
    const TensorView* cu;
    std::int64_t total;
    std::int64_t bound;
    const char* bound_name;
  };
  for (const Side& s : {Side{"cu_seqlens_q", &t.cu_seqlens_q, total_q, p.q_len, "q_len"},
                        Side{"cu_seqlens_k", &t.cu_seqlens_k, total_k, p.kv_len, "kv_len"}}) {
    const std::string n = s.name;
    if (read_i32(*s.cu, 0) != 0)
      fail(ctx, n + "[0]=" + std::to_string(read_i32(*s.cu, 0)) + " is not 0", "start the prefix offsets at 0");
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t lo = read_i32(*s.cu, b), hi = read_i32(*s.cu, b + 1);
      if (hi < lo)
        fail(ctx,
             n + " decreases at sequence " + std::to_string(b) + " (" + std::to_string(lo) + " -> " +
                 std::to_string(hi) + ")",
             "pass non-decreasing prefix offsets (cumulative sequence lengths)");
      if (hi - lo > s.bound)
        fail(ctx,
             "sequence " + std::to_string(b) + " has " + std::to_string(hi - lo) + " rows in " + n +
                 ", above the problem's " + s.bound_name + "=" + std::to_string(s.bound),
             std::string("plan with ") + s.bound_name + " >= the longest sequence");
    }
    const std::int64_t last = read_i32(*s.cu, p.batch);
    if (last != s.total)
      fail(ctx, n + "[batch]=" + std::to_string(last) + " but the tensors hold " + std::to_string(s.total) + " rows",
           "make the last prefix offset equal the packed row count of the tensors");
  }
  if (p.causal) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t lq = read_i32(t.cu_seqlens_q, b + 1) - read_i32(t.cu_seqlens_q, b);
      const std::int64_t lk = read_i32(t.cu_seqlens_k, b + 1) - read_i32(t.cu_seqlens_k, b);
      if (lq > lk)
        fail(ctx,
             "causal sequence " + std::to_string(b) + " has " + std::to_string(lq) + " queries but only " +
                 std::to_string(lk) + " keys",
             "causal attention is bottom-right aligned and needs q rows <= keys per sequence; pass "
             "causal=false or more keys");
    }
  }
}

}  // namespace

void validate_lengths_host(const TensorView& lengths, std::int64_t batch, std::int64_t max_len,
                           const char* context) {
  if (!(lengths.device == DeviceKind::kCpu && lengths.data != nullptr))
    fail(context, "lengths are not a host tensor", "pass host lengths for host-side checks");
  if (!(lengths.dtype == DType::kI32 && lengths.rank == 1 && lengths.shape[0] == batch))
    fail(context, "lengths is " + lengths.describe() + ", expected i32[" + std::to_string(batch) + "]",
         "pass one i32 length per sequence");
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = read_i32(lengths, b);
    if (!(len >= 0 && len <= max_len))
      fail(context,
           "lengths[" + std::to_string(b) + "]=" + std::to_string(len) +
               " is outside 0..kv_len=" + std::to_string(max_len),
           "plan with kv_len >= the longest sequence (and <= max_seq), or pass valid lengths");
  }
}

void validate_sinks(const TensorView& sinks, std::int64_t num_heads, DeviceKind device, const char* context) {
  check_exact(context, sinks, {"sinks", {num_heads}, true}, DType::kF32, device);
  if (sinks.empty() || sinks.device != DeviceKind::kCpu) return;
  const float* s = static_cast<const float*>(sinks.data);
  for (std::int64_t h = 0; h < sinks.shape[0]; ++h) {
    if (std::isnan(s[h]) || s[h] == std::numeric_limits<float>::infinity())
      fail(context, "sinks[" + std::to_string(h) + "]=" + std::to_string(s[h]) + " is NaN or +inf",
           "pass finite attention-sink logits (or -inf for a head without a sink)");
  }
}

void validate_kv_scale(const char* name, float value, DType cache, const char* context) {
  const std::string field = std::string("kv_scales.") + name + "=" + std::to_string(value);
  if (!(std::isfinite(value) && value > 0.0f))
    fail(context, field + " is not a finite number > 0",
         "pass the per-tensor dequantization scale of the e4m3 cache (real value = stored value x scale), e.g. "
         "max|x| / 448 of the data; 1 when the values are stored unscaled");
  if (!(is_fp8(cache) || value == 1.0f))
    fail(context, field + " with a " + std::string(dtype_name(cache)) + " cache",
         "kv_scales apply to e4m3 caches; leave them at 1 for f16/bf16/f32 caches");
}

void validate_kv_scales(DType kv_dtype, const KvScales& scales, const char* context) {
  validate_kv_scale("k", scales.k, kv_dtype, context);
  validate_kv_scale("v", scales.v, kv_dtype, context);
}

void reject_fp8_cache(DType kv_dtype, const char* context) {
  if (is_fp8(kv_dtype))
    fail(context,
         "kv_dtype is e4m3, which this op does not take (e4m3 caches are read by decode, paged decode and "
         "extend, and written by append and paged append)",
         "use an f16/bf16/f32 cache here, or for an e4m3 cache call append and then decode");
}

void validate_decode(const DecodeProblem& p, const DecodeTensors& t, DeviceKind device) {
  p.validate();
  const char* ctx = "decode";
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  check_exact(ctx, t.q, {"q", {B, H, D}}, p.q_dtype, device);
  check_exact(ctx, t.k_cache, {"k_cache", {B, G, S, D}}, p.kv_dtype, device);
  check_exact(ctx, t.v_cache, {"v_cache", {B, G, S, D}}, p.kv_dtype, device);
  check_exact(ctx, t.lengths, {"lengths", {B}}, DType::kI32, device);
  check_exact(ctx, t.out, {"out", {B, H, D}}, p.out_dtype, device);
  check_exact(ctx, t.lse, {"lse", {B, H}, true}, DType::kF32, device);
  validate_sinks(t.sinks, H, device, ctx);
  check_exact(ctx, t.key_starts, {"key_starts", {B}, true}, DType::kI32, device);
  check_same_gpu(ctx, {{"q", &t.q}, {"k_cache", &t.k_cache}, {"v_cache", &t.v_cache},
                       {"lengths", &t.lengths}, {"out", &t.out}, {"lse", &t.lse}, {"sinks", &t.sinks},
                       {"key_starts", &t.key_starts}});
  if (t.lengths.device == DeviceKind::kCpu) validate_lengths_host(t.lengths, B, p.kv_len, ctx);
  if (!t.key_starts.empty() && t.key_starts.device == DeviceKind::kCpu) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t start = read_i32(t.key_starts, b);
      if (!(start >= 0 && start <= p.kv_len))
        fail(ctx,
             "key_starts[" + std::to_string(b) + "]=" + std::to_string(start) + " is outside 0..kv_len=" +
                 std::to_string(p.kv_len),
             "pass each sequence's first real key (its left padding), 0 for a sequence without padding");
    }
  }
}

void validate_fp8_scales(const PrefillProblem& p, const Fp8Scales& scales, const char* context) {
  const std::pair<const char*, float> named[] = {{"q", scales.q}, {"k", scales.k}, {"v", scales.v}};
  for (const auto& [name, value] : named) {
    const std::string field = std::string("scales.") + name + "=" + std::to_string(value);
    if (!(std::isfinite(value) && value > 0.0f))
      fail(context, field + " is not a finite number > 0",
           "pass the per-tensor dequantization scale (real value = stored e4m3 value x scale), e.g. "
           "max|x| / 448 from the quantizer; 1 when the values were stored unscaled");
    if (!(is_fp8(p.dtype) || value == 1.0f))
      fail(context, field + " with " + std::string(dtype_name(p.dtype)) + " inputs",
           "scales apply to e4m3 inputs; leave them at 1 for f16/bf16/f32");
  }
}

void validate_prefill(const PrefillProblem& p, const PrefillTensors& t, DeviceKind device) {
  p.validate();
  const char* ctx = "prefill";
  validate_fp8_scales(p, t.scales, ctx);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim;
  const bool ragged = !t.cu_seqlens_q.empty() || !t.cu_seqlens_k.empty();
  if (!ragged) {
    check_exact(ctx, t.q, {"q", {B, H, p.q_len, D}}, p.dtype, device);
    check_exact(ctx, t.k, {"k", {B, G, p.kv_len, D}}, p.dtype, device);
    check_exact(ctx, t.v, {"v", {B, G, p.kv_len, D}}, p.dtype, device);
    check_exact(ctx, t.out, {"out", {B, H, p.q_len, D}}, p.out_dtype, device);
    check_exact(ctx, t.lse, {"lse", {B, H, p.q_len}, true}, DType::kF32, device);
  } else {
    if (t.cu_seqlens_q.empty() || t.cu_seqlens_k.empty())
      fail(ctx, "only one of cu_seqlens_q / cu_seqlens_k is given",
           "pass both prefix-offset tensors for a ragged batch, or neither");
    check_exact(ctx, t.cu_seqlens_q, {"cu_seqlens_q", {B + 1}}, DType::kI32, device);
    check_exact(ctx, t.cu_seqlens_k, {"cu_seqlens_k", {B + 1}}, DType::kI32, device);
    // Packed rows: the totals come from the tensors and are checked against the offsets.
    if (!(t.q.rank == 4 && t.k.rank == 4))
      fail(ctx,
           "ragged q and k must be [1, heads, total_rows, head_dim], got q " + t.q.describe() + " and k " +
               t.k.describe(),
           "pack the sequences along dimension 2 of rank-4 tensors with a leading 1");
    const std::int64_t total_q = t.q.shape[2], total_k = t.k.shape[2];
    if (!(total_q >= 0 && total_k >= 0)) fail(ctx, "ragged row counts are negative", "pass non-negative shapes");
    checked_product(ctx, "ragged q", {H, total_q, D});
    checked_product(ctx, "ragged k", {G, total_k, D});
    check_exact(ctx, t.q, {"q", {1, H, total_q, D}}, p.dtype, device);
    check_exact(ctx, t.k, {"k", {1, G, total_k, D}}, p.dtype, device);
    check_exact(ctx, t.v, {"v", {1, G, total_k, D}}, p.dtype, device);
    check_exact(ctx, t.out, {"out", {1, H, total_q, D}}, p.out_dtype, device);
    check_exact(ctx, t.lse, {"lse", {1, H, total_q}, true}, DType::kF32, device);
    validate_cu_seqlens_host(p, t, total_q, total_k);
  }
  validate_sinks(t.sinks, H, device, ctx);
  if (!t.sinks.empty() && is_fp8(p.dtype))
    fail(ctx, "sinks with e4m3 inputs", "attention sinks are not in the e4m3 kernel; pass f16 or bf16 inputs");
  check_same_gpu(ctx, {{"q", &t.q}, {"k", &t.k}, {"v", &t.v}, {"out", &t.out}, {"lse", &t.lse},
                       {"cu_seqlens_q", &t.cu_seqlens_q}, {"cu_seqlens_k", &t.cu_seqlens_k}, {"sinks", &t.sinks}});
}

void validate_append(const AppendTensors& t, DeviceKind device) {
  const char* ctx = "append_kv";
  if (t.k_new.empty() && t.v_new.empty())
    fail(ctx, "neither k_new nor v_new is given", "pass k_new (with k_cache), v_new (with v_cache), or both");
  // The cache that is written fixes the sizes; both caches must agree when both are written.
  const TensorView& cache = !t.k_new.empty() ? t.k_cache : t.v_cache;
  const char* cache_name = !t.k_new.empty() ? "k_cache" : "v_cache";
  if (cache.data == nullptr)
    fail(ctx, std::string(cache_name) + " has a null data pointer", "pass the cache the new token is written into");
  if (cache.rank != 4)
    fail(ctx, std::string(cache_name) + " is " + cache.describe() + ", expected [batch, kv_heads, max_seq, head_dim]",
         "pass the cache as a rank-4 view");
  const std::int64_t B = cache.shape[0], G = cache.shape[1], S = cache.shape[2], D = cache.shape[3];
  for (std::int64_t v : {B, G, S, D}) {
    if (v <= 0)
      fail(ctx, std::string(cache_name) + " has an empty dimension (" + cache.describe() + ")",
           "pass a cache with batch, kv_heads, max_seq and head_dim >= 1");
  }
  checked_product(ctx, "the cache", {B, G, S, D});
  // An e4m3 cache is written from rows in any storage dtype (quantized by append); any other cache
  // from rows of its own dtype (copied).
  auto check_side = [&](const char* cache_name, const TensorView& c, const char* new_name, const TensorView& n,
                        float scale, const char* scale_name) {
    check_tensor(ctx, c, {cache_name, {B, G, S, D}}, [](DType x) { return is_storage_dtype(x) || is_fp8(x); },
                 "f32, f16, bf16 or e4m3", device);
    if (is_fp8(c.dtype)) check_storage(ctx, n, {new_name, {B, G, D}}, device);
    else check_exact(ctx, n, {new_name, {B, G, D}}, c.dtype, device);
    validate_kv_scale(scale_name, scale, c.dtype, ctx);
  };
  // (The scale of a side that is not written is not read.)
  if (!t.k_new.empty()) check_side("k_cache", t.k_cache, "k_new", t.k_new, t.kv_scales.k, "k");
  if (!t.v_new.empty()) check_side("v_cache", t.v_cache, "v_new", t.v_new, t.kv_scales.v, "v");
  check_exact(ctx, t.positions, {"positions", {B}}, DType::kI32, device);
  check_same_gpu(ctx, {{"k_new", &t.k_new}, {"v_new", &t.v_new}, {"k_cache", &t.k_cache},
                       {"v_cache", &t.v_cache}, {"positions", &t.positions}});
  validate_positions_host(t.positions, B, S, S, ctx);
}

void validate_rope(const TensorView& x, const TensorView& positions, const RopeSpec& rope, DeviceKind device) {
  const char* ctx = "apply_rope";
  if (x.rank != 3) fail(ctx, "x is " + x.describe() + ", expected [batch, heads, head_dim]", "pass x as a rank-3 view");
  const std::int64_t B = x.shape[0], H = x.shape[1], D = x.shape[2];
  for (std::int64_t v : {B, H, D}) {
    if (v <= 0) fail(ctx, "x has an empty dimension (" + x.describe() + ")", "pass batch, heads, head_dim >= 1");
  }
  checked_product(ctx, "x", {B, H, D});
  check_storage(ctx, x, {"x", {B, H, D}}, device);
  check_exact(ctx, positions, {"positions", {B}}, DType::kI32, device);
  check_same_gpu(ctx, {{"x", &x}, {"positions", &positions}});
  validate_rope_spec(rope, D, ctx);
  validate_rope_positions_host(positions, B, rope, ctx);
}

void validate_fused(const DecodeProblem& p, const FusedDecodeTensors& t, const RopeSpec& rope,
                    DeviceKind device) {
  p.validate();
  const char* ctx = "fused_rope_append_decode";
  reject_fp8_cache(p.kv_dtype, ctx);
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
  check_exact(ctx, t.q, {"q", {B, H, D}}, p.q_dtype, device);
  check_exact(ctx, t.k_new, {"k_new", {B, G, D}}, p.kv_dtype, device);
  check_exact(ctx, t.v_new, {"v_new", {B, G, D}}, p.kv_dtype, device);
  check_exact(ctx, t.k_cache, {"k_cache", {B, G, S, D}}, p.kv_dtype, device);
  check_exact(ctx, t.v_cache, {"v_cache", {B, G, S, D}}, p.kv_dtype, device);
  check_exact(ctx, t.positions, {"positions", {B}}, DType::kI32, device);
  check_exact(ctx, t.out, {"out", {B, H, D}}, p.out_dtype, device);
  check_exact(ctx, t.lse, {"lse", {B, H}, true}, DType::kF32, device);
  validate_sinks(t.sinks, H, device, ctx);
  check_same_gpu(ctx, {{"q", &t.q}, {"k_new", &t.k_new}, {"v_new", &t.v_new}, {"k_cache", &t.k_cache},
                       {"v_cache", &t.v_cache}, {"positions", &t.positions}, {"out", &t.out},
                       {"lse", &t.lse}, {"sinks", &t.sinks}});
  validate_rope_spec(rope, D, ctx);
  validate_positions_host(t.positions, B, S, p.kv_len, ctx);
  validate_rope_positions_host(t.positions, B, rope, ctx);
}

void validate_merge(const MergeTensors& t, DeviceKind device) {
  const char* ctx = "merge_states";
  if (!(t.out_partial.data != nullptr && t.out_partial.rank == 3))
    fail(ctx, "out_partial is " + t.out_partial.describe() + ", expected [splits, rows, head_dim]",
         "pass the split outputs as a rank-3 f32, f16 or bf16 tensor");
  const std::int64_t S = t.out_partial.shape[0], R = t.out_partial.shape[1], D = t.out_partial.shape[2];
  if (!(S > 0 && R > 0 && D > 0))
    fail(ctx, "out_partial has an empty dimension (" + t.out_partial.describe() + ")",
         "pass splits, rows and head_dim >= 1");
  constexpr std::int64_t kMaxInt = std::numeric_limits<std::int32_t>::max();
  if (S > kMaxInt || D > kMaxInt)
    fail(ctx, "out_partial has " + std::to_string(S) + " splits of head_dim " + std::to_string(D),
         "pass fewer than 2^31 splits and a head_dim below 2^31");
  checked_product(ctx, "out_partial", {S, R, D});
  check_storage(ctx, t.out_partial, {"out_partial", {S, R, D}}, device);
  check_exact(ctx, t.lse_partial, {"lse_partial", {S, R}}, DType::kF32, device);
  check_storage(ctx, t.out, {"out", {R, D}}, device);
  check_exact(ctx, t.lse, {"lse", {R}, true}, DType::kF32, device);
  check_same_gpu(ctx, {{"out_partial", &t.out_partial}, {"lse_partial", &t.lse_partial}, {"out", &t.out},
                       {"lse", &t.lse}});
}

void validate_workspace(const Workspace& ws, std::uint64_t needed_bytes, DeviceKind device) {
  if (needed_bytes == 0) return;
  const char* ctx = "workspace";
  if (ws.data == nullptr)
    fail(ctx, "the plan needs " + std::to_string(needed_bytes) + " bytes but none were given",
         "allocate plan.evidence.workspace_bytes bytes on the run's device and pass them");
  if (ws.bytes < needed_bytes)
    fail(ctx, std::to_string(ws.bytes) + " bytes given, the plan needs " + std::to_string(needed_bytes),
         "allocate at least plan.evidence.workspace_bytes bytes");
  if (ws.device != device)
    fail(ctx, "the workspace is on " + device_name(ws.device) + " but the kernel runs on " + device_name(device),
         "allocate the workspace on the run's device");
}

}  // namespace attnkit
