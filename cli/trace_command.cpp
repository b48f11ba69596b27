#include "trace_command.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/trace_import/import.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "options.hpp"
#include "trace_import_command.hpp"
#include "trace_report.hpp"

namespace comptrain::cli {
namespace {

bool has_extension(const std::string& text, std::initializer_list<const char*> extensions) {
  const std::string ext = std::filesystem::path(text).extension().string();
  for (const char* e : extensions) {
    if (ext == e) return true;
  }
  return false;
}

std::vector<std::string> names(const std::vector<std::string_view>& views) { return {views.begin(), views.end()}; }

// Which trace to work on, and the command-line overrides of its scenario.
struct TraceSelection {
  std::string target;  // zoo name, trace .json, scenario .yaml; empty: the embedded default scenario
  std::optional<std::int64_t> batch;
  std::string precision;
  std::string optimizer;
  std::string optimizer_impl;
  std::string attention;
  std::optional<std::int64_t> layers, hidden, heads, seq_len, vocab;

  void add_options(CLI::App& command) {
    command.add_option("target", target,
                       "A zoo model name (see `comptrain trace list`), a trace file (.json), a Chakra trace (.et) or a scenario (.yaml); "
                       "default: the embedded default scenario");
    add_positive_int(command, "-b,--batch", batch, "Batch size (rescales a trace file)");
    add_choice(command, "--precision", precision,
               "fp32; amp-fp16 or amp-bf16 (torch.autocast: fp32 weights, gradients and state, 16-bit copies of the weights, "
               "autocast's per-op dtypes); fp16 or bf16 (model.half()/.bfloat16(): everything 16-bit); mixed (Megatron-style: "
               "16-bit weights and gradients, fp32 master weights and state). See traces/zoo/README.md",
               names(zoo::precision_names()));
    add_choice(command, "--optimizer", optimizer,
               "sgd, momentum, adam or adamw (torch.optim; default: momentum for CNNs, adam for transformers); adam8bit, adamw8bit, "
               "paged_adamw or paged_adamw8bit (bitsandbytes); adafactor (Hugging Face's). See traces/zoo/README.md",
               names(zoo::optimizer_names()));
    add_choice(command, "--optimizer-impl", optimizer_impl,
               "foreach (PyTorch 2's default on CUDA), fused or for-loop: which temporaries the step makes (torch.optim's optimizers only)",
               names(zoo::optimizer_impl_names()));
    auto* shape = command.add_option_group("transformer shape", "For bert-base, bert-large, gpt2, gpt and llama");
    add_choice(*shape, "--attention", attention,
               "fused-softmax (default: Megatron-style scale-mask-softmax), eager (Hugging Face's eager attention) or flash (one fused "
               "kernel, no S x S tensors; also sdpa-flash; llama's default); sdpa-mem-efficient (llama only: SDPA's memory-efficient "
               "kernel)",
               [] {
                 std::vector<std::string> choices = names(zoo::attention_names());
                 choices.emplace_back("sdpa-flash");  // zoo::parse_attention's other name for flash
                 return choices;
               }());
    add_positive_int(*shape, "--layers", layers, "Transformer layers");
    add_positive_int(*shape, "--hidden", hidden, "Hidden size");
    add_positive_int(*shape, "--heads", heads, "Attention heads");
    add_positive_int(*shape, "--seq-len", seq_len, "Sequence length");
    add_positive_int(*shape, "--vocab", vocab, "Vocabulary size");
  }

  bool overrides_model() const {
    return !precision.empty() || !optimizer.empty() || !optimizer_impl.empty() || !attention.empty() || layers || hidden || heads || seq_len || vocab;
  }

  bool is_trace_file() const { return has_extension(target, {".json", ".et"}); }

  traces::Trace load() const {
    if (is_trace_file()) {
      if (overrides_model()) {
        throw InputError("'" + target + "' is a trace file: only --batch applies to it (its model, precision and optimizer are fixed)");
      }
      // A .et is read as `trace import` reads it (a Chakra trace comptrain wrote gives back its
      // trace; any other what its nodes hold).
      traces::Trace trace = has_extension(target, {".et"}) ? trace_import::import_file(target, {}).trace : traces::read_trace_file(target);
      return batch ? trace.rescaled(*batch) : trace;
    }
    return sim::build_trace(scenario());
  }

  // The traces a run of the target builds: a pipeline scenario's virtual stages, else load()'s.
  std::vector<traces::Trace> load_stages() const {
    std::vector<traces::Trace> one;
    if (is_trace_file()) {
      one.push_back(load());
      return one;
    }
    const sim::Scenario s = scenario();  // read once
    if (s.zoo_model && sim::is_pipeline(s)) return sim::virtual_stage_traces(s, s.batch_size.value_or(1));
    one.push_back(sim::build_trace(s));
    return one;
  }

  // The scenario of a zoo model or .yaml target, with the command line's overrides.
  sim::Scenario scenario() const {
    sim::Scenario scenario;
    if (target.empty()) {
      scenario = sim::default_scenario();
    } else if (has_extension(target, {".yaml", ".yml"})) {
      scenario = sim::load_scenario_file(target);
    } else {
      scenario.source = "command line";
      scenario.name = target;
      scenario.zoo_model = zoo::ModelSpec{};
      scenario.zoo_model->model = target;
    }
    if (batch) scenario.batch_size = batch;
    if (scenario.trace_file) {
      if (overrides_model()) throw InputError(scenario.source + ": the scenario's model is a trace file: only --batch applies");
      return scenario;
    }
    zoo::ModelSpec& request = *scenario.zoo_model;
    if (!precision.empty()) request.precision = *zoo::parse_precision(precision);
    if (!optimizer.empty()) request.optimizer = zoo::parse_optimizer(optimizer);
    if (!optimizer_impl.empty()) {
      if (request.optimizer && !zoo::is_torch_optimizer(*request.optimizer)) {
        throw InputError("--optimizer-impl applies to torch.optim's sgd, momentum, adam and adamw; " + std::string(zoo::to_string(*request.optimizer)) +
                         " runs its own kernels");
      }
      request.optimizer_impl = *zoo::parse_optimizer_impl(optimizer_impl);
    }
    if (!attention.empty()) request.attention = zoo::parse_attention(attention);
    for (auto [field, value] : {std::pair{&request.layers, layers}, {&request.hidden, hidden}, {&request.heads, heads},
                                {&request.seq_len, seq_len}, {&request.vocab, vocab}}) {
      if (value) *field = value;
    }
    return scenario;
  }
};

}  // namespace

std::function<int()> add_trace_command(CLI::App& app) {
  auto* trace = app.add_subcommand("trace", "Inspect zoo models and trace files: counts, FLOPs, memory accounting");
  trace->require_subcommand(1);

  auto* list = trace->add_subcommand("list", "List the models of the zoo");

  auto show_selection = std::make_shared<TraceSelection>();
  auto show_json = std::make_shared<bool>(false);
  auto show_largest = std::make_shared<std::size_t>(8);
  auto* show = trace->add_subcommand("show", "Print a trace's op count, parameters, FLOPs, static memory breakdown");
  show_selection->add_options(*show);
  show->add_flag("--json", *show_json, "Print the report as JSON");
  add_nonnegative_int(*show, "--largest", *show_largest, "How many of the largest tensors live at the peak to list")
      ->capture_default_str();

  auto export_selection = std::make_shared<TraceSelection>();
  auto output = std::make_shared<std::string>();
  auto export_format = std::make_shared<std::string>();
  auto* exporter = trace->add_subcommand("export",
                                         "Write a trace file (JSON) or a Chakra execution trace (.et)\n"
                                         "The JSON trace format is traces/FORMAT.md's.");
  export_selection->add_options(*exporter);
  exporter->add_option("-o,--output", *output, "Output file; - for standard output")->required();
  add_choice(*exporter, "--format", *export_format,
             "json: comptrain's trace format; chakra: MLCommons Chakra's binary execution trace (.et; what ASTRA-sim reads, and "
             "`comptrain trace import` reads back to the same trace; traces/README.md, \"Chakra's binary trace\"). Default: chakra when the "
             "output ends in .et, json otherwise",
             {"json", "chakra"});

  const std::function<int()> import_action = add_trace_import_command(*trace);

  // The names a scenario's patterns are matched against (strategy rules, framework.compile.modules,
  // parallelism.fsdp.units, training.float8.skip), and which of them a pattern matches.
  auto names_selection = std::make_shared<TraceSelection>();
  auto module_pattern = std::make_shared<std::string>();
  auto name_pattern = std::make_shared<std::string>();
  auto only_ops = std::make_shared<bool>(false);
  auto only_tensors = std::make_shared<bool>(false);
  auto* names_command = trace->add_subcommand("names",
                                              "List a trace's op and tensor names, or those a pattern matches\n"
                                              "One per line, 'op NAME' then 'tensor NAME' in trace order: what the module patterns (a strategy rule's "
                                              "select.modules and recompute blocks, framework.compile.modules, parallelism.fsdp.units, "
                                              "training.float8.skip) and the name patterns (select.names, recompute keep) of a scenario are matched "
                                              "against (models/strategies/README.md, \"Module patterns\"). A pipeline scenario's names are its stages' (with their "
                                              "send and receive ops, recv_forward, ...), each once, ops first within each stage.");
  names_selection->add_options(*names_command);
  auto* by_module = names_command->add_option("--module", *module_pattern,
                                              "Only the names a module pattern matches ('layers.*.mlp', 'model.layers.[0-3]': components, `*` "
                                              "within one, `**` for any number, numeric ranges)");
  names_command->add_option("--name", *name_pattern,
                            "Only the names a name pattern matches (a name, or fnmatch's `*`, `?`, `[...]` over the whole name: "
                            "'model.layers.*.add_1.out')")
      ->excludes(by_module);
  auto* ops_flag = names_command->add_flag("--ops", *only_ops, "Only op names");
  names_command->add_flag("--tensors", *only_tensors, "Only tensor names")->excludes(ops_flag);

  return [=]() -> int {
    if (!trace->parsed()) return -1;
    if (const int code = import_action(); code >= 0) return code;
    if (list->parsed()) {
      for (const auto& model : zoo::list_models()) fmt::print("{:<12} {}\n", model.name, model.description);
      return 0;
    }
    if (show->parsed()) {
      const traces::Trace t = show_selection->load();
      const auto summary = traces::summarize(t);
      write_output("-", *show_json ? trace_report_json(t, summary) : trace_report_text(t, summary, *show_largest));
      return 0;
    }
    if (names_command->parsed()) {
      if (!module_pattern->empty()) {
        try {
          models::validate_module_pattern(*module_pattern);
        } catch (const InputError& e) {
          throw InputError(std::string("--module: ") + e.what());
        }
      }
      const std::vector<traces::Trace> stages = names_selection->load_stages();
      const auto matches = [&](const std::string& name) {
        if (!module_pattern->empty()) return models::module_pattern_matches(*module_pattern, name);
        return name_pattern->empty() || models::name_matches(*name_pattern, name);
      };
      std::string out;
      std::size_t count = 0;
      const auto emit = [&](const char* kind, const std::string& name) {
        if (!matches(name)) return;
        out += fmt::format("{:<6} {}\n", kind, name);
        ++count;
      };
      // A pipeline's stages: each name once, in model order (every stage has its own send and
      // receive ops of the same names).
      std::set<std::pair<std::string, std::string>> seen;
      for (const traces::Trace& t : stages) {
        if (!*only_tensors) {
          for (const traces::Op& op : t.ops()) {
            if (seen.emplace("op", op.name).second) emit("op", op.name);
          }
        }
        if (!*only_ops) {
          for (const traces::Tensor& tensor : t.tensors()) {
            if (seen.emplace("tensor", tensor.name).second) emit("tensor", tensor.name);
          }
        }
      }
      write_output("-", out);
      const bool filtered = !module_pattern->empty() || !name_pattern->empty();
      fmt::print(stderr, "{} name(s){}\n", count, filtered ? fmt::format(" matched by '{}'", module_pattern->empty() ? *name_pattern : *module_pattern) : "");
      // A pattern that matches nothing is what a scenario refuses (models/pattern_coverage.hpp).
      return filtered && count == 0 ? 2 : 0;
    }
    const traces::Trace t = export_selection->load();
    const bool chakra = *export_format == "chakra" || (export_format->empty() && has_extension(*output, {".et"}));
    // Text files end with a newline, as traces::write_trace_file writes them; a .et is binary.
    write_output(*output, chakra ? trace_import::trace_to_chakra_et(t) : traces::trace_to_json(t) + "\n");
    fmt::print(stderr, "wrote {} ({}{} ops, {} tensors, batch {})\n", is_standard_output(*output) ? "standard output" : *output,
               chakra ? "Chakra .et, " : "", t.ops().size(), t.tensors().size(), t.batch_size());
    return 0;
  };
}

}  // namespace comptrain::cli
