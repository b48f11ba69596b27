#include "import_command.hpp"

#include <fmt/format.h>

#include <memory>
#include <string>

#include "comptrain/sim/config/job_import.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "options.hpp"

namespace comptrain::cli {

std::function<int()> add_import_command(CLI::App& app) {
  struct Options {
    std::string input, output, from, platform;
    int nodes = 0, gpus_per_node = 0;
    std::int64_t vocab = 0;
  };
  auto options = std::make_shared<Options>();
  auto* command = app.add_subcommand("import",
                                     "Write another tool's training job as a scenario\n"
                                     "A Megatron-LM argument list (pretrain_gpt.py's flags, with torchrun's before them if any; a launch script's "
                                     "text works, its own variables, ${NAME:-default}s and $((arithmetic)) expanded, what it leaves unset an "
                                     "error) or a torchtitan TOML job file becomes a scenario with its model, batch, precision, "
                                     "parallelism layout and recomputation (and, for a Llama-shaped Megatron-LM model, Megatron's own layers: "
                                     "model.implementation megatron with the job's dropout and fusion flags; for a mixture of experts, Megatron's "
                                     "token dispatcher, allgather unless the job says alltoall, its aux-loss router, and GroupedMLP under --moe-grouped-gemm; under "
                                     "--fp8-format, Transformer Engine's delayed scaling on every linear but the output layer; under --use-megatron-fsdp, "
                                     "FSDP units per layer; for a torchtitan job, its "
                                     "torch.compile and torchao float8 converter). What the "
                                     "job sets that is not "
                                     "modelled, or that was assumed, is printed and written as comments at the scenario's top.");
  command->add_option("input", options->input, "The job: a file of Megatron-LM arguments, or a torchtitan .toml")->required();
  add_choice(*command, "--from", options->from, "The job's tool (default: torchtitan for a .toml file, else megatron)", {"megatron", "torchtitan"});
  command->add_option("--platform", options->platform, "The scenario's platform: a shipped name (scenarios/platforms/*.yaml, e.g. dgx-h100-superpod) or a platform .yaml file")
      ->required();
  command->add_option("-o,--output", options->output, "Scenario file to write (.yaml); - for standard output")->required();
  command->add_option("--nodes", options->nodes, "Nodes of the job (default: torchrun's --nnodes in the arguments, else 1)")->check(CLI::Range(1, 1'000'000));
  command->add_option("--gpus-per-node", options->gpus_per_node, "GPUs per node (default: torchrun's --nproc-per-node, else 8 with a note)")
      ->check(CLI::Range(1, 1024));
  command->add_option("--vocab", options->vocab, "The tokenizer's vocabulary, when the job does not state it (Megatron-LM's --vocab-size)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 32));

  return [command, options]() -> int {
    if (!command->parsed()) return -1;
    sim::JobImportOptions import_options;
    import_options.platform = options->platform;
    if (options->nodes > 0) import_options.nodes = options->nodes;
    if (options->gpus_per_node > 0) import_options.gpus_per_node = options->gpus_per_node;
    if (options->vocab > 0) import_options.vocab = options->vocab;
    std::string from = options->from;
    if (from.empty()) from = options->input.size() > 5 && options->input.substr(options->input.size() - 5) == ".toml" ? "torchtitan" : "megatron";
    const std::string text = read_file(options->input);
    const sim::ImportedScenario imported = from == "torchtitan" ? sim::import_torchtitan_toml(text, options->input, import_options)
                                                                : sim::import_megatron_arguments(text, options->input, import_options);
    write_output(options->output, imported.yaml);
    for (const std::string& note : imported.notes) fmt::print(stderr, "note: {}\n", note);
    fmt::print(stderr, "imported {} ({}) -> {}\n", options->input, from, is_standard_output(options->output) ? "standard output" : options->output);
    return 0;
  };
}

}  // namespace comptrain::cli
