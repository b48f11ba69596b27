#include "validate_command.hpp"

#include <memory>
#include <string>
#include <vector>

#include "comptrain/sim/report/validation_report.hpp"
#include "comptrain/sim/studies/validate.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "options.hpp"

namespace comptrain::cli {
namespace {

struct ValidateOptions {
  std::string table;
  bool fast = false;
  std::vector<std::string> points;
  bool json = false;
  bool markdown = false;
  int jobs = 0;
  std::string output;
};

int run(const ValidateOptions& o) {
  const std::filesystem::path path = o.table.empty() ? sim::default_validation_table() : std::filesystem::path(o.table);
  const sim::ValidationTable table = sim::load_validation_table(path);
  const auto results = sim::validate(table, {.fast = o.fast, .jobs = o.jobs, .points = o.points});
  const std::string text = o.json       ? sim::validation_json(table.source, results)
                           : o.markdown ? sim::validation_markdown(results)
                                        : sim::validation_text(results);
  write_output(o.output.empty() ? "-" : o.output, text);
  return 0;
}

}  // namespace

std::function<int()> add_validate_command(CLI::App& app) {
  auto options = std::make_shared<ValidateOptions>();
  auto* command = app.add_subcommand(
      "validate",
      "Set comptrain's predictions beside published measurements\n"
      "The measurements: throughput, peak memory, memory reduction, slowdown, largest batch (or a bound on it), a batch that "
      "ran, collective bandwidth, power and energy, checkpoint throughput and iterations, and kernel times (a microbenchmark's "
      "time of named ops against the op-time model's). Printed: each point's published and predicted value and the error (predicted / published - 1; met or not met for "
      "a bound and a batch that ran), then per metric the median and worst |error| and the bounds met over the points not "
      "marked suspect (those whose measured hardware or setup cannot be known) and the median over the held-out ones (no value "
      "fitted to them), the same per GPU generation and per workload "
      "family (cnn, encoder, decoder, moe) for the metrics with points in several, the configurations that ran but are "
      "predicted out of memory, and each suspect point with its reason.");
  command->add_option("table",
                      options->table,
                      "Validation table (.jsonl, scenarios/validation/README.md); default: scenarios/validation/published.jsonl of "
                      "the source tree comptrain was built from");
  command->add_flag("--fast", options->fast, "Only the points marked fast in the table (a few seconds; what ctest runs)");
  command->add_option("--points", options->points,
                      "Only the points whose id matches this shell pattern ('nccl-p5-4x8-*'); repeat for several. The summaries "
                      "are then over those points; a pattern that matches no point exits 2");
  auto* json = command->add_flag("--json", options->json, "Print the results as JSON");
  command->add_flag("--markdown", options->markdown, "Print the results as Markdown tables (the table of docs/validation.md)")->excludes(json);
  add_positive_int(*command, "-j,--jobs", options->jobs, "Points predicted at once, each in its own process (default: the core count)");
  command->add_option("-o,--output", options->output, "Write the table (or JSON) to this file instead of stdout ('-': stdout)");
  return [command, options]() -> int {
    if (!command->parsed()) return -1;
    return run(*options);
  };
}

}  // namespace comptrain::cli
