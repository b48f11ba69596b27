#include "comptrain/sim/studies/sweep.hpp"

#include <fmt/format.h>

#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/format.hpp"

namespace comptrain::sim {

std::vector<VariantResult> simulate_variants(const Sweep& sweep, const std::vector<std::size_t>& indices, int jobs, bool progress,
                                             const VariantEncoder& encode) {
  Progress bar("simulate", progress);
  std::vector<ChildProcess::Work> works;
  for (const std::size_t index : indices) {
    // Read, prepared and replayed in the worker: variants are built in parallel and only when
    // run, and the worker is a fresh process in which SimGrid's engine can run once.
    works.emplace_back([&sweep, &encode, index]() {
      const Scenario scenario = sweep.variant(index).scenario;
      const PreparedScenario prepared(scenario);
      const RunOutcome outcome = run_scenario(prepared, scenario.strategy, prepared.batch_size(), Isolation::this_process);
      return encode(scenario, prepared, outcome);
    });
  }
  std::size_t done = 0;
  bar.update(0, indices.size(), false);
  std::vector<JobOutcome> outcomes = run_jobs(std::move(works), jobs, [&](std::size_t k, const JobOutcome& outcome) {
    if (!outcome.diagnostics.empty()) {
      bar.print(prefix_lines(fmt::format("variant {} ({}): ", indices[k], sweep.label(indices[k])), outcome.diagnostics));
    }
    bar.update(++done, indices.size(), false);
  });
  bar.finish(done);
  // A failing variant is reported once all have run, the lowest-numbered one first: the error
  // must not depend on which worker happened to finish first (-j).
  std::vector<VariantResult> results(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    JobOutcome& outcome = outcomes[k];
    const std::string label = sweep.label(indices[k]);
    if (outcome.status != JobOutcome::Status::result) {
      outcome.text = fmt::format("variant {} ({}): {}", indices[k], label, outcome.text);
      std::move(outcome).result_or_throw();
    }
    results[k] = {indices[k], label, std::move(outcome.text)};
  }
  return results;
}

}  // namespace comptrain::sim
