// comptrain: predicts peak GPU memory and iteration time of DNN training under memory-saving
// strategies. This file only wires the subcommands; the work is in the libraries.
//
// Exit codes: 0 success, 1 internal failure (or a subcommand not implemented yet),
// 2 bad usage or bad input.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "calibrate_command.hpp"
#include "compress_command.hpp"
#include "comptrain_version.hpp"
#include "plan_command.hpp"
#include "simulate_command.hpp"
#include "trace_command.hpp"

namespace {

constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "comptrain: trace-driven simulator of memory-saving DNN training (activation compression, offloading, "
      "recomputation) on GPU systems",
      "comptrain"};
  app.set_version_flag("--version", std::string("comptrain ") + COMPTRAIN_VERSION);
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 internal failure or not implemented, 2 bad usage or bad input.");

  // Each returns its action, which answers -1 when its subcommand was not the one given.
  const std::function<int()> commands[] = {
      comptrain::cli::add_trace_command(app),
      comptrain::cli::add_simulate_command(app),
      comptrain::cli::add_compress_command(app),
      comptrain::cli::add_decompress_command(app),
      comptrain::cli::add_plan_command(app),
      comptrain::cli::add_merge_command(app),
      comptrain::cli::add_calibrate_command(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a hint to --help
    return kExitBadInput;
  }

  try {
    for (const auto& command : commands) {
      if (int code = command(); code >= 0) return code;
    }
    return kExitInternal;
  } catch (const comptrain::InputError& e) {
    fmt::print(stderr, "comptrain: error: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "comptrain: internal error: {}\n", e.what());
    return kExitInternal;
  }
}
