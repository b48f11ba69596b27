#include "trace_import_command.hpp"

#include <fmt/format.h>

#include <memory>
#include <string>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/trace_import/import.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "options.hpp"

namespace comptrain::cli {

std::function<int()> add_trace_import_command(CLI::App& trace) {
  struct Options {
    std::string input, output, format, device, name;
    std::int64_t batch = 1;
  };
  auto options = std::make_shared<Options>();
  auto* command = trace.add_subcommand(
      "import",
      "Convert a PyTorch or Chakra trace or memory snapshot to a trace file\n"
      "The input: a PyTorch profiler trace, a PyTorch memory snapshot (JSON), or a Chakra execution trace (JSON or binary "
      ".et).");
  command->add_option("input", options->input, "The file to import (a .et file is read as a binary Chakra trace)")->required();
  command->add_option("-o,--output", options->output, "Trace file to write (.json); - for standard output")->required();
  add_choice(*command, "--format", options->format,
             "Input format (default: detected from the content, and chakra-et for a .et file): chakra-et is Chakra's binary "
             "protobuf trace (what Chakra's converter and `comptrain trace export --format chakra` write)",
             {"pytorch-profiler", "memory-snapshot", "chakra-json", "chakra-et"});
  add_positive_int(*command, "-b,--batch", options->batch,
                   "The batch size the input was recorded at (no other tool's format records it; a Chakra trace written by "
                   "comptrain does, and keeps its own)")
      ->capture_default_str();
  command->add_option("--device", options->device, "The device the durations were measured on, when the input does not say");
  command->add_option("--name", options->name, "Trace name (default: the input's file name, or the recorded name of a Chakra trace comptrain wrote)");

  return [command, options]() -> int {
    if (!command->parsed()) return -1;
    trace_import::ImportOptions import_options;
    if (!options->format.empty()) import_options.format = trace_import::parse_format(options->format);
    import_options.batch_size = options->batch;
    import_options.device = options->device;
    import_options.name = options->name;
    const auto result = trace_import::import_file(options->input, import_options);
    // Files end with a newline, as text files should (as traces::write_trace_file writes them).
    write_output(options->output, traces::trace_to_json(result.trace) + "\n");
    fmt::print(stderr, "imported {} ({}): {} ops, {} tensors -> {}\n", options->input, trace_import::to_string(result.format),
               result.trace.ops().size(), result.trace.tensors().size(),
               is_standard_output(options->output) ? "standard output" : options->output);
    for (const auto& timeline : result.memory) {
      fmt::print(stderr, "memory {}: peak {} bytes at {:.6f} s ({} allocator events, {} bytes before the first)\n",
                 timeline.device, timeline.peak, timeline.peak_time, timeline.events, timeline.baseline);
    }
    for (const auto& missing : result.missing) fmt::print(stderr, "missing: {}\n", missing);
    return 0;
  };
}

}  // namespace comptrain::cli
