// torchtitan's Llama 3.1 8B on 8 GPUs (scenarios/validation/torchtitan-llama3-8b-h100-fsdp-8gpu-b2-sac.yaml):
// the tensors held at the peak under FSDP2 and selective checkpointing, against the same run
// modelled as before (DeepSpeed ZeRO-3 and a checkpoints rule), byte for byte by hand.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <variant>

#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::sim {
namespace {

const std::filesystem::path kValidation = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / ".." / ".." / "scenarios" / "validation";

const std::string kKeep =
    "[\"model.embed_tokens.out\", \"model.layers.*.add_1.out\", \"model.layers.*.self_attn.q_proj.out\", "
    "\"model.layers.*.self_attn.v_proj.out\", \"model.layers.*.self_attn.scaled_dot_product_attention.out\", "
    "\"model.layers.*.self_attn.scaled_dot_product_attention.logsumexp\", \"model.layers.*.mlp.gate_proj.out\", "
    "\"model.layers.*.mlp.down_proj.out\"]";

SimulationResult run(const std::string& parallelism, const std::string& recompute) {
  const Scenario scenario = parse_scenario(
      "model: {hf_config: ../hf-configs/llama-3-8b.json, seq_len: 8192, attention: flash}\n"
      "training: {batch_size: 2, precision: mixed, optimizer: adamw, optimizer_impl: foreach}\n"
      "platform: grand-teton-h100-96gb.yaml\n"
      "framework: {expandable_segments: true}\n"
      "parallelism: {nodes: 1, gpus_per_node: 8, " + parallelism + "}\n"
      "strategy:\n  name: sac\n  rules:\n    - select: {modules: [\"model.layers\"]}\n      recompute: {" + recompute + ", keep: " + kKeep + "}\n",
      "t.yaml", kValidation);
  const PreparedScenario prepared(scenario);
  const RunOutcome outcome = run_scenario(prepared, scenario.strategy, 2, Isolation::child_process);
  return std::get<CompletedRun>(outcome).result;
}

// At the peak (the loss's backward) FSDP2 and selective checkpointing hold, over ZeRO-3 and a
// checkpoints rule:
//  + each of the 32 layers' down_proj output (2 x 8192 x 4096 bf16), cached until its block's
//    backward ends;
//  - ZeRO-3's bf16 parameter and gradient partitions (2 + 2 bytes x 8,030,261,248 / 8): FSDP2's
//    sharded parameters are the fp32 masters, its sharded gradients do not exist yet;
//  + the root's embedding table (128256 x 4096 bf16), gathered through the step (ZeRO-3 had
//    gathered the output layer's for the backward already, as the root has);
//  + the last layer's parameters (218,112,000 bf16), not resharded after its forward.
TEST(TorchtitanMemory, FsdpAndSelectiveCheckpointingHoldWhatTheCodeHolds) {
  // ZeRO-3 releasing every parameter after each pass's use (no DeepSpeed reuse distance), as FSDP2 reshards.
  const SimulationResult before = run("zero: {stage: 3, overlap_comm: true, reduce_bucket_size: 218112000, stage3_max_reuse_distance: 0}", "mode: checkpoints");
  const SimulationResult after = run("fsdp: {units: [\"model.layers.*\"], reshard_after_forward: all_but_last, sharded_dtype: fp32, reduce_dtype: fp32}",
                                     "mode: selective, blocks: [\"model.layers.*\"]");
  ASSERT_TRUE(before.fits());
  ASSERT_TRUE(after.fits());
  const std::int64_t parameters = 8'030'261'248;
  const std::int64_t down_proj = std::int64_t{2} * 8192 * 4096 * 2;
  const std::int64_t expected = 32 * down_proj - 4 * parameters / 8 + std::int64_t{128256} * 4096 * 2 + std::int64_t{218'112'000} * 2;
  EXPECT_EQ(expected, 1'766'733'824);
  EXPECT_EQ(after.peak_bytes - before.peak_bytes, expected);
  // FSDP2's other streams hold their own segments: at least the fp32 sharded gradients
  // (4 bytes x parameters / 8) and the root's all-gather buffer (its 1,050,677,248 parameters
  // in bf16) beyond what the compute stream's tensors take.
  EXPECT_GT(after.device.peak_reserved - after.device.peak_allocated, 4 * parameters / 8 + std::int64_t{1'050'677'248} * 2);
}

}  // namespace
}  // namespace comptrain::sim
