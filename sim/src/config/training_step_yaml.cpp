// training.loss and training.optimizer_in_backward, and the checks that tie the optimizer to the
// rest of the scenario (scenarios/README.md, "Training"; traces/zoo/README.md, "Loss kinds",
// "Optimizers outside torch.optim", "The step in the backward pass").

#include <string>
#include <vector>

#include "comptrain/support/did_you_mean.hpp"
#include "config/scenario_reader.hpp"

namespace comptrain::sim {

// training.loss: {kind: NAME, chunks: N, upcast: BOOL, compiled: BOOL}; chunks only with kind
// chunked, upcast and compiled only with kind cross_entropy, and not together.
zoo::LossSpec ScenarioReader::read_loss(const YAML::Node& node) const {
  const std::string section = "training.loss";
  if (!node.IsMap()) {
    throw InputError(where(node.Mark()) + "'" + section + "' must be a mapping, e.g. {kind: fused_linear_cross_entropy} or {kind: chunked, chunks: 8}");
  }
  check_keys(node, section, {"kind", "chunks", "upcast", "compiled"});
  const YAML::Node kind = required(node, "kind", section);
  const std::string text = scalar(kind, section + ".kind");
  const auto parsed = zoo::parse_loss_kind(text);
  const std::vector<std::string_view> names = zoo::loss_kind_names();
  if (!parsed) {
    std::string list;
    for (std::string_view n : names) list += (list.empty() ? "" : ", ") + std::string(n);
    throw InputError(where(kind.Mark()) + "unknown loss kind '" + text + "' in '" + section + ".kind'; " +
                     did_you_mean_text(did_you_mean(text, std::span<const std::string_view>(names))) + "expected one of: " + list);
  }
  zoo::LossSpec loss;
  loss.kind = *parsed;
  if (const auto chunks = optional_positive(node, "chunks", section)) {
    if (loss.kind != zoo::LossKind::chunked) {
      throw InputError(where(node["chunks"].Mark()) + "'" + section + ".chunks' applies to kind chunked, not " + text);
    }
    loss.chunks = *chunks;  // at most seq_len: the zoo checks it against the model
  }
  if (const YAML::Node upcast = node["upcast"]) {
    if (loss.kind != zoo::LossKind::cross_entropy) {
      throw InputError(where(upcast.Mark()) + "'" + section + ".upcast' applies to kind cross_entropy, not " + text);
    }
    loss.upcast = boolean(upcast, section + ".upcast");
  }
  if (const YAML::Node compiled = node["compiled"]) {
    if (loss.kind != zoo::LossKind::cross_entropy) {
      throw InputError(where(compiled.Mark()) + "'" + section + ".compiled' applies to kind cross_entropy, not " + text);
    }
    loss.compiled = boolean(compiled, section + ".compiled");
    if (loss.compiled && loss.upcast) {
      throw InputError(where(compiled.Mark()) + "'" + section + ".compiled' upcasts the logits in its kernels; expected no '" + section +
                       ".upcast' with it");
    }
  }
  return loss;
}

void ScenarioReader::read_loss_and_step(const YAML::Node& training, const Scenario& scenario, zoo::ModelSpec& request) const {
  if (const YAML::Node loss = training["loss"]) request.loss = read_loss(loss);
  const bool library = request.optimizer && !zoo::is_torch_optimizer(*request.optimizer);
  if (library && training["optimizer_impl"]) {
    throw InputError(where(training["optimizer_impl"].Mark()) + "'training.optimizer_impl' applies to torch.optim's sgd, momentum, adam and adamw; " +
                     std::string(zoo::to_string(*request.optimizer)) + " runs its own kernels");
  }
  // DeepSpeed's optimizer offload steps the states with its own CPU Adam (12 bytes per
  // parameter on the host): not another optimizer's.
  bool offload = scenario.parallelism && scenario.parallelism->data.offload_optimizer;
  if (scenario.plan) {
    for (const auto& place : scenario.plan->offload_optimizer) offload = offload || place.has_value();
  }
  if (offload && request.optimizer && *request.optimizer != zoo::Optimizer::adam && *request.optimizer != zoo::Optimizer::adamw) {
    throw InputError(where(training["optimizer"].Mark()) + "'training.optimizer' is " + std::string(zoo::to_string(*request.optimizer)) +
                     " with an optimizer offload (parallelism.zero.offload_optimizer or plan.offload_optimizer), which steps DeepSpeed's "
                     "CPU Adam; expected adam or adamw");
  }
  const YAML::Node in_backward = training["optimizer_in_backward"];
  if (!in_backward) return;
  request.optimizer_in_backward = boolean(in_backward, "training.optimizer_in_backward");
  if (!request.optimizer_in_backward) return;
  // Megatron-LM steps its optimizer once the backward pass is over, on its DDP's main_grad buffer.
  if (request.megatron) {
    throw InputError(where(in_backward.Mark()) + "'training.optimizer_in_backward' with model.implementation megatron: Megatron-LM steps its "
                                                 "optimizer after the backward pass, on its DDP's main_grad buffer; expected optimizer_in_backward: false");
  }
  // torchtune refuses it (recipes' _setup_optimizer / setup: "Gradient accumulation is not
  // supported with optimizer in bwd"): the step would run on a partial gradient.
  if (scenario.accumulation_steps > 1) {
    throw InputError(where(in_backward.Mark()) + "'training.optimizer_in_backward' with gradient_accumulation_steps " +
                     std::to_string(scenario.accumulation_steps) + ": the step runs on each micro-step's gradient; expected gradient_accumulation_steps 1");
  }
  if (scenario.parallelism || (scenario.plan && scenario.plan->searches_clusters())) {
    throw InputError(where(in_backward.Mark()) + "'training.optimizer_in_backward' with a parallelism section or a plan's cluster search is not "
                                                 "modelled (the steps would have to wait for each gradient's reduction); expected a single-GPU scenario");
  }
}

}  // namespace comptrain::sim
