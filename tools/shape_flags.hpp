// The shape and target flags shared by `attnkit plan` and `attnkit bench`: register them on a
// CLI11 subcommand, then turn the parsed values into a validated problem and a Target.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/plan.hpp"

namespace attnkit::cli {

struct ShapeFlags {
  std::string op = "decode";
  std::string model;
  std::int64_t batch = 1, heads = 32, kv_heads = 8, head_dim = 128;
  std::int64_t kv_len = 4096, q_len = 0, max_seq = 0;  // 0: q_len = kv_len, max_seq = kv_len
  bool causal = true;
  std::int64_t window = 0;
  float softcap = 0.0f, scale = 0.0f;
  std::string dtype = "bf16", out_dtype;  // out_dtype empty: same as dtype
  // Set by add_shape_flags so a preset fills in only what the user did not pass.
  CLI::Option* heads_opt = nullptr;
  CLI::Option* kv_heads_opt = nullptr;
  CLI::Option* head_dim_opt = nullptr;
  CLI::Option* window_opt = nullptr;
  CLI::Option* softcap_opt = nullptr;
  CLI::Option* max_seq_opt = nullptr;
};

struct TargetFlags {
  std::string backend;  // "cpu", "cuda" or empty (from --device, else cpu)
  std::string device;   // "h200", "h100", "cpu" or empty (the present machine)
  std::string family;   // "scalar", "tiled", "split-kv" or empty (planner chooses)
  int threads = 0;
};

// with_op registers --op with `ops` as its choices (the first is the default's description).
void add_shape_flags(CLI::App& app, ShapeFlags& flags, bool with_op = true,
                     const std::vector<std::string>& ops = {"decode", "prefill"});
void add_target_flags(CLI::App& app, TargetFlags& flags);

DecodeProblem decode_problem(const ShapeFlags& flags);    // validated (Error with a Fix)
PrefillProblem prefill_problem(const ShapeFlags& flags);  // validated

Target resolve_target(const TargetFlags& flags);
std::optional<KernelFamily> parse_family(const std::string& name);  // empty -> nullopt
std::string family_flag_name(KernelFamily family);                  // inverse of parse_family

}  // namespace attnkit::cli
