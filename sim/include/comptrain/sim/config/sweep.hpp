#pragma once
// Sweeps (a scenario's `sweep:` section) and sharding them across a job array. The variants are
// simulated by studies/sweep.hpp; the result documents and their merge are report/sweep_document.hpp.
//
// A sweep maps scenario key paths to values:
//   sweep:
//     training.batch_size: [8, 16, 32]               # a list of values (any YAML)
//     model.layers: {from: 12, to: 48, step: 12}     # an inclusive range (step default 1)
//     strategy.rules[0].compress.ratio: [4, 8]
// Variants are the cross product, in the order of the keys (the last key varies fastest). Each
// is the document with those nodes replaced, read by the normal scenario reader.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::sim {

// The most variants a sweep may have (and a merged document may claim).
inline constexpr std::size_t kMaxSweepVariants = 100000;

struct SweepVariant {
  std::size_t index = 0;
  std::string label;  // "training.batch_size=8, platform=h100-80gb"
  Scenario scenario;
};

// A sweep, expanded lazily: its keys and values are read and each value checked once, and a
// variant's scenario is built only when asked for, so expanding costs time linear in the
// variants used (a shard builds only its own).
struct Sweep {
  std::string source;
  std::vector<std::string> keys;  // in document order
  std::size_t variant_count = 0;
  std::string hash;               // of the scenario's text: identifies the sweep in shards
  // Applied to every variant's scenario after it is read (the command line's --batch,
  // --platform); may be empty.
  std::function<void(Scenario&)> adjust;

  // "training.batch_size=8, platform=h100-80gb"
  std::string label(std::size_t index) const;
  // Variant `index` (< variant_count). InputError "SOURCE:LINE:COLUMN: sweep variant I (LABEL):
  // ..." when the scenario reader rejects the combination.
  SweepVariant variant(std::size_t index) const;

  struct Axes;  // the parsed keys and values (sweep.cpp)
  std::shared_ptr<const Axes> axes;
};

// Expands `scenario`'s sweep (scenario.has_sweep). Throws InputError "SOURCE:LINE:COLUMN: ..."
// at the sweep key for a bad key path (an index beyond 2^64 included), an empty list, a bad or
// overflowing range, or a value that the scenario reader rejects (with the reader's message).
// At most 100000 variants.
Sweep expand_sweep(const Scenario& scenario);

// --shard I/N: variants I, I+N, I+2N, ... (0-based), for Slurm job arrays
// (--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT). A cluster search without a sweep is
// split the same way over its configurations (studies/plan.hpp, PlanRequest::shard).
struct Shard {
  std::size_t index = 0;
  std::size_t count = 1;
};
Shard parse_shard(std::string_view text);  // InputError unless "I/N" with 0 <= I < N
// Indices I, I+N, ... below `variant_count` (every index without a shard): a sweep's variants or
// a cluster search's configurations.
std::vector<std::size_t> shard_variants(std::size_t variant_count, const std::optional<Shard>& shard);

// One variant's result: a JSON object (a plan, or a simulation report).
struct VariantResult {
  std::size_t index = 0;
  std::string label;
  std::string json;
};

// Identifies a run of a sweep: the sweep, the command and its result-changing settings
// (overrides such as --batch or --margin, canonically written by the caller).
std::string sweep_run_hash(const Sweep& sweep, std::string_view command, std::string_view settings);
// The same for a scenario without a sweep (a sharded cluster search): its text, the command and
// the settings, hashed as sweep_run_hash hashes a sweep's.
std::string scenario_run_hash(const Scenario& scenario, std::string_view command, std::string_view settings);

}  // namespace comptrain::sim
