// The flags of the serving plans of `attnkit plan` (--op paged-decode, extend, sharded-decode):
// page pool and table, multi-token queries, the lengths hint and the GPU count, turned into
// validated problems (docs/paged.md, docs/context-parallel.md).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/context_parallel.hpp"
#include "attnkit/paged.hpp"
#include "shape_flags.hpp"

namespace attnkit::cli {

struct ServingFlags {
  std::int64_t page_size = 16;
  std::string layout = "hnd";
  std::int64_t num_pages = 0;            // 0: every sequence can hold kv_len keys
  std::int64_t max_total_q = 0;          // extend: 0 = batch * max_q_len
  std::int64_t expected_total_keys = 0;  // paged decode: 0 = unknown
  int gpus = 2;                          // sharded decode
};

void add_serving_flags(CLI::App& app, ServingFlags& flags);

PagedDecodeProblem paged_decode_problem(const ShapeFlags& shape, const ServingFlags& serving);  // validated
// --q-len is the most new tokens per sequence (default 16).
ExtendProblem extend_problem(const ShapeFlags& shape, const ServingFlags& serving);
ShardedDecodeProblem sharded_decode_problem(const ShapeFlags& shape);
// --gpus copies of the resolved target (a CUDA one: --device h200 plans without the GPUs).
std::vector<Target> sharded_targets(const TargetFlags& target, const ServingFlags& serving);

}  // namespace attnkit::cli
