// Seed 000's fused decode step as one CPU call: RoPE(q) and RoPE(k_new) at positions[b],
// append k and v at positions[b], then attend over positions[b] + 1 keys with the plan.
// Inputs: q [batch, heads, head_dim], k_new / v_new [batch, kv_heads, head_dim] (un-rotated, never
//   modified: the rotated q lives in scratch, the rotated k goes straight into the cache),
//   caches [batch, kv_heads, max_seq, head_dim], i32 positions[batch].
// Everything (shapes, positions < max_seq, position + 1 <= plan kv_len, RoPE tables, workspace)
// is validated before the first write. Unlike the seed, k is rotated once per KV head, not once
// per query head of its group.
#include <cstring>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cpu/rope.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {

void fused_rope_append_decode(const DecodePlan& plan, const FusedDecodeTensors& t, const RopeSpec& rope,
                              Workspace workspace) {
  const char* ctx = "cpu::fused_rope_append_decode";
  if (plan.target.backend != Backend::kCpu)
    fail(ctx, "the plan was made for the cuda backend", "plan with cpu_target() to run on the CPU");
  validate_fused(plan.problem, t, rope, DeviceKind::kCpu);
  validate_workspace(workspace, plan.evidence.workspace_bytes, DeviceKind::kCpu);

  const DecodeProblem& p = plan.problem;
  const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim;
  std::vector<float> row(static_cast<std::size_t>(D));

  // The rotated query, stored in the query's own dtype (as a separate RoPE in place would).
  std::vector<std::uint8_t> q_rotated(static_cast<std::size_t>(B * H * D) * dtype_size(p.q_dtype));
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pos = detail::index_at(t.positions, b);
    lengths[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(pos + 1);
    for (std::int64_t h = 0; h < H; ++h) {
      detail::load_row(t.q.data, t.q.dtype, b * t.q.strides[0] + h * t.q.strides[1], D, row.data());
      detail::rope_row(row.data(), D, pos, rope);
      detail::store_row(q_rotated.data(), p.q_dtype, (b * H + h) * D, D, row.data());
    }
    for (std::int64_t g = 0; g < G; ++g) {
      detail::load_row(t.k_new.data, t.k_new.dtype, b * t.k_new.strides[0] + g * t.k_new.strides[1], D, row.data());
      detail::rope_row(row.data(), D, pos, rope);
      detail::store_row(t.k_cache.data, t.k_cache.dtype,
                        b * t.k_cache.strides[0] + g * t.k_cache.strides[1] + pos * t.k_cache.strides[2], D,
                        row.data());
      const std::size_t elem = dtype_size(p.kv_dtype);
      std::memmove(static_cast<std::uint8_t*>(t.v_cache.data) +
                       (b * t.v_cache.strides[0] + g * t.v_cache.strides[1] + pos * t.v_cache.strides[2]) * elem,
                   static_cast<const std::uint8_t*>(t.v_new.data) +
                       (b * t.v_new.strides[0] + g * t.v_new.strides[1]) * elem,
                   static_cast<std::size_t>(D) * elem);
    }
  }

  DecodeTensors attend;
  attend.q = TensorView::contiguous(q_rotated.data(), p.q_dtype, {B, H, D});
  attend.k_cache = t.k_cache;
  attend.v_cache = t.v_cache;
  attend.lengths = TensorView::contiguous(lengths.data(), DType::kI32, {B});
  attend.out = t.out;
  attend.lse = t.lse;
  attend.sinks = t.sinks;
  decode(plan, attend, workspace);
}

}  // namespace attnkit::cpu
