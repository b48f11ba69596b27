// `comptrain import`: Megatron-LM argument lists and torchtitan TOML job files as scenarios
// (sim/config/job_import.hpp). Each imported scenario is read back with the scenario reader: the
// import is checked by what the simulator would take from it.

#include "comptrain/sim/config/job_import.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::AllOf;

JobImportOptions on(const std::string& platform) {
  JobImportOptions options;
  options.platform = platform;
  return options;
}

Scenario read_back(const ImportedScenario& imported) { return parse_scenario(imported.yaml, "imported.yaml", "."); }

std::string megatron_error(const std::string& arguments, const JobImportOptions& options = on("dgx-h100-superpod")) {
  try {
    import_megatron_arguments(arguments, "job.sh", options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string torchtitan_error(const std::string& toml, const JobImportOptions& options = on("dgx-h100-superpod")) {
  try {
    import_torchtitan_toml(toml, "job.toml", options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

const char* const kLlama70b =
    "torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \\\n"
    "  --num-layers 80 --hidden-size 8192 --num-attention-heads 64 --group-query-attention --num-query-groups 8 \\\n"
    "  --ffn-hidden-size 28672 --swiglu --normalization RMSNorm --position-embedding-type rope \\\n"
    "  --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 4096 --vocab-size 32000 \\\n"
    "  --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 \\\n"
    "  --sequence-parallel --use-distributed-optimizer --bf16 --recompute-activations --lr 3e-4\n";

TEST(MegatronImport, ALlamaJobBecomesItsScenario) {
  const ImportedScenario imported = import_megatron_arguments(kLlama70b, "job.sh", on("dgx-h100-superpod"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->decoder);
  const zoo::DecoderArchitecture& arch = *s.zoo_model->decoder;
  EXPECT_EQ(arch.layers, 80);
  EXPECT_EQ(arch.hidden, 8192);
  EXPECT_EQ(arch.heads, 64);
  EXPECT_EQ(arch.kv_heads, 8);
  EXPECT_EQ(arch.intermediate, 28672);
  EXPECT_EQ(arch.vocab, 32768);  // 32000 padded to a multiple of 128 x TP 8
  EXPECT_FALSE(arch.tie_embeddings);
  EXPECT_EQ(s.zoo_model->seq_len, 4096);
  EXPECT_EQ(s.zoo_model->precision, zoo::Precision::mixed);
  EXPECT_EQ(s.batch_size, 1);
  // 32 GPUs / (TP 8 x PP 4) = 1 data-parallel rank: 64 micro-batches of 1 per iteration.
  EXPECT_EQ(s.accumulation_steps, 64);
  ASSERT_TRUE(s.parallelism);
  EXPECT_EQ(s.parallelism->nodes, 4);
  EXPECT_EQ(s.parallelism->gpus_per_node, 8);
  EXPECT_EQ(s.parallelism->layout.tensor, 8);
  EXPECT_EQ(s.parallelism->layout.pipeline, 4);
  EXPECT_TRUE(s.parallelism->layout.sequence_parallel);
  EXPECT_EQ(s.parallelism->data.zero_stage, 1);  // the distributed optimizer
  EXPECT_TRUE(s.parallelism->data.grad_reduce_in_fp32);  // --bf16: Megatron's fp32 gradient buffer
  // --recompute-activations: Megatron-LM's selective recomputation, as its own setting.
  EXPECT_EQ(s.strategy.name, "megatron-selective");
  ASSERT_TRUE(s.strategy.layer_recompute);
  EXPECT_EQ(s.strategy.layer_recompute->granularity, models::LayerRecompute::Granularity::selective);
  EXPECT_TRUE(s.strategy.rules.empty());
  // Megatron's GPT layers, with its dropout and fusion defaults (none of the flags given).
  ASSERT_TRUE(s.zoo_model->megatron);
  EXPECT_EQ(s.zoo_model->megatron->hidden_dropout, 0.1);
  EXPECT_EQ(s.zoo_model->megatron->attention_dropout, 0.1);
  EXPECT_TRUE(s.zoo_model->megatron->rope_fusion);
  EXPECT_TRUE(s.zoo_model->megatron->bias_activation_fusion);
  // What is not imported is said, in the notes and in the file.
  EXPECT_THAT(imported.yaml, HasSubstr("# note: not imported"));
  EXPECT_THAT(imported.yaml, HasSubstr("--lr"));
}

// The flags that shape Megatron's layers become model.megatron's keys; a dropout that is not a
// probability is an error at its line.
TEST(MegatronImport, LayerFlagsBecomeTheMegatronKeys) {
  std::string job = kLlama70b;
  job.insert(job.find(" --lr"), " --hidden-dropout 0.0 --attention-dropout 0.05 --no-rope-fusion --no-bias-swiglu-fusion");
  const Scenario s = read_back(import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod")));
  ASSERT_TRUE(s.zoo_model && s.zoo_model->megatron);
  EXPECT_EQ(s.zoo_model->megatron->hidden_dropout, 0.0);
  EXPECT_EQ(s.zoo_model->megatron->attention_dropout, 0.05);
  EXPECT_FALSE(s.zoo_model->megatron->rope_fusion);
  EXPECT_FALSE(s.zoo_model->megatron->bias_activation_fusion);
  std::string bad = kLlama70b;
  bad.insert(bad.find(" --lr"), " --hidden-dropout 1.5");
  const std::string error = megatron_error(bad);
  EXPECT_THAT(error, HasSubstr("job.sh:"));
  EXPECT_THAT(error, HasSubstr("--hidden-dropout"));
  EXPECT_THAT(error, HasSubstr("probability"));
}

TEST(MegatronImport, AGptJobIsTheZoosGpt) {
  const ImportedScenario imported = import_megatron_arguments(
      "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 50257 "
      "--micro-batch-size 4 --global-batch-size 512 --fp16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
      "--num-layers-per-virtual-pipeline-stage 3 "
      "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2",
      "job.sh", [] {
        JobImportOptions o = on("dgx-a100-superpod");
        o.nodes = 2;
        o.gpus_per_node = 8;
        return o;
      }());
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->model, "gpt");
  EXPECT_EQ(s.zoo_model->vocab, 50432);  // 50257 padded to a multiple of 128 x 2
  // 16 GPUs / (2 x 2) = 4 data-parallel ranks: 512 / (4 x 4) = 32 micro-batches.
  EXPECT_EQ(s.accumulation_steps, 32);
  EXPECT_EQ(s.parallelism->layout.virtual_stages, 4);  // 24 layers / (3 per virtual stage x 2 stages)
  EXPECT_EQ(s.parallelism->layout.schedule, models::PipelineSchedule::interleaved);
  EXPECT_EQ(s.strategy.name, "megatron-full");
  ASSERT_TRUE(s.strategy.layer_recompute);
  EXPECT_EQ(s.strategy.layer_recompute->method, models::LayerRecompute::Method::uniform);
  EXPECT_EQ(s.strategy.layer_recompute->num_layers, std::vector<int>{1});
  EXPECT_FALSE(s.zoo_model->tie_embeddings.has_value());  // Megatron's default: tied
  EXPECT_THAT(imported.yaml, ::testing::Not(HasSubstr("tie_embeddings")));
  EXPECT_FALSE(s.parallelism->data.grad_reduce_in_fp32);  // --fp16 reduces 16-bit gradients
}

// Megatron-LM reduces bf16 runs' gradients in fp32 unless --grad-reduce-in-bf16, and others' only
// with --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py:1204-1217).
TEST(MegatronImport, Bf16GradientsAreReducedInFp32UnlessAskedOtherwise) {
  const std::string base =
      "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1024 --micro-batch-size 1 --global-batch-size 8 ";
  const auto fp32_reduce = [&](const std::string& flags) {
    const Scenario s = read_back(import_megatron_arguments(base + flags, "job.sh", on("dgx-h100-superpod")));
    return s.parallelism && s.parallelism->data.grad_reduce_in_fp32;
  };
  EXPECT_TRUE(fp32_reduce("--bf16"));
  EXPECT_FALSE(fp32_reduce("--bf16 --grad-reduce-in-bf16"));
  EXPECT_FALSE(fp32_reduce("--fp16"));
  EXPECT_TRUE(fp32_reduce("--fp16 --accumulate-allreduce-grads-in-fp32"));
}

// --untie-embeddings-and-output-weights on Megatron's GPT: the zoo's gpt with an output layer of
// its own (model.tie_embeddings: false), read back as such.
TEST(MegatronImport, UntiedGptHasItsOwnOutputLayer) {
  const ImportedScenario imported = import_megatron_arguments(
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --vocab-size 1024 --micro-batch-size 1 "
      "--global-batch-size 8 --bf16 --untie-embeddings-and-output-weights",
      "job.sh", on("dgx-h100-superpod"));
  EXPECT_THAT(imported.yaml, HasSubstr("tie_embeddings: false"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->model, "gpt");
  EXPECT_EQ(s.zoo_model->tie_embeddings, false);
}

// --tp-comm-overlap becomes parallelism.tp_comm_overlap; Megatron-LM's refusal without sequence
// parallelism is an error at the flag.
TEST(MegatronImport, TpCommOverlapBecomesTheScenarioKey) {
  std::string job = kLlama70b;
  job.insert(job.find(" --lr"), " --tp-comm-overlap");
  const Scenario s = read_back(import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod")));
  ASSERT_TRUE(s.parallelism);
  EXPECT_TRUE(s.parallelism->layout.tp_comm_overlap);
  EXPECT_FALSE(read_back(import_megatron_arguments(kLlama70b, "job.sh", on("dgx-h100-superpod"))).parallelism->layout.tp_comm_overlap);
  std::string without_sp = job;
  without_sp.erase(without_sp.find(" --sequence-parallel"), std::string(" --sequence-parallel").size());
  try {
    (void)import_megatron_arguments(without_sp, "job.sh", on("dgx-h100-superpod"));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("job.sh"));
    EXPECT_THAT(e.what(), HasSubstr("--tp-comm-overlap"));
    EXPECT_THAT(e.what(), HasSubstr("without --sequence-parallel"));
  }
}

// --fp8-format (hybrid or e4m3) becomes Transformer Engine's delayed scaling on every linear but
// the output layer (Megatron's own ColumnParallelLinear); the amax settings are read without
// effect; Megatron's refusals and what is not modelled are errors at their flags.
TEST(MegatronImport, Fp8FormatBecomesTransformerEnginesDelayedScaling) {
  std::string job = kLlama70b;
  job.insert(job.find(" --lr"), " --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max");
  const ImportedScenario imported = import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.float8);
  EXPECT_EQ(s.float8->recipe, models::Float8Recipe::delayed);
  EXPECT_EQ(s.float8->skip, (std::vector<std::string>{"lm_head"}));
  EXPECT_THAT(imported.yaml, Not(HasSubstr("fp8-amax")));
  EXPECT_FALSE(read_back(import_megatron_arguments(kLlama70b, "job.sh", on("dgx-h100-superpod"))).float8);
  const auto with = [&](const std::string& flags) {
    std::string j = kLlama70b;
    j.insert(j.find(" --lr"), " " + flags);
    return megatron_error(j);
  };
  EXPECT_THAT(with("--fp8-format e5m2"), AllOf(HasSubstr("job.sh:"), HasSubstr("--fp8-format"), HasSubstr("'e5m2'")));
  EXPECT_THAT(with("--fp8-format e4m3 --transformer-impl local"), AllOf(HasSubstr("--fp8-format"), HasSubstr("transformer_engine")));
  EXPECT_THAT(with("--fp8-format hybrid --no-fp8-wgrad"), AllOf(HasSubstr("--no-fp8-wgrad"), HasSubstr("not modelled")));
  // --fp8-param-gather: the weights are FP8 tensors (no workspace beside them); without FP8, refused.
  EXPECT_FALSE(s.float8->fp8_weights);
  std::string params = kLlama70b;
  params.insert(params.find(" --lr"), " --fp8-format hybrid --fp8-param-gather");
  EXPECT_TRUE(read_back(import_megatron_arguments(params, "job.sh", on("dgx-h100-superpod"))).float8->fp8_weights);
  EXPECT_THAT(with("--fp8-param-gather"), AllOf(HasSubstr("--fp8-param-gather"), HasSubstr("without --fp8-format")));
  // A platform without FP8 tensor cores refuses the imported scenario when it is read.
  EXPECT_THROW(read_back(import_megatron_arguments(job, "job.sh", on("dgx-a100-superpod"))), InputError);
}

// --sequence-parallel under a tensor-parallel size of 1 is off, as Megatron-LM turns it off
// (validate_args), and said: the scenario reads back (it refuses sequence_parallel without
// tensor > 1), as FlagPerf's Qwen1.5-MoE job on 8 A800 (TP 1, PP 2, --sequence-parallel) needs.
TEST(MegatronImport, SequenceParallelIsOffWithoutTensorParallelism) {
  std::string job = kLlama70b;
  job.replace(job.find("--tensor-model-parallel-size 8"), std::string("--tensor-model-parallel-size 8").size(), "--tensor-model-parallel-size 1");
  job.replace(job.find("--pipeline-model-parallel-size 4"), std::string("--pipeline-model-parallel-size 4").size(), "--pipeline-model-parallel-size 8");
  const ImportedScenario imported = import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.parallelism);
  EXPECT_EQ(s.parallelism->layout.tensor, 1);
  EXPECT_FALSE(s.parallelism->layout.sequence_parallel);
  EXPECT_TRUE(std::any_of(imported.notes.begin(), imported.notes.end(),
                          [](const std::string& n) { return n.find("--sequence-parallel is off under a tensor-parallel size of 1") != std::string::npos; }));
  // With tensor parallelism it stays on, and nothing is said of it.
  const ImportedScenario tp8 = import_megatron_arguments(kLlama70b, "job.sh", on("dgx-h100-superpod"));
  EXPECT_TRUE(read_back(tp8).parallelism->layout.sequence_parallel);
  for (const std::string& note : tp8.notes) EXPECT_EQ(note.find("--sequence-parallel is off"), std::string::npos) << note;
}

// --moe-token-dispatcher-type: allgather by default, as Megatron-LM's arguments.py has it, written
// as parallelism.moe_token_dispatcher for a mixture of experts under model parallelism (where the
// zoo builds Megatron's layer); under tensor and expert parallelism both above 1, which the
// allgather dispatcher is not modelled for, alltoall with a note; flex is refused at its line; a
// dense job has no key.
TEST(MegatronImport, TheTokenDispatcherIsMegatronsDefaultOrItsFlag) {
  const auto moe = [](const std::string& flags) {
    std::string job = kLlama70b;
    job.insert(job.find(" --lr"), " --num-experts 8 --moe-router-topk 2" + flags);
    return job;
  };
  const auto dispatcher = [](const ImportedScenario& imported) {
    const std::size_t at = imported.yaml.find("moe_token_dispatcher: ");
    return at == std::string::npos ? std::string("none") : imported.yaml.substr(at + 22, imported.yaml.find('\n', at) - at - 22);
  };
  const ImportedScenario by_default = import_megatron_arguments(moe(""), "job.sh", on("dgx-h100-superpod"));
  EXPECT_EQ(dispatcher(by_default), "allgather");
  EXPECT_TRUE(read_back(by_default).parallelism->layout.moe_allgather_dispatcher);
  const ImportedScenario alltoall = import_megatron_arguments(moe(" --moe-token-dispatcher-type alltoall"), "job.sh", on("dgx-h100-superpod"));
  EXPECT_EQ(dispatcher(alltoall), "alltoall");
  EXPECT_FALSE(read_back(alltoall).parallelism->layout.moe_allgather_dispatcher);
  JobImportOptions eight_nodes = on("dgx-h100-superpod");
  eight_nodes.nodes = 8;  // 64 GPUs over TP 8 x PP 4: 2 data-parallel ranks for EP 2
  const ImportedScenario folded = import_megatron_arguments(moe(" --expert-model-parallel-size 2"), "job.sh", eight_nodes);
  EXPECT_EQ(dispatcher(folded), "alltoall");
  EXPECT_TRUE(std::any_of(folded.notes.begin(), folded.notes.end(),
                          [](const std::string& n) { return n.find("the allgather token dispatcher gathers over the tensor-and-expert group") != std::string::npos; }));
  EXPECT_THAT(megatron_error(moe(" --moe-token-dispatcher-type flex")),
              AllOf(HasSubstr("job.sh"), HasSubstr("--moe-token-dispatcher-type"), HasSubstr("is 'flex'; expected allgather")));
  EXPECT_EQ(dispatcher(import_megatron_arguments(kLlama70b, "job.sh", on("dgx-h100-superpod"))), "none");
}

// --moe-router-load-balancing-type: aux_loss, Megatron's default, is the router the zoo builds
// (its loss's kernels whatever --moe-aux-loss-coeff is, so both are read); sinkhorn and none are
// refused at their line.
TEST(MegatronImport, TheRouterIsAuxLossLoadBalancing) {
  std::string job = kLlama70b;
  job.insert(job.find(" --lr"), " --num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type aux_loss");
  const ImportedScenario imported = import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod"));
  for (const std::string& note : imported.notes) {
    EXPECT_EQ(note.find("moe-aux-loss-coeff"), std::string::npos) << note;
    EXPECT_EQ(note.find("moe-router-load-balancing-type"), std::string::npos) << note;
  }
  for (const char* type : {"sinkhorn", "none"}) {
    std::string other = kLlama70b;
    other.insert(other.find(" --lr"), std::string(" --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type ") + type);
    EXPECT_THAT(megatron_error(other), AllOf(HasSubstr("job.sh"), HasSubstr("--moe-router-load-balancing-type"),
                                             HasSubstr(std::string("is '") + type + "'; expected aux_loss")));
  }
}

// --moe-grouped-gemm: model.megatron.moe_grouped_gemm for a mixture of experts (GroupedMLP);
// absent, the key is not written; on a dense job it is not imported (said in the note).
TEST(MegatronImport, GroupedGemmBecomesTheMegatronKey) {
  std::string job = kLlama70b;
  job.insert(job.find(" --lr"), " --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm");
  const ImportedScenario grouped = import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod"));
  EXPECT_THAT(grouped.yaml, HasSubstr("moe_grouped_gemm: true"));
  const Scenario s = read_back(grouped);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->megatron);
  EXPECT_TRUE(s.zoo_model->megatron->moe_grouped_gemm);
  std::string sequential = kLlama70b;
  sequential.insert(sequential.find(" --lr"), " --num-experts 8 --moe-router-topk 2");
  EXPECT_THAT(import_megatron_arguments(sequential, "job.sh", on("dgx-h100-superpod")).yaml, Not(HasSubstr("moe_grouped_gemm")));
  std::string dense = kLlama70b;
  dense.insert(dense.find(" --lr"), " --moe-grouped-gemm");
  const ImportedScenario ignored = import_megatron_arguments(dense, "job.sh", on("dgx-h100-superpod"));
  EXPECT_THAT(ignored.yaml, Not(HasSubstr("moe_grouped_gemm:")));
  EXPECT_TRUE(std::any_of(ignored.notes.begin(), ignored.notes.end(),
                          [](const std::string& n) { return n.find("not imported") != std::string::npos && n.find("moe-grouped-gemm") != std::string::npos; }));
}

// --overlap-grad-reduce and --overlap-param-gather with the distributed optimizer become ZeRO-1's
// overlap_comm, Megatron-LM's bucket size (max(40M, 1M x data-parallel ranks) elements, or
// --ddp-bucket-size) and overlap_param_gather; Megatron's refusals of --overlap-param-gather
// without the distributed optimizer or --overlap-grad-reduce are errors at its line; without the
// distributed optimizer --overlap-grad-reduce stays DDP's (the scenario unchanged).
TEST(MegatronImport, DistributedOptimizerOverlapsBecomeZeroKeys) {
  const auto with = [](const std::string& flags, const std::string& base = kLlama70b) {
    std::string job = base;
    job.insert(job.find(" --lr"), flags);
    return job;
  };
  // 32 GPUs / (TP 8 x PP 4): one data-parallel rank, so 40M elements.
  const ImportedScenario grad = import_megatron_arguments(with(" --overlap-grad-reduce"), "job.sh", on("dgx-h100-superpod"));
  const Scenario g = read_back(grad);
  ASSERT_TRUE(g.parallelism);
  EXPECT_EQ(g.parallelism->data.zero_stage, 1);
  EXPECT_TRUE(g.parallelism->data.overlap_comm);
  EXPECT_EQ(g.parallelism->data.reduce_bucket_elements, 40'000'000);
  EXPECT_FALSE(g.parallelism->data.overlap_param_gather);
  for (const std::string& note : grad.notes) EXPECT_EQ(note.find("not modelled: the distributed optimizer"), std::string::npos) << note;

  // 512 nodes x 8 GPUs / 32: 128 data-parallel ranks, 128M elements.
  std::string large = with(" --overlap-grad-reduce --overlap-param-gather");
  large.replace(large.find("--nnodes 4"), 10, "--nnodes 512");
  large.replace(large.find("--global-batch-size 64"), 22, "--global-batch-size 256");
  const Scenario big = read_back(import_megatron_arguments(large, "job.sh", on("dgx-h100-superpod")));
  EXPECT_EQ(big.parallelism->data.reduce_bucket_elements, 128'000'000);
  EXPECT_TRUE(big.parallelism->data.overlap_param_gather);
  EXPECT_TRUE(big.parallelism->data.overlap_comm);

  const Scenario sized = read_back(import_megatron_arguments(with(" --overlap-grad-reduce --ddp-bucket-size 12345678"), "job.sh", on("dgx-h100-superpod")));
  EXPECT_EQ(sized.parallelism->data.reduce_bucket_elements, 12'345'678);

  // Megatron-LM's assertions (arguments.py): an error naming the flag and its line.
  EXPECT_THAT(megatron_error(with(" --overlap-param-gather")), HasSubstr("--overlap-param-gather is given without --overlap-grad-reduce"));
  std::string plain = with(" --overlap-grad-reduce --overlap-param-gather");
  plain.erase(plain.find(" --use-distributed-optimizer"), std::string(" --use-distributed-optimizer").size());
  const std::string error = megatron_error(plain);
  EXPECT_THAT(error, HasSubstr("job.sh:6: --overlap-param-gather is given without --use-distributed-optimizer"));

  // Without the distributed optimizer: DDP, whose buckets overlap the backward pass anyway.
  std::string ddp = with(" --overlap-grad-reduce");
  ddp.erase(ddp.find(" --use-distributed-optimizer"), std::string(" --use-distributed-optimizer").size());
  const ImportedScenario d = import_megatron_arguments(ddp, "job.sh", on("dgx-h100-superpod"));
  EXPECT_FALSE(read_back(d).parallelism->data.zero_stage != 0);
  EXPECT_TRUE(std::any_of(d.notes.begin(), d.notes.end(), [](const std::string& n) { return n.find("DDP's bucket all-reduces overlap") != std::string::npos; }));
}

// --recompute-granularity, --recompute-method and --recompute-num-layers become the strategy's
// `recompute:` as they are; Megatron-LM's own refusals (transformer_config.py) are errors at their lines.
TEST(MegatronImport, RecomputationFlagsBecomeTheStrategysSettings) {
  const std::string job =
      "--nproc-per-node 8 --num-layers 16 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 1024 --bf16 "
      "--pipeline-model-parallel-size 4 --global-batch-size 8\n";
  const ImportedScenario imported = import_megatron_arguments(job + "--recompute-granularity full --recompute-method block --recompute-num-layers 2\n",
                                                              "job.sh", on("dgx-h100-superpod"));
  EXPECT_THAT(imported.yaml, HasSubstr("recompute: {granularity: full, method: block, num_layers: 2}"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.strategy.layer_recompute);
  EXPECT_EQ(s.strategy.layer_recompute->granularity, models::LayerRecompute::Granularity::full);
  EXPECT_EQ(s.strategy.layer_recompute->method, models::LayerRecompute::Method::block);
  EXPECT_EQ(s.strategy.layer_recompute->num_layers, std::vector<int>{2});
  EXPECT_NO_THROW(PreparedScenario{s});  // 2 <= the 4 layers of each stage
  const ImportedScenario selective = import_megatron_arguments(job + "--recompute-granularity selective --recompute-method uniform\n", "job.sh",
                                                               on("dgx-h100-superpod"));
  EXPECT_THAT(selective.yaml, HasSubstr("recompute: {granularity: selective}"));
  EXPECT_THAT(selective.yaml, HasSubstr("--recompute-method uniform is ignored with selective"));
  // Without a granularity Megatron-LM reads neither: said, not imported.
  const ImportedScenario none = import_megatron_arguments(job + "--recompute-method block --recompute-num-layers 2\n", "job.sh", on("dgx-h100-superpod"));
  EXPECT_THAT(none.yaml, HasSubstr("strategy: baseline"));
  EXPECT_THAT(none.yaml, HasSubstr("--recompute-method"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity full --recompute-num-layers 2"),
              HasSubstr("job.sh:2: --recompute-granularity is full without --recompute-method"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity full --recompute-method uniform"),
              HasSubstr("job.sh:2: --recompute-granularity is full without --recompute-num-layers; expected --recompute-num-layers from 1 to the 4"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity full --recompute-method blocks --recompute-num-layers 2"),
              HasSubstr("job.sh:2: --recompute-method is 'blocks'; expected uniform or block"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity full --recompute-method block --recompute-num-layers 5"),
              HasSubstr("job.sh:2: --recompute-num-layers is '5'; expected an integer from 1 to 4"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity selective --recompute-num-layers 1"),
              HasSubstr("job.sh:2: --recompute-num-layers is given with selective recomputation"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity most"), HasSubstr("job.sh:2: --recompute-granularity is 'most'; expected full or selective"));
  // --recompute-modules: core_attn, Megatron's default, is the selective recomputation modelled;
  // any other module list (every value read) is refused.
  EXPECT_EQ(read_back(import_megatron_arguments(job + "--recompute-granularity selective --recompute-modules core_attn", "job.sh",
                                                on("dgx-h100-superpod")))
                .strategy.layer_recompute->granularity,
            models::LayerRecompute::Granularity::selective);
  EXPECT_THAT(megatron_error(job + "--recompute-granularity selective --recompute-modules=mlp"),
              HasSubstr("--recompute-modules is 'mlp'; only core_attn"));
  EXPECT_THAT(megatron_error(job + "--recompute-granularity selective --recompute-modules core_attn mlp layernorm"),
              HasSubstr("job.sh:2: --recompute-modules is 'core_attn mlp layernorm'; only core_attn (Megatron-LM's default) is modelled"));
}

TEST(MegatronImport, TheSwigluWidthDefaultsAsMegatronComputesIt) {
  // arguments.py: int(4h x 2/3 / 64) x 64 = int(10922.67 / 64) x 64 = 10880 for h = 4096.
  const Scenario s = read_back(import_megatron_arguments(
      "--nproc-per-node 8 --num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu --normalization RMSNorm "
      "--position-embedding-type rope --seq-length 128 --vocab-size 32000 --bf16",
      "job.sh", on("dgx-h100-superpod")));
  EXPECT_EQ(s.zoo_model->decoder->intermediate, 10880);
  EXPECT_TRUE(s.zoo_model->decoder->tie_embeddings);
}

TEST(MegatronImport, BadArgumentsAreErrorsAtTheirLines) {
  EXPECT_THAT(megatron_error("--hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8"), HasSubstr("--num-layers is missing"));
  EXPECT_THAT(megatron_error("--num-layers 2\n--hidden-size x --num-attention-heads 2 --seq-length 8 --vocab-size 8"),
              HasSubstr("job.sh:2: --hidden-size is 'x'; expected an integer"));
  EXPECT_THAT(megatron_error("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8"), HasSubstr("--vocab-size"));
  EXPECT_THAT(megatron_error("--nproc-per-node 8 --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8 "
                             "--micro-batch-size 3 --global-batch-size 16"),
              HasSubstr("--global-batch-size is 16; expected a multiple of micro-batch 3 x data-parallel 8"));
  EXPECT_THAT(megatron_error("--nproc-per-node 8 --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8 "
                             "--tensor-model-parallel-size 3"),
              HasSubstr("8 GPUs (1 node(s) x 8) are not a multiple of TP 3"));
  EXPECT_THAT(megatron_error("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8 --normalization Foo"),
              HasSubstr("--normalization is 'Foo'"));
  EXPECT_THAT(megatron_error("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8 --swiglu"),
              HasSubstr("neither a Llama-shaped decoder"));
}

// A launch script as Megatron-LM's examples write one (examples/llama/train_llama3_8b_h100_fp8.sh):
// argument arrays, the script's variables with environment defaults, $((arithmetic)), an `if`
// that appends quoted "--flag value" elements, and a flag that ends its array.
const char* const kLaunchScript = R"(#!/bin/bash
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"2"}
TP=${TP:-2}
NUM_LAYERS=4
LAYERS=$NUM_LAYERS
DTYPE="fp8"
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
)
MODEL_ARGS=(
    --num-layers ${LAYERS}
    --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope
    --seq-length $(( 2 * (1024 + 1024) ))   # comments end the line
    --vocab-size 32000
    --sequence-parallel
)
EXTRA=()
if [[ "$DTYPE" == "fp8" ]]; then
    EXTRA+=(
        "--fp8-format hybrid"
    )
fi
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size $((GPUS_PER_NODE * NNODES / TP * 4))
    --tensor-model-parallel-size $TP
    --bf16
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} "${EXTRA[@]}" ${TRAINING_ARGS[@]}
)";

TEST(MegatronImport, ALaunchScriptsVariablesAreExpanded) {
  const ImportedScenario imported = import_megatron_arguments(kLaunchScript, "job.sh", on("dgx-h100-superpod"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->decoder);
  EXPECT_EQ(s.zoo_model->decoder->layers, 4);        // $NUM_LAYERS through $LAYERS
  EXPECT_EQ(s.zoo_model->seq_len, 4096);             // $(( 2 * (1024 + 1024) ))
  ASSERT_TRUE(s.parallelism);
  EXPECT_EQ(s.parallelism->nodes, 2);                // ${SLURM_NNODES:-"2"}: the default
  EXPECT_EQ(s.parallelism->gpus_per_node, 8);
  EXPECT_EQ(s.parallelism->layout.tensor, 2);        // ${TP:-2}
  EXPECT_TRUE(s.parallelism->layout.sequence_parallel);  // the array's `)` is no value of it
  // $((8 * 2 / 2 * 4)) = 32 over 8 data-parallel ranks of micro-batch 1.
  EXPECT_EQ(s.accumulation_steps, 4);
  // "--fp8-format hybrid", one quoted element, is the flag and its value.
  EXPECT_TRUE(s.float8.has_value());
  // The defaults taken are said: the environment may set those variables.
  EXPECT_THAT(imported.notes, testing::Contains(AllOf(HasSubstr("SLURM_NNODES is not set in the script"), HasSubstr("'2'"))));
  EXPECT_THAT(imported.notes, testing::Contains(HasSubstr("${TP:-2} at line 4")));
}

// What the script does not set is an error that names the variable, at the argument's line;
// a variable assigned twice takes the later value, and says so.
TEST(MegatronImport, ALaunchScriptsUnsetVariablesAreErrors) {
  const std::string tail = " --hidden-size 8 --num-attention-heads 2 --seq-length 8 --vocab-size 8";
  EXPECT_THAT(megatron_error("--num-layers $NUM_LAYERS" + tail),
              HasSubstr("job.sh:1: --num-layers is '$NUM_LAYERS' (NUM_LAYERS is not set in the script before it); expected an integer"));
  EXPECT_THAT(megatron_error("A=1\n--num-layers $L" + tail + "\nL=4"), HasSubstr("job.sh:2: --num-layers is '$L' (L is not set"));
  EXPECT_THAT(megatron_error("L=4\nunset L\n--num-layers ${L}" + tail), HasSubstr("job.sh:3: --num-layers is '${L}' (L is not set"));
  // `local` is a value after a flag, a declaration where a command starts.
  EXPECT_THAT(megatron_error("local L=4\n--num-layers ${L} --bf16 --fp8-format e4m3 --transformer-impl local" + tail),
              HasSubstr("job.sh:2: --fp8-format is given with --transformer-impl local"));
  EXPECT_THAT(megatron_error("--num-layers ${1}" + tail), HasSubstr("$1 is the script's argument"));
  EXPECT_THAT(megatron_error("--num-layers $(nproc)" + tail), HasSubstr("$(nproc) is a command's output, which import does not run"));
  EXPECT_THAT(megatron_error("N=0\n--num-layers $((4 / N))" + tail), HasSubstr("divides by zero"));
  EXPECT_THAT(megatron_error("--num-layers $((1 << 2))" + tail), HasSubstr("not arithmetic import evaluates"));
  EXPECT_THAT(megatron_error("--num-layers $((9223372036854775807 + 1))" + tail), HasSubstr("overflows"));
  EXPECT_THAT(megatron_error("--num-layers ${N:?unset}" + tail), HasSubstr("is a form import does not expand"));
  EXPECT_THAT(megatron_error("X=abc\n--num-layers $((X + 1))" + tail), HasSubstr("X is 'abc', not an integer"));
  // A chain of variables deeper than the reader follows.
  std::string chain = "V0=1\n";
  for (int i = 1; i <= 100; ++i) chain += "V" + std::to_string(i) + "=$V" + std::to_string(i - 1) + "\n";
  EXPECT_THAT(megatron_error(chain + "--num-layers $V100" + tail), HasSubstr("more than 64 deep"));
  // Assigned twice (an if and its else, say): the later value, with a note.
  const ImportedScenario imported = import_megatron_arguments("L=2\nL=3\n--num-layers $L" + tail, "job.sh", on("dgx-h100-superpod"));
  EXPECT_EQ(read_back(imported).zoo_model->layers, 3);
  EXPECT_THAT(imported.notes, testing::Contains(HasSubstr("L is assigned 2 times before line 3; the last, line 2, was taken")));
}

// Megatron-FSDP (--use-megatron-fsdp): per-layer FSDP units under optim_grads_params (released
// after forward) and optim_grads (kept), the distributed optimizer's ZeRO-1 under optim; the
// gradients reduced in fp32 for --bf16 unless --grad-reduce-in-bf16; unknown strategies refused.
TEST(MegatronImport, MegatronFsdpBecomesFsdpUnits) {
  const std::string job =
      "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 4 --hidden-size 4096 --num-attention-heads 32 --swiglu "
      "--normalization RMSNorm --position-embedding-type rope --seq-length 4096 --vocab-size 32000 --bf16 --micro-batch-size 1 "
      "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-megatron-fsdp";
  const ImportedScenario imported = import_megatron_arguments(job, "job.sh", on("dgx-h100-superpod"));
  const Scenario s = read_back(imported);
  ASSERT_TRUE(s.parallelism && s.parallelism->data.fsdp);
  const models::FsdpSpec& fsdp = *s.parallelism->data.fsdp;
  EXPECT_EQ(fsdp.units, (std::vector<std::string>{"model.layers.*"}));
  EXPECT_EQ(fsdp.reshard_after_forward, models::FsdpSpec::Reshard::all);
  EXPECT_EQ(fsdp.sharded_parameter_bytes, 4);
  EXPECT_EQ(fsdp.reduce_bytes, 4);  // --bf16 without --grad-reduce-in-bf16
  EXPECT_FALSE(s.parallelism->data.grad_reduce_in_fp32);
  EXPECT_THAT(imported.notes, testing::Contains(HasSubstr("--use-megatron-fsdp, --data-parallel-sharding-strategy optim_grads_params")));
  EXPECT_THAT(imported.notes, Not(testing::Contains(HasSubstr("zero.overlap"))));
  const Scenario grads = read_back(import_megatron_arguments(job + " --data-parallel-sharding-strategy optim_grads --grad-reduce-in-bf16", "job.sh",
                                                             on("dgx-h100-superpod")));
  ASSERT_TRUE(grads.parallelism->data.fsdp);
  EXPECT_EQ(grads.parallelism->data.fsdp->reshard_after_forward, models::FsdpSpec::Reshard::none);
  EXPECT_EQ(grads.parallelism->data.fsdp->reduce_bytes, 2);
  const Scenario optim = read_back(import_megatron_arguments(job + " --data-parallel-sharding-strategy optim", "job.sh", on("dgx-h100-superpod")));
  EXPECT_FALSE(optim.parallelism->data.fsdp);
  EXPECT_EQ(optim.parallelism->data.zero_stage, 1);
  EXPECT_THAT(megatron_error(job + " --data-parallel-sharding-strategy all"),
              HasSubstr("--data-parallel-sharding-strategy is 'all'; expected no_shard, optim, optim_grads or optim_grads_params"));
}

// An expert degree the job's GPUs cannot hold is refused as Megatron-LM refuses it, not written
// into a scenario that the reader then refuses.
TEST(MegatronImport, AnExpertDegreeTheDataRanksDoNotHoldIsRefused) {
  const std::string job =
      "--nproc-per-node 8 --num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu --normalization RMSNorm "
      "--position-embedding-type rope --seq-length 128 --vocab-size 32000 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--pipeline-model-parallel-size 4 --expert-model-parallel-size 8";
  EXPECT_THAT(megatron_error(job), HasSubstr("job.sh:1: --expert-model-parallel-size is 8; the 8 GPUs (1 node(s) x 8) leave 2 data x 1 context ranks"));
  JobImportOptions four_nodes = on("dgx-h100-superpod");
  four_nodes.nodes = 4;
  EXPECT_EQ(read_back(import_megatron_arguments(job, "job.sh", four_nodes)).parallelism->layout.expert, 8);
}

TEST(TorchtitanImport, ALlama3JobBecomesItsScenario) {
  JobImportOptions options = on("dgx-h100-superpod");
  options.nodes = 2;
  options.gpus_per_node = 8;
  const ImportedScenario imported = import_torchtitan_toml(
      "[model]\nname = \"llama3\"\nflavor = \"70B\"\n[training]\nlocal_batch_size = 4\nseq_len = 8192\n"
      "[parallelism]\ntensor_parallel_degree = 8\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
      "pipeline_parallel_microbatch_size = 1\n[activation_checkpoint]\nmode = \"full\"\n",
      "job.toml", options);
  const Scenario s = read_back(imported);
  const zoo::DecoderArchitecture& arch = *s.zoo_model->decoder;
  EXPECT_EQ(arch.layers, 80);
  EXPECT_EQ(arch.hidden, 8192);
  // torchtitan's FeedForward: int(2 x 4 x 8192 / 3) = 21845, x 1.3 = 28398, up to a multiple of 4096.
  EXPECT_EQ(arch.intermediate, 28672);
  EXPECT_EQ(arch.vocab, 128256);
  EXPECT_TRUE(s.zoo_model->torchtitan);
  EXPECT_EQ(s.batch_size, 1);
  EXPECT_EQ(s.accumulation_steps, 4);  // local batch 4 in micro-batches of 1
  EXPECT_EQ(s.parallelism->layout.tensor, 8);
  EXPECT_TRUE(s.parallelism->layout.sequence_parallel);
  EXPECT_EQ(s.parallelism->layout.pipeline, 2);
  EXPECT_EQ(s.parallelism->layout.virtual_stages, 2);
  EXPECT_EQ(s.parallelism->layout.schedule, models::PipelineSchedule::interleaved);
  EXPECT_FALSE(s.parallelism->data.fsdp.has_value());  // one data-parallel rank: nothing to shard over
}

TEST(TorchtitanImport, FsdpShardsOverTheDataParallelRanks) {
  JobImportOptions options = on("dgx-h100-superpod");
  options.gpus_per_node = 8;
  const Scenario s = read_back(import_torchtitan_toml("[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 2\nseq_len = 4096\n", "job.toml", options));
  ASSERT_TRUE(s.parallelism && s.parallelism->data.fsdp);
  EXPECT_EQ(s.parallelism->data.zero_stage, 3);
  EXPECT_EQ(s.batch_size, 2);
  EXPECT_EQ(s.zoo_model->decoder->intermediate, 14336);
  EXPECT_EQ(s.strategy.name, "full-recompute");  // torchtitan's default mode, selective, imported as full
}

// Context parallelism's exchange: Megatron's --cp-comm-type (p2p, the default: the ring;
// allgather), torchtitan's context_parallel_rotate_method (allgather, PyTorch's default; alltoall:
// the ring); Ulysses refused.
TEST(JobImport, ContextParallelExchange) {
  std::string megatron = kLlama70b;
  megatron.replace(megatron.find("--lr 3e-4"), 9, "--context-parallel-size 2");
  megatron.replace(megatron.find("--nnodes 4"), 10, "--nnodes 8");
  const Scenario ring = read_back(import_megatron_arguments(megatron, "job.sh", on("dgx-h100-superpod")));
  EXPECT_EQ(ring.parallelism->layout.context, 2);
  EXPECT_FALSE(ring.parallelism->layout.context_all_gather);
  std::string allgather = megatron;
  allgather.replace(allgather.find("--context-parallel-size 2"), 25, "--context-parallel-size 2 --cp-comm-type allgather");
  EXPECT_TRUE(read_back(import_megatron_arguments(allgather, "job.sh", on("dgx-h100-superpod"))).parallelism->layout.context_all_gather);
  std::string ulysses = megatron;
  ulysses.replace(ulysses.find("--context-parallel-size 2"), 25, "--context-parallel-size 2 --cp-comm-type a2a");
  EXPECT_THAT(megatron_error(ulysses), HasSubstr("cp-comm-type is 'a2a'"));

  JobImportOptions options = on("dgx-h100-superpod");
  options.gpus_per_node = 8;
  const std::string toml = "[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n[parallelism]\ncontext_parallel_degree = 2\n";
  EXPECT_TRUE(read_back(import_torchtitan_toml(toml, "job.toml", options)).parallelism->layout.context_all_gather);
  EXPECT_FALSE(read_back(import_torchtitan_toml(toml + "context_parallel_rotate_method = \"alltoall\"\n", "job.toml", options))
                   .parallelism->layout.context_all_gather);
  EXPECT_THAT(torchtitan_error(toml + "context_parallel_rotate_method = \"ring\"\n"), HasSubstr("context_parallel_rotate_method is 'ring'"));
}

// torch.compile and torchao's float8 converter: [compile] enable with its components (or
// [training] compile of earlier releases) compile each block (framework.compile) and the loss;
// the converter float8 or quantize.linear.float8 becomes training.float8 with the filter_fqns as
// module patterns and the FSDP float8 all-gather. Before, a job that compiled and ran float8 was
// imported as eager bf16 without a word.
TEST(TorchtitanImport, CompileAndFloat8BecomeTheirScenarioKeys) {
  JobImportOptions options = on("dgx-h100-superpod");
  options.gpus_per_node = 8;
  const std::string base = "[model]\nflavor = \"8B\"\n";
  const std::string rest = "[training]\nlocal_batch_size = 2\nseq_len = 8192\n";
  const Scenario eager = read_back(import_torchtitan_toml(base + rest, "job.toml", options));
  EXPECT_FALSE(eager.framework.compile);
  EXPECT_FALSE(eager.float8);
  const std::string compiled = "[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  const Scenario c = read_back(import_torchtitan_toml(base + rest + compiled, "job.toml", options));
  ASSERT_TRUE(c.framework.compile);
  EXPECT_EQ(c.framework.compile->modules, (std::vector<std::string>{"model.layers.*"}));
  ASSERT_TRUE(c.zoo_model);
  EXPECT_TRUE(c.zoo_model->loss.compiled);
  // The earlier [training] compile compiles both.
  const Scenario old = read_back(import_torchtitan_toml(base + "[training]\nlocal_batch_size = 2\nseq_len = 8192\ncompile = true\n", "job.toml", options));
  ASSERT_TRUE(old.framework.compile);
  EXPECT_TRUE(old.zoo_model->loss.compiled);
  const Scenario model_only = read_back(import_torchtitan_toml(base + rest + "[compile]\nenable = true\ncomponents = [\"model\"]\n", "job.toml", options));
  EXPECT_TRUE(model_only.framework.compile);
  EXPECT_FALSE(model_only.zoo_model->loss.compiled);

  const std::string float8 = "[model]\nflavor = \"8B\"\nconverters = [\"quantize.linear.float8\"]\n" + rest + compiled +
                             "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\nfilter_fqns = [\"output\"]\n";
  const Scenario f = read_back(import_torchtitan_toml(float8, "job.toml", options));
  ASSERT_TRUE(f.float8);
  EXPECT_EQ(f.float8->recipe, models::Float8Recipe::tensorwise);
  EXPECT_EQ(f.float8->skip, (std::vector<std::string>{"lm_head"}));
  EXPECT_TRUE(f.float8->fsdp_all_gather);
  // The earlier converter name and section.
  const Scenario f_old = read_back(import_torchtitan_toml("[model]\nflavor = \"8B\"\nconverters = \"float8\"\n" + rest + compiled +
                                                              "[float8]\nfilter_fqns = [\"output\", \"attention.wq\"]\n",
                                                          "job.toml", options));
  ASSERT_TRUE(f_old.float8);
  EXPECT_EQ(f_old.float8->skip, (std::vector<std::string>{"lm_head", "model.layers.*.self_attn.q_proj"}));
  EXPECT_FALSE(f_old.float8->fsdp_all_gather);
  // What is not modelled is refused at its key.
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n" + rest, options),
              AllOf(HasSubstr("job.toml:3: [model] converters"), HasSubstr("torch.compile")));
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\nconverters = [\"mx\"]\n" + rest + compiled, options), HasSubstr("names 'mx'"));
  EXPECT_THAT(torchtitan_error(float8 + "recipe_name = \"rowwise\"\n", options), HasSubstr("recipe_name is 'rowwise'"));
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n" + rest + compiled + "[float8]\nfilter_fqns = [\"tok_embeddings\"]\n",
                               options),
              HasSubstr("filter_fqns names 'tok_embeddings'"));
  EXPECT_THAT(torchtitan_error(base + rest + "[compile]\nenable = true\ncomponents = [\"optimizer\"]\n", options), HasSubstr("names 'optimizer'"));
}

TEST(TorchtitanImport, BadKeysAreErrorsAtTheirLines) {
  EXPECT_THAT(torchtitan_error("[model]\nname = \"llama3\"\nflavor = \"9B\"\n"), HasSubstr("job.toml:3: [model] flavor is '9B'"));
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\n[training]\nseq_len = \"long\"\n"), HasSubstr("job.toml:4: [training] seq_len has the wrong type"));
  EXPECT_THAT(torchtitan_error("[model\n"), HasSubstr("job.toml:1"));
  JobImportOptions options = on("dgx-h100-superpod");
  options.gpus_per_node = 8;
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = 3\n", options), HasSubstr("are not a multiple of TP 3"));
  EXPECT_THAT(torchtitan_error("[model]\nflavor = \"8B\"\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"Foo\"\n", options),
              HasSubstr("[parallelism] pipeline_parallel_schedule is 'Foo'"));
}

}  // namespace
}  // namespace comptrain::sim
