// attnkit: plan, check and bench attention kernels from the command line.
// Exit status: 0 success, 1 a check failed, 2 a usage or validation error (message on stderr,
// ending in "Fix: ...").
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "attnkit/context_parallel.hpp"
#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/version.hpp"
#include "bench_command.hpp"
#include "build_info.hpp"
#include "check_command.hpp"
#include "plan_command.hpp"

namespace {

constexpr int kUsageError = 2;

// The command line as a shell would need it re-typed (for the benchmark's JSON).
std::string quoted_command(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!text.empty()) text += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+") == std::string::npos;
    if (plain) {
      text += arg;
      continue;
    }
    text += '\'';
    for (char c : arg) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += '\'';
  }
  return text;
}

// `attnkit --version`: what a bug report needs to name the build.
std::string version_text() {
  std::string text = std::string("attnkit ") + ATTNKIT_VERSION_STRING + "\ncommit   " + attnkit::cli::git_commit();
  text += attnkit::cuda::built() ? std::string("\ncuda     built (") + ATTNKIT_CLI_CUDA_ARCHS + ")" : "\ncuda     not built";
  text += attnkit::cuda::nccl_built() ? "\nnccl     built (multi-GPU context-parallel decode)" : "\nnccl     not built";
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnkit: plan, check and benchmark attention kernels for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());
  int exit_code = 0;
  attnkit::cli::add_plan_command(app);
  attnkit::cli::add_check_command(app, exit_code);
  attnkit::cli::add_bench_command(app, quoted_command(argc, argv), exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::cerr << "attnkit: " << e.what() << ". Fix: see `attnkit "
              << (app.get_subcommands().empty() ? std::string("--help") : app.get_subcommands().front()->get_name() + " --help")
              << "` for the accepted flags\n";
    return kUsageError;
  } catch (const attnkit::Error& e) {
    std::cerr << "attnkit: " << e.what() << '\n';
    return kUsageError;
  } catch (const std::exception& e) {
    std::cerr << "attnkit: unexpected error: " << e.what() << '\n';
    return kUsageError;
  }
  return exit_code;
}
