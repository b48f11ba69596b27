#pragma once
// `comptrain calibrate --from-collectives FILE`: fits a cluster platform's network to measured
// nccl-tests bus bandwidths. Two values decide a ring's time across nodes in the collective model
// (scenarios/platforms/README.md, "Clusters"): the NICs' effective rate (`nic.bandwidth`, with the
// network links, which carry a node's NICs, scaled by the same factor) and NCCL's latency per
// network step (`collectives.inter_node_step`). The fit simulates each measurement as
// `comptrain validate` does a bus_bandwidth point (the ring forced) and minimises the sum of
// log(predicted / measured)^2 over both values; every other value of the platform is kept.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"

namespace comptrain::sim {

// One line of an nccl-tests run: the collective, the cluster shape it ran on, the size as
// nccl-tests counts it (the all-reduce's buffer, the reduce-scatter's input, the all-gather's
// output, the all-to-all's buffer) and its busbw.
struct CollectiveMeasurement {
  models::CollectiveKind kind = models::CollectiveKind::all_reduce;
  int nodes = 1;
  int gpus_per_node = 1;
  std::int64_t bytes = 0;
  double bus_bandwidth = 0;  // bytes/s (the file gives GB/s, as nccl-tests prints it)
  int line = 0;              // in the measurements file, for messages
};

struct CollectiveMeasurementSet {
  std::string source;         // the file, for messages and the fitted values' comments
  std::string platform_spec;  // as written: a shipped name or a file
  models::Platform platform;  // resolved; a cluster (a network, NICs and a network step)
  std::string platform_text;  // the platform file's text when it is a file (its comments are kept); empty when shipped
  std::vector<CollectiveMeasurement> measurements;
};

// Parses FILE: `platform:` a shipped name or a .yaml file (relative to FILE), `measurements:` a
// list of {collective: all_reduce | reduce_scatter | all_gather | all_to_all, nodes, gpus_per_node, bytes,
// bus_bandwidth: GB/s}. InputError "SOURCE:LINE:COLUMN: problem; expected ..." for malformed YAML,
// unknown or missing keys, a platform without a network, a shape the platform does not have or
// the simulator refuses, a non-positive or non-finite figure.
CollectiveMeasurementSet parse_collective_measurements(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir);
CollectiveMeasurementSet load_collective_measurements(const std::filesystem::path& path);

struct NetworkFitOptions {
  int holdout = 0;                     // the last K measurements are not fitted; 0 <= K < the count
  std::string output_name = "fitted";  // the fitted platform's name
};

struct CollectiveFit {
  CollectiveMeasurement measurement;
  double before = 0;  // predicted busbw (bytes/s) on the base platform
  double after = 0;   // on the fitted platform, as written
  bool held_out = false;
};

struct NetworkFitResult {
  models::Platform base;
  models::Platform fitted;  // read back from platform_yaml
  std::vector<CollectiveFit> rows;
  double rms_before = 0, rms_after = 0;                         // rms log error over the fitted measurements
  std::optional<double> holdout_rms_before, holdout_rms_after;  // over the held-out ones
  int simulations = 0;                                          // collectives simulated for the fit
  std::string platform_yaml;                                    // the fitted platform file
};

// The fit: a grid over both values (each from 1/16 to 16 times the base's, in log scale), then
// Brent's method on each in turn around the best point; the values written to 4 significant
// digits and evaluated as written. InputError for a holdout that leaves nothing to fit.
NetworkFitResult fit_network(const CollectiveMeasurementSet& set, const NetworkFitOptions& options);

// Per measurement: the shape, measured, predicted before and after with their errors; then the
// two values before and after, and the rms log errors.
std::string network_fit_table(const NetworkFitResult& result);

}  // namespace comptrain::sim
