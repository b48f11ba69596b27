#pragma once
// The model zoo: traces of one training iteration of well-known networks, generated from
// their definitions (torchvision for the CNNs, the original papers / Hugging Face configs for
// the transformers), with the backward pass and the optimizer step.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::zoo {

enum class Precision {
  fp32,   // everything in fp32
  mixed,  // 16-bit (fp16) weights, activations and gradients; fp32 master weights and
          // optimizer state (the ZeRO paper's 2 + 2 + 12 bytes per parameter with Adam)
};
enum class Optimizer { sgd, momentum, adam };

std::string_view to_string(Precision precision);
std::string_view to_string(Optimizer optimizer);
std::optional<Precision> parse_precision(std::string_view text);
std::optional<Optimizer> parse_optimizer(std::string_view text);

// Which model, trained how: everything but the batch size. Unset optional fields take the
// model's defaults. A scenario holds one of these; its batch size lives in the scenario alone.
struct ModelSpec {
  std::string model;  // a name from list_models()
  Precision precision = Precision::fp32;
  std::optional<Optimizer> optimizer;  // default: momentum for CNNs, adam for transformers
  // Transformer shape (bert-*, gpt2, gpt only; an error for the CNNs).
  std::optional<std::int64_t> layers;
  std::optional<std::int64_t> hidden;
  std::optional<std::int64_t> heads;
  std::optional<std::int64_t> seq_len;
  std::optional<std::int64_t> vocab;
};

// What to generate: a model at a batch size.
struct ModelRequest : ModelSpec {
  std::int64_t batch_size = 1;
};

struct ModelInfo {
  std::string name;
  std::string description;
  bool transformer = false;
};

std::vector<ModelInfo> list_models();

// Throws InputError naming the field when the model is unknown or an option is out of range
// (batch < 1, heads not dividing hidden, ...).
traces::Trace build_model(const ModelRequest& request);

}  // namespace comptrain::zoo
