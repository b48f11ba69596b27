#pragma once
// The scenario reader, private to the config room: one class whose member functions are defined
// by section, in scenario_reader.cpp (the document, model, training, framework, platform),
// parallelism_yaml.cpp, plan_section_yaml.cpp and io_sections_yaml.cpp (data, checkpoint). The
// strategy sections are read by models::read_strategy (models/strategy_yaml.hpp).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "comptrain/models/units.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/yaml_reader.hpp"

namespace comptrain::sim {

// Reads one YAML document and reports every problem as "SOURCE:LINE:COLUMN: message".
class ScenarioReader : public yaml::Reader {
 public:
  ScenarioReader(std::string_view source, std::filesystem::path base_dir);

  YAML::Node load(std::string_view text) const;
  Scenario read(const YAML::Node& root);

 private:
  void read_training_options(const YAML::Node& training, Scenario& scenario) const;
  void read_tf32(const YAML::Node& training, Scenario& scenario) const;
  void read_float8(const YAML::Node& training, Scenario& scenario) const;
  std::vector<std::string> module_patterns(const YAML::Node& list, const std::string& key) const;
  void read_model(const YAML::Node& model, const YAML::Node& training, Scenario& scenario);
  models::Platform read_platform(const YAML::Node& node) const;
  // One of a closed set of names, parsed by `parse`; the message lists `names`.
  template <typename Parse>
  typename std::invoke_result_t<Parse, std::string_view>::value_type named(const YAML::Node& node, const std::string& field, Parse parse,
                                                                           const std::vector<std::string_view>& names) const;
  FrameworkSpec read_framework(const YAML::Node& node) const;
  std::optional<models::CompileScope> read_compile(const YAML::Node& node) const;
  zoo::ExpertRouting read_expert_routing(const YAML::Node& node) const;
  SequenceBins read_sequence_bins(const YAML::Node& node, std::int64_t seq_len) const;
  zoo::LoraSpec read_lora(const YAML::Node& node) const;  // lora_yaml.cpp
  models::StrategySpec read_strategy(const YAML::Node& node, const std::string& field) const;

  // parallelism_yaml.cpp
  ParallelismSection read_parallelism(const YAML::Node& node, const std::optional<models::Platform>& platform) const;
  void read_layout(const YAML::Node& node, ParallelismSection& p) const;
  std::string json_text_of(const YAML::Node& node, const std::string& field) const;
  models::FsdpSpec read_fsdp(const YAML::Node& node) const;
  models::CollectiveCompressionSpec read_collective_compression(const YAML::Node& node) const;
  std::optional<models::FsdpSpec::CpuOffload> read_fsdp_offload(const YAML::Node& node) const;
  // After the model: the step FSDP2's CPU offload runs on the host, from training.optimizer and
  // optimizer_impl; refuses what it does not model.
  void check_fsdp_offload(const YAML::Node& root, Scenario& scenario) const;
  std::optional<models::OptimizerOffloadSpec> read_offload_optimizer(const YAML::Node& node, int stage) const;

  // training_step_yaml.cpp: training.loss, training.optimizer_in_backward and the optimizer's
  // checks against the rest of the scenario.
  zoo::LossSpec read_loss(const YAML::Node& node) const;
  void read_loss_and_step(const YAML::Node& training, const Scenario& scenario, zoo::ModelSpec& request) const;

  // io_sections_yaml.cpp
  DataSpec read_data(const YAML::Node& node) const;
  CheckpointSpec read_checkpoint(const YAML::Node& node) const;
  StorageTier storage_tier(const YAML::Node& node, const std::string& field) const;

  // plan_section_yaml.cpp
  PlanSection read_plan(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism) const;
  EnergyBudget read_energy_budget(const YAML::Node& node, const std::optional<models::Platform>& platform) const;
  void read_cluster_search(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism,
                           PlanSection& plan) const;
  void read_layout_search(const YAML::Node& node, PlanSection& plan) const;
  void read_plan_recompute(const YAML::Node& list, const YAML::Node& plan_node, PlanSection& plan) const;
  void read_offload_search(const YAML::Node& node, const std::optional<ParallelismSection>& parallelism, PlanSection& plan) const;

  // Values every section reads.
  std::vector<std::string> string_list(const YAML::Node& node, const std::string& field) const;
  double bounded_quantity(const YAML::Node& node, models::units::Dimension dimension, const std::string& field, models::units::Bounds bounds) const;
  std::int64_t byte_count(const YAML::Node& node, const std::string& field) const;
  std::optional<std::int64_t> optional_positive(const YAML::Node& map, const char* key, const std::string& section) const;

  std::filesystem::path base_dir_;
  std::string platform_name_;  // the scenario's platform, once read (compress rules: profile auto)
  std::filesystem::path hf_config_;  // model.hf_config, once read (the scenario's default name)
};

}  // namespace comptrain::sim
