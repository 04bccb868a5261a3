// `attnkit check`: every kernel present, on fresh random inputs, against the float64 golden.
// Prints one row per kernel x shape x dtype (PASS / FAIL / SKIPPED with the reason) and sets
// `exit_code` to 1 when anything failed.
#pragma once
#include <CLI/CLI.hpp>

namespace attnkit::cli {
void add_check_command(CLI::App& app, int& exit_code);
}
