#pragma once
// The scenario readers' tests: the message of the InputError a scenario's text raises when it is
// read (and, with build_model, when its model is built), or a test failure when it raises none.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::test_support {

// The repository's scenarios/: the test scenarios name shipped files (hf-configs/...) relative to it.
inline const std::filesystem::path kShippedScenarios = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / ".." / ".." / "scenarios";

inline std::string scenario_error(std::string_view yaml, const std::filesystem::path& base_dir = kShippedScenarios, bool build_model = false) {
  try {
    const sim::Scenario s = sim::parse_scenario(yaml, "s.yaml", base_dir);
    if (build_model) sim::build_trace(s);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for:\n" << yaml;
  return "";
}

}  // namespace comptrain::test_support
