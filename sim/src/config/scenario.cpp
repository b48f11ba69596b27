#include "comptrain/sim/config/scenario.hpp"

#include <string>
#include <utility>

#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "config/scenario_reader.hpp"
#include "config/scenario_yaml.hpp"

namespace comptrain::sim {

Scenario parse_scenario(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir) {
  ScenarioReader reader(source, base_dir);
  Scenario scenario = reader.read(reader.load(yaml));
  scenario.yaml = std::string(yaml);
  scenario.base_dir = base_dir;
  return scenario;
}

YAML::Node load_scenario_yaml(std::string_view yaml, std::string_view source) {
  return ScenarioReader(source, {}).load(yaml);
}

Scenario parse_scenario_node(const YAML::Node& root, std::string_view source, const std::filesystem::path& base_dir) {
  return ScenarioReader(source, base_dir).read(root);
}

Scenario load_scenario_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return parse_scenario(text, path.string(), path.parent_path());
}

Scenario default_scenario() {
  return parse_scenario(default_scenario_yaml(), "<embedded scenarios/default.yaml>", std::filesystem::current_path());
}

void set_platform(Scenario& scenario, models::Platform platform) {
  for (std::size_t i = 0; i < scenario.strategy.rules.size(); ++i) {
    models::CompressAction* compress = scenario.strategy.rules[i].compress();
    if (!compress || !compress->profile_auto) continue;
    const std::string where = scenario.source + ": strategy.rules[" + std::to_string(i) + "].compress.profile auto, platform " + platform.name;
    try {
      compress->profile = models::resolve_profile("auto", scenario.base_dir, platform.name);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    if (!compress->profile->find(compress->codec)) {
      throw InputError(where + ": profile '" + compress->profile->name + "' has no codec '" + compress->codec + "'");
    }
  }
  // parallelism.compression's `profile: auto`, likewise.
  if (scenario.parallelism && scenario.parallelism->data.compression && scenario.parallelism->data.compression->profile_auto) {
    models::CollectiveCompressionSpec& z = *scenario.parallelism->data.compression;
    const std::string where = scenario.source + ": parallelism.compression.profile auto, platform " + platform.name;
    try {
      z.profile = models::resolve_profile("auto", scenario.base_dir, platform.name);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    if (!z.profile->find(z.codec)) throw InputError(where + ": profile '" + z.profile->name + "' has no codec '" + z.codec + "'");
  }
  if (scenario.power_limit) platform = models::with_power_limit(std::move(platform), *scenario.power_limit, scenario.source + ": power_limit");
  scenario.platform = std::move(platform);
}

std::string location_of(const Scenario& scenario, std::string_view field) {
  const auto it = scenario.locations.find(field);
  return it != scenario.locations.end() ? it->second : scenario.source + ": ";
}

const models::Platform& require_platform(const Scenario& scenario) {
  if (!scenario.platform) {
    std::string names;
    for (const auto& n : models::builtin_platform_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError(scenario.source + ": the scenario has no 'platform'; expected a shipped platform (" + names +
                     "), a platform file (.yaml) or an inline description");
  }
  return *scenario.platform;
}

}  // namespace comptrain::sim
