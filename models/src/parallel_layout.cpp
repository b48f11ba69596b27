#include "comptrain/models/parallel_layout.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace comptrain::models {

std::string_view to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved: return "interleaved";
    case PipelineSchedule::zero_bubble: return "zero_bubble";
  }
  return "unknown";
}

std::optional<PipelineSchedule> pipeline_schedule_from_string(std::string_view text) {
  for (const PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                          PipelineSchedule::interleaved, PipelineSchedule::zero_bubble}) {
    if (text == to_string(schedule)) return schedule;
  }
  return std::nullopt;
}

namespace {

struct NamedDegree {
  const char* field;
  int value;
};

// The degrees in the order of their scenario keys.
std::vector<NamedDegree> degrees_of(const ParallelLayout& layout) {
  return {{"tensor", layout.tensor},
          {"pipeline", layout.pipeline},
          {"context", layout.context},
          {"expert", layout.expert},
          {"virtual_stages", layout.virtual_stages}};
}

void require_degrees(const ParallelLayout& layout) {
  for (const NamedDegree& degree : degrees_of(layout)) {
    if (degree.value < 1) {
      throw std::invalid_argument(fmt::format("parallel layout: {} is {}; expected a degree >= 1", degree.field, degree.value));
    }
  }
}

// The key a T x C x P that does not divide the GPUs is reported at: the outermost degree of the
// product that is not 1, the one a reader most likely set last.
const char* product_field(const ParallelLayout& layout) {
  if (layout.pipeline > 1) return "pipeline";
  if (layout.context > 1) return "context";
  return "tensor";
}

// DeepSpeed's partition_uniform (microsoft/DeepSpeed@38327e0 deepspeed/runtime/utils.py:562-580),
// which Megatron-DeepSpeed's PipelineModule uses for partition_method "uniform": every part gets
// items / parts, and the first items mod parts parts one more (its loop adds 1 to every boundary
// after part i for i < residual). With fewer items than parts the first `items` parts get one
// and the rest none; stage_layers refuses that case before calling.
std::vector<int> partition_uniform(int items, int parts) {
  const int base = items / parts;
  const int residual = items % parts;
  std::vector<int> sizes(static_cast<std::size_t>(parts), base);
  for (int part = 0; part < residual; ++part) sizes[static_cast<std::size_t>(part)] += 1;
  return sizes;
}

}  // namespace

std::vector<LayoutProblem> check_layout(const ParallelLayout& layout, const LayoutModel& model, int gpus) {
  std::vector<LayoutProblem> problems;
  auto report = [&problems](std::string field, std::string message) {
    problems.push_back(LayoutProblem{std::move(field), std::move(message)});
  };

  // Degrees below 1: the other rules divide by them, so these are reported alone.
  for (const NamedDegree& degree : degrees_of(layout)) {
    if (degree.value < 1) report(degree.field, fmt::format("{} is {}; expected a degree >= 1", degree.field, degree.value));
  }
  if (!problems.empty()) return problems;

  const int tensor = layout.tensor;
  const int pipeline = layout.pipeline;
  const int context = layout.context;
  const int expert = layout.expert;
  const int virtual_stages = layout.virtual_stages;
  const long long model_parallel = static_cast<long long>(tensor) * context * pipeline;

  // D = GPUs / (T x C x P): the data-parallel degree is what the GPU count leaves.
  std::optional<long long> data;
  if (gpus < 1 || gpus % model_parallel != 0) {
    report(product_field(layout),
           fmt::format("tensor x context x pipeline = {} x {} x {} = {} does not divide the {} GPUs; expected a product that "
                       "divides the GPU count (the data-parallel degree is GPUs / product)",
                       tensor, context, pipeline, model_parallel, gpus));
  } else {
    data = gpus / model_parallel;
  }

  // Tensor parallelism splits attention by whole heads: the QKV projection is column-split per
  // head, and with grouped-query attention per KV head (shared/reference/parallelism.md §1;
  // NVIDIA/Megatron-LM@d98e8a6 megatron/core/tensor_parallel/layers.py).
  if (model.heads > 0) {
    const int kv_heads = model.kv_heads > 0 ? model.kv_heads : model.heads;
    const std::string expected = fmt::format(
        "expected a tensor degree that divides both the {} heads and the {} KV heads", model.heads, kv_heads);
    if (model.heads % tensor != 0) {
      report("tensor", fmt::format("{} does not divide the {} heads; {}", tensor, model.heads, expected));
    } else if (kv_heads % tensor != 0) {
      report("tensor", fmt::format("{} does not divide the {} KV heads; {}", tensor, kv_heads, expected));
    }
  }

  // Expert parallelism splits the routed experts over E ranks of the D x C ranks that share a
  // tensor and pipeline index (Megatron's MoE parallel folding: megatron/core/transformer/moe/
  // README.md:324-345 at NVIDIA/Megatron-LM@d98e8a6).
  if (expert > 1) {
    if (model.experts == 0) {
      report("expert", fmt::format("expert is {} but the model is dense (no routed experts); expected expert 1 for a "
                                   "dense model",
                                   expert));
    } else if (model.experts % expert != 0) {
      report("expert", fmt::format("{} does not divide the {} experts; expected an expert degree that divides the "
                                   "experts per MoE layer",
                                   expert, model.experts));
    }
    if (data && (*data * context) % expert != 0) {
      report("expert", fmt::format("{} does not divide the {} data x context ranks ({} x {}) it splits; expected an "
                                   "expert degree that divides data x context",
                                   expert, *data * context, *data, context));
    }
  }

  // The experts' tensor parallelism: Megatron's default, the layers' degree, is the one modelled
  // (ETP x EP within T x D x C, the groups of rank_groups); another value is MoE parallel folding.
  if (layout.expert_tensor != 0 && layout.expert_tensor != tensor) {
    report("expert_tensor", fmt::format("{} differs from tensor ({}); only the experts' tensor parallelism equal to the layers' (Megatron-LM's "
                                        "default) is modelled, not MoE parallel folding; expected {} or no expert_tensor",
                                        layout.expert_tensor, tensor, tensor));
  }

  // Context parallelism with Megatron's load balancing cuts the sequence into 2C equal chunks,
  // rank r keeping chunks r and 2C-1-r (NVIDIA/Megatron-LM@d98e8a6 megatron/core/utils.py:2504-2560).
  if (context > 1 && model.seq_len > 0 && model.seq_len % (2LL * context) != 0) {
    report("context", fmt::format("2 x {} = {} does not divide the sequence length {}; expected 2 x context to divide "
                                  "the sequence (load-balanced chunks: 2 per context rank)",
                                  context, 2 * context, model.seq_len));
  }

  // Every virtual stage needs at least one layer.
  const long long stages = static_cast<long long>(pipeline) * virtual_stages;
  if (model.layers > 0 && stages > model.layers) {
    if (virtual_stages > 1) {
      report("virtual_stages", fmt::format("pipeline x virtual_stages = {} x {} = {} stages exceed the {} layers; "
                                           "expected at most one stage per layer",
                                           pipeline, virtual_stages, stages, model.layers));
    } else {
      report("pipeline", fmt::format("{} pipeline stages exceed the {} layers; expected at most one stage per layer",
                                     pipeline, model.layers));
    }
  }

  // Model chunks per rank are the interleaved schedule's; it needs a pipeline and two chunks or
  // more (with one chunk Megatron's interleaved code runs 1F1B with a longer warm-up).
  if (layout.schedule == PipelineSchedule::interleaved) {
    if (pipeline == 1) {
      report("pipeline_schedule", "the interleaved schedule needs pipeline > 1, and pipeline is 1; expected pipeline "
                                  ">= 2, or no pipeline schedule to choose");
    } else if (virtual_stages < 2) {
      report("virtual_stages", fmt::format("virtual_stages is {}; expected virtual_stages >= 2 for the interleaved "
                                           "schedule; use 1f1b for one chunk per rank",
                                           virtual_stages));
    }
  } else if (virtual_stages > 1) {
    report("virtual_stages", fmt::format("virtual_stages is {} with the {} schedule; expected virtual_stages 1, or the "
                                         "interleaved schedule for model chunks",
                                         virtual_stages, to_string(layout.schedule)));
  }

  if (layout.pipeline_scatter_gather && (layout.pipeline == 1 || tensor == 1 || layout.sequence_parallel)) {
    report("pipeline_scatter_gather",
           layout.pipeline == 1 ? "pipeline_scatter_gather splits the tensors sent between pipeline stages, and pipeline is 1; expected pipeline > 1"
           : tensor == 1        ? "pipeline_scatter_gather splits a pipeline boundary tensor over the tensor-parallel ranks, and tensor is 1; "
                                  "expected tensor > 1"
                                : "pipeline_scatter_gather splits a pipeline boundary tensor over the tensor-parallel ranks, which sequence "
                                  "parallelism has split already; expected sequence_parallel false with it");
  }
  // Megatron-LM asserts it (megatron/training/arguments.py, "Tensor parallel communication/GEMM
  // overlap can happen only when sequence parallelism is enabled"); without tensor parallelism
  // there is nothing to overlap.
  if (layout.tp_comm_overlap && !layout.sequence_parallel) {
    report("tp_comm_overlap", tensor == 1 ? "tp_comm_overlap overlaps the tensor-parallel collectives with their GEMMs, and tensor is 1; expected tensor > 1 "
                                            "with sequence_parallel"
                                          : "tp_comm_overlap needs sequence parallelism (Megatron-LM asserts it); expected sequence_parallel true with it");
  }
  // Megatron drops sequence parallelism without tensor parallelism, with a warning
  // (NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py:1433-1437); asking for it is a
  // scenario mistake here.
  if (layout.sequence_parallel && tensor == 1) {
    report("sequence_parallel", "sequence_parallel splits the tensor-parallel group's activations, and tensor is 1; "
                                "expected tensor > 1 with sequence_parallel");
  }

  if (!layout.pipeline_layers.empty()) {
    const std::size_t entries = layout.pipeline_layers.size();
    if (static_cast<long long>(entries) != stages) {
      report("pipeline_layers", fmt::format("{} entries; expected pipeline x virtual_stages = {} x {} = {}", entries,
                                            pipeline, virtual_stages, stages));
    }
    long long sum = 0;
    for (std::size_t i = 0; i < entries; ++i) {
      const int count = layout.pipeline_layers[i];
      if (count < 1) {
        report("pipeline_layers", fmt::format("entry {} is {}; expected every stage to have at least 1 layer", i, count));
      }
      sum += count;
    }
    if (model.layers > 0 && sum != model.layers) {
      report("pipeline_layers", fmt::format("the entries sum to {} layers; expected the model's {}", sum, model.layers));
    }
  }
  return problems;
}

int data_parallel_degree(const ParallelLayout& layout, int gpus) {
  require_degrees(layout);
  const long long model_parallel = static_cast<long long>(layout.tensor) * layout.context * layout.pipeline;
  if (gpus < 1 || gpus % model_parallel != 0) {
    throw std::invalid_argument(fmt::format("parallel layout: tensor x context x pipeline = {} does not divide the {} GPUs",
                                            model_parallel, gpus));
  }
  return static_cast<int>(gpus / model_parallel);
}

RankGroups rank_groups(const ParallelLayout& layout, int gpus, ParallelGroup group) {
  const int data = data_parallel_degree(layout, gpus);
  const int tensor = layout.tensor;
  const int context = layout.context;
  // The D x C ranks of one tensor and pipeline index, T apart; the expert index splits them
  // into D x C / E blocks of E consecutive members.
  const int data_context = data * context;
  if ((group == ParallelGroup::expert || group == ParallelGroup::expert_data) && data_context % layout.expert != 0) {
    throw std::invalid_argument(fmt::format("parallel layout: expert {} does not divide the {} data x context ranks",
                                            layout.expert, data_context));
  }
  switch (group) {
    case ParallelGroup::tensor: return RankGroups{tensor, 1};
    case ParallelGroup::context: return RankGroups{context, tensor};
    case ParallelGroup::data: return RankGroups{data_context, tensor};
    case ParallelGroup::expert: return RankGroups{layout.expert, tensor};
    case ParallelGroup::expert_data: return RankGroups{data_context / layout.expert, tensor * layout.expert};
    case ParallelGroup::pipeline: return RankGroups{layout.pipeline, tensor * context * data};
  }
  throw std::invalid_argument("parallel layout: unknown group");
}

std::vector<int> stage_layers(const ParallelLayout& layout, int layers) {
  require_degrees(layout);
  if (!layout.pipeline_layers.empty()) return layout.pipeline_layers;
  const long long stages = static_cast<long long>(layout.pipeline) * layout.virtual_stages;
  if (layers < stages) {
    throw std::invalid_argument(
        fmt::format("parallel layout: {} layers for {} pipeline stages; expected at least one layer per stage", layers, stages));
  }
  return partition_uniform(layers, static_cast<int>(stages));
}

}  // namespace comptrain::models
