// The fast CPU kernels' driver: cuts a plan into tasks, runs them on OpenMP threads with the
// instruction set fast_isa.cpp selects, and writes the output tensors.
// Inputs: validated views (any storage dtype, any strides with head_dim contiguous; decode: an
//   e4m3 cache too, its scales folded into the score scale and the output rows, not per element).
// Parallelism: plan.target.threads threads, dynamic scheduling over the plan's tasks
//   (decode: sequence x KV head x key split; prefill: sequence x KV head x query-row block, the
//   costliest causal blocks first). Each thread owns one scratch buffer, grown once and reused.
// Decode splits write normalised partial states (f32, [splits][rows][head_dim] then
//   [splits][rows] LSE, then one i32 counter per (sequence, KV head)) to the caller's workspace
//   (plan.evidence.workspace_bytes, required by cpu::decode). The thread that finishes the last
//   split of a (sequence, KV head) merges its rows at once: no second pass and no barrier before
//   it, so a thread that loses its core to another process does not hold up a merge phase.
// Bound: see fast_body.hpp (decode: memory or FMA by group size; prefill: FMA).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <omp.h>

#include "attnkit/error.hpp"
#include "common/attention_sinks.hpp"
#include "cpu/fast_isa.hpp"
#include "cpu/fast_tasks.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

const FastBodies& bodies_for(simd::Isa isa) {
  switch (isa) {
    case simd::Isa::kAmx: return fast_bodies_amx();
    case simd::Isa::kAvx512Bf16: return fast_bodies_avx512bf16();
    case simd::Isa::kAvx512: return fast_bodies_avx512();
    case simd::Isa::kAvx2: return fast_bodies_avx2();
    case simd::Isa::kScalar: break;
  }
  return fast_bodies_scalar();
}

// This thread's scratch, grown (never shrunk) to `floats`; allocated once per thread in practice.
float* thread_scratch(std::size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

RowSource source(const TensorView& t, std::int64_t offset, std::int64_t row_stride, std::int64_t head_stride = 0) {
  return RowSource{t.data, t.dtype, offset, row_stride, head_stride};
}

int thread_count(const Target& target) { return std::max(1, target.threads); }

}  // namespace

const FastBodies& selected_fast_bodies() { return bodies_for(simd::selected_isa()); }

void fast_decode(const DecodePlan& plan, const DecodeTensors& t, Workspace workspace) {
  const DecodeProblem& p = plan.problem;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  const WorkPartition& part = plan.partition;
  const std::int64_t G = p.group_size(), d = p.head_dim, H = p.num_heads, KH = p.kv_heads;
  if (!(part.rows_per_block == G && part.sequence_splits >= 1 && part.keys_per_split >= 1 && part.tile_size >= 1))
    fail("cpu::decode", "the plan's split_kv_decode partition does not pack the GQA group of " + std::to_string(G),
         "plan with plan_decode(problem, cpu_target())");
  const FastBodies& bodies = selected_fast_bodies();
  const std::int64_t splits = part.sequence_splits, keys_per_split = part.keys_per_split, tile = part.tile_size;
  const std::int64_t rows = p.batch * H;
  const std::int64_t units = p.batch * KH;
  const std::int64_t tasks = units * splits;

  float* state_out = nullptr;
  float* state_lse = nullptr;
  std::int32_t* splits_done = nullptr;  // per (sequence, KV head)
  if (splits > 1) {
    const std::size_t floats = static_cast<std::size_t>(splits * rows * (d + 1));
    // cpu::decode has checked the workspace against the plan; this guards the layout used here
    // (the plan's (head_dim + 2) floats per state row leave room for the counters).
    if (!(workspace.data != nullptr &&
          workspace.bytes >= floats * sizeof(float) + static_cast<std::size_t>(units) * sizeof(std::int32_t)))
      fail("cpu::decode", "the workspace is smaller than the split states need",
           "pass plan.evidence.workspace_bytes bytes of workspace");
    if (!(reinterpret_cast<std::uintptr_t>(workspace.data) % alignof(float) == 0))
      fail("cpu::decode", "the workspace is not aligned to 4 bytes (it holds f32 split states)",
           "pass a workspace from malloc, new or a std::vector (any of them is aligned enough)");
    state_out = static_cast<float*>(workspace.data);
    state_lse = state_out + splits * rows * d;
    splits_done = reinterpret_cast<std::int32_t*>(state_lse + splits * rows);
    std::fill(splits_done, splits_done + units, 0);
  }
  // Merge: out = sum_s e^{lse_s - M} o_s / sum_s e^{lse_s - M}; empty splits carry -inf.
  auto merge_row = [&](std::int64_t row, float* merged) {
    float m = kNegInf;
    for (std::int64_t s = 0; s < splits; ++s) m = std::max(m, state_lse[s * rows + row]);
    float total = 0.0f;
    std::fill(merged, merged + d, 0.0f);
    if (m != kNegInf) {
      for (std::int64_t s = 0; s < splits; ++s) {
        const float w = std::exp(state_lse[s * rows + row] - m);
        if (w == 0.0f) continue;
        total += w;
        const float* o = state_out + (s * rows + row) * d;
        for (std::int64_t c = 0; c < d; ++c) merged[c] += w * o[c];
      }
      for (std::int64_t c = 0; c < d; ++c) merged[c] /= total;
    }
    const std::int64_t b = row / H, h = row % H;
    float lse = m == kNegInf ? kNegInf : m + std::log(total);
    if (sinks) attnkit::detail::fold_sink_into_row(merged, d, &lse, sinks[h]);
    store_row(t.out.data, t.out.dtype, b * t.out.strides[0] + h * t.out.strides[1], d, merged);
    if (!t.lse.empty()) static_cast<float*>(t.lse.data)[b * t.lse.strides[0] + h * t.lse.strides[1]] = lse;
  };
  const std::size_t body_floats = bodies.decode_scratch_floats(d, G, tile);
  const std::size_t staging_floats = static_cast<std::size_t>(G * d + G);

#pragma omp parallel num_threads(thread_count(plan.target))
  {
    float* scratch = thread_scratch(body_floats + staging_floats);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t split = task % splits, unit = task / splits;
      const std::int64_t b = unit / KH, kvh = unit % KH;
      const std::int64_t len = index_at(t.lengths, b);
      const KeyRange range = decode_keys(len, p.options.window, t.key_starts.empty() ? 0 : index_at(t.key_starts, b));
      // Left padding (unknown to the plan): the real keys over all the planned splits, so none idles.
      const std::int64_t even = ((range.size() + splits - 1) / splits + tile - 1) / tile * tile;
      const std::int64_t per_split =
          t.key_starts.empty() || splits == 1 ? keys_per_split : std::min(keys_per_split, std::max(even, tile));
      const std::int64_t begin = std::min(range.end, range.begin + split * per_split);
      const std::int64_t end = std::min(range.end, begin + per_split);
      const std::int64_t first_row = b * H + kvh * G;

      DecodeTask task_args;
      task_args.head_dim = d;
      task_args.group = G;
      task_args.tile = tile;
      task_args.scale = p.effective_scale() * t.kv_scales.k;
      task_args.out_scale = t.kv_scales.v;
      task_args.softcap = p.options.softcap;
      task_args.q = source(t.q, b * t.q.strides[0] + kvh * G * t.q.strides[1], 0, t.q.strides[1]);
      task_args.k = source(t.k_cache, b * t.k_cache.strides[0] + kvh * t.k_cache.strides[1], t.k_cache.strides[2]);
      task_args.v = source(t.v_cache, b * t.v_cache.strides[0] + kvh * t.v_cache.strides[1], t.v_cache.strides[2]);
      task_args.key_begin = begin;
      task_args.key_end = end;
      task_args.pipelined = part.pipeline_stages == 2;
      task_args.l1_prefetch = part.cpu_l1_prefetch;
      task_args.scratch = scratch + staging_floats;
      if (splits > 1) {
        task_args.out = state_out + (split * rows + first_row) * d;
        task_args.out_stride = d;
        task_args.lse = state_lse + split * rows + first_row;
        bodies.decode(task_args);
        // acq_rel: this split's states are published, and the last split sees every other one's.
        if (std::atomic_ref<std::int32_t>(splits_done[unit]).fetch_add(1, std::memory_order_acq_rel) == splits - 1) {
          for (std::int64_t g = 0; g < G; ++g) merge_row(first_row + g, scratch);
        }
        continue;
      }
      task_args.out = scratch;
      task_args.out_stride = d;
      task_args.lse = scratch + G * d;
      bodies.decode(task_args);
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t h = kvh * G + g;
        if (sinks) attnkit::detail::fold_sink_into_row(scratch + g * d, d, &task_args.lse[g], sinks[h]);
        store_row(t.out.data, t.out.dtype, b * t.out.strides[0] + h * t.out.strides[1], d, scratch + g * d);
        if (!t.lse.empty()) static_cast<float*>(t.lse.data)[b * t.lse.strides[0] + h * t.lse.strides[1]] = task_args.lse[g];
      }
    }
  }
}

void fast_prefill(const PrefillPlan& plan, const PrefillTensors& t, Workspace) {
  const PrefillProblem& p = plan.problem;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  const WorkPartition& part = plan.partition;
  const std::int64_t G = p.group_size(), d = p.head_dim, KH = p.kv_heads;
  if (!(part.sequence_splits == 1 && part.rows_per_block >= 1 && part.tile_size >= 1))
    fail("cpu::prefill", "the plan's cooperative_tiled partition splits keys, which the CPU prefill kernel does not do",
         "plan with plan_prefill(problem, cpu_target())");
  const FastBodies& bodies = selected_fast_bodies();
  const std::int64_t block_rows = part.rows_per_block, tile = part.tile_size;
  const bool ragged = !t.cu_seqlens_q.empty();

  // Row blocks of every sequence, the costliest (latest causal rows) first.
  struct Block {
    std::int64_t b, first_row, rows, lq, lk, q0, k0;
  };
  std::vector<Block> blocks;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t q0 = ragged ? index_at(t.cu_seqlens_q, b) : 0;
    const std::int64_t k0 = ragged ? index_at(t.cu_seqlens_k, b) : 0;
    const std::int64_t lq = ragged ? index_at(t.cu_seqlens_q, b + 1) - q0 : p.q_len;
    const std::int64_t lk = ragged ? index_at(t.cu_seqlens_k, b + 1) - k0 : p.kv_len;
    for (std::int64_t r = 0; r < lq; r += block_rows) blocks.push_back({b, r, std::min(block_rows, lq - r), lq, lk, q0, k0});
  }
  if (p.causal) {
    std::stable_sort(blocks.begin(), blocks.end(), [](const Block& x, const Block& y) {
      return x.first_row + x.rows + (x.lk - x.lq) > y.first_row + y.rows + (y.lk - y.lq);
    });
  }
  const std::int64_t tasks = static_cast<std::int64_t>(blocks.size()) * KH;
  const std::size_t body_floats = bodies.prefill_scratch_floats(d, G, block_rows, tile);

#pragma omp parallel num_threads(thread_count(plan.target))
  {
    float* scratch = thread_scratch(body_floats);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const Block& blk = blocks[static_cast<std::size_t>(task / KH)];
      const std::int64_t kvh = task % KH;
      const std::int64_t tb = ragged ? 0 : blk.b;
      const std::int64_t row0 = blk.q0 + blk.first_row;

      PrefillTask a;
      a.head_dim = d;
      a.group = G;
      a.rows = blk.rows;
      a.block_rows = block_rows;
      a.tile = tile;
      a.scale = p.effective_scale();
      a.softcap = p.options.softcap;
      a.causal = p.causal;
      a.window = p.options.window;
      a.kv_len = blk.lk;
      a.first_position = blk.first_row + (blk.lk - blk.lq);
      a.q = source(t.q, tb * t.q.strides[0] + kvh * G * t.q.strides[1] + row0 * t.q.strides[2], t.q.strides[2],
                   t.q.strides[1]);
      a.k = source(t.k, tb * t.k.strides[0] + kvh * t.k.strides[1] + blk.k0 * t.k.strides[2], t.k.strides[2]);
      a.v = source(t.v, tb * t.v.strides[0] + kvh * t.v.strides[1] + blk.k0 * t.v.strides[2], t.v.strides[2]);
      // Rows go straight to the output tensor, converted by the body (no f32 staging pass).
      a.out = RowSink{t.out.data, t.out.dtype, tb * t.out.strides[0] + kvh * G * t.out.strides[1] + row0 * t.out.strides[2],
                      t.out.strides[2], t.out.strides[1]};
      if (!t.lse.empty()) {
        a.lse = LseSink{static_cast<float*>(t.lse.data),
                        tb * t.lse.strides[0] + kvh * G * t.lse.strides[1] + row0 * t.lse.strides[2], t.lse.strides[2],
                        t.lse.strides[1]};
      }
      a.sink_logits = sinks ? sinks + kvh * G : nullptr;
      a.scratch = scratch;
      bodies.prefill(a);
    }
  }
}

}  // namespace attnkit::cpu::detail
