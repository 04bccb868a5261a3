// Extend on the CPU: q_len_b new query rows per sequence (ragged, cu_seqlens_q) against the
// sequence's keys in a page pool, causal bottom-right (row i at position length - q_len_b + i).
// Inputs: validated views; q/out [rows, num_heads, head_dim] token-major; K/V pools in HND or NHD;
//   i32 cu_seqlens_q [batch + 1], page table [batch, max_pages_per_seq], lengths [batch], on the host.
// Parallelism: tasks (sequence, KV head, block of rows_per_block query rows, key split) on OpenMP
//   threads, the costliest blocks first. A task packs the GQA group for its row block and walks the
//   union of its rows' visible keys in chunks of plan.gather_keys: gather K and V from the pages
//   (an e4m3 pool's rows widened to f16, exact), run the fast prefill body (fast_body.hpp) with
//   positions shifted to the chunk, merge the chunk's state. An e4m3 pool's K scale joins the score
//   scale, its V scale multiplies each finished row (states are linear in V). Keys are split
//   (plan.partition.sequence_splits) when the row blocks alone leave threads idle; split states go
//   to the workspace ([splits][rows x heads][head_dim], then LSE).
// Bound: FMA for long q_len; memory (K/V streamed once per row block) for decode-like q_len.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <omp.h>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "common/attention_sinks.hpp"
#include "cpu/paged_rows.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct RowBlock {
  std::int64_t b, first, rows, q_len, len, row0;  // rows [first, first + rows) of sequence b
  std::int64_t lo, hi;                             // union of the rows' visible keys
};

}  // namespace

void extend(const ExtendPlan& plan, const ExtendTensors& t, Workspace workspace) {
  const char* ctx = "cpu::extend";
  if (plan.target.backend != Backend::kCpu)
    fail(ctx, "the plan was made for the cuda backend",
         "plan with cpu_target() to run on the CPU, or call cuda::extend");
  validate_extend(plan.problem, t, DeviceKind::kCpu);
  validate_workspace(workspace, plan.evidence.workspace_bytes, DeviceKind::kCpu);
  const ExtendProblem& p = plan.problem;
  const WorkPartition& part = plan.partition;
  const std::int64_t G = p.group_size(), d = p.head_dim, H = p.num_heads, KH = p.kv_heads;
  if (!(part.family == KernelFamily::kCooperativeTiled && part.rows_per_block >= 1 && part.tile_size >= 1 &&
        part.sequence_splits >= 1 && part.keys_per_split >= 1 && plan.gather_keys >= part.tile_size))
    fail(ctx, "the plan's partition is not a CPU cooperative_tiled extend partition",
         "plan with plan_extend(problem, cpu_target())");
  const detail::FastBodies& bodies = detail::paged_bodies();
  const std::int64_t R = part.rows_per_block, tile = part.tile_size, chunk = plan.gather_keys;
  const std::int64_t splits = part.sequence_splits, keys_per_split = part.keys_per_split;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  const std::int64_t total_rows = detail::index_at(t.cu_seqlens_q, p.batch);
  const std::int64_t state_rows = total_rows * H;

  float* state_out = nullptr;
  float* state_lse = nullptr;
  if (splits > 1) {
    const std::size_t floats = static_cast<std::size_t>(splits * state_rows * (d + 1));
    if (!(workspace.data != nullptr && workspace.bytes >= floats * sizeof(float)))
      fail(ctx, "the workspace is smaller than the split states need", "pass plan.bounds.workspace_bytes bytes");
    state_out = static_cast<float*>(workspace.data);
    state_lse = state_out + splits * state_rows * d;
  }

  // Row blocks, costliest first. This host vector is the one allocation of a run (the block list);
  // the CUDA kernel derives blocks from the offsets on the device instead.
  std::vector<RowBlock> blocks;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t row0 = detail::index_at(t.cu_seqlens_q, b);
    const std::int64_t q_len = detail::index_at(t.cu_seqlens_q, b + 1) - row0;
    const std::int64_t len = detail::index_at(t.cache.lengths, b);
    for (std::int64_t r = 0; r < q_len; r += R) {
      const std::int64_t rows = std::min(R, q_len - r);
      const std::int64_t pos = len - q_len + r;
      const std::int64_t lo = visible_keys(pos, len, true, p.options.window).begin;
      const std::int64_t hi = visible_keys(pos + rows - 1, len, true, p.options.window).end;
      blocks.push_back({b, r, rows, q_len, len, row0, lo, hi});
    }
  }
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const RowBlock& x, const RowBlock& y) { return x.hi - x.lo > y.hi - y.lo; });
  const std::int64_t tasks = static_cast<std::int64_t>(blocks.size()) * KH * splits;

  const bool widen = is_fp8(p.kv_dtype);
  const DType stage_dtype = widen ? DType::kF16 : p.kv_dtype;
  const float v_scale = t.kv_scales.v;  // 1 unless the pool is e4m3
  const std::size_t stage_floats =
      detail::floats_for_bytes(static_cast<std::size_t>(chunk * d) * dtype_size(stage_dtype));
  const std::size_t state_floats = static_cast<std::size_t>(G * R * (d + 1));
  const std::size_t body_floats = bodies.prefill_scratch_floats(d, G, R, tile);
  const PageLayout layout = p.cache.layout;

#pragma omp parallel num_threads(std::max(1, plan.target.threads))
  {
    float* scratch = detail::paged_thread_scratch(2 * stage_floats + 2 * state_floats + body_floats + d + 1);
    float* stage_k = scratch;
    float* stage_v = stage_k + stage_floats;
    float* run = stage_v + stage_floats;  // out [G][R][d], then lse [G][R]
    float* part_state = run + state_floats;
    float* body_scratch = part_state + state_floats;
    float* merged = body_scratch + body_floats;  // d + 1 floats for the split merge
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t split = task % splits, unit = task / splits;
      const RowBlock& blk = blocks[static_cast<std::size_t>(unit / KH)];
      const std::int64_t kvh = unit % KH;
      const std::int64_t begin = std::min(blk.hi, blk.lo + split * keys_per_split);
      const std::int64_t end = split == splits - 1 ? blk.hi : std::min(blk.hi, begin + keys_per_split);
      const detail::PagedRows keys(t.cache.k_pages, layout, t.cache.page_table, blk.b, kvh);
      const detail::PagedRows values(t.cache.v_pages, layout, t.cache.page_table, blk.b, kvh);
      const std::int64_t first_position = blk.len - blk.q_len + blk.first;
      const std::int64_t first_row = blk.row0 + blk.first;  // packed row of the block's first query

      float* run_lse = run + G * R * d;
      std::fill(run, run + G * R * d, 0.0f);
      std::fill(run_lse, run_lse + G * R, kNegInf);
      detail::PrefillTask a;
      a.head_dim = d;
      a.group = G;
      a.rows = blk.rows;
      a.block_rows = R;
      a.tile = tile;
      a.scale = p.effective_scale() * t.kv_scales.k;
      a.softcap = p.options.softcap;
      a.causal = true;
      a.window = p.options.window;
      a.q = detail::RowSource{t.q.data, t.q.dtype, first_row * t.q.strides[0] + kvh * G * t.q.strides[1],
                              t.q.strides[0], t.q.strides[1]};
      a.k = detail::RowSource{stage_k, stage_dtype, 0, d, 0};
      a.v = detail::RowSource{stage_v, stage_dtype, 0, d, 0};
      a.scratch = body_scratch;
      for (std::int64_t c0 = begin; c0 < end; c0 += chunk) {
        const std::int64_t n = std::min(chunk, end - c0);
        keys.gather(c0, n, stage_k, widen);
        values.gather(c0, n, stage_v, widen);
        // The chunk is keys [c0, c0 + n): positions shift by c0 so the body's masks stay exact.
        a.kv_len = n;
        a.first_position = first_position - c0;
        const bool first = c0 == begin;
        a.out = detail::RowSink{first ? run : part_state, DType::kF32, 0, d, R * d};  // [group][R][d] f32
        a.lse = detail::LseSink{first ? run_lse : part_state + G * R * d, 0, 1, R};
        bodies.prefill(a);
        if (!first) {
          for (std::int64_t g = 0; g < G; ++g) {
            detail::merge_partial(blk.rows, d, part_state + g * R * d, d, part_state + G * R * d + g * R,
                                  run + g * R * d, d, run_lse + g * R);
          }
        }
      }
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t h = kvh * G + g;
        for (std::int64_t i = 0; i < blk.rows; ++i) {
          const std::int64_t row = first_row + i;
          float* o = run + (g * R + i) * d;
          float lse = run_lse[g * R + i];
          if (v_scale != 1.0f) std::transform(o, o + d, o, [&](float x) { return x * v_scale; });
          if (splits > 1) {
            std::copy(o, o + d, state_out + (split * state_rows + row * H + h) * d);
            state_lse[split * state_rows + row * H + h] = lse;
            continue;
          }
          if (sinks) attnkit::detail::fold_sink_into_row(o, d, &lse, sinks[h]);
          detail::store_row(t.out.data, t.out.dtype, row * t.out.strides[0] + h * t.out.strides[1], d, o);
          if (!t.lse.empty()) static_cast<float*>(t.lse.data)[row * t.lse.strides[0] + h * t.lse.strides[1]] = lse;
        }
      }
    }
    if (splits > 1) {
#pragma omp for schedule(static)
      for (std::int64_t sr = 0; sr < state_rows; ++sr) {
        std::fill(merged, merged + d, 0.0f);
        merged[d] = kNegInf;
        for (std::int64_t s = 0; s < splits; ++s) {
          detail::merge_partial(1, d, state_out + (s * state_rows + sr) * d, d, state_lse + s * state_rows + sr, merged,
                                d, merged + d);
        }
        const std::int64_t row = sr / H, h = sr % H;
        if (sinks) attnkit::detail::fold_sink_into_row(merged, d, merged + d, sinks[h]);
        detail::store_row(t.out.data, t.out.dtype, row * t.out.strides[0] + h * t.out.strides[1], d, merged);
        if (!t.lse.empty()) static_cast<float*>(t.lse.data)[row * t.lse.strides[0] + h * t.lse.strides[1]] = merged[d];
      }
    }
  }
}

}  // namespace attnkit::cpu
