// The parallelism section: data parallelism (DDP, ZeRO, FSDP) and the optimizer offload.

#include "config/scenario_reader.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {

ParallelismSection ScenarioReader::read_parallelism(const YAML::Node& node, const std::optional<models::Platform>& platform) const {
  require_map(node, "parallelism");
  check_keys(node, "parallelism",
             {"nodes", "gpus_per_node", "ddp", "zero", "fsdp", "tensor", "pipeline", "context", "expert", "expert_tensor", "virtual_stages", "sequence_parallel",
              "pipeline_schedule", "pipeline_layers", "pipeline_scatter_gather", "context_parallel_comm", "tp_comm_overlap", "compression",
              "grad_reduce_in_fp32", "moe_token_dispatcher"});
  ParallelismSection p;
  // At most 1,000,000 GPUs: far beyond any machine, and nodes x GPUs stays an int.
  constexpr std::int64_t kMaxGpus = 1'000'000;
  const auto count = [&](const char* key, std::int64_t fallback) {
    const std::int64_t value = optional_positive(node, key, "parallelism").value_or(fallback);
    if (value > kMaxGpus) {
      throw InputError(where(node[key].Mark()) + "'parallelism." + key + "' is " + node[key].Scalar() + "; expected at most 1000000");
    }
    return static_cast<int>(value);
  };
  p.nodes = count("nodes", 1);
  // Default: every GPU of a node (the platform's gpus_per_node).
  p.gpus_per_node = count("gpus_per_node", platform ? platform->gpus_per_node : 1);
  if (static_cast<std::int64_t>(p.nodes) * p.gpus_per_node > kMaxGpus) {
    throw InputError(where(node.Mark()) + "'parallelism' asks for " + std::to_string(static_cast<std::int64_t>(p.nodes) * p.gpus_per_node) +
                     " GPUs; expected at most 1000000");
  }
  if (platform && p.gpus_per_node > platform->gpus_per_node) {
    throw InputError(where(node["gpus_per_node"] ? node["gpus_per_node"].Mark() : node.Mark()) + "'parallelism.gpus_per_node' is " +
                     std::to_string(p.gpus_per_node) + " but platform '" + platform->name + "' has " + std::to_string(platform->gpus_per_node) +
                     " GPUs per node; expected at most that");
  }
  p.nodes_position = position_of(node["nodes"] ? node["nodes"].Mark() : node.Mark());
  p.gpus_per_node_position = position_of(node["gpus_per_node"] ? node["gpus_per_node"].Mark() : node.Mark());
  p.data.ranks = p.nodes * p.gpus_per_node;
  read_layout(node, p);
  const YAML::Node ddp = node["ddp"];
  const YAML::Node zero = node["zero"];
  const YAML::Node fsdp = node["fsdp"];
  if ((ddp ? 1 : 0) + (zero ? 1 : 0) + (fsdp ? 1 : 0) > 1) {
    throw InputError(where((fsdp ? fsdp : zero).Mark()) +
                     "'parallelism' has more than one of 'ddp' (PyTorch DDP), 'zero' (DeepSpeed ZeRO) and 'fsdp' (PyTorch FSDP2); expected one of them");
  }
  if (fsdp) {
    p.data.zero_stage = 3;
    p.data.fsdp = read_fsdp(fsdp);
    if (const YAML::Node r = fsdp["replicate"]; r && p.data.ranks % p.data.fsdp->replicate != 0) {
      throw InputError(where(r.Mark()) + "'parallelism.fsdp.replicate' is " + r.Scalar() + " but the run has " + std::to_string(p.data.ranks) +
                       " GPUs; expected a divisor of that (HSDP: the GPUs form replicate groups of GPUs / replicate GPUs, each sharding the model)");
    }
    // Pageable shards: each copy is staged at the host link's pageable rate, which the platform must give.
    if (const auto& offload = p.data.fsdp->cpu_offload; offload && !offload->pin_memory && platform && !(platform->host_link.pageable_bandwidth > 0)) {
      throw InputError(where(fsdp["offload_policy"].Mark()) + "'parallelism.fsdp.offload_policy.pin_memory' is false, which copies through pageable host "
                       "memory at the platform's host_link.pageable_bandwidth; platform '" + platform->name + "' does not give it; expected pin_memory: true or a platform that gives it");
    }
  }
  // The largest bucket or reduction bucket accepted: 1 TiB, beyond any GPU's memory.
  constexpr std::int64_t kMaxBucketBytes = std::int64_t{1} << 40;
  if (ddp) {
    require_map(ddp, "parallelism.ddp");
    check_keys(ddp, "parallelism.ddp", {"bucket_cap", "first_bucket", "gradient_as_bucket_view", "comm_hook", "powersgd"});
    for (const char* key : {"bucket_cap", "first_bucket"}) {
      const YAML::Node n = ddp[key];
      if (!n) continue;
      const std::string field = std::string("parallelism.ddp.") + key;
      const std::int64_t bytes = byte_count(n, field);
      if (bytes < 1 || bytes > kMaxBucketBytes) {
        throw InputError(where(n.Mark()) + "'" + field + "' is " + scalar(n, field) + "; expected 1 B to 1 TiB (PyTorch's default: 25 MiB, the first 1 MiB)");
      }
      (std::string_view(key) == "bucket_cap" ? p.data.bucket_cap_bytes : p.data.first_bucket_bytes) = bytes;
    }
    if (ddp["gradient_as_bucket_view"]) p.data.gradient_as_bucket_view = boolean(ddp["gradient_as_bucket_view"], "parallelism.ddp.gradient_as_bucket_view");
    if (const YAML::Node hook = ddp["comm_hook"]) {
      const std::string name = scalar(hook, "parallelism.ddp.comm_hook");
      if (name == "fp16") {
        p.data.comm_hook = models::DdpCommHook::fp16;
      } else if (name == "bf16") {
        p.data.comm_hook = models::DdpCommHook::bf16;
      } else if (name == "powersgd") {
        p.data.comm_hook = models::DdpCommHook::powersgd;
      } else if (name != "none") {
        throw InputError(where(hook.Mark()) + "'parallelism.ddp.comm_hook' is '" + name +
                         "'; expected fp16, bf16 (PyTorch's fp16_compress_hook, bf16_compress_hook), powersgd (powerSGD_hook) or none");
      }
    }
    if (const YAML::Node power = ddp["powersgd"]) {
      if (p.data.comm_hook != models::DdpCommHook::powersgd) {
        throw InputError(where(power.Mark()) + "'parallelism.ddp.powersgd' is given without 'comm_hook: powersgd'; expected both or neither");
      }
      require_map(power, "parallelism.ddp.powersgd");
      check_keys(power, "parallelism.ddp.powersgd", {"matrix_approximation_rank", "min_compression_rate"});
      if (const YAML::Node r = power["matrix_approximation_rank"]) {
        std::int64_t rank = 0;
        if (!r.IsScalar() || !YAML::convert<std::int64_t>::decode(r, rank) || rank < 1 || rank > 1024) {
          throw InputError(where(r.Mark()) + "'parallelism.ddp.powersgd.matrix_approximation_rank' is " +
                           scalar(r, "parallelism.ddp.powersgd.matrix_approximation_rank") + "; expected an integer from 1 to 1024 (PyTorch's default: 1)");
        }
        p.data.powersgd.rank = static_cast<int>(rank);
      }
      if (const YAML::Node rate = power["min_compression_rate"]) {
        double value = -1;
        if (!rate.IsScalar() || !YAML::convert<double>::decode(rate, value) || !std::isfinite(value) || value < 0 || value > 1e6) {
          throw InputError(where(rate.Mark()) + "'parallelism.ddp.powersgd.min_compression_rate' is " +
                           scalar(rate, "parallelism.ddp.powersgd.min_compression_rate") + "; expected a number from 0 to 10^6 (PyTorch's default: 2)");
        }
        p.data.powersgd.min_compression_rate = value;
      }
    }
  }
  if (zero) {
    require_map(zero, "parallelism.zero");
    check_keys(zero, "parallelism.zero",
               {"stage", "reduce_bucket_size", "overlap_comm", "overlap_param_gather", "sub_group_size", "stage3_max_reuse_distance", "offload_optimizer",
                "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients"});
    const YAML::Node stage = required(zero, "stage", "parallelism.zero");
    std::int64_t value = 0;
    if (!stage.IsScalar() || !YAML::convert<std::int64_t>::decode(stage, value) || value < 1 || value > 3) {
      throw InputError(where(stage.Mark()) + "'parallelism.zero.stage' is '" + (stage.IsScalar() ? stage.Scalar() : std::string("a collection")) +
                       "'; expected 1, 2 or 3 (leave 'zero' out for PyTorch DDP)");
    }
    p.data.zero_stage = static_cast<int>(value);
    if (const auto elements = optional_positive(zero, "reduce_bucket_size", "parallelism.zero")) {
      if (*elements > kMaxBucketBytes) {
        throw InputError(where(zero["reduce_bucket_size"].Mark()) + "'parallelism.zero.reduce_bucket_size' is " + zero["reduce_bucket_size"].Scalar() +
                         "; expected at most 2^40 elements (DeepSpeed's default: 500000000)");
      }
      p.data.reduce_bucket_elements = *elements;
    }
    if (zero["overlap_comm"]) p.data.overlap_comm = boolean(zero["overlap_comm"], "parallelism.zero.overlap_comm");
    if (const auto elements = optional_positive(zero, "sub_group_size", "parallelism.zero")) {
      if (*elements > kMaxBucketBytes) {
        throw InputError(where(zero["sub_group_size"].Mark()) + "'parallelism.zero.sub_group_size' is " + zero["sub_group_size"].Scalar() +
                         "; expected at most 2^40 elements (DeepSpeed's default: 1000000000)");
      }
      p.data.sub_group_elements = *elements;
    }
    // ZeRO-3's reuse distance (models::DataParallelSpec::max_reuse_distance_elements); 0 releases every parameter after its use.
    if (const YAML::Node reuse = zero["stage3_max_reuse_distance"]) {
      std::int64_t elements = -1;
      if (!reuse.IsScalar() || !YAML::convert<std::int64_t>::decode(reuse, elements) || elements < 0 || elements > kMaxBucketBytes) {
        throw InputError(where(reuse.Mark()) + "'parallelism.zero.stage3_max_reuse_distance' is " + scalar(reuse, "parallelism.zero.stage3_max_reuse_distance") +
                         "; expected 0 to 2^40 elements (DeepSpeed's default: 1000000000)");
      }
      if (p.data.zero_stage != 3) {
        throw InputError(where(reuse.Mark()) + "'parallelism.zero.stage3_max_reuse_distance' is ZeRO-3's; expected 'stage: 3'");
      }
      p.data.max_reuse_distance_elements = elements;
    }
    if (const YAML::Node offload = zero["offload_optimizer"]) p.data.offload_optimizer = read_offload_optimizer(offload, p.data.zero_stage);
    // Megatron-LM's --overlap-param-gather (models::DataParallelSpec::overlap_param_gather): the
    // distributed optimizer's (ZeRO-1) parameter all-gather moved into the next forward pass;
    // stage 2 all-gathers the same way, stage 3 gathers before every op already.
    if (const YAML::Node gather = zero["overlap_param_gather"]) {
      p.data.overlap_param_gather = boolean(gather, "parallelism.zero.overlap_param_gather");
      if (p.data.overlap_param_gather && (p.data.zero_stage > 2 || p.data.offload_optimizer)) {
        throw InputError(where(gather.Mark()) + "'parallelism.zero.overlap_param_gather' needs the updated parameters all-gathered after a step on the GPU; "
                         "expected 'stage: 1' or 'stage: 2' without 'offload_optimizer' (stage 3 gathers before each op already)");
      }
      p.overlap_param_gather_position = where(gather.Mark());
    }
    // ZeRO++ (models::DataParallelSpec): stage 3's.
    const auto stage3_only = [&](const char* key) {
      if (p.data.zero_stage != 3) {
        throw InputError(where(zero[key].Mark()) + "'parallelism.zero." + key + "' is ZeRO++'s, which DeepSpeed runs with stage 3; expected 'stage: 3'");
      }
    };
    if (const YAML::Node hpz = zero["zero_hpz_partition_size"]) {
      stage3_only("zero_hpz_partition_size");
      std::int64_t size = 0;
      if (!hpz.IsScalar() || !YAML::convert<std::int64_t>::decode(hpz, size) || size < 1 || size > 1'000'000) {
        throw InputError(where(hpz.Mark()) + "'parallelism.zero.zero_hpz_partition_size' is " + scalar(hpz, "parallelism.zero.zero_hpz_partition_size") +
                         "; expected a positive number of ranks (DeepSpeed's default 1: off; ZeRO++ uses the GPUs of a node)");
      }
      p.data.hpz_partition_size = static_cast<int>(size);
      p.hpz_position = where(hpz.Mark());
    }
    if (zero["zero_quantized_weights"]) {
      stage3_only("zero_quantized_weights");
      p.data.quantized_weights = boolean(zero["zero_quantized_weights"], "parallelism.zero.zero_quantized_weights");
    }
    if (const YAML::Node qgz = zero["zero_quantized_gradients"]) {
      stage3_only("zero_quantized_gradients");
      p.data.quantized_gradients = boolean(qgz, "parallelism.zero.zero_quantized_gradients");
      p.qgz_position = where(qgz.Mark());
    }
  }
  if (const YAML::Node compression = node["compression"]) {
    p.data.compression = read_collective_compression(compression);
    if (compression["algorithm"]) p.compression_algorithm_position = where(compression["algorithm"].Mark());
    // The other ways of compressing the same collectives.
    const auto refuse = [&](bool present, const YAML::Node& at, const std::string& what) {
      if (present) {
        throw InputError(where(at.Mark()) + "'parallelism.compression' compresses the data-parallel collectives, and " + what +
                         " does too; expected one of them");
      }
    };
    refuse(p.data.comm_hook != models::DdpCommHook::none, compression, "'parallelism.ddp.comm_hook' (" + std::string(models::to_string(p.data.comm_hook)) + ")");
    refuse(p.data.quantized_weights, compression, "ZeRO++'s 'parallelism.zero.zero_quantized_weights'");
    refuse(p.data.quantized_gradients, compression, "ZeRO++'s 'parallelism.zero.zero_quantized_gradients'");
    if (p.data.fsdp) {
      throw InputError(where(compression.Mark()) + "'parallelism.compression' is modelled for PyTorch DDP and DeepSpeed ZeRO; expected 'ddp' or 'zero', not 'fsdp'");
    }
    if (p.data.compression->all_reduce == models::CompressedAllReduce::recursive_doubling && p.data.zero_stage > 0) {
      throw InputError(where(compression["algorithm"].Mark()) + "'parallelism.compression.algorithm' recursive_doubling is for all-reduces, and ZeRO stage " +
                       std::to_string(p.data.zero_stage) + " reduce-scatters and gathers (on a ring); expected ring, or 'ddp'");
    }
  }
  // Megatron-LM's fp32 gradient buffer (models::DataParallelSpec::grad_reduce_in_fp32).
  if (const YAML::Node fp32 = node["grad_reduce_in_fp32"]) {
    p.data.grad_reduce_in_fp32 = boolean(fp32, "parallelism.grad_reduce_in_fp32");
    if (p.data.grad_reduce_in_fp32) {
      std::string other;
      if (p.data.fsdp) other = "'fsdp' (FSDP2 reduces in its reduce_dtype)";
      else if (p.data.zero_stage > 1) other = "ZeRO stage " + std::to_string(p.data.zero_stage);
      else if (p.data.comm_hook != models::DdpCommHook::none) other = "'ddp.comm_hook' " + std::string(models::to_string(p.data.comm_hook));
      else if (p.data.compression) other = "'compression'";
      if (!other.empty()) {
        throw InputError(where(fp32.Mark()) + "'parallelism.grad_reduce_in_fp32' is Megatron-LM's fp32 gradient buffer, for its DDP and distributed "
                         "optimizer; found with " + other + "; expected 'ddp' without a hook or compression, or 'zero: {stage: 1}'");
      }
    }
  }
  return p;
}

// parallelism.compression (models::CollectiveCompressionSpec): an error-bounded codec on the
// data-parallel collectives, its costs from a calibration profile or given, as a strategy's
// compress rule takes them (scenarios/README.md, "Parallelism").
models::CollectiveCompressionSpec ScenarioReader::read_collective_compression(const YAML::Node& node) const {
  const std::string f = "parallelism.compression";
  require_map(node, f);
  check_keys(node, f, {"profile", "codec", "error_bound", "error_bound_mode", "ratio", "compress_bandwidth", "decompress_bandwidth", "latency", "algorithm"});
  models::CollectiveCompressionSpec z;
  if (const YAML::Node algorithm = node["algorithm"]) {
    const std::string a = scalar(algorithm, f + ".algorithm");
    const auto parsed = models::parse_compressed_all_reduce(a);
    if (!parsed) {
      throw InputError(where(algorithm.Mark()) + "'" + f + ".algorithm' is '" + a + "'; expected " + std::string(models::kCompressedAllReduceChoices) +
                       " (how a compressed all-reduce moves its data: C-Coll's ring, the default, or gZCCL's recursive doubling)");
    }
    z.all_reduce = *parsed;
  }
  const YAML::Node profile = node["profile"];
  if (profile) {
    const std::string spec = scalar(profile, f + ".profile");
    try {
      z.profile = models::resolve_profile(spec, base_dir_, platform_name_);
    } catch (const InputError& e) {
      throw InputError(where(profile.Mark()) + "'" + f + ".profile': " + e.what());
    }
    z.profile_auto = spec == "auto";
    if (node["codec"]) z.codec = scalar(node["codec"], f + ".codec");
    if (!z.profile->find(z.codec)) {
      std::string names;
      for (const auto& cp : z.profile->codecs) names += (names.empty() ? "" : ", ") + cp.codec;
      throw InputError(where(node["codec"] ? node["codec"].Mark() : profile.Mark()) + "profile '" + z.profile->name + "' has no codec '" + z.codec +
                       "'; it has: " + names);
    }
  } else if (node["codec"]) {
    throw InputError(where(node["codec"].Mark()) + "'" + f + ".codec' applies with 'profile' only (it picks the profile's models)");
  }
  const YAML::Node eb = required(node, "error_bound", f);
  z.error_bound = number(eb, f + ".error_bound");
  if (!(z.error_bound > 0) || !std::isfinite(z.error_bound)) {
    throw InputError(where(eb.Mark()) + "'" + f + ".error_bound' is " + eb.Scalar() + "; expected a finite bound > 0 (each compression's, e.g. 1e-3)");
  }
  if (const YAML::Node mode = node["error_bound_mode"]) {
    const std::string m = scalar(mode, f + ".error_bound_mode");
    const auto parsed = parse_error_bound_mode(m);
    if (!parsed) {
      throw InputError(where(mode.Mark()) + "'" + f + ".error_bound_mode' is '" + m +
                       "'; expected rel (relative to the value range of each compressed chunk, the default) or abs (in the gradients' and parameters' units)");
    }
    if (*parsed == ErrorBoundMode::abs && !node["ratio"]) {
      throw InputError(where(mode.Mark()) + "'" + f + ".error_bound_mode' is abs without 'ratio'; expected a ratio with it (the profiles' ratio models take a "
                       "bound relative to the value range, and traces give no range for gradients) or error_bound_mode rel");
    }
    z.error_bound_mode = *parsed;
  }
  if (z.error_bound_mode == ErrorBoundMode::rel && z.error_bound > 1) {
    throw InputError(where(eb.Mark()) + "'" + f + ".error_bound' is " + eb.Scalar() + " relative to the value range; expected at most 1");
  }
  // Without a profile the ratio and both bandwidths are required; with one each overrides.
  if (!profile || node["ratio"]) {
    const YAML::Node ratio = required(node, "ratio", f);
    z.ratio = number(ratio, f + ".ratio");
    if (!(*z.ratio >= 1) || !std::isfinite(*z.ratio)) {
      throw InputError(where(ratio.Mark()) + "'" + f + ".ratio' is " + ratio.Scalar() + "; expected a finite compression ratio >= 1");
    }
  }
  // As a compress rule's: 1 kB/s to 1 PB/s, latencies up to 1 s.
  const models::units::Bounds bandwidth{1e3, 1e15};
  if (!profile || node["compress_bandwidth"]) {
    z.compress_bandwidth = bounded_quantity(required(node, "compress_bandwidth", f), models::units::Dimension::bandwidth, f + ".compress_bandwidth", bandwidth);
  }
  if (!profile || node["decompress_bandwidth"]) {
    z.decompress_bandwidth = bounded_quantity(required(node, "decompress_bandwidth", f), models::units::Dimension::bandwidth, f + ".decompress_bandwidth", bandwidth);
  }
  if (node["latency"]) z.latency = bounded_quantity(node["latency"], models::units::Dimension::time, f + ".latency", {0, 1});
  return z;
}

// The model-parallel degrees (models/parallel_layout.hpp). Each key's place is kept: the rules that
// need the model (heads, experts, layers) and the GPU count (--platform, plan.gpus may change it)
// are checked when the scenario is prepared (sim/run/run.cpp), at the line of the key they are about.
void ScenarioReader::read_layout(const YAML::Node& node, ParallelismSection& p) const {
  models::ParallelLayout& layout = p.layout;
  constexpr std::int64_t kMaxDegree = 1'000'000;  // as the GPU count's bound
  const auto degree = [&](const char* key, int& into) {
    const YAML::Node n = node[key];
    p.layout_positions[key] = where(n ? n.Mark() : node.Mark());
    if (!n) return;
    const std::int64_t value = *optional_positive(node, key, "parallelism");
    if (value > kMaxDegree) {
      throw InputError(where(n.Mark()) + "'parallelism." + key + "' is " + n.Scalar() + "; expected at most 1000000");
    }
    into = static_cast<int>(value);
  };
  degree("tensor", layout.tensor);
  degree("pipeline", layout.pipeline);
  degree("context", layout.context);
  degree("expert", layout.expert);
  degree("expert_tensor", layout.expert_tensor);  // unset: 0, the tensor degree (Megatron's default)
  degree("virtual_stages", layout.virtual_stages);
  for (const char* key : {"sequence_parallel", "pipeline_schedule", "pipeline_layers", "pipeline_scatter_gather", "context_parallel_comm", "tp_comm_overlap",
                          "moe_token_dispatcher"}) {
    p.layout_positions[key] = where(node[key] ? node[key].Mark() : node.Mark());
  }
  if (const YAML::Node comm = node["context_parallel_comm"]) {
    // Megatron-LM's --cp-comm-type names p2p and allgather are accepted too
    // (megatron/training/arguments.py:3221-3226 at NVIDIA/Megatron-LM@d98e8a6); a2a (Ulysses) is not modelled.
    const std::string name = scalar(comm, "parallelism.context_parallel_comm");
    const auto parsed = zoo::parse_context_parallel_variant(name);
    if (!parsed) {
      throw InputError(where(comm.Mark()) + "'parallelism.context_parallel_comm' is '" + name +
                       "'; expected ring (Transformer Engine's ring, Megatron's p2p, the default) or all_gather (PyTorch context_parallel's; Megatron's "
                       "allgather)");
    }
    layout.context_all_gather = *parsed == zoo::ContextParallelSpec::Variant::all_gather;
    if (layout.context == 1) {
      throw InputError(where(comm.Mark()) + "'parallelism.context_parallel_comm' chooses context parallelism's exchange, and "
                                            "'parallelism.context' is 1; expected context > 1, or no context_parallel_comm");
    }
  }
  if (const YAML::Node dispatcher = node["moe_token_dispatcher"]) {
    // Megatron-LM's --moe-token-dispatcher-type names (megatron/training/arguments.py); flex
    // (DeepEP) and alltoall_seq are not modelled. Whether the model has experts, and the degrees
    // allgather is written for, are checked with the model (sim/run/run.cpp).
    const std::string name = scalar(dispatcher, "parallelism.moe_token_dispatcher");
    if (name != "alltoall" && name != "allgather") {
      throw InputError(where(dispatcher.Mark()) + "'parallelism.moe_token_dispatcher' is '" + name +
                       "'; expected alltoall (the default) or allgather (Megatron-LM's default); flex and alltoall_seq are not modelled");
    }
    layout.moe_allgather_dispatcher = name == "allgather";
    p.moe_token_dispatcher_given = true;
  }
  if (const YAML::Node sp = node["sequence_parallel"]) layout.sequence_parallel = boolean(sp, "parallelism.sequence_parallel");
  if (const YAML::Node overlap = node["tp_comm_overlap"]) layout.tp_comm_overlap = boolean(overlap, "parallelism.tp_comm_overlap");
  if (const YAML::Node sg = node["pipeline_scatter_gather"]) {
    layout.pipeline_scatter_gather = boolean(sg, "parallelism.pipeline_scatter_gather");
  }
  if (const YAML::Node schedule = node["pipeline_schedule"]) {
    const std::string name = scalar(schedule, "parallelism.pipeline_schedule");
    const auto parsed = models::pipeline_schedule_from_string(name);
    if (!parsed) {
      throw InputError(where(schedule.Mark()) + "'parallelism.pipeline_schedule' is '" + name +
                       "'; expected gpipe, 1f1b (Megatron-LM's default), interleaved (with virtual_stages) or zero_bubble (ZB-H1)");
    }
    layout.schedule = *parsed;
  } else if (layout.virtual_stages > 1) {
    layout.schedule = models::PipelineSchedule::interleaved;  // Megatron: --num-layers-per-virtual-pipeline-stage selects it
  }
  if (const YAML::Node layers = node["pipeline_layers"]) {
    if (!layers.IsSequence() || layers.size() == 0) {
      throw InputError(where(layers.Mark()) + "'parallelism.pipeline_layers' must be a non-empty list of layer counts, one per pipeline stage");
    }
    for (const auto& item : layers) {
      std::int64_t count = 0;
      if (!item.IsScalar() || !YAML::convert<std::int64_t>::decode(item, count) || count < 1 || count > kMaxDegree) {
        throw InputError(where(item.Mark()) + "'parallelism.pipeline_layers' holds '" + (item.IsScalar() ? item.Scalar() : std::string("a collection")) +
                         "'; expected positive layer counts");
      }
      layout.pipeline_layers.push_back(static_cast<int>(count));
    }
  }
}

// parallelism.fsdp (models/transforms/README.md, "FSDP2"): {units: [module patterns],
// reshard_after_forward: true | false | all_but_last, sharded_dtype, reduce_dtype, replicate,
// offload_policy: cpu | none | {kind: cpu, pin_memory} (or torchtitan's enable_cpu_offload)}.
models::FsdpSpec ScenarioReader::read_fsdp(const YAML::Node& node) const {
  const std::string section = "parallelism.fsdp";
  require_map(node, section);
  check_keys(node, section, {"units", "reshard_after_forward", "sharded_dtype", "reduce_dtype", "replicate", "offload_policy", "enable_cpu_offload"});
  models::FsdpSpec f;
  const YAML::Node units = required(node, "units", section);
  f.units = string_list(units, section + ".units");
  if (f.units.empty()) throw InputError(where(units.Mark()) + "'" + section + ".units' is empty; expected the module patterns fully_shard is applied to, e.g. [\"model.layers.*\"]");
  for (std::size_t i = 0; i < f.units.size(); ++i) {
    try {
      models::validate_module_pattern(f.units[i]);
    } catch (const InputError& e) {
      throw InputError(where(units[i].Mark()) + "'" + section + ".units': " + e.what());
    }
  }
  if (const YAML::Node r = node["reshard_after_forward"]) {
    const std::string value = scalar(r, section + ".reshard_after_forward");
    if (value == "true") {
      f.reshard_after_forward = models::FsdpSpec::Reshard::all;
    } else if (value == "false") {
      f.reshard_after_forward = models::FsdpSpec::Reshard::none;
    } else if (value == "all_but_last") {
      f.reshard_after_forward = models::FsdpSpec::Reshard::all_but_last;
    } else {
      throw InputError(where(r.Mark()) + "'" + section + ".reshard_after_forward' is '" + value +
                       "'; expected true, false or all_but_last (every unit but the last in forward order, as torchtitan does)");
    }
  }
  const auto dtype_bytes = [&](const char* key, int fallback) {
    const YAML::Node n = node[key];
    if (!n) return fallback;
    const std::string value = scalar(n, section + "." + key);
    if (value == "fp32") return 4;
    if (value == "bf16" || value == "fp16") return 2;
    throw InputError(where(n.Mark()) + "'" + section + "." + key + "' is '" + value + "'; expected fp32, bf16 or fp16");
  };
  f.sharded_parameter_bytes = dtype_bytes("sharded_dtype", 4);
  // Unset: MixedPrecisionPolicy's default (None): the gradients are reduced in their own dtype.
  f.reduce_bytes = dtype_bytes("reduce_dtype", 0);
  // HSDP's replicas (torchtitan's data_parallel_replicate_degree); whether it divides the GPUs is
  // checked with the GPU count (read_parallelism). At most 1,000,000, as the GPUs.
  if (const auto replicate = optional_positive(node, "replicate", section)) {
    if (*replicate > 1'000'000) throw InputError(where(node["replicate"].Mark()) + "'" + section + ".replicate' is " + node["replicate"].Scalar() + "; expected at most 1000000");
    f.replicate = static_cast<int>(*replicate);
  }
  f.cpu_offload = read_fsdp_offload(node);
  return f;
}

// parallelism.fsdp.offload_policy: fully_shard's offload_policy, CPUOffloadPolicy(pin_memory=True)
// as `cpu` or {kind: cpu, pin_memory: true | false}, OffloadPolicy() (no offload) as `none`; or
// torchtitan's training.enable_cpu_offload (CPUOffloadPolicy() with its default pin_memory).
// models/transforms/README.md, "FSDP2's CPU offload".
std::optional<models::FsdpSpec::CpuOffload> ScenarioReader::read_fsdp_offload(const YAML::Node& node) const {
  const std::string section = "parallelism.fsdp";
  const YAML::Node policy = node["offload_policy"];
  const YAML::Node titan = node["enable_cpu_offload"];
  if (policy && titan) {
    throw InputError(where(titan.Mark()) + "'" + section + "' has both 'offload_policy' and 'enable_cpu_offload' (torchtitan's name for offload_policy: cpu); expected one of them");
  }
  if (titan) {
    if (!boolean(titan, section + ".enable_cpu_offload")) return std::nullopt;
    return models::FsdpSpec::CpuOffload{};
  }
  if (!policy) return std::nullopt;
  const std::string expected = "; expected cpu (CPUOffloadPolicy), none (no offload) or {kind: cpu, pin_memory: true | false}";
  models::FsdpSpec::CpuOffload offload;
  std::string kind;
  if (policy.IsMap()) {
    check_keys(policy, section + ".offload_policy", {"kind", "pin_memory"});
    kind = scalar(required(policy, "kind", section + ".offload_policy"), section + ".offload_policy.kind");
    if (const YAML::Node pin = policy["pin_memory"]) offload.pin_memory = boolean(pin, section + ".offload_policy.pin_memory");
    if (kind == "none" && policy["pin_memory"]) {
      throw InputError(where(policy["pin_memory"].Mark()) + "'" + section + ".offload_policy.pin_memory' applies to kind cpu only" + expected);
    }
  } else if (policy.IsScalar()) {
    kind = policy.Scalar();
  } else {
    throw InputError(where(policy.Mark()) + "'" + section + ".offload_policy' is a list" + expected);
  }
  if (kind == "none") return std::nullopt;
  if (kind != "cpu") throw InputError(where(policy.Mark()) + "'" + section + ".offload_policy' is '" + kind + "'" + expected);
  return offload;
}

// FSDP2's CPU offload steps the sharded parameters where they live, on the host, with the
// training's torch.optim optimizer (models::torch_cpu_adamw_seconds): Adam or AdamW, fused=True
// (optimizer_impl: fused, torchtitan's default) on ATen's CPU fused kernel, otherwise the
// for-loop. A trace file's step is taken as the for-loop AdamW's.
void ScenarioReader::check_fsdp_offload(const YAML::Node& root, Scenario& scenario) const {
  if (!scenario.parallelism || !scenario.parallelism->data.fsdp || !scenario.parallelism->data.fsdp->cpu_offload) return;
  models::FsdpSpec::CpuOffload& offload = *scenario.parallelism->data.fsdp->cpu_offload;
  if (!scenario.zoo_model) return;
  const zoo::ModelSpec& m = *scenario.zoo_model;
  const YAML::Node training = root["training"];
  if (m.optimizer && *m.optimizer != zoo::Optimizer::adam && *m.optimizer != zoo::Optimizer::adamw) {
    throw InputError(where(training["optimizer"].Mark()) + "'training.optimizer' is " + std::string(zoo::to_string(*m.optimizer)) +
                     " with parallelism.fsdp's CPU offload, whose step on the host is modelled for torch.optim's adam and adamw only; expected adam or adamw");
  }
  if (m.optimizer_in_backward) {
    throw InputError(where(training["optimizer_in_backward"].Mark()) + "'training.optimizer_in_backward' with parallelism.fsdp's CPU offload is not modelled "
                     "(FSDP2 then copies each gradient shard to the host blocking, for the hook's step on the CPU); expected optimizer_in_backward: false");
  }
  offload.fused_step = m.optimizer_impl == zoo::OptimizerImpl::fused;
}

// parallelism.zero.offload_optimizer: DeepSpeed's keys (deepspeed/runtime/zero/offload_config.py)
// and Deep Optimizer States' (the DataStates/DeepSpeed fork's offload_config.py). device: none
// leaves the optimizer on the GPU, as in DeepSpeed.
std::optional<models::OptimizerOffloadSpec> ScenarioReader::read_offload_optimizer(const YAML::Node& node, int stage) const {
  const std::string section = "parallelism.zero.offload_optimizer";
  require_map(node, section);
  check_keys(node, section, {"device", "ratio", "pin_memory", "prefetch_optimizer", "prefetch_optimizer_gap", "part_grads_async"});
  const YAML::Node device = required(node, "device", section);
  const std::string name = scalar(device, section + ".device");
  if (name == "none") return std::nullopt;
  if (name != "cpu") {
    throw InputError(where(device.Mark()) + "'" + section + ".device' is '" + name + "'; expected cpu or none (nvme is not modelled)");
  }
  models::OptimizerOffloadSpec o;
  if (const YAML::Node ratio = node["ratio"]) {
    o.ratio = number(ratio, section + ".ratio");
    if (!(o.ratio >= 0 && o.ratio <= 1)) throw InputError(where(ratio.Mark()) + "'" + section + ".ratio' is " + ratio.Scalar() + "; expected 0 to 1");
    if (o.ratio < 1 && stage != 3) {
      throw InputError(where(ratio.Mark()) + "'" + section + ".ratio' is " + ratio.Scalar() + " with ZeRO stage " + std::to_string(stage) +
                       "; expected 1 (DeepSpeed's Twin-Flow ratio is for stage 3 only)");
    }
  }
  // Host buffers are modelled as pinned (copies at the PCIe link's rate).
  if (const YAML::Node pin = node["pin_memory"]; pin && !boolean(pin, section + ".pin_memory")) {
    throw InputError(where(pin.Mark()) + "'" + section + ".pin_memory' is false; expected true (pageable host buffers are not modelled)");
  }
  if (node["part_grads_async"]) o.part_grads_async = boolean(node["part_grads_async"], section + ".part_grads_async");
  if (node["prefetch_optimizer"]) o.prefetch_optimizer = boolean(node["prefetch_optimizer"], section + ".prefetch_optimizer");
  if (const auto gap = optional_positive(node, "prefetch_optimizer_gap", section)) {
    if (*gap > 1'000'000) throw InputError(where(node["prefetch_optimizer_gap"].Mark()) + "'" + section + ".prefetch_optimizer_gap' is too large; expected at most 1000000");
    o.prefetch_optimizer_gap = static_cast<int>(*gap);
  }
  const bool fork_keys = o.prefetch_optimizer || o.part_grads_async;
  if (fork_keys && stage != 3) {
    throw InputError(where(node.Mark()) + "'" + section + "' uses Deep Optimizer States' keys with ZeRO stage " + std::to_string(stage) + "; expected stage 3");
  }
  if (o.prefetch_optimizer && o.ratio != 1) {
    throw InputError(where(node["ratio"].Mark()) + "'" + section + ".ratio' is " + node["ratio"].Scalar() + " with prefetch_optimizer; expected 1");
  }
  if (o.prefetch_optimizer && o.prefetch_optimizer_gap == 0) {
    throw InputError(where(node.Mark()) + "'" + section + "' has prefetch_optimizer but no prefetch_optimizer_gap; expected a gap k >= 1 (subgroup x is "
                     "stepped on the GPU when (x + 1) % k == 0)");
  }
  return o;
}

}  // namespace comptrain::sim
