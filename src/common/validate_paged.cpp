// Argument validation of the paged calls, shared by the CPU and CUDA backends. Every check runs
// before anything is written. Index tensors (page table, lengths, offsets, start positions) are
// read only when they live on the host; a device run relies on its kernel's bounds guards.
//
// Decisions: a page may be read by several sequences (prefix sharing) and entries of a table row
// past the sequence's last page are never read (so -1 padding is fine), but two appended tokens
// must not land in the same (page, slot): that write would race on a GPU and lose a token anyway.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "common/size_checks.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/validate.hpp"

namespace attnkit {
namespace {

using detail::kMaxElements;

std::string device_name(DeviceKind d) { return d == DeviceKind::kCpu ? "cpu" : "cuda"; }

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Given, rank and shape, dtype (exact, or any storage dtype when `dtype` is kI32 and `storage`),
// device, head_dim contiguous, positive non-overflowing strides.
void check(const char* ctx, const std::string& name, const TensorView& t, const std::vector<std::int64_t>& shape,
           DType dtype, DeviceKind device, bool optional = false) {
  if (optional && t.empty()) return;
  const std::string want = std::string(dtype_name(dtype)) + shape_string(shape);
  // A tensor of no elements may come without memory (torch.empty(0, ...) has a null data pointer):
  // extend's q and out when every sequence of the step is idle.
  const bool no_elements = std::find(shape.begin(), shape.end(), std::int64_t{0}) != shape.end();
  if (t.data == nullptr && !no_elements)
    fail(ctx, name + " has a null data pointer", "pass a " + want + " tensor with allocated memory");
  if (!(reinterpret_cast<std::uintptr_t>(t.data) % dtype_size(t.dtype) == 0))
    fail(ctx,
         name + " points to an address not aligned to its " + std::to_string(dtype_size(t.dtype)) + "-byte elements",
         "pass " + name + " from an allocation aligned to its element size (any allocator's memory is)");
  if (!(t.rank == static_cast<int>(shape.size())))
    fail(ctx,
         name + " is " + t.describe() + ", expected rank " + std::to_string(shape.size()) + " " + shape_string(shape),
         "pass " + name + " as " + want);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (t.shape[d] != shape[d])
      fail(ctx, name + " is " + t.describe() + ", expected " + shape_string(shape),
           "pass " + name + " with shape " + shape_string(shape) + " (the problem's sizes)");
  }
  if (t.dtype != dtype)
    fail(ctx, name + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected " + std::string(dtype_name(dtype)),
         "convert " + name + " or change the problem's dtype to match");
  if (t.device != device)
    fail(ctx, name + " lives on " + device_name(t.device) + " but the kernel runs on " + device_name(device),
         "copy " + name + " to " + device_name(device) + " memory or call the " + device_name(t.device) + " backend");
  const int rank = t.rank;
  if (!(rank == 0 || t.strides[rank - 1] == 1 || t.shape[rank - 1] <= 1 || no_elements))
    fail(ctx, name + " is not contiguous in its last dimension", "make the last dimension of " + name + " contiguous");
  std::int64_t span = 0;
  for (int i = 0; i < rank; ++i) {
    if (t.numel() == 0 || t.shape[i] == 1) continue;
    if (t.strides[i] <= 0)
      fail(ctx, name + " has stride " + std::to_string(t.strides[i]) + " in dimension " + std::to_string(i),
           "pass positive strides (in elements)");
    if (!(t.strides[i] <= kMaxElements / t.shape[i] && span <= kMaxElements - t.strides[i] * t.shape[i]))
      fail(ctx, name + " strides overflow the addressable range", "pass strides whose span fits in 2^62 elements");
    span += t.strides[i] * (t.shape[i] - 1);
  }
}

bool all_on_host(std::initializer_list<const TensorView*> ts) {
  for (const TensorView* t : ts) {
    if (t->device != DeviceKind::kCpu) return false;
  }
  return true;
}

void check_same_gpu(const char* ctx, std::initializer_list<std::pair<const char*, const TensorView*>> ts) {
  int index = -1;
  for (auto [name, t] : ts) {
    if (t->empty() || t->device != DeviceKind::kCuda) continue;
    if (index < 0) index = t->device_index;
    if (t->device_index != index)
      fail(ctx, std::string(name) + " is on another GPU than the rest of the call",
           "put every tensor of one call on the same GPU");
  }
}

std::int64_t at(const TensorView& t, std::int64_t i) { return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]]; }
std::int64_t at2(const TensorView& t, std::int64_t i, std::int64_t j) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}

std::vector<std::int64_t> pool_shape(const PagedCacheSpec& c, std::int64_t kv_heads, std::int64_t head_dim) {
  if (c.layout == PageLayout::kHND) return {c.num_pages, kv_heads, c.page_size, head_dim};
  return {c.num_pages, c.page_size, kv_heads, head_dim};
}

// The page of sequence b holding position `pos`, checked: in the table and in the pool.
void check_page(const char* ctx, const PagedCacheSpec& c, const TensorView& table, std::int64_t b, std::int64_t pos,
                std::int64_t len, const char* what) {
  const std::int64_t slot = pos / c.page_size;
  if (slot >= c.max_pages_per_seq)
    fail(ctx,
         "page table is shorter than sequence " + std::to_string(b) + ": " + what + " " + std::to_string(len) +
             " keys need " + std::to_string((len + c.page_size - 1) / c.page_size) + " pages but a row holds " +
             std::to_string(c.max_pages_per_seq) + " (of " + std::to_string(c.page_size) + " keys)",
         "widen the page table (max_pages_per_seq) or shorten the sequence");
  const std::int64_t page = at2(table, b, slot);
  if (page < 0)
    fail(ctx,
         "sequence " + std::to_string(b) + " is longer than its pages: " + what + " " + std::to_string(len) +
             " keys reach page_table[" + std::to_string(b) + "][" + std::to_string(slot) + "]=" + std::to_string(page) +
             " (no page assigned)",
         "assign a page to every ceil(length / page_size) entry of the row before the call");
  if (page >= c.num_pages)
    fail(ctx,
         "page_table[" + std::to_string(b) + "][" + std::to_string(slot) + "]=" + std::to_string(page) +
             " is out of range (the pool has " + std::to_string(c.num_pages) + " pages)",
         "pass page indices in 0..num_pages-1");
}

// cu_seqlens: i32 [batch + 1], starts at 0, no negative or decreasing entry, last <= rows.
void check_offsets_host(const char* ctx, const char* name, const TensorView& cu, std::int64_t batch, std::int64_t rows) {
  for (std::int64_t b = 0; b <= batch; ++b) {
    if (at(cu, b) < 0)
      fail(ctx, std::string(name) + "[" + std::to_string(b) + "]=" + std::to_string(at(cu, b)) + " is negative",
           "pass prefix offsets (cumulative row counts) starting at 0");
  }
  if (at(cu, 0) != 0)
    fail(ctx, std::string(name) + "[0]=" + std::to_string(at(cu, 0)) + " is not 0", "start the prefix offsets at 0");
  for (std::int64_t b = 0; b < batch; ++b) {
    if (at(cu, b + 1) < at(cu, b))
      fail(ctx,
           std::string(name) + " decreases at sequence " + std::to_string(b) + " (" + std::to_string(at(cu, b)) +
               " -> " + std::to_string(at(cu, b + 1)) + ")",
           "pass non-decreasing prefix offsets (cumulative sequence lengths)");
  }
  if (at(cu, batch) > rows)
    fail(ctx,
         std::string(name) + "[batch]=" + std::to_string(at(cu, batch)) + " is beyond the " + std::to_string(rows) +
             " rows of the tensors",
         "make the last prefix offset at most the packed row count of the tensors");
}

void check_cache_tensors(const char* ctx, const PagedCacheSpec& c, std::int64_t batch, std::int64_t kv_heads,
                         std::int64_t head_dim, DType kv_dtype, const PagedKvCache& cache, DeviceKind device) {
  const auto shape = pool_shape(c, kv_heads, head_dim);
  check(ctx, "k_pages", cache.k_pages, shape, kv_dtype, device);
  check(ctx, "v_pages", cache.v_pages, shape, kv_dtype, device);
  check(ctx, "page_table", cache.page_table, {batch, c.max_pages_per_seq}, DType::kI32, device);
  check(ctx, "lengths", cache.lengths, {batch}, DType::kI32, device);
}

}  // namespace

void validate_paged_indices_host(const PagedCacheSpec& c, const TensorView& table, const TensorView& lengths,
                                 std::int64_t batch, std::int64_t max_len, const char* ctx) {
  if (!(table.device == DeviceKind::kCpu && lengths.device == DeviceKind::kCpu && table.data && lengths.data))
    fail(ctx, "the page table or lengths are not host tensors", "pass host copies for host-side checks");
  if (!(table.dtype == DType::kI32 && table.rank == 2 && table.shape[0] == batch &&
        table.shape[1] == c.max_pages_per_seq))
    fail(ctx,
         "page_table is " + table.describe() + ", expected i32[" + std::to_string(batch) + ", " +
             std::to_string(c.max_pages_per_seq) + "]",
         "pass one row of max_pages_per_seq i32 page indices per sequence");
  if (!(lengths.dtype == DType::kI32 && lengths.rank == 1 && lengths.shape[0] == batch))
    fail(ctx, "lengths is " + lengths.describe() + ", expected i32[" + std::to_string(batch) + "]",
         "pass one i32 length per sequence");
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = at(lengths, b);
    if (len < 0)
      fail(ctx, "lengths[" + std::to_string(b) + "]=" + std::to_string(len) + " is negative", "pass lengths >= 0");
    // Table first: a row too short for the sequence is the more specific diagnosis.
    if (len > 0) check_page(ctx, c, table, b, len - 1, len, "its");
    if (len > max_len)
      fail(ctx,
           "lengths[" + std::to_string(b) + "]=" + std::to_string(len) +
               " is above the plan's kv_len=" + std::to_string(max_len),
           "plan with kv_len >= the longest sequence, or pass valid lengths");
    for (std::int64_t pos = 0; pos < len; pos += c.page_size) check_page(ctx, c, table, b, pos, len, "its");
  }
}

void validate_paged_decode(const PagedDecodeProblem& p, const PagedDecodeTensors& t, DeviceKind device) {
  p.validate();
  const char* ctx = "paged_decode";
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
  check(ctx, "q", t.q, {B, H, D}, p.q_dtype, device);
  check_cache_tensors(ctx, p.cache, B, p.kv_heads, D, p.kv_dtype, t.cache, device);
  check(ctx, "out", t.out, {B, H, D}, p.out_dtype, device);
  check(ctx, "lse", t.lse, {B, H}, DType::kF32, device, true);
  validate_sinks(t.sinks, H, device, ctx);
  check_same_gpu(ctx, {{"q", &t.q}, {"k_pages", &t.cache.k_pages}, {"v_pages", &t.cache.v_pages},
                       {"page_table", &t.cache.page_table}, {"lengths", &t.cache.lengths}, {"out", &t.out},
                       {"lse", &t.lse}, {"sinks", &t.sinks}});
  if (all_on_host({&t.cache.page_table, &t.cache.lengths})) {
    validate_paged_indices_host(p.cache, t.cache.page_table, t.cache.lengths, B, p.kv_len, ctx);
  }
}

void validate_extend(const ExtendProblem& p, const ExtendTensors& t, DeviceKind device) {
  p.validate();
  const char* ctx = "extend";
  validate_kv_scales(p.kv_dtype, t.kv_scales, ctx);
  const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
  if (t.q.rank != 3)
    fail(ctx, "q is " + t.q.describe() + ", expected [rows, num_heads, head_dim]",
         "pack the new query tokens of every sequence along dimension 0 of a rank-3 tensor");
  const std::int64_t rows = t.q.shape[0];
  if (!(rows >= 0 && rows <= p.total_q_bound()))
    fail(ctx,
         "q has " + std::to_string(rows) + " rows but the plan covers max_total_q=" + std::to_string(p.total_q_bound()),
         "plan with max_total_q >= the packed query rows (or pass fewer rows)");
  check(ctx, "q", t.q, {rows, H, D}, p.q_dtype, device);
  check(ctx, "cu_seqlens_q", t.cu_seqlens_q, {B + 1}, DType::kI32, device);
  check_cache_tensors(ctx, p.cache, B, p.kv_heads, D, p.kv_dtype, t.cache, device);
  check(ctx, "out", t.out, {rows, H, D}, p.out_dtype, device);
  check(ctx, "lse", t.lse, {rows, H}, DType::kF32, device, true);
  validate_sinks(t.sinks, H, device, ctx);
  check_same_gpu(ctx, {{"q", &t.q}, {"cu_seqlens_q", &t.cu_seqlens_q}, {"k_pages", &t.cache.k_pages},
                       {"v_pages", &t.cache.v_pages}, {"page_table", &t.cache.page_table},
                       {"lengths", &t.cache.lengths}, {"out", &t.out}, {"lse", &t.lse}, {"sinks", &t.sinks}});
  if (!all_on_host({&t.cu_seqlens_q, &t.cache.page_table, &t.cache.lengths})) return;
  check_offsets_host(ctx, "cu_seqlens_q", t.cu_seqlens_q, B, rows);
  validate_paged_indices_host(p.cache, t.cache.page_table, t.cache.lengths, B, p.kv_len, ctx);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t q_len = at(t.cu_seqlens_q, b + 1) - at(t.cu_seqlens_q, b), len = at(t.cache.lengths, b);
    if (q_len > p.max_q_len)
      fail(ctx,
           "sequence " + std::to_string(b) + " has " + std::to_string(q_len) +
               " query rows, above the plan's max_q_len=" + std::to_string(p.max_q_len),
           "plan with max_q_len >= the longest run of new tokens");
    if (q_len > len)
      fail(ctx,
           "sequence " + std::to_string(b) + " has " + std::to_string(q_len) + " query rows but only " +
               std::to_string(len) + " keys",
           "the new tokens are the last keys of their sequence: append them to the cache (paged_append_kv) and "
           "count them in lengths");
  }
}

void validate_paged_append(const PagedCacheSpec& c, const PagedAppendTensors& t, DeviceKind device) {
  const char* ctx = "paged_append_kv";
  if (t.k_new.empty() && t.v_new.empty())
    fail(ctx, "neither k_new nor v_new is given", "pass k_new (with k_pages), v_new (with v_pages), or both");
  if (!(c.num_pages > 0 && c.page_size > 0 && c.max_pages_per_seq > 0))
    fail(ctx, "the cache spec has a non-positive num_pages, page_size or max_pages_per_seq",
         "describe the pool with positive sizes");
  const TensorView& src = !t.k_new.empty() ? t.k_new : t.v_new;
  const TensorView& pool = !t.k_new.empty() ? t.k_pages : t.v_pages;
  if (!(src.rank == 3 && src.data != nullptr && pool.rank == 4 && pool.data != nullptr))
    fail(ctx,
         "new rows " + src.describe() + " / pages " + pool.describe() +
             " are not [rows, kv_heads, head_dim] / a rank-4 page pool",
         "pass the new tokens token-major and the pool in its layout's shape");
  const std::int64_t rows = src.shape[0], G = src.shape[1], D = src.shape[2];
  if (!(rows >= 0 && G > 0 && D > 0))
    fail(ctx, "new rows have an empty head or head_dim dimension", "pass kv_heads and head_dim >= 1");
  if (!(is_storage_dtype(pool.dtype) || is_fp8(pool.dtype)))
    fail(ctx, "the page pool dtype is " + std::string(dtype_name(pool.dtype)), "use f32, f16, bf16 or e4m3 pages");
  const auto shape = pool_shape(c, G, D);
  // An e4m3 pool is written from rows of any storage dtype (quantized), any other pool from rows of
  // its own dtype (copied). The scale of a side that is not written is not read.
  auto check_side = [&](const char* pool_name, const TensorView& pages, const char* new_name, const TensorView& n,
                        float scale, const char* scale_name) {
    check(ctx, pool_name, pages, shape, pool.dtype, device);
    const bool quantized = is_fp8(pool.dtype);
    if (quantized && !is_storage_dtype(n.dtype))
      fail(ctx, std::string(new_name) + " has dtype " + std::string(dtype_name(n.dtype)) + " for an e4m3 pool",
           "pass the new rows in f32, f16 or bf16: append quantizes them to e4m3");
    check(ctx, new_name, n, {rows, G, D}, quantized ? n.dtype : pool.dtype, device);
    validate_kv_scale(scale_name, scale, pool.dtype, ctx);
  };
  if (!t.k_new.empty()) check_side("k_pages", t.k_pages, "k_new", t.k_new, t.kv_scales.k, "k");
  if (!t.v_new.empty()) check_side("v_pages", t.v_pages, "v_new", t.v_new, t.kv_scales.v, "v");
  if (!(t.page_table.rank == 2 && t.page_table.data != nullptr))
    fail(ctx, "page_table is " + t.page_table.describe() + ", expected i32[batch, max_pages_per_seq]",
         "pass one row of page indices per sequence");
  const std::int64_t B = t.page_table.shape[0];
  if (B <= 0) fail(ctx, "page_table has no rows", "pass one row per sequence");
  check(ctx, "page_table", t.page_table, {B, c.max_pages_per_seq}, DType::kI32, device);
  check(ctx, "cu_seqlens_new", t.cu_seqlens_new, {B + 1}, DType::kI32, device);
  check(ctx, "start_positions", t.start_positions, {B}, DType::kI32, device);
  check_same_gpu(ctx, {{"k_new", &t.k_new}, {"v_new", &t.v_new}, {"k_pages", &t.k_pages}, {"v_pages", &t.v_pages},
                       {"page_table", &t.page_table}, {"cu_seqlens_new", &t.cu_seqlens_new},
                       {"start_positions", &t.start_positions}});
  if (!all_on_host({&t.page_table, &t.cu_seqlens_new, &t.start_positions})) return;
  check_offsets_host(ctx, "cu_seqlens_new", t.cu_seqlens_new, B, rows);
  std::vector<std::int64_t> slots;  // page * page_size + slot of every written token
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t start = at(t.start_positions, b);
    const std::int64_t n = at(t.cu_seqlens_new, b + 1) - at(t.cu_seqlens_new, b);
    if (start < 0)
      fail(ctx, "start_positions[" + std::to_string(b) + "]=" + std::to_string(start) + " is negative",
           "pass the position of each sequence's first new token (its length before the append)");
    if (n == 0) continue;
    const std::int64_t end = start + n;
    check_page(ctx, c, t.page_table, b, end - 1, end, "after the append its");  // table long enough, first
    for (std::int64_t pos = start; pos < end; pos = (pos / c.page_size + 1) * c.page_size) {
      check_page(ctx, c, t.page_table, b, pos, end, "after the append its");
    }
    for (std::int64_t pos = start; pos < end; ++pos) {
      slots.push_back(at2(t.page_table, b, pos / c.page_size) * c.page_size + pos % c.page_size);
    }
  }
  std::sort(slots.begin(), slots.end());
  const auto dup = std::adjacent_find(slots.begin(), slots.end());
  if (dup != slots.end())
    fail(ctx,
         "two new tokens would be written to the same slot (page " +
             std::to_string(dup == slots.end() ? 0 : *dup / c.page_size) + ", slot " +
             std::to_string(dup == slots.end() ? 0 : *dup % c.page_size) + ")",
         "give each sequence its own pages for the positions it appends (copy a shared page before writing it)");
}

}  // namespace attnkit
