#pragma once
// Another tool's training job as a comptrain scenario (`comptrain import`): a Megatron-LM
// argument list (pretrain_gpt.py's flags, optionally after torchrun's) or a torchtitan job file
// (its TOML train config). The scenario is written whole: the model as an inline Hugging Face
// config (or the zoo's `gpt`), the training keys, the parallelism section with the layout, the
// recomputation as a strategy. What the job says that comptrain does not model, or that the
// import had to assume, is listed in `notes` (and as comments at the scenario's top), never
// dropped silently. sim/README.md, "Importing jobs", has the mapping table and its sources.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace comptrain::sim {

struct JobImportOptions {
  std::string platform;              // the scenario's platform (a shipped name or a .yaml path); required
  std::optional<int> nodes;          // the job's nodes (else torchrun's --nnodes, else 1)
  std::optional<int> gpus_per_node;  // GPUs per node (else torchrun's --nproc-per-node, else the platform's)
  std::optional<long long> vocab;    // the tokenizer's vocabulary when the job does not state it
};

struct ImportedScenario {
  std::string yaml;                // the scenario, comments first
  std::vector<std::string> notes;  // what was assumed or is not modelled, one line each
};

// Megatron-LM's arguments (megatron/training/arguments.py), as on a command line or in a launch
// script: `--key value`, `--key=value`, flags; backslash-newlines, quotes and # comments as a
// shell reads them. Unknown arguments are noted, not errors; a known one with a bad value, or a
// model the arguments do not determine, is an InputError naming `source`, the line and the
// argument.
ImportedScenario import_megatron_arguments(std::string_view text, const std::string& source, const JobImportOptions& options);

// A torchtitan train config (TOML: [model] name and flavor, [training], [parallelism],
// [activation_checkpoint], [optimizer]; pytorch/torchtitan@4a950eaa torchtitan/config/job_config.py,
// the last release with TOML configs). InputError naming `source`, the line and the key.
ImportedScenario import_torchtitan_toml(std::string_view text, const std::string& source, const JobImportOptions& options);

}  // namespace comptrain::sim
