// Plans as text: an aligned two-column table for people, JSON (stable snake_case keys mirroring
// the structs in plan.hpp) for the CLI, the benchmarks and the Python package.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/plan.hpp"

namespace attnkit {

std::string to_string(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

std::string to_string(KernelFamily f) {
  switch (f) {
    case KernelFamily::kScalarOnline: return "scalar_online";
    case KernelFamily::kCooperativeTiled: return "cooperative_tiled";
    case KernelFamily::kSplitKvDecode: return "split_kv_decode";
    case KernelFamily::kWarpSpecializedWgmma: return "warp_specialized_wgmma";
  }
  return "unknown";
}

namespace {

using json = nlohmann::json;
using Rows = std::vector<std::pair<std::string, std::string>>;

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Decimal units, as bandwidths are quoted (TB/s).
std::string si(double v, const char* unit) {
  static const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (v >= 1000.0 && i < 6) {
    v /= 1000.0;
    ++i;
  }
  return (i == 0 ? format("%.0f", v) : format("%.1f", v)) + " " + prefixes[i] + unit;
}
std::string bytes(std::uint64_t b) { return si(static_cast<double>(b), "B"); }
std::string flops(std::uint64_t f) { return si(static_cast<double>(f), "FLOP"); }

std::string seconds(double s) {
  if (s <= 0) return "unknown (no peak for this target)";
  if (s < 1e-3) return format("%.2f us", s * 1e6);
  if (s < 1) return format("%.3f ms", s * 1e3);
  return format("%.3f s", s);
}

std::string table(const Rows& rows) {
  std::size_t width = 0;
  for (const auto& [key, value] : rows) width = std::max(width, key.size());
  std::string out;
  for (const auto& [key, value] : rows) {
    out += key;
    out.append(width + 2 - key.size(), ' ');
    out += value + "\n";
  }
  return out;
}

std::string options_text(const AttentionOptions& o, float effective_scale) {
  std::string text = "scale " + format("%.6g", effective_scale);
  text += o.window > 0 ? ", window " + std::to_string(o.window) : ", no window";
  if (o.softcap > 0) text += ", softcap " + format("%g", o.softcap);
  return text;
}

void add_target(Rows& rows, const Target& t) {
  std::string text = to_string(t.backend) + " \"" + t.name + "\"";
  if (t.backend == Backend::kCpu) {
    text += ", " + std::to_string(t.threads) + " threads";
    // The facts the CPU rules key on besides sizes (decode tiles, AMX prefill tiles).
    text += ", " + std::to_string(t.cpu_vector_lanes) + "-lane vectors";
    if (t.cpu_intel_cores) text += ", Intel cores";
    if (t.cpu_matrix_tiles) text += ", AMX tiles";
  } else {
    text += ", " + std::to_string(t.sm_count) + " SMs, sm_" + std::to_string(t.cc_major) + std::to_string(t.cc_minor);
  }
  text += ", cache " + bytes(static_cast<std::uint64_t>(t.cache_bytes));
  if (t.peak_read_bytes_per_s > 0) text += ", peak read " + si(t.peak_read_bytes_per_s, "B/s");
  rows.emplace_back("target", text);
}

// backend: which backend's flags apply (the L2 policy is CUDA's, the L1 prefetch the CPU's); seed
// 004's work plan has none.
void add_partition(Rows& rows, const WorkPartition& p, const Backend* backend = nullptr) {
  rows.emplace_back("family", to_string(p.family));
  rows.emplace_back("tiles", std::to_string(p.tile_count) + " of " + std::to_string(p.tile_size) + " keys");
  rows.emplace_back("sequence splits", std::to_string(p.sequence_splits) + " (" + std::to_string(p.tiles_per_split) +
                                           " tiles, " + std::to_string(p.keys_per_split) + " keys per split)");
  rows.emplace_back("rows per block", std::to_string(p.rows_per_block));
  rows.emplace_back("blocks per row", std::to_string(p.workgroups_per_row));
  rows.emplace_back("lanes per block", std::to_string(p.workgroup_lanes) + " (" + std::to_string(p.warps_per_block) +
                                           " warps of " + std::to_string(p.warp_lanes) + ")");
  rows.emplace_back("grid", std::to_string(p.grid_blocks) + " blocks");
  rows.emplace_back("pipeline stages", std::to_string(p.pipeline_stages));
  if (p.merge_cluster > 1) {
    rows.emplace_back("split merge", "in clusters of " + std::to_string(p.merge_cluster) + " blocks (distributed shared memory)");
  }
  if (p.family == KernelFamily::kSplitKvDecode) {
    if (backend != nullptr && *backend == Backend::kCuda) {
      rows.emplace_back("K/V L2 policy", p.kv_evict_first ? "evict first" : "evict normal");
    }
    if (p.resident_blocks > 0) rows.emplace_back("blocks per SM", std::to_string(p.resident_blocks));
    if (backend != nullptr && *backend == Backend::kCpu && !p.cpu_l1_prefetch) {
      rows.emplace_back("L1 prefetch", "none (rows come from the L2 stream)");
    }
  }
  if (p.family == KernelFamily::kWarpSpecializedWgmma) {
    rows.emplace_back("persistent walk", std::to_string(p.tiles_per_unit) + " query tile(s) per unit, groups of " +
                                             std::to_string(p.heads_per_tile_group) + " (sequence, head) pairs" +
                                             (p.tail_pairs > 0 ? ", the last " + std::to_string(p.tail_pairs) +
                                                                     " pairs as single tiles longest first"
                                                               : std::string()) +
                                             (p.packed_heads > 1 ? ", " + std::to_string(p.packed_heads) +
                                                                       " GQA heads packed per tile"
                                                                 : std::string()));
  }
  rows.emplace_back("scratch (elements)", "q " + std::to_string(p.q_scratch_elements) + ", scores " +
                                              std::to_string(p.score_scratch_elements) + ", o acc " +
                                              std::to_string(p.o_acc_scratch_elements) + ", split reduce " +
                                              std::to_string(p.split_reduce_scratch_elements));
}

void add_evidence(Rows& rows, const Evidence& e) {
  rows.emplace_back("global read", bytes(e.traffic.global_read_bytes));
  rows.emplace_back("global write", bytes(e.traffic.global_write_bytes));
  rows.emplace_back("shared per block", bytes(e.traffic.shared_memory_bytes));
  rows.emplace_back("workspace", bytes(e.workspace_bytes));
  rows.emplace_back("matmul", flops(e.matmul_flops));
  rows.emplace_back("non-matmul", flops(e.non_matmul_flops));
  rows.emplace_back("occupancy proxy", format("%.2f%%", e.occupancy_proxy_bps / 100.0));
  rows.emplace_back("tolerance", "max-abs " + format("%g", e.output_tolerance_abs) + ", rel-L2 " +
                                     format("%g", e.rel_l2_tolerance));
  rows.emplace_back("predicted time", seconds(e.predicted_seconds));
}

void add_reasons(Rows& rows, const std::vector<std::string>& reasons) {
  for (std::size_t i = 0; i < reasons.size(); ++i) rows.emplace_back(i == 0 ? "reasons" : "", reasons[i]);
}

json target_json(const Target& t) {
  return {{"backend", to_string(t.backend)},
          {"name", t.name},
          {"threads", t.threads},
          {"cache_bytes", t.cache_bytes},
          {"sm_count", t.sm_count},
          {"cc_major", t.cc_major},
          {"cc_minor", t.cc_minor},
          {"shared_bytes_per_block", t.shared_bytes_per_block},
          {"shared_bytes_per_sm", t.shared_bytes_per_sm},
          {"max_threads_per_sm", t.max_threads_per_sm},
          {"peak_read_bytes_per_s", t.peak_read_bytes_per_s},
          {"peak_matmul_flops_per_s", t.peak_matmul_flops_per_s},
          {"cpu_intel_cores", t.cpu_intel_cores},
          {"cpu_matrix_tiles", t.cpu_matrix_tiles},
          {"cpu_vector_lanes", t.cpu_vector_lanes}};
}

json partition_json(const WorkPartition& p) {
  return {{"family", to_string(p.family)},
          {"tile_size", p.tile_size},
          {"tile_count", p.tile_count},
          {"sequence_splits", p.sequence_splits},
          {"tiles_per_split", p.tiles_per_split},
          {"keys_per_split", p.keys_per_split},
          {"rows_per_block", p.rows_per_block},
          {"workgroups_per_row", p.workgroups_per_row},
          {"workgroup_lanes", p.workgroup_lanes},
          {"warp_lanes", p.warp_lanes},
          {"warps_per_block", p.warps_per_block},
          {"q_scratch_elements", p.q_scratch_elements},
          {"score_scratch_elements", p.score_scratch_elements},
          {"o_acc_scratch_elements", p.o_acc_scratch_elements},
          {"split_reduce_scratch_elements", p.split_reduce_scratch_elements},
          {"grid_blocks", p.grid_blocks},
          {"pipeline_stages", p.pipeline_stages},
          {"heads_per_tile_group", p.heads_per_tile_group},
          {"tiles_per_unit", p.tiles_per_unit},
          {"tail_pairs", p.tail_pairs},
          {"packed_heads", p.packed_heads},
          {"merge_cluster", p.merge_cluster},
          {"kv_evict_first", p.kv_evict_first},
          {"resident_blocks", p.resident_blocks},
          {"cpu_l1_prefetch", p.cpu_l1_prefetch}};
}

json evidence_json(const Evidence& e) {
  return {{"traffic",
           {{"global_read_bytes", e.traffic.global_read_bytes},
            {"global_write_bytes", e.traffic.global_write_bytes},
            {"shared_memory_bytes", e.traffic.shared_memory_bytes}}},
          {"occupancy_proxy_bps", e.occupancy_proxy_bps},
          {"non_matmul_flops", e.non_matmul_flops},
          {"matmul_flops", e.matmul_flops},
          {"workspace_bytes", e.workspace_bytes},
          {"output_tolerance_abs", e.output_tolerance_abs},
          {"rel_l2_tolerance", e.rel_l2_tolerance},
          {"predicted_seconds", e.predicted_seconds}};
}

json options_json(const AttentionOptions& o, float effective_scale) {
  return {{"window", o.window}, {"scale", o.scale}, {"effective_scale", effective_scale}, {"softcap", o.softcap}};
}

std::string dt(DType t) { return std::string(dtype_name(t)); }

}  // namespace

std::string to_table(const DecodePlan& plan) {
  const DecodeProblem& p = plan.problem;
  Rows rows;
  rows.emplace_back("problem", "decode: batch " + std::to_string(p.batch) + ", heads " + std::to_string(p.num_heads) +
                                   " (kv " + std::to_string(p.kv_heads) + ", group " + std::to_string(p.group_size()) +
                                   "), head_dim " + std::to_string(p.head_dim) + ", kv_len " +
                                   std::to_string(p.kv_len) + " of " + std::to_string(p.max_seq));
  rows.emplace_back("dtypes", "q " + dt(p.q_dtype) + ", kv " + dt(p.kv_dtype) + ", out " + dt(p.out_dtype));
  rows.emplace_back("options", options_text(p.options, p.effective_scale()));
  add_target(rows, plan.target);
  add_partition(rows, plan.partition, &plan.target.backend);
  add_evidence(rows, plan.evidence);
  add_reasons(rows, plan.reasons);
  return table(rows);
}

std::string to_table(const PrefillPlan& plan) {
  const PrefillProblem& p = plan.problem;
  Rows rows;
  rows.emplace_back("problem", std::string("prefill") + (p.causal ? " (causal)" : "") + ": batch " +
                                   std::to_string(p.batch) + ", heads " + std::to_string(p.num_heads) + " (kv " +
                                   std::to_string(p.kv_heads) + ", group " + std::to_string(p.group_size()) +
                                   "), head_dim " + std::to_string(p.head_dim) + ", q_len " + std::to_string(p.q_len) +
                                   ", kv_len " + std::to_string(p.kv_len));
  rows.emplace_back("dtypes", "q/k/v " + dt(p.dtype) + ", out " + dt(p.out_dtype));
  rows.emplace_back("options", options_text(p.options, p.effective_scale()));
  add_target(rows, plan.target);
  add_partition(rows, plan.partition, &plan.target.backend);
  add_evidence(rows, plan.evidence);
  add_reasons(rows, plan.reasons);
  return table(rows);
}

std::string to_table(const FlashAttentionWorkPlan& plan) {
  Rows rows;
  rows.emplace_back("problem", "flash attention (seed 004): seq_len " + std::to_string(plan.seq_len) + ", head_dim " +
                                   std::to_string(plan.head_dim) + ", f32, one head");
  add_partition(rows, plan.partition);
  add_evidence(rows, plan.evidence);
  return table(rows);
}

std::string to_json(const DecodePlan& plan) {
  const DecodeProblem& p = plan.problem;
  json problem = {{"batch", p.batch},       {"num_heads", p.num_heads},   {"kv_heads", p.kv_heads},
                  {"head_dim", p.head_dim}, {"max_seq", p.max_seq},       {"kv_len", p.kv_len},
                  {"kv_dtype", dt(p.kv_dtype)}, {"q_dtype", dt(p.q_dtype)}, {"out_dtype", dt(p.out_dtype)},
                  {"options", options_json(p.options, p.effective_scale())}};
  json j = {{"kind", "decode"},
            {"problem", problem},
            {"target", target_json(plan.target)},
            {"partition", partition_json(plan.partition)},
            {"evidence", evidence_json(plan.evidence)},
            {"reasons", plan.reasons}};
  return j.dump();
}

std::string to_json(const PrefillPlan& plan) {
  const PrefillProblem& p = plan.problem;
  json problem = {{"batch", p.batch},       {"num_heads", p.num_heads}, {"kv_heads", p.kv_heads},
                  {"head_dim", p.head_dim}, {"q_len", p.q_len},         {"kv_len", p.kv_len},
                  {"causal", p.causal},     {"dtype", dt(p.dtype)},     {"out_dtype", dt(p.out_dtype)},
                  {"options", options_json(p.options, p.effective_scale())}};
  json j = {{"kind", "prefill"},
            {"problem", problem},
            {"target", target_json(plan.target)},
            {"partition", partition_json(plan.partition)},
            {"evidence", evidence_json(plan.evidence)},
            {"reasons", plan.reasons}};
  return j.dump();
}

std::string to_json(const FlashAttentionWorkPlan& plan) {
  json j = {{"kind", "flash_attention"},
            {"seq_len", plan.seq_len},
            {"head_dim", plan.head_dim},
            {"logical_elements", plan.logical_elements},
            {"partition", partition_json(plan.partition)},
            {"evidence", evidence_json(plan.evidence)}};
  return j.dump();
}

}  // namespace attnkit
