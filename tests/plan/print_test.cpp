// Printing: JSON parses, has the stable keys and the plan's values; the table names the family.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "attnkit/plan.hpp"

using namespace attnkit;
using nlohmann::json;

namespace {

Target cpu(int threads) {
  Target t;
  t.backend = Backend::kCpu;
  t.threads = threads;
  return t;
}

void expect_partition_matches(const json& j, const WorkPartition& p) {
  EXPECT_EQ(j.at("family"), to_string(p.family));
  EXPECT_EQ(j.at("tile_size").get<std::uint32_t>(), p.tile_size);
  EXPECT_EQ(j.at("tile_count").get<std::uint32_t>(), p.tile_count);
  EXPECT_EQ(j.at("sequence_splits").get<std::uint32_t>(), p.sequence_splits);
  EXPECT_EQ(j.at("keys_per_split").get<std::uint32_t>(), p.keys_per_split);
  EXPECT_EQ(j.at("grid_blocks").get<std::uint64_t>(), p.grid_blocks);
  EXPECT_EQ(j.at("heads_per_tile_group").get<std::uint32_t>(), p.heads_per_tile_group);
  EXPECT_EQ(j.at("tiles_per_unit").get<std::uint32_t>(), p.tiles_per_unit);
  EXPECT_EQ(j.at("tail_pairs").get<std::uint32_t>(), p.tail_pairs);
  EXPECT_EQ(j.at("packed_heads").get<std::uint32_t>(), p.packed_heads);
  for (const char* key : {"tiles_per_split", "rows_per_block", "workgroups_per_row", "workgroup_lanes", "warp_lanes",
                          "warps_per_block", "q_scratch_elements", "score_scratch_elements", "o_acc_scratch_elements",
                          "split_reduce_scratch_elements", "pipeline_stages", "kv_evict_first", "cpu_l1_prefetch"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

void expect_evidence_matches(const json& j, const Evidence& e) {
  EXPECT_EQ(j.at("traffic").at("global_read_bytes").get<std::uint64_t>(), e.traffic.global_read_bytes);
  EXPECT_EQ(j.at("traffic").at("global_write_bytes").get<std::uint64_t>(), e.traffic.global_write_bytes);
  EXPECT_EQ(j.at("traffic").at("shared_memory_bytes").get<std::uint64_t>(), e.traffic.shared_memory_bytes);
  EXPECT_EQ(j.at("occupancy_proxy_bps").get<std::uint32_t>(), e.occupancy_proxy_bps);
  EXPECT_EQ(j.at("non_matmul_flops").get<std::uint64_t>(), e.non_matmul_flops);
  EXPECT_EQ(j.at("matmul_flops").get<std::uint64_t>(), e.matmul_flops);
  EXPECT_EQ(j.at("workspace_bytes").get<std::uint64_t>(), e.workspace_bytes);
  EXPECT_EQ(j.at("output_tolerance_abs").get<double>(), e.output_tolerance_abs);
  EXPECT_EQ(j.at("rel_l2_tolerance").get<double>(), e.rel_l2_tolerance);
  EXPECT_EQ(j.at("predicted_seconds").get<double>(), e.predicted_seconds);
}

}  // namespace

TEST(Print, FamilyAndBackendNames) {
  EXPECT_EQ(to_string(KernelFamily::kScalarOnline), "scalar_online");
  EXPECT_EQ(to_string(KernelFamily::kCooperativeTiled), "cooperative_tiled");
  EXPECT_EQ(to_string(KernelFamily::kSplitKvDecode), "split_kv_decode");
  EXPECT_EQ(to_string(KernelFamily::kWarpSpecializedWgmma), "warp_specialized_wgmma");
  EXPECT_EQ(to_string(Backend::kCpu), "cpu");
  EXPECT_EQ(to_string(Backend::kCuda), "cuda");
}

TEST(Print, SeedPlanJsonRoundTrips) {
  const auto plan = plan_flash_attention_tiled(4096, 128, 128);
  const json j = json::parse(to_json(plan));
  EXPECT_EQ(j.at("kind"), "flash_attention");
  EXPECT_EQ(j.at("seq_len").get<std::uint32_t>(), 4096u);
  EXPECT_EQ(j.at("head_dim").get<std::uint32_t>(), 128u);
  EXPECT_EQ(j.at("logical_elements").get<std::uint32_t>(), plan.logical_elements);
  expect_partition_matches(j.at("partition"), plan.partition);
  expect_evidence_matches(j.at("evidence"), plan.evidence);
  // Dump and parse again: nothing is lost.
  EXPECT_EQ(json::parse(j.dump()), j);
}

TEST(Print, DecodePlanJsonHasEveryField) {
  DecodeProblem p;
  p.options.window = 512;
  const DecodePlan plan = plan_decode(p, cpu(4));
  const json j = json::parse(to_json(plan));
  EXPECT_EQ(j.at("kind"), "decode");
  const json& pr = j.at("problem");
  EXPECT_EQ(pr.at("num_heads").get<std::int64_t>(), p.num_heads);
  EXPECT_EQ(pr.at("kv_heads").get<std::int64_t>(), p.kv_heads);
  EXPECT_EQ(pr.at("kv_len").get<std::int64_t>(), p.kv_len);
  EXPECT_EQ(pr.at("kv_dtype"), "bf16");
  EXPECT_EQ(pr.at("options").at("window").get<std::int64_t>(), 512);
  for (const char* key : {"batch", "head_dim", "max_seq", "q_dtype", "out_dtype"}) EXPECT_TRUE(pr.contains(key)) << key;
  EXPECT_EQ(j.at("target").at("backend"), "cpu");
  EXPECT_EQ(j.at("target").at("threads").get<int>(), 4);
  EXPECT_FALSE(j.at("target").at("cpu_intel_cores").get<bool>());
  EXPECT_FALSE(j.at("target").at("cpu_matrix_tiles").get<bool>());
  EXPECT_EQ(j.at("target").at("cpu_vector_lanes").get<int>(), 16);
  expect_partition_matches(j.at("partition"), plan.partition);
  expect_evidence_matches(j.at("evidence"), plan.evidence);
  EXPECT_EQ(j.at("reasons").size(), plan.reasons.size());
  // What the CPU rules key on is in the printed target, so a reader can tell why the tile is short.
  Target intel = cpu(4);
  intel.cpu_intel_cores = intel.cpu_matrix_tiles = true;
  const DecodePlan on_intel = plan_decode(p, intel);
  EXPECT_NE(to_table(on_intel).find("4 threads, 16-lane vectors, Intel cores, AMX tiles"), std::string::npos)
      << to_table(on_intel);
  EXPECT_TRUE(json::parse(to_json(on_intel)).at("target").at("cpu_intel_cores").get<bool>());
  EXPECT_EQ(to_table(plan).find("Intel cores"), std::string::npos);
  // Each backend's own flags only: the CPU table shows the L1 prefetch (off on these AMD-like
  // cores) and no L2 policy, which is CUDA's.
  EXPECT_FALSE(j.at("partition").at("cpu_l1_prefetch").get<bool>());
  EXPECT_NE(to_table(plan).find("L1 prefetch"), std::string::npos) << to_table(plan);
  EXPECT_EQ(to_table(plan).find("K/V L2 policy"), std::string::npos) << to_table(plan);
  EXPECT_EQ(to_table(on_intel).find("L1 prefetch"), std::string::npos) << to_table(on_intel);
  Target gpu;
  gpu.backend = Backend::kCuda;
  const std::string on_gpu = to_table(plan_decode(p, gpu));
  EXPECT_NE(on_gpu.find("K/V L2 policy"), std::string::npos) << on_gpu;
  EXPECT_EQ(on_gpu.find("L1 prefetch"), std::string::npos) << on_gpu;
}

TEST(Print, PrefillPlanJsonHasEveryField) {
  PrefillProblem p;
  p.q_len = 100;
  p.kv_len = 300;
  const PrefillPlan plan = plan_prefill(p, cpu(2));
  const json j = json::parse(to_json(plan));
  EXPECT_EQ(j.at("kind"), "prefill");
  EXPECT_EQ(j.at("problem").at("q_len").get<std::int64_t>(), 100);
  EXPECT_EQ(j.at("problem").at("causal").get<bool>(), true);
  expect_partition_matches(j.at("partition"), plan.partition);
  expect_evidence_matches(j.at("evidence"), plan.evidence);
}

TEST(Print, TablesNameTheFamilyAndReadableUnits) {
  const auto seed = plan_flash_attention_tiled(4096, 128, 128);
  const std::string seed_table = to_table(seed);
  EXPECT_NE(seed_table.find("cooperative_tiled"), std::string::npos) << seed_table;
  // 2 * 4096^2 * 128 + 4096 * 128 f32 reads = 17.18 GB.
  EXPECT_NE(seed_table.find("17.2 GB"), std::string::npos) << seed_table;

  const DecodePlan decode = plan_decode(DecodeProblem{}, cpu(4));
  const std::string table = to_table(decode);
  EXPECT_NE(table.find(to_string(decode.partition.family)), std::string::npos) << table;
  EXPECT_NE(table.find("reasons"), std::string::npos) << table;
  for (const std::string& reason : decode.reasons) EXPECT_NE(table.find(reason), std::string::npos) << reason;
  // Two aligned columns: every value starts at the same column.
  std::size_t column = std::string::npos;
  std::size_t start = 0;
  while (start < table.size()) {
    const std::size_t end = table.find('\n', start);
    const std::string line = table.substr(start, end - start);
    std::size_t key_end = line.find("  ");
    ASSERT_NE(key_end, std::string::npos) << line;
    const std::size_t value_start = line.find_first_not_of(' ', key_end);
    if (column == std::string::npos) column = value_start;
    EXPECT_EQ(value_start, column) << line;
    start = end + 1;
  }
}
