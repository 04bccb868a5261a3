// `attnkit bench`: time attnkit's kernels on the best backend present against ceilings measured
// in the same run; a table, or one JSON document with the commit, device and exact command.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace attnkit::cli {
// exit_code becomes 1 when a case could not be measured (its row says why).
void add_bench_command(CLI::App& app, const std::string& command_line, int& exit_code);
}
