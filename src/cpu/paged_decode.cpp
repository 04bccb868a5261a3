// Paged decode on the CPU: one new query per sequence against its keys in a page pool.
// Inputs: validated views; q/out [batch, num_heads, head_dim]; K/V pools in HND or NHD
//   (paged.hpp); i32 page table [batch, max_pages_per_seq] and lengths [batch], on the host.
// Parallelism: the plan's tasks, (sequence, KV head, key split), on OpenMP threads, dynamic
//   scheduling. A task packs the GQA group and runs the fast decode body (fast_body.hpp) on its
//   keys. Where the plan reads pages in place (gather_keys 0: every tile inside one page, or made
//   of whole pages that the body walks page by page), the body reads the rows from the pool
//   itself, one call per task from the task's first tile boundary on, as on a contiguous cache (a
//   window's first keys before it are gathered first).
//   Otherwise the task walks its keys in chunks of plan.gather_keys: gather the chunk's K and V
//   rows from their pages into L2-resident staging, run the body on it, merge the chunk's state
//   into the task's running state.
//   Split states go to the caller's workspace ([splits][rows][head_dim] then [splits][rows]) and
//   one parallel pass merges them, as the contiguous kernel does.
// Bound: memory (K/V read once per KV head from DRAM; gathered chunks once more from L2).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <omp.h>

#include "attnkit/cpu.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "common/attention_sinks.hpp"
#include "cpu/paged_rows.hpp"
#include "cpu/row_io.hpp"
#include "plan/rules.hpp"

namespace attnkit::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void require_cpu_plan(const Target& target, const char* context) {
  if (target.backend != Backend::kCpu)
    fail(context, "the plan was made for the cuda backend",
         "plan with cpu_target() to run on the CPU, or call cuda::paged_decode");
}

}  // namespace

void paged_decode(const PagedDecodePlan& plan, const PagedDecodeTensors& t, Workspace workspace) {
  const char* ctx = "cpu::paged_decode";
  require_cpu_plan(plan.target, ctx);
  validate_paged_decode(plan.problem, t, DeviceKind::kCpu);
  validate_workspace(workspace, plan.evidence.workspace_bytes, DeviceKind::kCpu);
  const PagedDecodeProblem& p = plan.problem;
  const WorkPartition& part = plan.partition;
  const std::int64_t G = p.group_size(), d = p.head_dim, H = p.num_heads, KH = p.kv_heads;
  const bool in_place = plan.gather_keys == 0;
  const std::int64_t page = p.cache.page_size;
  if (!(part.family == KernelFamily::kSplitKvDecode && part.rows_per_block == G && part.sequence_splits >= 1 &&
        part.keys_per_split >= 1 && part.tile_size >= 1 &&
        (in_place ? attnkit::detail::cpu_reads_pages_in_place(page, part.tile_size) : plan.gather_keys >= part.tile_size)))
    fail(ctx, "the plan's partition is not a CPU split_kv_decode over the GQA group of " + std::to_string(G) +
                  (in_place ? " whose tiles nest in the pages or span whole pages of 16 keys or more" : ""),
         "plan with plan_paged_decode(problem, cpu_target())");
  const detail::FastBodies& bodies = detail::paged_bodies();
  const std::int64_t splits = part.sequence_splits, keys_per_split = part.keys_per_split;
  const float* sinks = static_cast<const float*>(t.sinks.data);  // [num_heads] or null
  // In place, only a task's keys before its first tile boundary are gathered: less than a tile.
  const std::int64_t tile = part.tile_size, chunk = in_place ? tile : plan.gather_keys;
  const std::int64_t rows = p.batch * H, tasks = p.batch * KH * splits;

  float* state_out = nullptr;
  float* state_lse = nullptr;
  if (splits > 1) {
    const std::size_t floats = static_cast<std::size_t>(splits * rows * (d + 1));
    if (!(workspace.data != nullptr && workspace.bytes >= floats * sizeof(float)))
      fail(ctx, "the workspace is smaller than the split states need", "pass plan.bounds.workspace_bytes bytes");
    state_out = static_cast<float*>(workspace.data);
    state_lse = state_out + splits * rows * d;
  }
  const std::size_t stage_bytes = static_cast<std::size_t>(chunk * d) * dtype_size(p.kv_dtype);
  const std::size_t stage_floats = detail::floats_for_bytes(stage_bytes);
  const std::size_t state_floats = static_cast<std::size_t>(G * d + G);  // one (out, lse) set
  const std::size_t body_floats = bodies.decode_scratch_floats(d, G, tile);
  const PageLayout layout = p.cache.layout;

#pragma omp parallel num_threads(std::max(1, plan.target.threads))
  {
    float* scratch = detail::paged_thread_scratch(2 * stage_floats + 2 * state_floats + body_floats);
    float* stage_k = scratch;
    float* stage_v = stage_k + stage_floats;
    float* run = stage_v + stage_floats;  // running state: out [G][d], then lse [G]
    float* part_state = run + state_floats;
    float* body_scratch = part_state + state_floats;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t split = task % splits, unit = task / splits;
      const std::int64_t b = unit / KH, kvh = unit % KH;
      const std::int64_t len = detail::index_at(t.cache.lengths, b);
      const KeyRange range = visible_keys(len - 1, len, true, p.options.window);
      const std::int64_t begin = std::min(range.end, range.begin + split * keys_per_split);
      const std::int64_t end = split == splits - 1 ? range.end : std::min(range.end, begin + keys_per_split);
      const detail::PagedRows keys(t.cache.k_pages, layout, t.cache.page_table, b, kvh);
      const detail::PagedRows values(t.cache.v_pages, layout, t.cache.page_table, b, kvh);

      std::fill(run, run + G * d, 0.0f);
      std::fill(run + G * d, run + G * d + G, kNegInf);
      detail::DecodeTask a;
      a.head_dim = d;
      a.group = G;
      a.tile = tile;
      a.scale = p.effective_scale() * t.kv_scales.k;  // an e4m3 pool's scales (1 otherwise), as decode's
      a.out_scale = t.kv_scales.v;
      a.softcap = p.options.softcap;
      a.l1_prefetch = part.cpu_l1_prefetch;
      a.q = detail::RowSource{t.q.data, t.q.dtype, b * t.q.strides[0] + kvh * G * t.q.strides[1], 0, t.q.strides[1]};
      a.out_stride = d;
      a.scratch = body_scratch;
      // The first body call writes the running state directly, later ones are merged into it (an
      // empty range keeps the zeros and -inf set above).
      bool first = true;
      auto attend = [&] {
        a.out = first ? run : part_state;
        a.lse = first ? run + G * d : part_state + G * d;
        bodies.decode(a);
        if (!first) detail::merge_partial(G, d, part_state, d, part_state + G * d, run, d, run + G * d);
        first = false;
      };
      // Gathered: every key, or in place only the keys before the first tile boundary (a window's
      // start); the rest in place, tiles from that boundary on.
      const std::int64_t gathered_end = in_place ? std::min(end, (begin + tile - 1) / tile * tile) : end;
      for (std::int64_t c0 = begin; c0 < gathered_end; c0 += chunk) {
        const std::int64_t n = std::min(chunk, gathered_end - c0);
        keys.gather(c0, n, stage_k);
        values.gather(c0, n, stage_v);
        a.k = detail::RowSource{stage_k, p.kv_dtype, 0, d, 0};
        a.v = detail::RowSource{stage_v, p.kv_dtype, 0, d, 0};
        a.key_begin = 0;
        a.key_end = n;
        attend();
      }
      if (gathered_end < end) {
        a.k = keys.in_place(p.kv_dtype);
        a.v = values.in_place(p.kv_dtype);
        a.key_begin = gathered_end;
        a.key_end = end;
        attend();
      }
      const std::int64_t first_row = b * H + kvh * G;
      if (splits > 1) {
        std::copy(run, run + G * d, state_out + (split * rows + first_row) * d);
        std::copy(run + G * d, run + G * d + G, state_lse + split * rows + first_row);
        continue;
      }
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t h = kvh * G + g;
        if (sinks) attnkit::detail::fold_sink_into_row(run + g * d, d, &run[G * d + g], sinks[h]);
        detail::store_row(t.out.data, t.out.dtype, b * t.out.strides[0] + h * t.out.strides[1], d, run + g * d);
        if (!t.lse.empty()) static_cast<float*>(t.lse.data)[b * t.lse.strides[0] + h * t.lse.strides[1]] = run[G * d + g];
      }
    }
    if (splits > 1) {
#pragma omp for schedule(static)
      for (std::int64_t row = 0; row < rows; ++row) {
        float* merged = run;
        float* merged_lse = run + d;
        std::fill(merged, merged + d, 0.0f);
        *merged_lse = kNegInf;
        for (std::int64_t s = 0; s < splits; ++s) {
          detail::merge_partial(1, d, state_out + (s * rows + row) * d, d, state_lse + s * rows + row, merged, d,
                                merged_lse);
        }
        const std::int64_t b = row / H, h = row % H;
        if (sinks) attnkit::detail::fold_sink_into_row(merged, d, merged_lse, sinks[h]);
        detail::store_row(t.out.data, t.out.dtype, b * t.out.strides[0] + h * t.out.strides[1], d, merged);
        if (!t.lse.empty()) static_cast<float*>(t.lse.data)[b * t.lse.strides[0] + h * t.lse.strides[1]] = *merged_lse;
      }
    }
  }
}

}  // namespace attnkit::cpu
