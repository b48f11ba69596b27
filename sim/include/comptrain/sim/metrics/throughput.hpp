#pragma once
// Throughput, written once: every study and report computes samples/s here.

#include <cstdint>

namespace comptrain::sim {

// Samples one optimizer step trains: every GPU's micro-batch in each of its micro-steps
// (gradient accumulation).
constexpr std::int64_t global_batch(std::int64_t micro_batch, int gpus, int micro_steps) { return micro_batch * gpus * micro_steps; }

// Global samples/s: an iteration's global batch over its seconds (the replayed iteration, or the
// mean iteration with data loading and checkpoints). The caller checks that the run fits and
// that `seconds` > 0.
constexpr double samples_per_second(std::int64_t global_samples, double seconds) { return static_cast<double>(global_samples) / seconds; }

}  // namespace comptrain::sim
