// `attnkit plan`: shape flags or a model preset in, the planner's decision out. Nothing runs.
#include "plan_command.hpp"

#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnkit/context_parallel.hpp"
#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"
#include "serving_flags.hpp"
#include "shape_flags.hpp"

namespace attnkit::cli {
namespace {

struct PlanFlags {
  ShapeFlags shape;
  TargetFlags target;
  ServingFlags serving;
  bool json = false;
  bool seed_scalar = false, seed_tiled = false;
  std::int64_t seq_len = 0;
  std::int64_t tile = 64;
};

std::uint32_t to_u32(std::int64_t value, const char* name) {
  if (!(value > 0 && value <= std::numeric_limits<std::uint32_t>::max()))
    fail("attnkit plan --seed-*", std::string(name) + "=" + std::to_string(value) + " is out of range",
         std::string("pass ") + name + " in 1..4294967295");
  return static_cast<std::uint32_t>(value);
}

// JSON is re-indented for people; it stays one document for programs.
void print(const std::string& table, const std::string& json, bool as_json) {
  std::string text = table;
  if (as_json) {
    const nlohmann::json doc = nlohmann::json::parse(json, nullptr, false);
    text = doc.is_discarded() ? json : doc.dump(2);
  }
  std::cout << text;
  if (!text.ends_with('\n')) std::cout << '\n';
}

void run_seed_plan(const PlanFlags& f) {
  if (f.seed_scalar && f.seed_tiled)
    fail("attnkit plan", "--seed-scalar and --seed-tiled both given", "pass one of them");
  if (f.seq_len <= 0) fail("attnkit plan --seed-*", "--seq-len is missing", "pass --seq-len N (N >= 1)");
  const std::uint32_t seq_len = to_u32(f.seq_len, "--seq-len");
  const std::uint32_t head_dim = to_u32(f.shape.head_dim, "--head-dim");
  const FlashAttentionWorkPlan plan =
      f.seed_scalar ? plan_flash_attention_scalar(seq_len, head_dim)
                    : plan_flash_attention_tiled(seq_len, head_dim, to_u32(f.tile, "--tile"));
  print(to_table(plan), to_json(plan), f.json);
}

void run_plan(const PlanFlags& f) {
  if (f.seed_scalar || f.seed_tiled) {
    run_seed_plan(f);
    return;
  }
  if (f.seq_len != 0)
    fail("attnkit plan", "--seq-len belongs to --seed-scalar/--seed-tiled",
         "use --kv-len (and --q-len) for decode/prefill plans, or add --seed-scalar");
  const std::optional<KernelFamily> family = parse_family(f.target.family);
  if (family && f.shape.op != "decode" && f.shape.op != "prefill" && f.shape.op != "extend")
    fail("attnkit plan", "--family applies to --op decode, prefill and extend", "drop --family for --op " + f.shape.op);
  if (f.shape.op == "sharded-decode") {
    const ShardedDecodePlan plan = plan_sharded_decode(sharded_decode_problem(f.shape), sharded_targets(f.target, f.serving));
    print(to_table(plan), to_json(plan), f.json);
    return;
  }
  const Target target = resolve_target(f.target);
  if (f.shape.op == "paged-decode") {
    const PagedDecodePlan plan = plan_paged_decode(paged_decode_problem(f.shape, f.serving), target);
    print(to_table(plan), to_json(plan), f.json);
  } else if (f.shape.op == "extend") {
    const ExtendProblem problem = extend_problem(f.shape, f.serving);
    const ExtendPlan plan = family ? plan_extend(problem, target, *family) : plan_extend(problem, target);
    print(to_table(plan), to_json(plan), f.json);
  } else if (f.shape.op == "decode") {
    const DecodeProblem problem = decode_problem(f.shape);
    const DecodePlan plan = family ? plan_decode(problem, target, *family) : plan_decode(problem, target);
    print(to_table(plan), to_json(plan), f.json);
  } else {
    const PrefillProblem problem = prefill_problem(f.shape);
    const PrefillPlan plan = family ? plan_prefill(problem, target, *family) : plan_prefill(problem, target);
    print(to_table(plan), to_json(plan), f.json);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan one attention call and print the decision and its evidence");
  add_shape_flags(*cmd, flags->shape, true, {"decode", "prefill", "paged-decode", "extend", "sharded-decode"});
  add_target_flags(*cmd, flags->target);
  add_serving_flags(*cmd, flags->serving);
  cmd->add_flag("--json", flags->json, "print one JSON object instead of the table");
  cmd->add_flag("--seed-scalar", flags->seed_scalar, "seed 004's square planner, scalar online kernel");
  cmd->add_flag("--seed-tiled", flags->seed_tiled, "seed 004's square planner, cooperative tiled kernel");
  cmd->add_option("--seq-len", flags->seq_len, "seed planners: sequence length (square: seq_len x seq_len)");
  cmd->add_option("--tile", flags->tile, "seed tiled planner: keys per tile")->capture_default_str();
  cmd->callback([flags] { run_plan(*flags); });
}

}  // namespace attnkit::cli
