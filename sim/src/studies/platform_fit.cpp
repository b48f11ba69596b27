#include "comptrain/sim/studies/platform_fit.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/metrics/throughput.hpp"
#include "comptrain/sim/runtime/wire.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/sim/studies/prediction.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_excerpt.hpp"
#include "comptrain/support/yaml_errors.hpp"
#include "studies/fit_rows.hpp"

namespace comptrain::sim {
namespace {

using traces::OpKind;
namespace limits = models::platform_limits;

// The kinds that run on tensor cores and decide compute-bound time (op_time.cpp's
// uses_tensor_cores): scaled together by FitParameter::gemm.
constexpr std::array kGemmKinds{OpKind::conv, OpKind::linear, OpKind::matmul, OpKind::attention};
// The same kinds in two groups, for sets whose convolutions and matrix products part ways (a
// CNN's implicit-GEMM convolutions on cuDNN against a transformer's cuBLAS GEMMs):
// FitParameter::conv and FitParameter::matmul.
constexpr std::array kMatmulKinds{OpKind::linear, OpKind::matmul, OpKind::attention};

constexpr std::array kAllParameters{FitParameter::gemm,        FitParameter::conv,        FitParameter::matmul,
                                    FitParameter::memory_default, FitParameter::compute_default, FitParameter::tensor_core,
                                    FitParameter::tensor_core_cuda11, FitParameter::conv_wave_loss, FitParameter::gemm_k_overhead};

// gemm_k_overhead is no fraction of peak: a count of K elements, scaled from the base value (or
// from kStartKOverhead where the base has none, 0 scaling to nothing) within [1, kMaxFittedKOverhead]
// and written as a whole number.
constexpr double kStartKOverhead = 128;
constexpr double kMaxFittedKOverhead = 4096;

// ---------------------------------------------------------------- the measurements file

MeasurementSet read_measurements(const YAML::Node& root, std::string_view source, const std::filesystem::path& base_dir) {
  const auto where = [&](const YAML::Node& node) { return yaml::location(source, node.Mark()); };
  if (!root.IsMap()) throw InputError(where(root) + "expected a mapping with the keys platform, measurements");
  yaml::check_keys(source, root, "the measurements file", {"platform", "measurements"});
  MeasurementSet set;
  set.source = source;

  const YAML::Node platform = root["platform"];
  if (!platform) throw InputError(where(root) + "missing key 'platform'; expected a shipped platform name or a platform file (.yaml)");
  if (!platform.IsScalar() || platform.Scalar().empty()) {
    throw InputError(where(platform) + "'platform' must be a shipped platform name or a platform file (.yaml)");
  }
  set.platform_spec = platform.Scalar();
  set.platform_line = platform.Mark().line + 1;
  try {
    set.platform = models::resolve_platform(set.platform_spec, base_dir);
    const models::ShippedOrFile which =
        models::shipped_or_file(set.platform_spec, base_dir, "platform", models::builtin_platform_names());
    if (which.file) set.platform_text = read_file(*which.file);
  } catch (const InputError& e) {
    throw InputError(where(platform) + "platform: " + e.what());
  }

  const YAML::Node list = root["measurements"];
  if (!list) throw InputError(where(root) + "missing key 'measurements'; expected a list of {scenario: FILE, samples_per_second: X}");
  if (!list.IsSequence() || list.size() == 0) {
    throw InputError(where(list) + "'measurements' must be a non-empty list of {scenario: FILE, samples_per_second: X}");
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string name = fmt::format("measurements[{}]", i);
    if (!item.IsMap()) throw InputError(where(item) + "'" + name + "' must be a mapping {scenario: FILE, samples_per_second: X}");
    yaml::check_keys(source, item, name, {"scenario", "samples_per_second"});
    Measurement m;
    m.line = item.Mark().line + 1;
    const YAML::Node scenario = item["scenario"];
    if (!scenario) throw InputError(where(item) + "missing key 'scenario' in " + name + "; expected a scenario file relative to this file");
    // At most PATH_MAX (4096 bytes on Linux): no longer path opens, and every later message
    // about the measurement shows it.
    constexpr std::size_t kMaxPath = 4096;
    if (!scenario.IsScalar() || scenario.Scalar().empty() || scenario.Scalar().size() > kMaxPath) {
      throw InputError(where(scenario) + "'" + name + ".scenario' must be a scenario file (a path relative to this file, at most 4096 bytes)");
    }
    m.scenario = base_dir / scenario.Scalar();
    const YAML::Node rate = item["samples_per_second"];
    if (!rate) throw InputError(where(item) + "missing key 'samples_per_second' in " + name + "; expected the measured training throughput");
    double value = 0;
    // The validation table's bounds (1e-9 to 1e18, sim/src/studies/validate.cpp): a denormal
    // made the fit's log errors infinite.
    if (!rate.IsScalar() || !YAML::convert<double>::decode(rate, value) || !(value >= 1e-9 && value <= 1e18)) {
      throw InputError(where(rate) + "'" + name + ".samples_per_second' is " + (rate.IsScalar() ? json_excerpt(rate.Scalar()) : "a collection") +
                       "; expected a number from 1e-9 to 1e18 (training samples per second, at the scenario's batch size)");
    }
    m.samples_per_second = value;
    set.measurements.push_back(std::move(m));
  }
  return set;
}

// ---------------------------------------------------------------- parameters

// One parameter's efficiencies on the base platform: where they live and their values.
struct Group {
  FitParameter parameter = FitParameter::gemm;
  bool memory = false;                // memory efficiencies, else compute
  // One value of Efficiency's own, not per kind (tensor_core, tensor_core_cuda11,
  // conv_wave_loss, gemm_k_overhead): efficiency.<its name> in a platform file; one entry, nullopt.
  bool scalar = false;
  // A count of K elements (gemm_k_overhead), not a fraction of peak.
  bool elements = false;
  std::vector<std::optional<OpKind>> entries;  // nullopt: the `default`
  std::vector<double> base;
  double lo = 0, hi = 0;              // bounds of log(scale): every value stays in [0.001, 1] (elements: [1, kMaxFittedKOverhead])
};

Group group_of(FitParameter parameter, const models::Efficiency& e) {
  Group g;
  g.parameter = parameter;
  switch (parameter) {
    case FitParameter::gemm:
      for (OpKind kind : kGemmKinds) {
        g.entries.emplace_back(kind);
        g.base.push_back(e.compute_for(kind));
      }
      break;
    case FitParameter::conv:
      g.entries.emplace_back(OpKind::conv);
      g.base.push_back(e.compute_for(OpKind::conv));
      break;
    case FitParameter::matmul:
      for (OpKind kind : kMatmulKinds) {
        g.entries.emplace_back(kind);
        g.base.push_back(e.compute_for(kind));
      }
      break;
    case FitParameter::memory_default:
      g.memory = true;
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.memory_default);
      break;
    case FitParameter::compute_default:
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.compute_default);
      break;
    case FitParameter::tensor_core:
      g.scalar = true;
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.tensor_core);
      break;
    case FitParameter::tensor_core_cuda11:
      // Unset, the fit starts from the current toolkits' share.
      g.scalar = true;
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.tensor_core_cuda11.value_or(e.tensor_core));
      break;
    case FitParameter::conv_wave_loss:
      g.scalar = true;
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.conv_wave_loss);
      break;
    case FitParameter::gemm_k_overhead:
      g.scalar = true;
      g.elements = true;
      g.entries.emplace_back(std::nullopt);
      g.base.push_back(e.gemm_k_overhead > 0 ? e.gemm_k_overhead : kStartKOverhead);
      g.lo = std::log(1.0 / g.base.front());
      g.hi = std::log(kMaxFittedKOverhead / g.base.front());
      return g;
  }
  const auto [smallest, largest] = std::minmax_element(g.base.begin(), g.base.end());
  g.lo = std::log(limits::min_efficiency / *smallest);
  g.hi = std::log(1.0 / *largest);
  return g;
}

// A fraction as the platform file will hold it: 4 significant digits within the bounds, so
// that what the fit reports is what the written file predicts.
double as_written(double value) {
  const double rounded = std::stod(fmt::format("{:.4g}", value));
  return std::clamp(rounded, limits::min_efficiency, 1.0);
}

// Sets a scalar parameter's value (Group::scalar).
void set_scalar(models::Efficiency& e, FitParameter parameter, double value) {
  switch (parameter) {
    case FitParameter::tensor_core:
      e.tensor_core = value;
      return;
    case FitParameter::tensor_core_cuda11:
      e.tensor_core_cuda11 = value;
      return;
    case FitParameter::conv_wave_loss:
      e.conv_wave_loss = value;
      return;
    case FitParameter::gemm_k_overhead:
      e.gemm_k_overhead = value;
      return;
    default:
      throw std::logic_error("set_scalar: " + std::string(to_string(parameter)) + " is a group of per-kind efficiencies");
  }
}

models::Efficiency scaled(const models::Efficiency& base, const std::vector<Group>& groups, const std::vector<double>& x, bool round) {
  models::Efficiency e = base;
  for (std::size_t j = 0; j < groups.size(); ++j) {
    const Group& g = groups[j];
    for (std::size_t k = 0; k < g.entries.size(); ++k) {
      double value = g.elements ? std::clamp(g.base[k] * std::exp(x[j]), 1.0, kMaxFittedKOverhead)
                                : std::clamp(g.base[k] * std::exp(x[j]), limits::min_efficiency, 1.0);
      if (round) value = g.elements ? std::round(value) : as_written(value);
      const std::optional<OpKind>& entry = g.entries[k];
      if (g.scalar) {
        set_scalar(e, g.parameter, value);
      } else if (!entry) {
        (g.memory ? e.memory_default : e.compute_default) = value;
      } else {
        (g.memory ? e.memory : e.compute)[*entry] = value;
      }
    }
  }
  return e;
}

// ---------------------------------------------------------------- predictions

struct LoadedMeasurement {
  Scenario scenario;  // on the base platform
  std::string name;
  std::int64_t batch = 0;
};

// One measurement's predicted samples/s under `efficiency`, or why there is none.
Prediction predict_in_worker(Scenario scenario, const models::Efficiency& efficiency) {
  scenario.platform->efficiency = efficiency;
  const PreparedScenario prepared(std::move(scenario));
  const std::int64_t batch = prepared.batch_size();
  RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, batch, Isolation::this_process);
  if (const auto* inapplicable = std::get_if<models::NotApplicable>(&outcome)) {
    return Prediction::none(fmt::format("the strategy does not apply at batch {} ({})", batch, inapplicable->reason));
  }
  const CompletedRun& completed = std::get<CompletedRun>(outcome);
  const SimulationResult& r = completed.result;
  if (const auto& oom = r.out_of_memory) {
    return Prediction::none(
        fmt::format("it runs out of memory at batch {} ({}); a throughput needs a run that fits", batch, describe_out_of_memory(*oom)));
  }
  if (!(r.iteration_seconds > 0)) return Prediction::none(fmt::format("the iteration takes {} s", r.iteration_seconds));
  // As comptrain validate: the iteration with the loader, or over the sequence bins.
  const std::optional<double> iteration = completed.sustained_iteration_seconds();
  if (!iteration) return Prediction::none(fmt::format("a shorter sequence bin runs out of memory at batch {}", batch));
  return Prediction::of(samples_per_second(global_batch(batch, prepared.data_parallel_ranks(), prepared.scenario().accumulation_steps), *iteration));
}

// Simulates measurements under given efficiencies, many at once in worker processes.
class Predictor {
 public:
  Predictor(const MeasurementSet& set, const std::vector<LoadedMeasurement>& loaded, int jobs) : set_(set), loaded_(loaded), jobs_(jobs) {}

  // Per request (efficiencies, measurement indices): the predicted samples/s of each index. Every
  // simulation runs; a failure is reported for the first one in request order, whatever `jobs`.
  std::vector<std::vector<double>> run(const std::vector<std::pair<models::Efficiency, std::vector<std::size_t>>>& requests) {
    std::vector<ChildProcess::Work> works;
    std::vector<std::pair<std::size_t, std::size_t>> slots;  // (request, index in it) per job
    for (std::size_t r = 0; r < requests.size(); ++r) {
      for (std::size_t k = 0; k < requests[r].second.size(); ++k) {
        const Scenario* scenario = &loaded_[requests[r].second[k]].scenario;
        const models::Efficiency* efficiency = &requests[r].first;
        works.emplace_back([scenario, efficiency] { return wire::encode(predict_in_worker(*scenario, *efficiency)); });
        slots.emplace_back(r, k);
      }
    }
    const std::vector<JobOutcome> outcomes = run_jobs(std::move(works), jobs_);
    std::vector<std::vector<double>> out(requests.size());
    for (std::size_t r = 0; r < requests.size(); ++r) out[r].resize(requests[r].second.size());
    for (std::size_t job = 0; job < outcomes.size(); ++job) {
      const auto [r, k] = slots[job];
      const std::size_t i = requests[r].second[k];
      const Measurement& m = set_.measurements[i];
      const JobOutcome& outcome = outcomes[job];
      const std::string where = fmt::format("{}:{}: measurement {} ({})", set_.source, m.line, i + 1, m.scenario.string());
      if (outcome.status == JobOutcome::Status::input_error) throw InputError(where + ": " + outcome.text);
      if (outcome.status != JobOutcome::Status::result) {
        throw std::runtime_error(where + ": the simulation failed: " + outcome.text + (outcome.diagnostics.empty() ? "" : "\n" + outcome.diagnostics));
      }
      const Prediction prediction = wire::decode<Prediction>(outcome.text);
      if (!prediction.value) throw InputError(where + ": " + prediction.why_none);
      out[r][k] = *prediction.value;
    }
    return out;
  }

 private:
  const MeasurementSet& set_;
  const std::vector<LoadedMeasurement>& loaded_;
  int jobs_;
};

double sum_squared_log_errors(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double sum = 0;
  for (std::size_t i = 0; i < predicted.size(); ++i) sum += std::pow(std::log(predicted[i] / measured[i]), 2);
  return sum;
}

double rms(double sum_of_squares, std::size_t count) { return std::sqrt(sum_of_squares / static_cast<double>(count)); }

// ---------------------------------------------------------------- the optimizer

// The objective over log-scale vectors, memoized (coordinate descent revisits points) and able
// to evaluate several points in one batch of worker processes (the grid scans).
class Objective {
 public:
  Objective(Predictor& predictor, const models::Efficiency& base, const std::vector<Group>& groups, std::vector<std::size_t> fitted,
            std::vector<double> measured)
      : predictor_(predictor), base_(base), groups_(groups), fitted_(std::move(fitted)), measured_(std::move(measured)) {}

  std::vector<double> values(const std::vector<std::vector<double>>& points) {
    std::vector<std::pair<models::Efficiency, std::vector<std::size_t>>> requests;
    std::vector<std::vector<double>> missing;
    for (const auto& x : points) {
      if (cache_.contains(x) || std::find(missing.begin(), missing.end(), x) != missing.end()) continue;
      missing.push_back(x);
      requests.emplace_back(scaled(base_, groups_, x, false), fitted_);
    }
    const auto predicted = predictor_.run(requests);
    for (std::size_t r = 0; r < missing.size(); ++r) cache_[missing[r]] = predicted[r];
    evaluations_ += static_cast<int>(missing.size());
    std::vector<double> out;
    for (const auto& x : points) out.push_back(sum_squared_log_errors(cache_.at(x), measured_));
    return out;
  }
  double value(const std::vector<double>& x) { return values({x}).front(); }
  const std::vector<double>& predictions(const std::vector<double>& x) {
    value(x);
    return cache_.at(x);
  }
  int evaluations() const { return evaluations_; }

 private:
  Predictor& predictor_;
  const models::Efficiency& base_;
  const std::vector<Group>& groups_;
  std::vector<std::size_t> fitted_;
  std::vector<double> measured_;
  std::map<std::vector<double>, std::vector<double>> cache_;
  int evaluations_ = 0;
};

// Minimizes f on [a, b] by golden-section search down to a bracket of `tolerance`; returns the
// best point it evaluated.
std::pair<double, double> golden_section(const std::function<double(double)>& f, double a, double b, double tolerance) {
  const double inverse_phi = (std::sqrt(5.0) - 1) / 2;
  double c = b - inverse_phi * (b - a);
  double d = a + inverse_phi * (b - a);
  double fc = f(c);
  double fd = f(d);
  while (b - a > tolerance) {
    if (fc <= fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - inverse_phi * (b - a);
      fc = f(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + inverse_phi * (b - a);
      fd = f(d);
    }
  }
  return fc <= fd ? std::pair{c, fc} : std::pair{d, fd};
}

// Golden-section brackets stop at 0.001 in log scale: 0.1 % of an efficiency, far below what
// end-to-end throughputs (a few % of run-to-run noise) can resolve.
constexpr double kLogTolerance = 1e-3;
// Points of each coordinate's grid scan: the objective need not be unimodal over three orders
// of magnitude (a term flattens once its ops turn memory-bound), so the golden section starts
// from the best of a grid.
constexpr int kGridPoints = 9;
// A sweep that lowers the objective by less than this ends the descent: 1e-10 in squared log
// error is a 0.001 % change of throughput.
constexpr double kConvergence = 1e-10;

// A line search from x along `direction`, t in [t_lo, t_hi]: a grid, then golden section
// between the best grid point's neighbours. Moves x only if that lowers the objective, so a
// parameter the predictions do not depend on keeps its value.
void line_search(Objective& objective, const std::vector<Group>& groups, std::vector<double>& x, double& fx,
                 const std::vector<double>& direction, double t_lo, double t_hi) {
  // The box [lo, hi] per parameter bounds t.
  for (std::size_t j = 0; j < x.size(); ++j) {
    if (direction[j] == 0) continue;
    const double to_lo = (groups[j].lo - x[j]) / direction[j];
    const double to_hi = (groups[j].hi - x[j]) / direction[j];
    t_lo = std::max(t_lo, std::min(to_lo, to_hi));
    t_hi = std::min(t_hi, std::max(to_lo, to_hi));
  }
  if (!(t_hi - t_lo > kLogTolerance)) return;
  const auto point = [&](double t) {
    std::vector<double> y = x;
    for (std::size_t j = 0; j < y.size(); ++j) y[j] = std::clamp(x[j] + t * direction[j], groups[j].lo, groups[j].hi);
    return y;
  };
  std::vector<std::vector<double>> grid;
  std::vector<double> ts;
  for (int k = 0; k < kGridPoints; ++k) {
    ts.push_back(t_lo + (t_hi - t_lo) * k / (kGridPoints - 1));
    grid.push_back(point(ts.back()));
  }
  const std::vector<double> values = objective.values(grid);
  const auto best = static_cast<std::size_t>(std::min_element(values.begin(), values.end()) - values.begin());
  auto [t, ft] = golden_section([&](double u) { return objective.value(point(u)); }, ts[best == 0 ? 0 : best - 1],
                                ts[std::min(best + 1, ts.size() - 1)], kLogTolerance);
  if (values[best] < ft) std::tie(t, ft) = std::pair{ts[best], values[best]};
  if (ft < fx) {
    x = point(t);
    fx = ft;
  }
}

// The search directions: each parameter alone, then each pair together and against each other.
// The pairs matter: an op's time is max(compute, memory), so the objective has kinks where ops
// change sides, and at a kink no single parameter may descend while a diagonal does (GEMM and
// memory efficiency trading time in the same iterations).
std::vector<std::vector<double>> directions(std::size_t n) {
  std::vector<std::vector<double>> out;
  for (std::size_t j = 0; j < n; ++j) {
    out.emplace_back(n, 0.0);
    out.back()[j] = 1;
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      for (const double sign : {1.0, -1.0}) {
        out.emplace_back(n, 0.0);
        out.back()[i] = 1;
        out.back()[j] = sign;
      }
    }
  }
  return out;
}

std::vector<double> minimize(Objective& objective, const std::vector<Group>& groups, int max_sweeps) {
  std::vector<double> x(groups.size(), 0.0);  // the base platform
  double fx = objective.value(x);
  const std::vector<std::vector<double>> search = directions(x.size());
  for (int sweep = 0; sweep < max_sweeps && fx > 0; ++sweep) {
    const std::vector<double> start = x;
    const double f_start = fx;
    // The first sweep scans each parameter over its whole range; later ones a shrinking window
    // around the current point (e^±1, then e^±0.5, ...), which the first placed.
    const double window = sweep == 0 ? std::numeric_limits<double>::infinity() : std::ldexp(1.0, 1 - sweep);
    for (const auto& direction : search) line_search(objective, groups, x, fx, direction, -window, window);
    // Along the sweep's net move (Powell's direction), which follows a smooth valley that the
    // fixed directions cross slowly; up to 4 more such moves.
    std::vector<double> move(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) move[j] = x[j] - start[j];
    if (x.size() > 1 && *std::max_element(move.begin(), move.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }) != 0) {
      line_search(objective, groups, x, fx, move, 0, 4);
    }
    if (f_start - fx < kConvergence) break;
  }
  return x;
}

}  // namespace

// ---------------------------------------------------------------- public

MeasurementSet parse_measurements(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir) {
  return read_measurements(yaml::load_document(yaml, source), source, base_dir);
}

MeasurementSet load_measurements(const std::filesystem::path& path) {
  return parse_measurements(read_file(path), path.string(), path.parent_path());
}

std::string_view to_string(FitParameter parameter) {
  switch (parameter) {
    case FitParameter::gemm:
      return "gemm";
    case FitParameter::conv:
      return "conv";
    case FitParameter::matmul:
      return "matmul";
    case FitParameter::memory_default:
      return "memory_default";
    case FitParameter::compute_default:
      return "compute_default";
    case FitParameter::tensor_core:
      return "tensor_core";
    case FitParameter::tensor_core_cuda11:
      return "tensor_core_cuda11";
    case FitParameter::conv_wave_loss:
      return "conv_wave_loss";
    case FitParameter::gemm_k_overhead:
      return "gemm_k_overhead";
  }
  return "?";
}

std::optional<FitParameter> parse_fit_parameter(std::string_view text) {
  for (FitParameter p : kAllParameters) {
    if (to_string(p) == text) return p;
  }
  return std::nullopt;
}

std::string fit_parameter_choices() {
  std::string text;
  for (std::size_t i = 0; i < kAllParameters.size(); ++i) {
    if (i > 0) text += i + 1 == kAllParameters.size() ? " or " : ", ";
    text += to_string(kAllParameters[i]);
  }
  return text;
}

std::string fitted_platform_yaml(const models::Platform& base, std::string_view base_text, const models::Platform& fitted,
                                 const std::vector<ParameterFit>& parameters, const std::string& fitted_comment) {
  // The efficiencies a parameter scales, by (memory, kind; nullopt: default).
  std::map<std::pair<bool, std::optional<OpKind>>, const ParameterFit*> fitted_entries;
  // The scalar ones by their key under efficiency (their name).
  std::map<std::string, const ParameterFit*, std::less<>> fitted_scalars;
  for (const ParameterFit& p : parameters) {
    const Group group = group_of(p.parameter, base.efficiency);
    if (group.scalar) {
      fitted_scalars[std::string(to_string(p.parameter))] = &p;
      continue;
    }
    for (const std::optional<OpKind>& entry : group.entries) {
      fitted_entries[{p.parameter == FitParameter::memory_default, entry}] = &p;
    }
  }
  const auto comment_of = [&](const ParameterFit& p) {
    if (p.sensitivity != 0) return fitted_comment;
    return fmt::format("not fitted: no measurement depends on it ({} kept); copied from platform {}", to_string(p.parameter), base.name);
  };
  models::PlatformYamlComments comments;
  comments.header = fmt::format(
      "Platform {} as `comptrain calibrate --from-measurements` fitted it. The efficiencies marked\n"
      "\"fitted\" were fitted to measured throughputs; every other value is copied from platform {}\n"
      "({}), with the comment it had there when it had one of its own.",
      fitted.name, base.name, base.source);
  comments.original_text = base_text;
  comments.otherwise = fmt::format("copied from platform {} ({})", base.name, base.source);
  comments.comment_for = [&](const std::vector<std::string>& path) -> std::optional<std::string> {
    if (path == std::vector<std::string>{"name"}) return "calibrate -o";
    if (path.size() == 2 && path[0] == "efficiency") {
      const auto it = fitted_scalars.find(path[1]);
      return it == fitted_scalars.end() ? std::nullopt : std::optional(comment_of(*it->second));
    }
    if (path.size() != 3 || path[0] != "efficiency") return std::nullopt;
    const std::optional<OpKind> kind = path[2] == "default" ? std::nullopt : traces::parse_op_kind(path[2]);
    const auto it = fitted_entries.find({path[1] == "memory", kind});
    if (it == fitted_entries.end()) return std::nullopt;
    return comment_of(*it->second);
  };
  // Every value but the name and the efficiencies is the base platform's.
  models::Platform written = base;
  written.name = fitted.name;
  written.efficiency = fitted.efficiency;
  return models::platform_to_yaml(written, comments);
}

FitResult fit_measurements(const MeasurementSet& set, const FitOptions& options) {
  const std::size_t count = set.measurements.size();
  if (options.holdout < 0 || static_cast<std::size_t>(options.holdout) >= count) {
    throw InputError(fmt::format("--holdout {}: {} has {} measurement{}; expected 0 to {} held out, so that at least one is fitted",
                                 options.holdout, set.source, count, count == 1 ? "" : "s", count - 1));
  }
  if (options.parameters.empty()) {
    throw InputError("no parameter to fit; expected one or more of " + fit_parameter_choices());
  }
  const auto asked = [&](FitParameter p) { return std::find(options.parameters.begin(), options.parameters.end(), p) != options.parameters.end(); };
  // gemm scales the kinds conv and matmul split: fitted together, one efficiency would have two scales.
  if (asked(FitParameter::gemm) && (asked(FitParameter::conv) || asked(FitParameter::matmul))) {
    throw InputError("--fit-parameters: gemm scales conv, linear, matmul and attention together; expected either gemm or conv and matmul, not both");
  }

  // Every scenario is read and prepared before the first simulation, so a bad one stops the fit
  // at once, at its measurement's line.
  std::vector<LoadedMeasurement> loaded;
  for (std::size_t i = 0; i < count; ++i) {
    const Measurement& m = set.measurements[i];
    const std::string where = fmt::format("{}:{}: measurement {} ({})", set.source, m.line, i + 1, m.scenario.string());
    try {
      Scenario scenario = load_scenario_file(m.scenario);
      if (scenario.has_sweep) throw InputError("it has a sweep; expected one setup per measured throughput");
      set_platform(scenario, set.platform);
      const PreparedScenario prepared(scenario);
      loaded.push_back({std::move(scenario), prepared.scenario().name, prepared.batch_size()});
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
  }
  const std::size_t fitted_count = count - static_cast<std::size_t>(options.holdout);
  std::vector<std::size_t> fitted_indices, all_indices;
  std::vector<double> measured;
  for (std::size_t i = 0; i < count; ++i) {
    all_indices.push_back(i);
    if (i < fitted_count) {
      fitted_indices.push_back(i);
      measured.push_back(set.measurements[i].samples_per_second);
    }
  }

  std::vector<FitParameter> parameters;
  for (FitParameter p : options.parameters) {
    if (std::find(parameters.begin(), parameters.end(), p) == parameters.end()) parameters.push_back(p);
  }
  std::vector<Group> groups;
  for (FitParameter p : parameters) groups.push_back(group_of(p, set.platform.efficiency));

  Predictor predictor(set, loaded, options.jobs);
  FitResult result;
  result.base = set.platform;
  // Before: every measurement on the base platform (this also finds one that cannot run).
  const std::vector<double> before = predictor.run({{set.platform.efficiency, all_indices}}).front();

  Objective objective(predictor, set.platform.efficiency, groups, fitted_indices, measured);
  const std::vector<double> x = minimize(objective, groups, options.max_sweeps);

  // How much each parameter moves the predictions at the fit: 0 = the data say nothing of it.
  const std::vector<double>& at_fit = objective.predictions(x);
  for (std::size_t j = 0; j < groups.size(); ++j) {
    constexpr double kStep = 0.05;
    std::vector<double> y = x;
    y[j] = x[j] + kStep <= groups[j].hi ? x[j] + kStep : x[j] - kStep;
    const std::vector<double> moved = objective.predictions(y);
    double sensitivity = 0;
    for (std::size_t i = 0; i < moved.size(); ++i) sensitivity = std::max(sensitivity, std::abs(std::log(moved[i] / at_fit[i])) / kStep);
    // Below 1e-6 the change is rounding in the replay, not a dependence.
    const bool determined = sensitivity >= 1e-6;
    result.parameters.push_back({parameters[j], determined ? std::exp(x[j]) : 1.0, determined ? sensitivity : 0.0});
  }
  result.evaluations = objective.evaluations();

  // The platform as it will be written (4 digits per efficiency), read back: the "after"
  // column is what the file predicts.
  std::vector<double> x_written = x;
  for (std::size_t j = 0; j < groups.size(); ++j) {
    if (result.parameters[j].sensitivity == 0) x_written[j] = 0;  // not determined: the base value stays
  }
  models::Platform fitted = set.platform;
  fitted.name = options.output_name;
  fitted.efficiency = scaled(set.platform.efficiency, groups, x_written, true);
  for (std::size_t j = 0; j < groups.size(); ++j) {
    // x = 0 is the base value for every parameter but a gemm_k_overhead the base lacks (its
    // scale starts from kStartKOverhead): not determined, it stays absent.
    if (result.parameters[j].sensitivity == 0 && groups[j].elements) fitted.efficiency.gemm_k_overhead = set.platform.efficiency.gemm_k_overhead;
  }
  const std::vector<double> after = predictor.run({{fitted.efficiency, all_indices}}).front();

  double before_fit = 0, after_fit = 0, before_held = 0, after_held = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const bool held_out = i >= fitted_count;
    const double m = set.measurements[i].samples_per_second;
    (held_out ? before_held : before_fit) += std::pow(std::log(before[i] / m), 2);
    (held_out ? after_held : after_fit) += std::pow(std::log(after[i] / m), 2);
    result.rows.push_back({set.measurements[i], loaded[i].name, loaded[i].batch, before[i], after[i], held_out});
  }
  result.rms_before = rms(before_fit, fitted_count);
  result.rms_after = rms(after_fit, fitted_count);
  if (options.holdout > 0) {
    result.holdout_rms_before = rms(before_held, static_cast<std::size_t>(options.holdout));
    result.holdout_rms_after = rms(after_held, static_cast<std::size_t>(options.holdout));
  }
  const std::string comment = fmt::format("fitted from {} measurements of {}: rms log error {:.4f} (before: {:.4f})", fitted_count,
                                          set.source, result.rms_after, result.rms_before);
  result.platform_yaml = fitted_platform_yaml(set.platform, set.platform_text, fitted, result.parameters, comment);
  // What we write must read back, and be what we evaluated.
  result.fitted = models::parse_platform(result.platform_yaml, options.output_name);
  for (const FitParameter p : parameters) {
    const Group written = group_of(p, result.fitted.efficiency);
    const Group evaluated = group_of(p, fitted.efficiency);
    if (written.base != evaluated.base) throw std::logic_error("fit_measurements: the written efficiencies differ from the evaluated ones");
  }
  return result;
}

std::string fit_table(const FitResult& result) {
  std::string out = fmt::format("{:<4} {:<40} {:>6} {:>11} {:>11} {:>8} {:>11} {:>8}\n", "line", "scenario", "batch", "measured",
                                "before", "error", "after", "error");
  const auto row = [&out](const MeasurementFit& r) {
    std::string scenario = r.measurement.scenario.filename().string();
    if (scenario.size() > 40) scenario = "..." + scenario.substr(scenario.size() - 37);
    out += fmt::format("{:<4} {:<40} {:>6} {:>11.4g} {:>11.4g} {:>+7.1f}% {:>11.4g} {:>+7.1f}%\n", r.measurement.line, scenario, r.batch,
                       r.measurement.samples_per_second, r.before, 100 * (r.before / r.measurement.samples_per_second - 1), r.after,
                       100 * (r.after / r.measurement.samples_per_second - 1));
  };
  const std::size_t fitted = detail::append_fitted_then_held_out(out, result.rows, row);
  out += "parameters (fitted value / base value; sensitivity = max |d log throughput / d log value|):\n";
  for (const ParameterFit& p : result.parameters) {
    // gemm_k_overhead is a count, not a fraction: its value, and the base's.
    const std::string value =
        p.parameter == FitParameter::gemm_k_overhead
            ? fmt::format("= {:g} (base {:g})", result.fitted.efficiency.gemm_k_overhead, result.base.efficiency.gemm_k_overhead)
            : fmt::format("x{:.4g}", p.scale);
    out += fmt::format("  {:<16} {}  sensitivity {:.3g}{}\n", to_string(p.parameter), value, p.sensitivity,
                       p.sensitivity == 0 ? "  (no measurement depends on it: kept)" : "");
  }
  out += fmt::format("rms log error, {} fitted: {:.4f} -> {:.4f}\n", fitted, result.rms_before, result.rms_after);
  if (fitted < result.parameters.size()) {
    out += fmt::format("note: {} measurement{} for {} parameters: many fits match them equally; the one found is not unique\n", fitted,
                       fitted == 1 ? "" : "s", result.parameters.size());
  }
  if (result.holdout_rms_before) {
    out += fmt::format("rms log error, {} held out: {:.4f} -> {:.4f}\n", result.rows.size() - fitted, *result.holdout_rms_before,
                       *result.holdout_rms_after);
  }
  out += fmt::format("{} evaluations of the objective\n", result.evaluations);
  return out;
}

}  // namespace comptrain::sim
