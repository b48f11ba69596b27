#include "comptrain/sim/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <type_traits>

#include "comptrain/sim/run.hpp"
#include "comptrain/sim/simulation.hpp"
#include "comptrain/sim/workers.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "documents.hpp"

namespace comptrain::sim {
namespace {

using nlohmann::ordered_json;

static_assert(std::is_trivially_copyable_v<PlanPoint>, "PlanPoint travels over a pipe as bytes");

bool is_baseline(const models::StrategySpec& spec) { return spec.rules.empty(); }

// Runs in a worker process: one simulation, reduced to what the planner needs, replayed in
// this process (the worker is a fresh child already). A strategy that does not apply at this
// batch is a point of its own; its reason follows the point's bytes.
std::string probe(const PreparedScenario& prepared, const models::StrategySpec& spec, std::int64_t batch) {
  PlanPoint point;
  point.batch = batch;
  std::string note;
  auto scheduled = schedule_run(prepared, spec, batch);
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&scheduled)) {
    point.inapplicable = true;
    note = not_applicable->reason;
  } else {
    const SimulationResult r = replay(prepared, std::get<ScheduledRun>(scheduled), Isolation::this_process);
    if (r.out_of_memory) {
      point.out_of_memory = true;
      point.peak_bytes = r.out_of_memory->in_use + r.out_of_memory->requested;
    } else {
      point.exact_peak_bytes = r.peak_bytes;
      point.allocated_peak_bytes = r.device.peak_allocated;
      point.reserved_peak_bytes = r.device.peak_reserved;
      point.device_peak_bytes = r.device.device_peak();
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
  std::vector<std::unique_ptr<PreparedScenario>> prepared;  // per request, prepared once
  std::vector<std::vector<models::StrategySpec>> strategies;  // per request, identical ones removed
  std::vector<BatchSizePlan> plans;
  std::vector<Search> searches;
  WorkerPool pool;
  Progress progress;
  std::map<std::size_t, std::pair<std::size_t, std::int64_t>> job_owner;  // job -> search, batch
  std::vector<bool> extra_done;
  // An input error a worker met (a zoo model that cannot be built at some batch): reported once
  // every job has ended, the first by (plan, strategy, batch), so that it does not depend on
  // which worker finished first.
  std::optional<std::tuple<std::size_t, std::size_t, std::int64_t, std::string>> input_error;

  Driver(const std::vector<PlanRequest>& r, int jobs, bool show) : requests(r), pool(jobs), progress("plan", show) {}

  const PlanOptions& options(const Search& s) const { return requests[s.plan].options; }
  std::int64_t limit(const Search& s) const { return plans[s.plan].limit_bytes; }
  const models::StrategySpec& spec(const Search& s) const { return strategies[s.plan][s.strategy]; }

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
    if (s.phase == Search::Phase::extra) {
      s.phase = Search::Phase::done;  // comparison points only: the search itself was over
      return;
    }
    std::sort(s.round.begin(), s.round.end());
    std::optional<std::int64_t> first_fail;
    for (std::int64_t b : s.round) {
      if (!s.points.at(b).fits) {
        first_fail = b;
        break;
      }
      s.lo = b;
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
        const PreparedScenario& scenario = *prepared[s.plan];
        const models::StrategySpec& strategy = spec(s);
        const std::size_t job = pool.submit([&scenario, &strategy, b]() { return probe(scenario, strategy, b); });
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

  // When every search of a plan is done: the points the comparison with the baseline needs,
  // each strategy and the baseline at the smaller of their largest batches, where the search
  // did not simulate them.
  void on_search_done(const Search& done) {
    const std::size_t p = done.plan;
    if (extra_done[p]) return;
    std::optional<std::size_t> baseline;
    for (std::size_t i = 0; i < searches.size(); ++i) {
      if (searches[i].plan != p) continue;
      if (searches[i].phase != Search::Phase::done) return;
      if (!baseline && is_baseline(spec(searches[i]))) baseline = i;
    }
    extra_done[p] = true;
    if (!baseline || searches[*baseline].lo == 0) return;
    std::map<std::size_t, std::set<std::int64_t>> extra;  // search -> batches
    const std::int64_t base_max = searches[*baseline].lo;
    for (std::size_t i = 0; i < searches.size(); ++i) {
      const Search& s = searches[i];
      if (s.plan != p || i == *baseline || s.lo == 0) continue;
      const std::int64_t common = std::min(base_max, s.lo);
      if (!s.points.count(common)) extra[i].insert(common);
      if (!searches[*baseline].points.count(common)) extra[*baseline].insert(common);
    }
    for (auto& [i, batches] : extra) {
      searches[i].phase = Search::Phase::extra;
      searches[i].round.assign(batches.begin(), batches.end());
    }
    for (auto& [i, batches] : extra) submit_round(i);
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

  void record(std::size_t job, JobOutcome outcome) {
    const auto [index, batch] = job_owner.at(job);
    Search& s = searches[index];
    PlanPoint point;
    point.batch = batch;
    if (outcome.status == JobOutcome::Status::input_error) {
      auto error = std::make_tuple(s.plan, s.strategy, batch, outcome.text);
      if (!input_error || error < *input_error) input_error = std::move(error);
      outcome.status = JobOutcome::Status::failed;  // the point fails; the plan exits 2 at the end
    }
    if (outcome.status == JobOutcome::Status::result && outcome.text.size() >= sizeof point) {
      std::memcpy(&point, outcome.text.data(), sizeof point);
      if (point.inapplicable) s.notes[batch] = fmt::format("batch {}: the strategy does not apply: {}", batch, outcome.text.substr(sizeof point));
    } else {
      // A worker that threw or died (a signal: a crash inside SimGrid) fails this point only.
      point.simulation_failed = true;
      s.notes[batch] = fmt::format("batch {}: {}; counted as not fitting", batch, outcome.text);
    }
    if (!outcome.diagnostics.empty()) {
      std::string& note = s.notes[batch];
      note += (note.empty() ? fmt::format("batch {}: ", batch) : std::string("; ")) + "the worker wrote: " + outcome.diagnostics;
      while (!note.empty() && note.back() == '\n') note.pop_back();
    }
    if (!point.out_of_memory && !point.inapplicable && !point.simulation_failed) {
      switch (options(s).memory_metric) {
        case MemoryMetric::exact: point.peak_bytes = point.exact_peak_bytes; break;
        case MemoryMetric::allocated: point.peak_bytes = point.allocated_peak_bytes; break;
        case MemoryMetric::reserved: point.peak_bytes = point.reserved_peak_bytes; break;
        case MemoryMetric::device: point.peak_bytes = point.device_peak_bytes; break;
      }
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
    out.strategy = spec(s).name;
    out.spec = spec(s);
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
      // The allocator's figures move by whole segments and cached blocks, so they may dip a
      // little as the batch grows without the search being wrong: only what fits (above) is
      // checked for them; the tensors' exact bytes must not fall.
      if (previous && options(s).memory_metric == MemoryMetric::exact && point.peak_bytes < previous->peak_bytes) {
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
  if (!(o.margin >= 0 && o.margin < 1)) throw InputError(fmt::format("plan: margin {:g} is out of range; expected a fraction in [0, 1)", o.margin));
  if (o.max_batch < 1) throw InputError("plan: max batch must be >= 1");
  if (o.target_global_batch && *o.target_global_batch < 1) throw InputError("plan: target global batch must be >= 1");
  if (o.probes_per_round < 1) throw InputError("plan: probes per round must be >= 1");
}

// Two strategies with the same rules plan the same: one is kept, the other named in a note.
std::vector<models::StrategySpec> without_duplicates(const std::vector<models::StrategySpec>& specs, std::vector<std::string>& notes) {
  std::vector<models::StrategySpec> out;
  std::vector<std::string> rules;
  for (const models::StrategySpec& spec : specs) {
    const std::string mine = detail::strategy_json(spec)["rules"].dump();
    const auto same = std::find(rules.begin(), rules.end(), mine);
    if (same != rules.end()) {
      const std::string& kept = out[static_cast<std::size_t>(same - rules.begin())].name;
      if (kept != spec.name) notes.push_back(fmt::format("'{}' has the same rules as '{}': planned once, as '{}'", spec.name, kept, kept));
      continue;
    }
    rules.push_back(mine);
    out.push_back(spec);
  }
  return out;
}

const PlanPoint* point_at(const StrategyPlan& s, std::int64_t batch) {
  const auto it = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& q) { return q.batch == batch; });
  return it == s.points.end() ? nullptr : &*it;
}

void compare_with_baseline(BatchSizePlan& plan, const std::vector<models::StrategySpec>& specs) {
  const auto base = std::find_if(specs.begin(), specs.end(), is_baseline);
  if (base == specs.end()) return;
  const StrategyPlan& baseline = plan.strategies[static_cast<std::size_t>(base - specs.begin())];
  if (!baseline.max_batch) return;
  for (StrategyPlan& s : plan.strategies) {
    if (&s == &baseline || !s.max_batch) continue;
    const std::int64_t batch = std::min(*baseline.max_batch, *s.max_batch);
    const PlanPoint* mine = point_at(s, batch);
    const PlanPoint* theirs = point_at(baseline, batch);
    if (!mine || !theirs || !mine->fits || !theirs->fits || theirs->iteration_seconds <= 0 || theirs->peak_bytes <= 0) continue;
    StrategyPlan::Comparison c;
    c.batch = batch;
    c.peak_saved_fraction = 1.0 - static_cast<double>(mine->peak_bytes) / static_cast<double>(theirs->peak_bytes);
    const auto saved = [](std::int64_t mine_bytes, std::int64_t their_bytes) {
      return their_bytes > 0 ? 1.0 - static_cast<double>(mine_bytes) / static_cast<double>(their_bytes) : 0.0;
    };
    c.allocated_saved_fraction = saved(mine->allocated_peak_bytes, theirs->allocated_peak_bytes);
    c.reserved_saved_fraction = saved(mine->reserved_peak_bytes, theirs->reserved_peak_bytes);
    c.slowdown = mine->iteration_seconds / theirs->iteration_seconds;
    c.best_throughput_ratio = baseline.best_samples_per_second > 0 ? s.best_samples_per_second / baseline.best_samples_per_second : 0;
    s.vs_baseline = c;
  }
}

std::string strategy_description(const StrategyPlan& s, const BatchSizePlan& plan) {
  if (!s.max_batch) {
    if (s.points.empty()) return "not simulated";
    const PlanPoint& one = s.points.front();
    if (one.inapplicable) return "the strategy does not apply at batch 1";
    if (one.simulation_failed) return "the simulation failed at batch 1 (see the warnings)";
    return fmt::format("does not fit at batch 1: needs {}{} of {} allowed", one.out_of_memory ? "more than " : "", format_bytes(one.peak_bytes),
                       format_bytes(plan.limit_bytes));
  }
  return {};
}

// One line under the table: which strategy trains the largest batch, which is fastest, and
// what the largest one costs against the baseline.
std::string verdict(const BatchSizePlan& plan) {
  const StrategyPlan* largest = nullptr;
  const StrategyPlan* fastest = nullptr;
  for (const StrategyPlan& s : plan.strategies) {
    if (!s.max_batch) continue;
    if (!largest || *s.max_batch > *largest->max_batch) largest = &s;
    if (!fastest || s.best_samples_per_second > fastest->best_samples_per_second) fastest = &s;
  }
  if (!largest) return "Verdict: no strategy fits at batch 1 on this GPU.";
  std::string out = fmt::format("Verdict: {} runs the largest batch ({}{})", largest->strategy, largest->max_is_ceiling ? ">= " : "", *largest->max_batch);
  if (largest->vs_baseline) {
    const auto& c = *largest->vs_baseline;
    out += fmt::format(", saving {:.0f}% of peak memory at batch {} ({:.0f}% of max_memory_allocated, {:.0f}% of max_memory_reserved) for a {:.2f}x slowdown",
                       100 * c.peak_saved_fraction, c.batch, 100 * c.allocated_saved_fraction, 100 * c.reserved_saved_fraction, c.slowdown);
  }
  if (fastest == largest) return out + fmt::format("; it is also the fastest ({:.1f} samples/s).", fastest->best_samples_per_second);
  return out + fmt::format("; {} is the fastest ({:.1f} samples/s at batch {}).", fastest->strategy, fastest->best_samples_per_second, *fastest->best_batch);
}

}  // namespace

std::vector<models::StrategySpec> strategies_to_plan(const Scenario& scenario) {
  if (scenario.plan && !scenario.plan->strategies.empty()) return scenario.plan->strategies;
  std::vector<models::StrategySpec> out(3);
  out[0].name = "baseline";
  out[1].name = "offload";
  out[1].rules.push_back({{}, models::OffloadAction{}});
  out[2].name = "recompute";
  out[2].rules.push_back({{}, models::RecomputeAction{}});
  // The scenario's own strategy, unless it is one of these under another name.
  const std::string own = detail::strategy_json(scenario.strategy)["rules"].dump();
  if (std::none_of(out.begin(), out.end(), [&](const auto& s) { return detail::strategy_json(s)["rules"].dump() == own; })) out.push_back(scenario.strategy);
  return out;
}

PlanOptions plan_options_for(const Scenario& scenario, PlanOptions base) {
  if (!scenario.plan) return base;
  if (scenario.plan->margin) base.margin = *scenario.plan->margin;
  if (scenario.plan->max_batch) base.max_batch = *scenario.plan->max_batch;
  if (scenario.plan->target_global_batch) base.target_global_batch = scenario.plan->target_global_batch;
  if (scenario.plan->memory_metric) base.memory_metric = *scenario.plan->memory_metric;
  return base;
}

std::vector<BatchSizePlan> make_plans(const std::vector<PlanRequest>& requests, int jobs, bool progress) {
  Driver d(requests, jobs, progress);
  d.extra_done.assign(requests.size(), false);
  for (std::size_t p = 0; p < requests.size(); ++p) {
    const PlanRequest& r = requests[p];
    check_options(r.options);
    if (r.strategies.empty()) throw InputError(r.scenario.source + ": no strategy to plan");
    // Prepared once here, before any worker is forked: a trace file is parsed once, and a
    // scenario or strategy that cannot run exits 2 once instead of failing every probe.
    d.prepared.push_back(std::make_unique<PreparedScenario>(r.scenario));
    BatchSizePlan plan;
    d.strategies.push_back(without_duplicates(r.strategies, plan.notes));
    for (const models::StrategySpec& spec : d.strategies.back()) {
      try {
        models::validate_strategy(spec);
      } catch (const InputError& e) {
        throw InputError(r.scenario.source + ": " + e.what());
      }
    }
    const models::Platform& platform = d.prepared.back()->platform();
    plan.scenario_name = r.scenario.name;
    plan.scenario_source = r.scenario.source;
    plan.platform_source = platform.source;
    plan.gpu_name = platform.gpu.name;
    plan.variant = r.variant;
    plan.platform_name = platform.name;
    // The device metric counts the CUDA context, so it is held against the visible memory; the
    // others count what the allocator holds, against what it may reserve.
    const FrameworkOnGpu& framework = d.prepared.back()->framework();
    plan.capacity_bytes = r.options.memory_metric == MemoryMetric::device ? framework.visible_bytes : framework.usable_bytes();
    plan.cuda_context_bytes = framework.cuda_context_bytes;
    plan.limit_bytes = static_cast<std::int64_t>(std::floor((1 - r.options.margin) * static_cast<double>(plan.capacity_bytes)));
    plan.options = r.options;
    plan.options.jobs = jobs;
    plan.options.progress = progress;
    d.plans.push_back(std::move(plan));
    for (std::size_t s = 0; s < d.strategies.back().size(); ++s) {
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
    d.record(finished->id, std::move(finished->outcome));
    d.progress.update(++done, d.estimate_total(), true);
  }
  d.progress.finish(done);
  if (d.input_error) throw InputError(std::get<3>(*d.input_error));

  for (const Search& s : d.searches) d.plans[s.plan].strategies.push_back(d.finish(s));
  for (std::size_t p = 0; p < d.plans.size(); ++p) compare_with_baseline(d.plans[p], d.strategies[p]);
  return d.plans;
}

BatchSizePlan make_plan(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies, const PlanOptions& options) {
  std::vector<PlanRequest> requests(1);
  requests[0].scenario = scenario;
  requests[0].strategies = strategies;
  requests[0].options = options;
  return make_plans(requests, options.jobs, options.progress).front();
}

std::string plan_table_text(const BatchSizePlan& plan) {
  const auto& o = plan.options;
  std::string out = fmt::format("Plan       {}{}\n", plan.scenario_name, plan.variant.empty() ? "" : "   (variant: " + plan.variant + ")");
  out += fmt::format("Platform   {}: {} {}; limit {} (margin {:g}%)\n", plan.platform_name, format_bytes(plan.capacity_bytes),
                     o.memory_metric == MemoryMetric::device
                         ? "of visible GPU memory"
                         : fmt::format("PyTorch can use (visible memory less a {} CUDA context)", format_bytes(plan.cuda_context_bytes)),
                     format_bytes(plan.limit_bytes), o.margin * 100);
  const char* metric = "";
  switch (o.memory_metric) {
    case MemoryMetric::reserved:
      metric = "reserved: PyTorch's caching allocator (model) must hold the peak's segments within the limit (max_memory_reserved)";
      break;
    case MemoryMetric::allocated: metric = "allocated: the allocator model's rounded blocks (max_memory_allocated) within the limit"; break;
    case MemoryMetric::exact: metric = "exact: the live tensors' bytes within the limit (no allocator rounding or caching)"; break;
    case MemoryMetric::device: metric = "device: reserved + CUDA context (what nvidia-smi shows) within the limit"; break;
  }
  out += fmt::format("Memory     {}; out-of-memory as PyTorch decides it, on reserved segments\n", metric);
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
  out += fmt::format("{:>24}  {:>9}  {:>4}\n", "vs baseline: batch, peak", "slowdown", "sims");
  bool compared = false;
  for (const auto& s : plan.strategies) {
    if (!s.max_batch) {
      out += fmt::format("{:<{}}  {}  ({} simulations)\n", s.strategy, width, strategy_description(s, plan), s.points.size());
      continue;
    }
    const std::string max = s.max_is_ceiling ? fmt::format(">= {}", *s.max_batch) : std::to_string(*s.max_batch);
    out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>11.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                       format_bytes(s.best_peak_bytes));
    if (g) out += fmt::format("{:>11}  ", s.accumulation_steps);
    std::string at = "-", slowdown = "-";
    if (s.vs_baseline) {
      compared = true;
      at = fmt::format("{}, {:+.0f}%", s.vs_baseline->batch, -100 * s.vs_baseline->peak_saved_fraction);
      slowdown = fmt::format("{:.2f}x", s.vs_baseline->slowdown);
    }
    out += fmt::format("{:>24}  {:>9}  {:>4}\n", at, slowdown, s.points.size());
  }
  if (compared) {
    out += "\nvs baseline: at the largest batch both run, the change in peak memory and the iteration time over the baseline's.\n";
    for (const auto& s : plan.strategies) {
      if (s.vs_baseline && s.vs_baseline->best_throughput_ratio > 0) {
        out += fmt::format("best vs best: {} {:.2f}x the baseline's samples/s\n", s.strategy, s.vs_baseline->best_throughput_ratio);
      }
    }
  }
  out += "\n" + verdict(plan) + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  for (const auto& s : plan.strategies) {
    if (s.max_is_ceiling) out += fmt::format("{}: fits up to the search ceiling {} (--max-batch to search further).\n", s.strategy, *s.max_batch);
    for (const auto& w : s.warnings) out += fmt::format("warning: {}: {}\n", s.strategy, w);
  }
  return out;
}

namespace {

ordered_json plan_to_json(const BatchSizePlan& plan) {
  ordered_json j = detail::document_header("plan");
  j["scenario"] = detail::scenario_json(plan.scenario_name, plan.scenario_source);
  j["variant"] = plan.variant.empty() ? ordered_json(nullptr) : ordered_json(plan.variant);
  j["platform"] = {{"name", plan.platform_name}, {"source", plan.platform_source}, {"gpu", plan.gpu_name}, {"memory_capacity_bytes", plan.capacity_bytes},
                   {"cuda_context_bytes", plan.cuda_context_bytes}};
  j["limit_bytes"] = plan.limit_bytes;
  // jobs and progress are left out: they do not change the plan, and documents must not differ by them.
  j["options"] = {{"margin", plan.options.margin},
                  {"memory_metric", to_string(plan.options.memory_metric)},
                  {"max_batch", plan.options.max_batch},
                  {"target_global_batch", plan.options.target_global_batch ? ordered_json(*plan.options.target_global_batch) : ordered_json(nullptr)},
                  {"probes_per_round", plan.options.probes_per_round}};
  ordered_json strategies = ordered_json::array();
  for (const auto& s : plan.strategies) {
    ordered_json js;
    js["strategy"] = detail::strategy_json(s.spec);
    js["fits_at_batch_1"] = s.max_batch.has_value();
    js["max_batch"] = s.max_batch ? ordered_json(*s.max_batch) : ordered_json(nullptr);
    js["max_is_ceiling"] = s.max_is_ceiling;
    js["best_batch"] = s.best_batch ? ordered_json(*s.best_batch) : ordered_json(nullptr);
    js["best_samples_per_second"] = s.best_samples_per_second;
    js["best_peak_bytes"] = s.best_peak_bytes;
    js["accumulation_steps"] = s.accumulation_steps;
    if (s.vs_baseline) {
      js["vs_baseline"] = {{"batch", s.vs_baseline->batch},
                           {"peak_saved_fraction", s.vs_baseline->peak_saved_fraction},
                           {"allocated_saved_fraction", s.vs_baseline->allocated_saved_fraction},
                           {"reserved_saved_fraction", s.vs_baseline->reserved_saved_fraction},
                           {"slowdown", s.vs_baseline->slowdown},
                           {"best_throughput_ratio", s.vs_baseline->best_throughput_ratio}};
    } else {
      js["vs_baseline"] = nullptr;
    }
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
                        {"stall_seconds", p.stall_seconds},
                        {"exact_peak_bytes", p.exact_peak_bytes},
                        {"allocated_peak_bytes", p.allocated_peak_bytes},
                        {"reserved_peak_bytes", p.reserved_peak_bytes},
                        {"device_peak_bytes", p.device_peak_bytes}});
    }
    js["points"] = std::move(points);
    strategies.push_back(std::move(js));
  }
  j["strategies"] = std::move(strategies);
  j["notes"] = plan.notes;
  return j;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string plan_json(const BatchSizePlan& plan) { return plan_to_json(plan).dump(2) + "\n"; }

std::string plan_csv(const std::vector<BatchSizePlan>& plans) {
  std::string out = "variant,scenario,platform,strategy,batch,fits,out_of_memory,inapplicable,simulation_failed,peak_bytes,iteration_seconds,samples_per_second,stall_seconds\n";
  for (const BatchSizePlan& plan : plans) {
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

std::string plan_csv(const BatchSizePlan& plan) { return plan_csv(std::vector<BatchSizePlan>{plan}); }

}  // namespace comptrain::sim
