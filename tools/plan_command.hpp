// `attnkit plan`: print the plan (family, partition, workspace, predicted bytes/FLOPs, reasons)
// for a shape or a model preset, as a table or as JSON.
#pragma once
#include <CLI/CLI.hpp>

namespace attnkit::cli {
void add_plan_command(CLI::App& app);
}
