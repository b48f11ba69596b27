#include "comptrain/sim/plan.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "comptrain/models/op_time.hpp"
#include "comptrain/sim/simulation.hpp"
#include "comptrain/sim/sweep.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using nlohmann::ordered_json;

static_assert(std::is_trivially_copyable_v<PlanPoint>, "PlanPoint travels over a pipe as bytes");

bool is_baseline(const models::StrategySpec& spec) { return spec.rules.empty(); }

Scenario at_batch(Scenario scenario, std::int64_t batch) {
  scenario.batch_size = batch;
  if (scenario.zoo_model) scenario.zoo_model->batch_size = batch;
  return scenario;
}

// Runs in a worker process: one simulation, reduced to what the planner needs. A strategy that
// cannot be built at this batch (e.g. a recompute budget below what the checkpoints need) is an
// inapplicable point rather than an error, so the search can go on; its message follows the bytes.
std::string probe(const Scenario& scenario, const models::StrategySpec& spec, std::int64_t batch) {
  // This is a worker process: SimGrid's backtraces on a crash would only clutter the progress
  // line, and the failure reaches the plan's warnings anyway.
  if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) {
    ::dup2(null, STDERR_FILENO);
    ::close(null);
  }
  const Scenario s = at_batch(scenario, batch);
  const models::Platform& platform = require_platform(s);
  const traces::Trace trace = build_trace(s);
  models::OpTimeOptions time_options;
  time_options.allow_tf32 = s.allow_tf32;
  const models::OpTimeModel time_model(platform, time_options);
  PlanPoint point;
  point.batch = batch;
  std::string note;
  std::optional<models::Schedule> schedule;
  try {
    schedule = models::build_schedule(trace, time_model, spec);
  } catch (const InputError& e) {
    point.inapplicable = true;
    note = e.what();
  }
  if (schedule) {
    // simulate() forks once more: a simulator crash (an abort inside SimGrid) then becomes a
    // failed point with its message instead of ending the whole plan.
    SimulationResult r;
    try {
      r = simulate(platform, *schedule);
    } catch (const std::runtime_error& e) {
      point.simulation_failed = true;
      note = e.what();
    }
    if (point.simulation_failed) {
    } else if (r.out_of_memory) {
      point.out_of_memory = true;
      point.peak_bytes = r.out_of_memory->in_use + r.out_of_memory->requested;
    } else {
      point.peak_bytes = r.peak_bytes;
      point.iteration_seconds = r.iteration_seconds;
      point.stall_seconds = r.compute_stall_seconds;
    }
  }
  std::string bytes(sizeof point, '\0');
  std::memcpy(bytes.data(), &point, sizeof point);
  return bytes + note;
}

// The search for one strategy of one plan; see plan.hpp. A round's probes are decided from the
// results of the previous round only, never from the order in which they arrive.
struct Search {
  std::size_t plan = 0;
  std::size_t strategy = 0;
  enum class Phase { grow, bisect, extra, done } phase = Phase::grow;
  std::int64_t lo = 0;          // largest batch known to fit (0: none)
  std::int64_t hi = 0;          // smallest batch known not to fit (0: none yet)
  std::int64_t next_power = 1;  // growth: the next power of two to probe
  std::vector<std::int64_t> round;
  std::size_t outstanding = 0;
  std::map<std::int64_t, PlanPoint> points;
  std::map<std::int64_t, std::string> notes;  // by batch: the same whatever the completion order
};

struct Driver {
  const std::vector<PlanRequest>& requests;
  std::vector<Plan> plans;
  std::vector<Search> searches;
  ProcessPool pool;
  Progress progress;
  std::map<std::size_t, std::pair<std::size_t, std::int64_t>> job_owner;  // job -> search, batch
  std::vector<bool> extra_done;

  Driver(const std::vector<PlanRequest>& r, int jobs, bool show) : requests(r), pool(jobs), progress("plan", show) {}

  const PlanOptions& options(const Search& s) const { return requests[s.plan].options; }
  std::int64_t limit(const Search& s) const { return plans[s.plan].limit_bytes; }

  // The next round's probes, or none when the search is finished.
  std::vector<std::int64_t> next_round(Search& s) const {
    const auto width = static_cast<std::int64_t>(std::max(1, options(s).probes_per_round));
    const std::int64_t ceiling = options(s).max_batch;
    std::vector<std::int64_t> out;
    if (s.phase == Search::Phase::grow) {
      while (static_cast<std::int64_t>(out.size()) < width && s.next_power > 0) {
        if (s.next_power >= ceiling) {
          out.push_back(ceiling);
          s.next_power = 0;  // the ceiling is the last growth probe
        } else {
          out.push_back(s.next_power);
          s.next_power *= 2;
        }
      }
    } else if (s.phase == Search::Phase::bisect) {
      for (std::int64_t i = 1; i <= width; ++i) {
        const std::int64_t b = s.lo + (s.hi - s.lo) * i / (width + 1);
        if (b > s.lo && b < s.hi && (out.empty() || out.back() != b)) out.push_back(b);
      }
    }
    return out;
  }

  // Decides from a completed round: the first failing probe bounds the interval from above.
  void decide(Search& s) {
    std::sort(s.round.begin(), s.round.end());
    std::optional<std::int64_t> first_fail;
    for (std::int64_t b : s.round) {
      if (!s.points.at(b).fits) {
        first_fail = b;
        break;
      }
      s.lo = b;
    }
    if (s.phase == Search::Phase::extra) {
      s.phase = Search::Phase::done;
      return;
    }
    if (first_fail) {
      s.hi = *first_fail;
      s.phase = (s.lo == 0 || s.hi - s.lo <= 1) ? Search::Phase::done : Search::Phase::bisect;
    } else if (s.phase == Search::Phase::grow && s.next_power == 0) {
      s.phase = Search::Phase::done;  // the ceiling fits
    } else if (s.phase == Search::Phase::bisect && s.hi - s.lo <= 1) {
      s.phase = Search::Phase::done;
    }
  }

  void submit_round(std::size_t index) {
    Search& s = searches[index];
    while (s.phase != Search::Phase::done) {
      if (s.phase != Search::Phase::extra) s.round = next_round(s);
      s.outstanding = 0;
      for (std::int64_t b : s.round) {
        if (s.points.count(b)) continue;  // already simulated
        const PlanRequest& request = requests[s.plan];
        const models::StrategySpec& spec = request.strategies[s.strategy];
        const std::size_t job = pool.submit([&request, &spec, b]() { return probe(request.scenario, spec, b); });
        job_owner[job] = {index, b};
        ++s.outstanding;
      }
      if (s.outstanding > 0) return;
      if (s.round.empty()) {
        s.phase = Search::Phase::done;
      } else {
        decide(s);
      }
    }
    on_search_done(s);
  }

  // When every search of a plan is done: the baseline at the other strategies' best batches
  // where it fits there but was not simulated, for the slowdown column.
  void on_search_done(const Search& done) {
    const std::size_t p = done.plan;
    if (extra_done[p]) return;
    std::optional<std::size_t> baseline;
    for (std::size_t i = 0; i < searches.size(); ++i) {
      if (searches[i].plan != p) continue;
      if (searches[i].phase != Search::Phase::done) return;
      if (!baseline && is_baseline(requests[p].strategies[searches[i].strategy])) baseline = i;
    }
    extra_done[p] = true;
    if (!baseline) return;
    Search& base = searches[*baseline];
    std::vector<std::int64_t> extra;
    for (const Search& s : searches) {
      if (s.plan != p || &s == &base) continue;
      if (auto best = best_of(s); best && base.lo >= *best && !base.points.count(*best)) extra.push_back(*best);
    }
    std::sort(extra.begin(), extra.end());
    extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
    if (extra.empty()) return;
    base.phase = Search::Phase::extra;
    base.round = extra;
    submit_round(*baseline);
  }

  double rate(const Search& s, const PlanPoint& point) const {
    if (!point.fits || point.iteration_seconds <= 0) return 0;
    if (const auto g = options(s).target_global_batch) {
      const std::int64_t steps = (*g + point.batch - 1) / point.batch;
      return static_cast<double>(*g) / (static_cast<double>(steps) * point.iteration_seconds);
    }
    return point.samples_per_second;
  }

  std::optional<std::int64_t> best_of(const Search& s) const {
    std::optional<std::int64_t> best;
    double best_rate = 0;
    for (const auto& [b, point] : s.points) {  // ascending: ties keep the smaller batch
      const double r = rate(s, point);
      if (point.fits && (!best || r > best_rate)) {
        best = b;
        best_rate = r;
      }
    }
    return best;
  }

  void record(std::size_t job, std::string output) {
    const auto [index, batch] = job_owner.at(job);
    Search& s = searches[index];
    PlanPoint point;
    std::memcpy(&point, output.data(), sizeof point);
    if (point.inapplicable) s.notes[batch] = fmt::format("batch {}: the strategy does not apply: {}", batch, output.substr(sizeof point));
    if (point.simulation_failed) {
      s.notes[batch] = fmt::format("batch {}: the simulation failed ({}); counted as not fitting", batch, output.substr(sizeof point));
    }
    point.fits = !point.out_of_memory && !point.inapplicable && !point.simulation_failed && point.peak_bytes <= limit(s);
    point.samples_per_second = point.fits && point.iteration_seconds > 0 ? static_cast<double>(batch) / point.iteration_seconds : 0;
    s.points[batch] = point;
    if (--s.outstanding == 0) {
      decide(s);
      submit_round(index);
    }
  }

  std::size_t estimate_total() const {
    std::size_t total = 0;
    for (const Search& s : searches) {
      total += s.points.size() + s.outstanding;
      const auto width = static_cast<double>(std::max(1, options(s).probes_per_round));
      auto rounds = [&](double span) { return span <= 1 ? 0.0 : std::ceil(std::log(span) / std::log(width + 1)); };
      if (s.phase == Search::Phase::grow) total += static_cast<std::size_t>(width + width * rounds(static_cast<double>(std::max<std::int64_t>(s.lo, 2))));
      if (s.phase == Search::Phase::bisect) total += static_cast<std::size_t>(width * rounds(static_cast<double>(s.hi - s.lo)));
    }
    return total;
  }

  StrategyPlan finish(const Search& s) const {
    StrategyPlan out;
    out.strategy = requests[s.plan].strategies[s.strategy].name;
    for (const auto& [b, point] : s.points) out.points.push_back(point);
    for (const auto& [batch, note] : s.notes) out.warnings.push_back(note);
    if (s.lo > 0) {
      out.max_batch = s.lo;
      out.max_is_ceiling = s.lo == options(s).max_batch;
    }
    // The search assumed that peak memory grows with the batch; check it on what was simulated.
    const PlanPoint* previous = nullptr;
    std::optional<std::int64_t> failed_at;
    for (const PlanPoint& point : out.points) {
      if (!point.fits && !failed_at) failed_at = point.batch;
      if (point.fits && failed_at) {
        out.warnings.push_back(fmt::format("not monotone: batch {} fits but batch {} does not; the maximum reported is below the first failure", point.batch,
                                           *failed_at));
      }
      if (point.out_of_memory || point.inapplicable || point.simulation_failed) continue;
      if (previous && point.peak_bytes < previous->peak_bytes) {
        out.warnings.push_back(fmt::format("not monotone: peak {} at batch {} is below {} at batch {}", format_bytes(point.peak_bytes), point.batch,
                                           format_bytes(previous->peak_bytes), previous->batch));
      }
      previous = &point;
    }
    if (auto best = best_of(s)) {
      const PlanPoint& point = s.points.at(*best);
      out.best_batch = *best;
      out.best_samples_per_second = rate(s, point);
      out.best_peak_bytes = point.peak_bytes;
      if (const auto g = options(s).target_global_batch) out.accumulation_steps = (*g + *best - 1) / *best;
    }
    return out;
  }
};

void check_options(const PlanOptions& o) {
  if (!(o.margin >= 0 && o.margin < 1)) throw InputError(fmt::format("plan: margin {} is out of range; expected a fraction in [0, 1)", o.margin));
  if (o.max_batch < 1) throw InputError("plan: max batch must be >= 1");
  if (o.target_global_batch && *o.target_global_batch < 1) throw InputError("plan: target global batch must be >= 1");
  if (o.probes_per_round < 1) throw InputError("plan: probes per round must be >= 1");
}

std::string strategy_description(const StrategyPlan& s, const Plan& plan) {
  if (!s.max_batch) {
    if (s.points.empty()) return "not simulated";
    const PlanPoint& one = s.points.front();
    if (one.inapplicable) return "the strategy does not apply at batch 1";
    return fmt::format("does not fit at batch 1: needs {}{} of {} allowed", one.out_of_memory ? "more than " : "", format_bytes(one.peak_bytes),
                       format_bytes(plan.limit_bytes));
  }
  return {};
}

}  // namespace

std::vector<models::StrategySpec> strategies_to_plan(const Scenario& scenario) {
  if (scenario.plan && !scenario.plan->strategies.empty()) return scenario.plan->strategies;
  std::vector<models::StrategySpec> out(3);
  out[0].name = "baseline";
  out[1].name = "offload";
  out[1].rules.push_back({});
  out[1].rules.back().offload = models::OffloadAction{};
  out[2].name = "recompute";
  out[2].rules.push_back({});
  out[2].rules.back().recompute = models::RecomputeAction{};
  const std::string& own = scenario.strategy.name;
  if (std::none_of(out.begin(), out.end(), [&](const auto& s) { return s.name == own; })) out.push_back(scenario.strategy);
  return out;
}

PlanOptions plan_options_for(const Scenario& scenario, PlanOptions base) {
  if (!scenario.plan) return base;
  if (scenario.plan->margin) base.margin = *scenario.plan->margin;
  if (scenario.plan->max_batch) base.max_batch = *scenario.plan->max_batch;
  if (scenario.plan->target_global_batch) base.target_global_batch = scenario.plan->target_global_batch;
  return base;
}

std::vector<Plan> make_plans(const std::vector<PlanRequest>& requests, int jobs, bool progress) {
  Driver d(requests, jobs, progress);
  d.extra_done.assign(requests.size(), false);
  for (std::size_t p = 0; p < requests.size(); ++p) {
    const PlanRequest& r = requests[p];
    check_options(r.options);
    if (r.strategies.empty()) throw InputError(r.scenario.source + ": no strategy to plan");
    const models::Platform& platform = require_platform(r.scenario);
    Plan plan;
    plan.scenario_name = r.scenario.name;
    plan.variant = r.variant;
    plan.platform_name = platform.name;
    plan.capacity_bytes = platform.gpu.memory_bytes;
    plan.limit_bytes = static_cast<std::int64_t>(std::floor((1 - r.options.margin) * static_cast<double>(platform.gpu.memory_bytes)));
    plan.options = r.options;
    plan.options.jobs = jobs;
    plan.options.progress = progress;
    d.plans.push_back(std::move(plan));
    for (std::size_t s = 0; s < r.strategies.size(); ++s) {
      Search search;
      search.plan = p;
      search.strategy = s;
      d.searches.push_back(std::move(search));
    }
  }
  for (std::size_t i = 0; i < d.searches.size(); ++i) d.submit_round(i);
  std::size_t done = 0;
  d.progress.update(0, d.estimate_total(), true);
  while (auto finished = d.pool.next()) {
    d.record(finished->id, std::move(finished->output));
    d.progress.update(++done, d.estimate_total(), true);
  }
  d.progress.finish(done);

  for (const Search& s : d.searches) d.plans[s.plan].strategies.push_back(d.finish(s));
  for (std::size_t p = 0; p < d.plans.size(); ++p) {
    Plan& plan = d.plans[p];
    const auto& specs = requests[p].strategies;
    const auto base = std::find_if(specs.begin(), specs.end(), is_baseline);
    if (base == specs.end()) continue;
    const StrategyPlan& baseline = plan.strategies[static_cast<std::size_t>(base - specs.begin())];
    for (StrategyPlan& s : plan.strategies) {
      if (!s.best_batch) continue;
      const auto mine = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& q) { return q.batch == *s.best_batch; });
      const auto theirs = std::find_if(baseline.points.begin(), baseline.points.end(), [&](const PlanPoint& q) { return q.batch == *s.best_batch; });
      if (theirs != baseline.points.end() && theirs->fits && theirs->iteration_seconds > 0) {
        s.slowdown_vs_baseline = mine->iteration_seconds / theirs->iteration_seconds;
      }
    }
  }
  return d.plans;
}

Plan make_plan(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies, const PlanOptions& options) {
  std::vector<PlanRequest> requests(1);
  requests[0].scenario = scenario;
  requests[0].strategies = strategies;
  requests[0].options = options;
  return make_plans(requests, options.jobs, options.progress).front();
}

std::string plan_table_text(const Plan& plan) {
  const auto& o = plan.options;
  std::string out = fmt::format("Plan       {}{}\n", plan.scenario_name, plan.variant.empty() ? "" : "   (variant: " + plan.variant + ")");
  out += fmt::format("Platform   {}: {} of GPU memory; limit {} (margin {:g}%)\n", plan.platform_name, format_bytes(plan.capacity_bytes),
                     format_bytes(plan.limit_bytes), o.margin * 100);
  out += fmt::format("Search     batch 1 to {}, exponential growth then bisection ({} simulations per round); peak memory assumed monotone in the batch\n",
                     o.max_batch, o.probes_per_round);
  if (o.target_global_batch) {
    out += fmt::format("Target     global batch {} by gradient accumulation: samples/s = {} / (steps x iteration time); the optimizer step is counted\n"
                       "           on every micro-batch (our trace holds one), so the figures are slightly pessimistic\n",
                       *o.target_global_batch, *o.target_global_batch);
  }
  std::size_t width = 8;
  for (const auto& s : plan.strategies) width = std::max(width, s.strategy.size());
  const bool g = o.target_global_batch.has_value();
  out += "\n" + fmt::format("{:<{}}  {:>10}  {:>10}  {:>11}  {:>12}  ", "strategy", width, "max batch", "best batch", "samples/s", "peak at best");
  if (g) out += fmt::format("{:>11}  ", "accum steps");
  out += fmt::format("{:>13}  {:>4}\n", "vs baseline", "sims");
  for (const auto& s : plan.strategies) {
    if (!s.max_batch) {
      out += fmt::format("{:<{}}  {}  ({} simulations)\n", s.strategy, width, strategy_description(s, plan), s.points.size());
      continue;
    }
    const std::string max = s.max_is_ceiling ? fmt::format(">= {}", *s.max_batch) : std::to_string(*s.max_batch);
    out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>11.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                       format_bytes(s.best_peak_bytes));
    if (g) out += fmt::format("{:>11}  ", s.accumulation_steps);
    out += fmt::format("{:>13}  {:>4}\n", s.slowdown_vs_baseline > 0 ? fmt::format("{:.2f}x", s.slowdown_vs_baseline) : "n/a", s.points.size());
  }
  out += "\nvs baseline: iteration time / the baseline's at the same batch (n/a: the baseline does not fit there).\n";
  for (const auto& s : plan.strategies) {
    if (s.max_is_ceiling) out += fmt::format("{}: fits up to the search ceiling {} (--max-batch to search further).\n", s.strategy, *s.max_batch);
    for (const auto& w : s.warnings) out += fmt::format("warning: {}: {}\n", s.strategy, w);
  }
  return out;
}

namespace {

ordered_json plan_to_json(const Plan& plan) {
  ordered_json j;
  j["scenario"] = plan.scenario_name;
  j["variant"] = plan.variant.empty() ? ordered_json(nullptr) : ordered_json(plan.variant);
  j["platform"] = plan.platform_name;
  j["capacity_bytes"] = plan.capacity_bytes;
  j["limit_bytes"] = plan.limit_bytes;
  // jobs and progress are left out: they do not change the plan, and documents must not differ by them.
  j["options"] = {{"margin", plan.options.margin},
                  {"max_batch", plan.options.max_batch},
                  {"target_global_batch", plan.options.target_global_batch ? ordered_json(*plan.options.target_global_batch) : ordered_json(nullptr)},
                  {"probes_per_round", plan.options.probes_per_round}};
  ordered_json strategies = ordered_json::array();
  for (const auto& s : plan.strategies) {
    ordered_json js;
    js["strategy"] = s.strategy;
    js["fits_at_batch_1"] = s.max_batch.has_value();
    js["max_batch"] = s.max_batch ? ordered_json(*s.max_batch) : ordered_json(nullptr);
    js["max_is_ceiling"] = s.max_is_ceiling;
    js["best_batch"] = s.best_batch ? ordered_json(*s.best_batch) : ordered_json(nullptr);
    js["best_samples_per_second"] = s.best_samples_per_second;
    js["best_peak_bytes"] = s.best_peak_bytes;
    js["accumulation_steps"] = s.accumulation_steps;
    js["slowdown_vs_baseline"] = s.slowdown_vs_baseline > 0 ? ordered_json(s.slowdown_vs_baseline) : ordered_json(nullptr);
    js["warnings"] = s.warnings;
    ordered_json points = ordered_json::array();
    for (const auto& p : s.points) {
      points.push_back({{"batch", p.batch},
                        {"fits", p.fits},
                        {"out_of_memory", p.out_of_memory},
                        {"inapplicable", p.inapplicable},
                        {"simulation_failed", p.simulation_failed},
                        {"peak_bytes", p.peak_bytes},
                        {"iteration_seconds", p.iteration_seconds},
                        {"samples_per_second", p.samples_per_second},
                        {"stall_seconds", p.stall_seconds}});
    }
    js["points"] = std::move(points);
    strategies.push_back(std::move(js));
  }
  j["strategies"] = std::move(strategies);
  return j;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string plan_json(const Plan& plan) { return plan_to_json(plan).dump(2) + "\n"; }

std::string plan_csv(const std::vector<Plan>& plans) {
  std::string out = "variant,scenario,platform,strategy,batch,fits,out_of_memory,inapplicable,simulation_failed,peak_bytes,iteration_seconds,samples_per_second,stall_seconds\n";
  for (const Plan& plan : plans) {
    for (const auto& s : plan.strategies) {
      for (const auto& p : s.points) {
        out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(plan.variant), csv_field(plan.scenario_name), csv_field(plan.platform_name),
                           csv_field(s.strategy), p.batch, p.fits ? 1 : 0, p.out_of_memory ? 1 : 0, p.inapplicable ? 1 : 0, p.simulation_failed ? 1 : 0, p.peak_bytes,
                           p.iteration_seconds, p.samples_per_second, p.stall_seconds);
      }
    }
  }
  return out;
}

std::string plan_csv(const Plan& plan) { return plan_csv(std::vector<Plan>{plan}); }

}  // namespace comptrain::sim
