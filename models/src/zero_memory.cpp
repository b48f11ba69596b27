#include "comptrain/models/zero_memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace comptrain::models::zero {
namespace {

// The largest bytes per parameter a state may declare: far above any real format (fp64 Adam with
// a master copy is 8 + 8 + 24), low enough that 64 · kMaxParameters stays far from overflow.
constexpr std::int64_t kMaxBytesPerParameter = 64;

void check_parameters(std::int64_t parameters, const char* what) {
  if (parameters < 0 || parameters > kMaxParameters) {
    throw std::invalid_argument(std::string(what) + " is " + std::to_string(parameters) + "; expected between 0 and " +
                                std::to_string(kMaxParameters) + " (2^53/32)");
  }
}

void check_count(std::int64_t count, const char* what) {
  // A bound far above any cluster; it keeps 4·count and the products below exact.
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 24;
  if (count < 1 || count > kMaxCount) {
    throw std::invalid_argument(std::string(what) + " is " + std::to_string(count) + "; expected between 1 and " +
                                std::to_string(kMaxCount));
  }
}

void check_bytes(std::int64_t bytes, const char* what) {
  if (bytes < 0 || bytes > kMaxBytesPerParameter) {
    throw std::invalid_argument(std::string("bytes per parameter: ") + what + " is " + std::to_string(bytes) +
                                "; expected between 0 and " + std::to_string(kMaxBytesPerParameter));
  }
}

void check_cluster(const DeepSpeedCluster& cluster) {
  check_count(cluster.gpus_per_node, "gpus_per_node");
  check_count(cluster.nodes, "nodes");
  check_count(cluster.gpus_per_node * cluster.nodes, "gpus_per_node * nodes");
  if (!std::isfinite(cluster.additional_buffer_factor) || cluster.additional_buffer_factor < 0) {
    throw std::invalid_argument("additional_buffer_factor is " + std::to_string(cluster.additional_buffer_factor) +
                                "; expected a finite number >= 0");
  }
}

// Python's int(x) for a float: truncation toward zero. Every value here is >= 0.
std::int64_t python_int(double x, const char* what) {
  // 2^63 is exactly representable; anything at or above it does not fit an int64.
  if (!(x < 9223372036854775808.0)) {
    throw std::invalid_argument(std::string("DeepSpeed's estimate of ") + what + " exceeds 2^63 - 1 bytes");
  }
  return static_cast<std::int64_t>(x);
}

// Python's `int(m * total_params / total_gpus)` for an int total_params: m·Ψ is an exact int and
// int / int is the correctly rounded quotient. With m·Ψ < 2^53 both operands are exact doubles
// and IEEE division is correctly rounded, so the double quotient is Python's; int() truncates it.
std::int64_t python_int_ratio(std::int64_t multiplier, std::int64_t parameters, std::int64_t gpus) {
  return python_int(static_cast<double>(multiplier * parameters) / static_cast<double>(gpus), "a GPU share");
}

// Python's `total_params * m * additional_buffer_factor`, evaluated left to right, where m is a
// value Python computed before (an int, or a float such as max(4 * n, 18 * gpus_factor)) and is
// exact as a double. Python's Ψ·m is either an exact int converted to float at the next multiply
// or a float product: both are the correctly rounded value of the exact product, which is what a
// double multiply of the exact operands gives. The second multiply rounds once, as in Python.
double python_scaled(std::int64_t parameters, double multiplier, double factor) {
  return static_cast<double>(parameters) * multiplier * factor;
}

// max(int a, float b) as Python's max: a unless b > a. The returned double is exact (a < 2^53).
double python_max(std::int64_t a, double b) { return b > static_cast<double>(a) ? b : static_cast<double>(a); }

}  // namespace

BytesPerParameter bytes_per_parameter(StatePrecision precision, OptimizerKind optimizer, bool fp32_master_copy) {
  std::int64_t states = 0;
  switch (optimizer) {
    case OptimizerKind::sgd: states = 0; break;
    case OptimizerKind::momentum: states = 1; break;
    case OptimizerKind::adam: states = 2; break;
    default: throw std::invalid_argument("bytes_per_parameter: unknown optimizer kind");
  }
  switch (precision) {
    case StatePrecision::fp32:
    case StatePrecision::amp:
      // The weights are fp32: a master copy exists only where the framework clones one (DeepSpeed).
      return {4, 4, 4 * states + (fp32_master_copy ? 4 : 0)};
    case StatePrecision::half:
      if (fp32_master_copy) {
        throw std::invalid_argument(
            "bytes_per_parameter: a half model with an fp32 master copy is the 'mixed' precision, not 'half'");
      }
      return {2, 2, 2 * states};
    case StatePrecision::mixed:
      // The ZeRO paper's K = 12 for Adam: fp32 parameters (the master copy), momentum, variance.
      return {2, 2, 4 + 4 * states};
  }
  throw std::invalid_argument("bytes_per_parameter: unknown state precision");
}

std::int64_t shard_elements(std::int64_t parameters, std::int64_t ranks) {
  check_parameters(parameters, "parameters");
  check_count(ranks, "ranks");
  return parameters / ranks + (parameters % ranks != 0 ? 1 : 0);
}

ModelStateBytes model_states_per_gpu(std::int64_t parameters, std::int64_t ranks, ZeroStage stage,
                                     BytesPerParameter bytes) {
  check_bytes(bytes.parameter, "parameter");
  check_bytes(bytes.gradient, "gradient");
  check_bytes(bytes.optimizer, "optimizer");
  const std::int64_t shard = shard_elements(parameters, ranks);
  const std::int64_t full = parameters;
  // Which states are sharded at each stage: optimizer from 1, gradients from 2, parameters at 3.
  int level = 0;
  switch (stage) {
    case ZeroStage::stage0: level = 0; break;
    case ZeroStage::stage1: level = 1; break;
    case ZeroStage::stage2: level = 2; break;
    case ZeroStage::stage3: level = 3; break;
    default: throw std::invalid_argument("model_states_per_gpu: unknown ZeRO stage");
  }
  ModelStateBytes result;
  result.optimizer_states = bytes.optimizer * (level >= 1 ? shard : full);
  result.gradients = bytes.gradient * (level >= 2 ? shard : full);
  result.parameters = bytes.parameter * (level >= 3 ? shard : full);
  return result;
}

DeepSpeedEstimate deepspeed_zero2_estimate(std::int64_t total_parameters, const DeepSpeedCluster& cluster,
                                           bool offload_optimizer, DeepSpeedZero2Formula formula) {
  check_parameters(total_parameters, "total_parameters");
  check_cluster(cluster);
  const std::int64_t psi = total_parameters;
  const std::int64_t total_gpus = cluster.nodes * cluster.gpus_per_node;
  const double factor = cluster.additional_buffer_factor;
  DeepSpeedEstimate estimate;
  if (offload_optimizer) {
    // stage_1_and_2.py: gpu_mem = 2 * total_params
    //                   cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    estimate.gpu_bytes = 2 * psi;
    estimate.host_bytes_per_node =
        python_int(python_scaled(psi, python_max(4 * total_gpus, 16.0), factor), "host memory");
  } else {
    switch (formula) {
      case DeepSpeedZero2Formula::v0_4_2_to_v0_14_2:
        // 0c1802cc: gpu_mem = 4 * total_params + int(16 * total_params / total_gpus)
        estimate.gpu_bytes = 4 * psi + python_int_ratio(16, psi, total_gpus);
        break;
      case DeepSpeedZero2Formula::since_v0_14_3:
        // f4cb866c: gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        estimate.gpu_bytes = 2 * psi + python_int_ratio(18, psi, total_gpus);
        break;
      default: throw std::invalid_argument("deepspeed_zero2_estimate: unknown formula");
    }
    // cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    estimate.host_bytes_per_node =
        python_int(python_scaled(psi, static_cast<double>(4 * cluster.gpus_per_node), factor), "host memory");
  }
  return estimate;
}

DeepSpeedZero3Estimate deepspeed_zero3_estimate(std::int64_t total_parameters, std::int64_t largest_layer_parameters,
                                                const DeepSpeedCluster& cluster, const DeepSpeedZero3Options& options) {
  check_parameters(total_parameters, "total_parameters");
  check_cluster(cluster);
  if (largest_layer_parameters < 0 || largest_layer_parameters > total_parameters) {
    throw std::invalid_argument("largest_layer_parameters is " + std::to_string(largest_layer_parameters) +
                                "; expected between 0 and total_parameters (" + std::to_string(total_parameters) + ")");
  }
  if (options.offload_params && !options.offload_optimizer) {
    throw std::invalid_argument(
        "deepspeed_zero3_estimate: offload_params needs offload_optimizer (DeepSpeed's estimator has no such case)");
  }
  const std::int64_t psi = total_parameters;
  const std::int64_t layer = largest_layer_parameters;
  const std::int64_t per_node = cluster.gpus_per_node;
  const std::int64_t total_gpus = cluster.nodes * per_node;
  const double factor = cluster.additional_buffer_factor;
  // stage3.py: gpus_factor = 1 / num_nodes; largest_layer_memory = (4 * largest_layer_params)
  const double gpus_factor = 1.0 / static_cast<double>(cluster.nodes);
  DeepSpeedZero3Estimate estimate;
  estimate.largest_layer_bytes = 4 * layer;
  if (options.offload_optimizer) {
    // 18 = 16 (fp32 parameters, gradients, momentum, variance) + 2 (fp16 parameters) on the host;
    // 16 without the parameters' fp16 copy, which then stays on the GPU.
    const double bytes_per_param = options.offload_params ? 18.0 : 16.0;
    if (options.offload_params) {
      estimate.gpu_bytes = estimate.largest_layer_bytes;
    } else {
      estimate.gpu_bytes = estimate.largest_layer_bytes + python_int_ratio(2, psi, total_gpus);
    }
    if (options.zero_init) {
      // cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor: Python multiplies the
      // exact int Ψ·18 (or Ψ·16) by gpus_factor, then by the factor; same association here.
      const double exact = static_cast<double>(psi * static_cast<std::int64_t>(bytes_per_param));
      estimate.host_bytes_per_node = python_int(exact * gpus_factor * factor, "host memory");
    } else {
      // cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
      const double multiplier = python_max(4 * per_node, bytes_per_param * gpus_factor);
      estimate.host_bytes_per_node = python_int(python_scaled(psi, multiplier, factor), "host memory");
    }
  } else {
    estimate.gpu_bytes = estimate.largest_layer_bytes + python_int_ratio(18, psi, total_gpus);
    // With zero.Init only the largest layer is built on the host before partitioning; without it,
    // the whole fp32 model, in each process of the node.
    const std::int64_t built = options.zero_init ? layer : psi;
    estimate.host_bytes_per_node =
        python_int(python_scaled(built, static_cast<double>(4 * per_node), factor), "host memory");
  }
  return estimate;
}

}  // namespace comptrain::models::zero
