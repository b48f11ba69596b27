#include "comptrain/sim/studies/network_fit.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <boost/math/tools/minima.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/models/units.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/engine/replay_cost.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_excerpt.hpp"
#include "comptrain/support/yaml_errors.hpp"
#include "studies/fit_rows.hpp"

namespace comptrain::sim {
namespace {

// Each value is fitted within [1/16, 16] times the base's: far wider than any calibration of a
// known interconnect moves it, narrow enough that a grid of 17 points per value lands near the
// optimum (steps of 2^0.5).
constexpr double kLogRange = 2.772588722239781;  // ln 16
constexpr int kGridPoints = 17;
// An nccl-tests size beyond 2^50 B (1 PiB) is no measurement: the validation table's bound.
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 50;

// ---------------------------------------------------------------- the measurements file

CollectiveMeasurementSet read_set(const YAML::Node& root, std::string_view source, const std::filesystem::path& base_dir) {
  const auto where = [&](const YAML::Node& node) { return yaml::location(source, node.Mark()); };
  if (!root.IsMap()) throw InputError(where(root) + "expected a mapping with the keys platform, measurements");
  yaml::check_keys(source, root, "the measurements file", {"platform", "measurements"});
  CollectiveMeasurementSet set;
  set.source = source;
  const YAML::Node platform = root["platform"];
  if (!platform || !platform.IsScalar() || platform.Scalar().empty()) {
    throw InputError(where(platform ? platform : root) + "'platform' must be a shipped platform name or a platform file (.yaml)");
  }
  set.platform_spec = platform.Scalar();
  try {
    set.platform = models::resolve_platform(set.platform_spec, base_dir);
    const models::ShippedOrFile which = models::shipped_or_file(set.platform_spec, base_dir, "platform", models::builtin_platform_names());
    if (which.file) set.platform_text = read_file(*which.file);
  } catch (const InputError& e) {
    throw InputError(where(platform) + "platform: " + e.what());
  }
  // Both fitted values must exist to be scaled: a cluster.
  const models::Platform& p = set.platform;
  if (!p.network || !p.nic || !(p.nic->bandwidth > 0) || !(p.collectives.inter_node_step > 0)) {
    throw InputError(where(platform) + "platform " + p.name +
                     " has no network with NICs and a collectives.inter_node_step; expected a cluster platform (scenarios/platforms/README.md, "
                     "\"Clusters\")");
  }

  const std::string item_form = "{collective: all_reduce | reduce_scatter | all_gather | all_to_all, nodes: N, gpus_per_node: G, bytes: B, bus_bandwidth: GB/s}";
  const YAML::Node list = root["measurements"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    throw InputError(where(list ? list : root) + "'measurements' must be a non-empty list of " + item_form);
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string name = fmt::format("measurements[{}]", i);
    if (!item.IsMap()) throw InputError(where(item) + "'" + name + "' must be a mapping " + item_form);
    yaml::check_keys(source, item, name, {"collective", "nodes", "gpus_per_node", "bytes", "bus_bandwidth"});
    CollectiveMeasurement m;
    m.line = item.Mark().line + 1;
    const auto field = [&](const char* key) {
      const YAML::Node node = item[key];
      if (!node) throw InputError(where(item) + fmt::format("missing key '{}' in {}; expected {}", key, name, item_form));
      if (!node.IsScalar()) throw InputError(where(node) + fmt::format("'{}.{}' is a collection; expected a value", name, key));
      return node;
    };
    const auto integer = [&](const char* key, std::int64_t max) {
      const YAML::Node node = field(key);
      std::int64_t value = 0;
      if (!YAML::convert<std::int64_t>::decode(node, value) || value < 1 || value > max) {
        throw InputError(where(node) + fmt::format("'{}.{}' is {}; expected an integer from 1 to {}", name, key, json_excerpt(node.Scalar()), max));
      }
      return value;
    };
    const YAML::Node kind = field("collective");
    const std::optional<models::CollectiveKind> parsed = models::parse_collective_kind(kind.Scalar());
    if (!parsed) {
      throw InputError(where(kind) + fmt::format("'{}.collective' is {}; expected {}", name, json_excerpt(kind.Scalar()), models::kCollectiveKindChoices));
    }
    m.kind = *parsed;
    m.nodes = static_cast<int>(integer("nodes", p.max_nodes()));
    m.gpus_per_node = static_cast<int>(integer("gpus_per_node", p.gpus_per_node));
    try {
      check_whole_gpus({m.nodes, m.gpus_per_node});  // simulate_collective builds every GPU (shared/defects-2/09)
    } catch (const InputError& e) {
      throw InputError(where(item) + fmt::format("{}: nodes and gpus_per_node: {}", name, e.what()));
    }
    m.bytes = integer("bytes", kMaxBytes);
    const YAML::Node busbw = field("bus_bandwidth");
    double gbps = 0;
    // From 1e-6 GB/s (1 kB/s, below any network nccl-tests runs over) to 1e6 GB/s: a denormal
    // such as 4e-320 made the fit's log errors, and the written platform's comments, infinite.
    if (!YAML::convert<double>::decode(busbw, gbps) || !(gbps >= 1e-6 && gbps <= 1e6)) {
      throw InputError(where(busbw) + fmt::format("'{}.bus_bandwidth' is {}; expected nccl-tests' busbw in GB/s, a number from 1e-6 to 1e6", name,
                                                  json_excerpt(busbw.Scalar())));
    }
    m.bus_bandwidth = gbps * 1e9;
    set.measurements.push_back(m);
  }
  return set;
}

// ---------------------------------------------------------------- the model

// The platform with the NICs' rate (and the links that carry them) scaled by exp(log_nic) and the
// network step by exp(log_step).
models::Platform scaled(const models::Platform& base, double log_nic, double log_step) {
  models::Platform p = base;
  const double nic = std::exp(log_nic);
  p.nic->bandwidth = base.nic->bandwidth * nic;
  p.network->link.bandwidth = base.network->link.bandwidth * nic;
  p.collectives.inter_node_step = base.collectives.inter_node_step * std::exp(log_step);
  return p;
}

// busbw of one measurement on `platform`, as comptrain validate predicts a bus_bandwidth point.
double predict(const models::Platform& platform, const CollectiveMeasurement& m) {
  return ring_bus_bandwidth(platform, {m.nodes, m.gpus_per_node}, m.kind, m.bytes);
}

double squared_log_error(double predicted, double measured) { return std::pow(std::log(predicted / measured), 2); }

}  // namespace

CollectiveMeasurementSet parse_collective_measurements(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir) {
  return read_set(yaml::load_document(yaml, source), source, base_dir);
}

CollectiveMeasurementSet load_collective_measurements(const std::filesystem::path& path) {
  return parse_collective_measurements(read_file(path), path.string(), path.parent_path());
}

NetworkFitResult fit_network(const CollectiveMeasurementSet& set, const NetworkFitOptions& options) {
  const std::size_t n = set.measurements.size();
  if (options.holdout < 0 || static_cast<std::size_t>(options.holdout) >= n) {
    throw InputError(fmt::format("--holdout {}: {} leaves no measurement of {} to fit; expected 0 to {}", options.holdout, set.source, n, n - 1));
  }
  const std::size_t fitted_count = n - static_cast<std::size_t>(options.holdout);
  NetworkFitResult result;
  result.base = set.platform;

  // The objective over the fitted measurements, memoised: the grid and Brent's steps revisit points.
  std::map<std::pair<double, double>, double> cache;
  const auto objective = [&](double log_nic, double log_step) {
    const auto key = std::pair{log_nic, log_step};
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
    const models::Platform p = scaled(set.platform, log_nic, log_step);
    double sum = 0;
    for (std::size_t i = 0; i < fitted_count; ++i) sum += squared_log_error(predict(p, set.measurements[i]), set.measurements[i].bus_bandwidth);
    result.simulations += static_cast<int>(fitted_count);
    return cache[key] = sum;
  };
  // The grid, then Brent's method on each value in turn within a grid step of the best point,
  // until a round moves neither by more than 1e-4 in log scale (0.01 %, below what 4 written
  // digits keep).
  const double step = 2 * kLogRange / (kGridPoints - 1);
  double best_nic = 0, best_step = 0, best = objective(0, 0);
  for (int i = 0; i < kGridPoints; ++i) {
    for (int j = 0; j < kGridPoints; ++j) {
      const double a = -kLogRange + i * step, b = -kLogRange + j * step;
      if (const double f = objective(a, b); f < best) std::tie(best_nic, best_step, best) = std::tuple{a, b, f};
    }
  }
  for (int round = 0; round < 8; ++round) {
    const double nic_before = best_nic, step_before = best_step;
    const auto along_nic = [&](double a) { return objective(a, best_step); };
    const auto [a, fa] = boost::math::tools::brent_find_minima(along_nic, std::max(-kLogRange, best_nic - step), std::min(kLogRange, best_nic + step), 30);
    if (fa < best) std::tie(best_nic, best) = std::pair{a, fa};
    const auto along_step = [&](double b) { return objective(best_nic, b); };
    const auto [b, fb] = boost::math::tools::brent_find_minima(along_step, std::max(-kLogRange, best_step - step), std::min(kLogRange, best_step + step), 30);
    if (fb < best) std::tie(best_step, best) = std::pair{b, fb};
    if (std::abs(best_nic - nic_before) < 1e-4 && std::abs(best_step - step_before) < 1e-4) break;
  }

  // What is written: the NICs' rate and the step to 4 digits, the links at the written rate times
  // the base's ratio of link to NIC (a link that carried its node's 8 NICs still carries 8), every
  // other value the base's. Each as the text the file holds, and the value that text reads back as.
  models::Platform written = set.platform;
  written.name = options.output_name;
  const std::string nic_text = fmt::format("{:.4g} GB/s", set.platform.nic->bandwidth * std::exp(best_nic) / 1e9);
  written.nic->bandwidth = models::units::parse_quantity(nic_text, models::units::Dimension::bandwidth);
  const std::string link_text =
      fmt::format("{:.6g} GB/s", written.nic->bandwidth * (set.platform.network->link.bandwidth / set.platform.nic->bandwidth) / 1e9);
  written.network->link.bandwidth = models::units::parse_quantity(link_text, models::units::Dimension::bandwidth);
  const std::string step_text = fmt::format("{:.4g} us", set.platform.collectives.inter_node_step * std::exp(best_step) * 1e6);
  written.collectives.inter_node_step = models::units::parse_quantity(step_text, models::units::Dimension::time);

  // Every measurement before and after, on the values as written.
  double before = 0, after = 0, held_before = 0, held_after = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const CollectiveMeasurement& m = set.measurements[i];
    CollectiveFit row{m, predict(set.platform, m), predict(written, m), i >= fitted_count};
    (row.held_out ? held_before : before) += squared_log_error(row.before, m.bus_bandwidth);
    (row.held_out ? held_after : after) += squared_log_error(row.after, m.bus_bandwidth);
    result.rows.push_back(row);
  }
  result.rms_before = std::sqrt(before / static_cast<double>(fitted_count));
  result.rms_after = std::sqrt(after / static_cast<double>(fitted_count));
  if (options.holdout > 0) {
    result.holdout_rms_before = std::sqrt(held_before / options.holdout);
    result.holdout_rms_after = std::sqrt(held_after / options.holdout);
  }
  const std::string fitted_comment =
      fmt::format("fitted by `comptrain calibrate --from-collectives {}{}`: {} nccl-tests busbw, rms log error {:.4f} (before: {:.4f})",
                  set.source, options.holdout > 0 ? fmt::format(" --holdout {}", options.holdout) : "", fitted_count, result.rms_after,
                  result.rms_before);
  models::PlatformYamlComments comments;
  comments.header = fmt::format(
      "Platform {} as `comptrain calibrate --from-collectives` fitted it. The network values marked \"fitted\" (the NICs' rate,\n"
      "the network links' and NCCL's step across the network) were fitted to measured nccl-tests bus bandwidths; every other\n"
      "value is copied from platform {} ({}), with the comment it had there when it had one of its own.",
      written.name, set.platform.name, set.platform.source);
  comments.original_text = set.platform_text;
  comments.otherwise = fmt::format("copied from platform {} ({})", set.platform.name, set.platform.source);
  const std::map<std::vector<std::string>, std::string> fitted_texts{
      {{"nic", "bandwidth"}, nic_text}, {{"network", "link", "bandwidth"}, link_text}, {{"collectives", "inter_node_step"}, step_text}};
  comments.comment_for = [&](const std::vector<std::string>& path) -> std::optional<std::string> {
    if (path == std::vector<std::string>{"name"}) return "calibrate -o";
    if (fitted_texts.contains(path)) return fitted_comment;
    return std::nullopt;
  };
  comments.text_for = [&](const std::vector<std::string>& path) -> std::optional<std::string> {
    const auto it = fitted_texts.find(path);
    return it == fitted_texts.end() ? std::nullopt : std::optional(it->second);
  };
  result.platform_yaml = models::platform_to_yaml(written, comments);
  // What we write must read back as what we evaluate.
  result.fitted = models::parse_platform(result.platform_yaml, options.output_name);
  if (result.fitted.nic->bandwidth != written.nic->bandwidth || result.fitted.network->link.bandwidth != written.network->link.bandwidth ||
      result.fitted.collectives.inter_node_step != written.collectives.inter_node_step) {
    throw std::logic_error("fit_network: the written network values differ from the fitted ones");
  }
  return result;
}

std::string network_fit_table(const NetworkFitResult& result) {
  std::string out = fmt::format("{:<4} {:<14} {:>5} {:>4} {:>12} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "line", "collective", "nodes", "gpn", "bytes",
                                "measured", "before", "error", "after", "error");
  const auto row = [&out](const CollectiveFit& r) {
    const CollectiveMeasurement& m = r.measurement;
    out += fmt::format("{:<4} {:<14} {:>5} {:>4} {:>12} {:>10.4g} {:>10.4g} {:>+7.1f}% {:>10.4g} {:>+7.1f}%\n", m.line, models::to_string(m.kind), m.nodes,
                       m.gpus_per_node, m.bytes, m.bus_bandwidth / 1e9, r.before / 1e9, 100 * (r.before / m.bus_bandwidth - 1), r.after / 1e9,
                       100 * (r.after / m.bus_bandwidth - 1));
  };
  const std::size_t fitted = detail::append_fitted_then_held_out(out, result.rows, row);
  out += "busbw in GB/s\n";
  out += fmt::format("nic.bandwidth           {:.4g} -> {:.4g} GB/s\n", result.base.nic->bandwidth / 1e9, result.fitted.nic->bandwidth / 1e9);
  out += fmt::format("network.link.bandwidth  {:.4g} -> {:.4g} GB/s\n", result.base.network->link.bandwidth / 1e9,
                     result.fitted.network->link.bandwidth / 1e9);
  out += fmt::format("inter_node_step         {:.4g} -> {:.4g} us\n", result.base.collectives.inter_node_step * 1e6,
                     result.fitted.collectives.inter_node_step * 1e6);
  out += fmt::format("rms log error, {} fitted: {:.4f} -> {:.4f}\n", fitted, result.rms_before, result.rms_after);
  if (result.holdout_rms_before) {
    out += fmt::format("rms log error, {} held out: {:.4f} -> {:.4f}\n", result.rows.size() - fitted, *result.holdout_rms_before,
                       *result.holdout_rms_after);
  }
  out += fmt::format("{} collectives simulated\n", result.simulations);
  return out;
}

}  // namespace comptrain::sim
