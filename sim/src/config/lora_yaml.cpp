// model.lora: LoRA / QLoRA fine-tuning of a decoder (zoo::LoraSpec; traces/zoo/README.md, "LoRA
// and QLoRA"), under the names of PEFT's LoraConfig a user knows: rank (r), alpha (lora_alpha),
// dropout (lora_dropout), targets (target_modules: a list of module-name suffixes, or
// all-linear) and base: nf4 for QLoRA's 4-bit frozen weights (bitsandbytes' bnb_4bit_quant_type).

#include "scenario_reader.hpp"

namespace comptrain::sim {

zoo::LoraSpec ScenarioReader::read_lora(const YAML::Node& node) const {
  require_map(node, "model.lora");
  check_keys(node, "model.lora", {"rank", "alpha", "dropout", "targets", "base"});
  zoo::LoraSpec lora;
  // PEFT's own limit is r > 0; 65,536 is far above any published rank (up to the hidden size).
  if (const YAML::Node r = node["rank"]) lora.rank = bounded_integer(r, "model.lora.rank", 1, 65'536);
  if (const YAML::Node a = node["alpha"]) {
    lora.alpha = number(a, "model.lora.alpha", [](double v) { return v > 0; }, "a positive number (scaling = alpha / rank)");
  }
  if (const YAML::Node d = node["dropout"]) {
    lora.dropout = number(d, "model.lora.dropout", [](double v) { return v >= 0 && v < 1; }, "a probability in [0, 1)");
  }
  if (const YAML::Node t = node["targets"]) {
    if (t.IsScalar()) {
      if (t.Scalar() != "all-linear") {
        throw InputError(where(t.Mark()) + "'model.lora.targets' is '" + t.Scalar() +
                         "'; expected all-linear or a list of module names such as [q_proj, v_proj]");
      }
      lora.all_linear = true;
    } else {
      if (!t.IsSequence() || t.size() == 0) {
        throw InputError(where(t.Mark()) + "'model.lora.targets' must be all-linear or a non-empty list of module names such as [q_proj, v_proj]");
      }
      for (const auto& item : t) lora.targets.push_back(scalar(item, "model.lora.targets"));
    }
  }
  if (const YAML::Node b = node["base"]) {
    const std::string text = scalar(b, "model.lora.base");
    if (text == "nf4") {
      lora.nf4 = true;
    } else if (text != "model") {
      throw InputError(where(b.Mark()) + "'model.lora.base' is '" + text +
                       "'; expected nf4 (QLoRA: bitsandbytes 4-bit NormalFloat with double quantisation) or model (the frozen weights in the "
                       "model's dtype, the default)");
    }
  }
  return lora;
}

}  // namespace comptrain::sim
