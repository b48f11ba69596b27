// parallelism.fsdp.offload_policy and enable_cpu_offload: FSDP2's CPU offload as a scenario says it
// (scenarios/README.md; models/transforms/README.md, "FSDP2's CPU offload").

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/scenario_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::filesystem::path& kScenarios = test_support::kShippedScenarios;

std::string error_of(std::string_view yaml) { return test_support::scenario_error(yaml); }

const std::string kHead = "model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\nplatform: dgx-h100-superpod\n";

std::optional<models::FsdpSpec::CpuOffload> offload_of(const std::string& training, const std::string& fsdp) {
  const Scenario s = parse_scenario(kHead + training + "parallelism: {fsdp: {units: [\"model.layers.*\"]" + fsdp + "}}\n", "s.yaml", kScenarios);
  return s.parallelism->data.fsdp->cpu_offload;
}

TEST(FsdpOffloadScenario, PolicyForms) {
  EXPECT_FALSE(offload_of("", ""));
  EXPECT_FALSE(offload_of("", ", offload_policy: none"));
  EXPECT_FALSE(offload_of("", ", enable_cpu_offload: false"));
  const auto cpu = offload_of("", ", offload_policy: cpu");
  ASSERT_TRUE(cpu);
  EXPECT_TRUE(cpu->pin_memory);  // CPUOffloadPolicy's default
  EXPECT_FALSE(cpu->fused_step);  // optimizer_impl foreach: the for-loop on the CPU
  EXPECT_EQ(offload_of("", ", enable_cpu_offload: true"), cpu);
  EXPECT_EQ(offload_of("", ", offload_policy: {kind: cpu, pin_memory: true}"), cpu);
  EXPECT_FALSE(offload_of("", ", offload_policy: {kind: none}"));
  // torchtitan's default optimizer.implementation, fused: ATen's CPU kernel.
  const auto fused = offload_of("training: {optimizer: adamw, optimizer_impl: fused}\n", ", enable_cpu_offload: true");
  ASSERT_TRUE(fused);
  EXPECT_TRUE(fused->fused_step);
}

TEST(FsdpOffloadScenario, RefusesWhatItDoesNotModel) {
  const auto fsdp = [](const std::string& extra) { return "parallelism: {fsdp: {units: [\"model.layers.*\"], " + extra + "}}\n"; };
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: nvme")),
              AllOf(HasSubstr("s.yaml:3:"), HasSubstr("'parallelism.fsdp.offload_policy' is 'nvme'"), HasSubstr("expected cpu")));
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: [cpu]")), HasSubstr("is a list"));
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: {pin_memory: true}")), HasSubstr("'kind'"));
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: {kind: cpu, pinned: true}")), HasSubstr("'pinned'"));
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: {kind: none, pin_memory: true}")), HasSubstr("applies to kind cpu only"));
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: cpu, enable_cpu_offload: true")), HasSubstr("both 'offload_policy' and 'enable_cpu_offload'"));
  EXPECT_THAT(error_of(kHead + fsdp("enable_cpu_offload: maybe")), HasSubstr("enable_cpu_offload"));
  // Pageable shards need the platform's pageable rate, which dgx-h100-superpod does not give.
  EXPECT_THAT(error_of(kHead + fsdp("offload_policy: {kind: cpu, pin_memory: false}")),
              AllOf(HasSubstr("s.yaml:3:"), HasSubstr("pin_memory' is false"), HasSubstr("host_link.pageable_bandwidth")));
  // The step on the CPU is torch.optim's Adam or AdamW.
  EXPECT_THAT(error_of(kHead + "training: {optimizer: adafactor}\n" + fsdp("offload_policy: cpu")),
              AllOf(HasSubstr("s.yaml:3:"), HasSubstr("'training.optimizer' is adafactor"), HasSubstr("expected adam or adamw")));
  EXPECT_THAT(error_of(kHead + "training: {optimizer: sgd}\n" + fsdp("enable_cpu_offload: true")), HasSubstr("'training.optimizer' is sgd"));
  EXPECT_FALSE(offload_of("training: {optimizer: adam}\n", ", offload_policy: cpu")->fused_step);
}

}  // namespace
}  // namespace comptrain::sim
