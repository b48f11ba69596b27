#pragma once
// A scenario: what to simulate, written in YAML. Like Calculon's split of system, application
// and execution, it has one section per concern:
//   model:     the application (a zoo model and its shape options, or a trace file)
//   training:  how it is trained (batch size, precision, optimizer, TF32)
//   platform:  the system (a shipped platform, a platform file, or an inline description)
//   strategy:  the memory-saving strategy (rules over the saved activations)
// See scenarios/README.md.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {

struct Scenario {
  std::string source;  // where it came from, for messages ("scenarios/default.yaml")
  std::string name;    // a label for reports; defaults to the model's name

  // Exactly one of the two: a zoo model (its request carries batch, precision, optimizer)
  // or a trace file (path resolved against the scenario's directory).
  std::optional<zoo::ModelRequest> zoo_model;
  std::optional<std::filesystem::path> trace_file;
  std::optional<std::int64_t> batch_size;  // for a trace file: rescale to this batch
  bool allow_tf32 = false;                 // fp32 convolutions and matmuls on TF32 tensor cores

  std::optional<models::Platform> platform;  // required to simulate
  models::StrategySpec strategy;             // default: baseline
};

// Parses a scenario. `source` names it in errors; relative trace paths resolve against
// `base_dir`. Throws InputError "SOURCE:LINE:COLUMN: problem; expected ..." for malformed YAML,
// unknown keys (listing the valid ones), wrong types and out-of-range values.
Scenario parse_scenario(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir);
Scenario load_scenario_file(const std::filesystem::path& path);

// The scenario shipped inside the binary (scenarios/default.yaml at build time).
std::string_view default_scenario_yaml();
Scenario default_scenario();

// The trace the scenario describes, at its batch size.
traces::Trace build_trace(const Scenario& scenario);

// The scenario's platform; InputError naming the scenario when it has none.
const models::Platform& require_platform(const Scenario& scenario);

}  // namespace comptrain::sim
