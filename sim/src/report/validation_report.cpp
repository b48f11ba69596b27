// The validation table as `comptrain validate` prints it: text, JSON and Markdown (the table in
// docs/validation.md is this output, checked by a test).

#include "comptrain/sim/report/validation_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "report/documents.hpp"

namespace comptrain::sim {
namespace {

std::string format_value(ValidationMetric metric, double value) {
  switch (metric) {
    case ValidationMetric::throughput_samples_per_s:
      return fmt::format("{:.4g}", value);  // the published figures have 2 to 4 digits
    case ValidationMetric::peak_mem_bytes:
      return fmt::format("{:.2f} GiB", value / (1 << 30));
    case ValidationMetric::memory_reduction_x:
    case ValidationMetric::slowdown_x:
    case ValidationMetric::energy_ratio_x:
      return fmt::format("{:.3f}x", value);
    case ValidationMetric::average_power_watts:
      return fmt::format("{:.1f} W", value);
    case ValidationMetric::max_batch:
    case ValidationMetric::ran_at_batch:
      return fmt::format("{:.0f}", value);
    case ValidationMetric::bus_bandwidth:
    case ValidationMetric::checkpoint_throughput:
      return fmt::format("{:.1f} GB/s", value);
    case ValidationMetric::checkpoint_iteration_seconds:
      return fmt::format("{:.2f} s", value);
    case ValidationMetric::kernel_seconds:
      return fmt::format("{:.4g} ms", value * 1e3);
  }
  return {};
}

std::string format_published(const ValidationPoint& p) {
  if (p.metric == ValidationMetric::ran_at_batch) return "ran at " + format_value(p.metric, p.published);
  if (p.bound == Bound::lower) return ">= " + format_value(p.metric, p.published);
  if (p.bound == Bound::upper) return "<= " + format_value(p.metric, p.published);
  std::string text = format_value(p.metric, p.published);
  if (p.published_upper) text += "-" + format_value(p.metric, *p.published_upper);
  return text;
}

std::string format_error(double error) { return fmt::format("{:+.1f}%", 100 * error); }

// A ran_at_batch point's prediction: whether it fits, and its reserved peak's share of the
// usable memory (what the failing request needed, out of memory).
std::string format_predicted(const ValidationResult& r) {
  if (!r.predicted) return "-";
  if (r.point.metric == ValidationMetric::ran_at_batch) return fmt::format("{} {:.1f}%", r.out_of_memory ? "OOM" : "fits", 100 * *r.predicted);
  return format_value(r.point.metric, *r.predicted);
}

// Bounded points say met or not met (with the error beyond the bound); the others the error.
std::string format_result_error(const ValidationResult& r) {
  if (r.met) return *r.met ? "met" : r.error ? "not met, " + format_error(*r.error) : "not met";
  return r.error ? format_error(*r.error) : "-";
}

std::string status(const ValidationResult& r) {
  if (!r.predicted) return r.why_none;
  return r.why_none.empty() ? "covered" : "covered; " + r.why_none;
}

std::string summary_median(const MetricSummary& s) { return s.worst_id.empty() ? "-" : fmt::format("{:.1f}%", 100 * s.median_abs_error); }
std::string summary_worst(const MetricSummary& s) { return s.worst_id.empty() ? "-" : fmt::format("{:.1f}%", 100 * s.worst_abs_error); }
std::string summary_met(const MetricSummary& s) { return s.bounded ? fmt::format("{} of {}", s.met, s.bounded) : "-"; }
// The held-out points' median |error| and their count: "2.1% of 12".
std::string summary_holdout(const MetricSummary& s) {
  return s.holdout_count ? fmt::format("{:.1f}% of {}", 100 * s.holdout_median_abs_error, s.holdout_count) : "-";
}

// The configurations that ran but are predicted out of memory at their batch (issue 31's
// first done-when), or that none is.
std::string out_of_memory_line(const std::vector<ValidationResult>& results, bool markdown) {
  const std::vector<std::string> ids = ran_but_predicted_out_of_memory(results);
  if (ids.empty()) return "\nConfigurations that ran, predicted out of memory at their batch: none.\n";
  std::string list;
  for (const std::string& id : ids) list += (list.empty() ? "" : ", ") + (markdown ? "`" + id + "`" : id);
  return fmt::format("\nConfigurations that ran, predicted out of memory at their batch: {} ({}).\n", ids.size(), list);
}

std::string set_name(const ValidationPoint& p) {
  std::string set = p.holdout ? "holdout" : "fit";
  if (p.suspect) set += ", suspect";
  return set;
}

std::string left_out(const MetricSummary& s) {
  std::string out;
  if (s.suspect) out += fmt::format("{} suspect", s.suspect);
  if (s.not_covered) out += fmt::format("{}{} without prediction", out.empty() ? "" : ", ", s.not_covered);
  return out;
}

std::string group_median(const GroupSummary& g) { return g.worst_id.empty() ? "-" : fmt::format("{:.1f}%", 100 * g.median_abs_error); }
std::string group_worst(const GroupSummary& g) { return g.worst_id.empty() ? "-" : fmt::format("{:.1f}%", 100 * g.worst_abs_error); }

constexpr std::string_view kGroupsHeading =
    "Summary per GPU generation (the platform's compute capability) and per workload family, for each metric whose points fall in "
    "two groups or more, suspect ones left out:";

// The suspect points, each with what cannot be known about its setup: shown so that a reader
// can judge each exclusion.
std::vector<const ValidationResult*> suspects(const std::vector<ValidationResult>& results) {
  std::vector<const ValidationResult*> out;
  for (const ValidationResult& r : results) {
    if (r.point.suspect) out.push_back(&r);
  }
  return out;
}

// A Markdown table cell: a '|' would end the cell, a newline the row.
std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string validation_text(const std::vector<ValidationResult>& results) {
  std::size_t id_width = 2;
  for (const ValidationResult& r : results) id_width = std::max(id_width, r.point.id.size());
  std::string out = fmt::format("{:<{}}  {:<24}  {:>11}  {:>11}  {:>8}  {:<15}  {}\n", "id", id_width, "metric", "published", "predicted", "error",
                                "set", "covered");
  for (const ValidationResult& r : results) {
    out += fmt::format("{:<{}}  {:<24}  {:>11}  {:>11}  {:>8}  {:<15}  {}\n", r.point.id, id_width, metric_name(r.point.metric), format_published(r.point),
                       format_predicted(r), format_result_error(r), set_name(r.point), status(r));
  }
  out += "\nerror = predicted / published - 1 (0 within a range or on a bound's side: met). Summary per metric over the predicted points, "
         "suspect ones left out:\n";
  out += fmt::format("{:<28}  {:>6}  {:>14}  {:>13}  {:>10}  {:>13}  {:<}\n", "metric", "points", "median |error|", "worst |error|", "bounds met",
                     "held out", "worst point");
  for (const MetricSummary& s : summarize(results)) {
    const std::string left = left_out(s);
    out += fmt::format("{:<28}  {:>6}  {:>14}  {:>13}  {:>10}  {:>13}  {}{}\n", metric_name(s.metric), s.count, summary_median(s), summary_worst(s),
                       summary_met(s), summary_holdout(s), s.worst_id.empty() ? "-" : s.worst_id, left.empty() ? "" : " (left out: " + left + ")");
  }
  const std::vector<GroupSummary> groups = summarize_groups(results);
  if (!groups.empty()) {
    out += fmt::format("\n{}\n", kGroupsHeading);
    out += fmt::format("{:<28}  {:<22}  {:>6}  {:>14}  {:>13}  {}\n", "metric", "group", "points", "median |error|", "worst |error|", "worst point");
    for (const GroupSummary& g : groups) {
      out += fmt::format("{:<28}  {:<22}  {:>6}  {:>14}  {:>13}  {}\n", metric_name(g.metric), g.by + " " + g.group, g.count, group_median(g),
                         group_worst(g), g.worst_id.empty() ? "-" : g.worst_id);
    }
  }
  out += out_of_memory_line(results, false);
  const auto suspect = suspects(results);
  if (!suspect.empty()) {
    out += fmt::format("\nSuspect points ({}: the measured hardware or setup cannot be known), left out of the summaries:\n", suspect.size());
    for (const ValidationResult* r : suspect) out += fmt::format("{}: {}\n", r->point.id, r->point.suspect_reason);
  }
  return out;
}

std::string validation_json(const std::string& table_source, const std::vector<ValidationResult>& results) {
  detail::ordered_json doc = detail::document_header("validation");
  doc["table"] = table_source;
  detail::ordered_json points = detail::ordered_json::array();
  for (const ValidationResult& r : results) {
    detail::ordered_json p;
    p["id"] = r.point.id;
    p["metric"] = metric_name(r.point.metric);
    p["published"] = r.point.published;
    if (r.point.published_upper) p["published_upper"] = *r.point.published_upper;
    if (r.point.bound != Bound::none) p["bound"] = to_string(r.point.bound);
    if (!r.point.ops.empty()) p["ops"] = r.point.ops;
    p["predicted"] = r.predicted ? detail::ordered_json(*r.predicted) : detail::ordered_json(nullptr);
    p["error"] = r.error ? detail::ordered_json(*r.error) : detail::ordered_json(nullptr);
    if (r.met) p["met"] = *r.met;
    p["out_of_memory"] = r.out_of_memory;
    p["covered"] = r.point.covered();
    if (!r.why_none.empty()) p["why_none"] = r.why_none;
    p["suspect"] = r.point.suspect;
    if (r.point.suspect) p["suspect_reason"] = r.point.suspect_reason;
    p["generation"] = r.generation.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(r.generation);
    p["family"] = r.point.family.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(r.point.family);
    p["holdout"] = r.point.holdout;
    p["source"] = r.point.source;
    points.push_back(std::move(p));
  }
  doc["points"] = std::move(points);
  detail::ordered_json summary = detail::ordered_json::array();
  for (const MetricSummary& s : summarize(results)) {
    summary.push_back({{"metric", metric_name(s.metric)},
                       {"points", s.count},
                       {"median_abs_error", s.worst_id.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(s.median_abs_error)},
                       {"worst_abs_error", s.worst_id.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(s.worst_abs_error)},
                       {"worst_point", s.worst_id},
                       {"bounded", s.bounded},
                       {"bounds_met", s.met},
                       {"holdout_points", s.holdout_count},
                       {"holdout_median_abs_error", s.holdout_count ? detail::ordered_json(s.holdout_median_abs_error) : detail::ordered_json(nullptr)},
                       {"suspect_left_out", s.suspect},
                       {"without_prediction", s.not_covered}});
  }
  doc["summary"] = std::move(summary);
  detail::ordered_json by_group = detail::ordered_json::array();
  for (const GroupSummary& g : summarize_groups(results)) {
    by_group.push_back({{"metric", metric_name(g.metric)},
                        {"by", g.by},
                        {"group", g.group},
                        {"points", g.count},
                        {"median_abs_error", g.worst_id.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(g.median_abs_error)},
                        {"worst_abs_error", g.worst_id.empty() ? detail::ordered_json(nullptr) : detail::ordered_json(g.worst_abs_error)},
                        {"worst_point", g.worst_id}});
  }
  doc["summary_by_group"] = std::move(by_group);
  doc["ran_but_predicted_out_of_memory"] = ran_but_predicted_out_of_memory(results);
  return doc.dump(2) + "\n";
}

std::string validation_markdown(const std::vector<ValidationResult>& results) {
  std::string out = "| id | metric | published | predicted | error | set | covered |\n|---|---|--:|--:|--:|---|---|\n";
  for (const ValidationResult& r : results) {
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", r.point.id, metric_name(r.point.metric), markdown_cell(format_published(r.point)),
                       format_predicted(r), format_result_error(r), set_name(r.point), markdown_cell(status(r)));
  }
  out += "\nerror = predicted / published - 1 (0 within a range or on a bound's side: met). Summary per metric over the predicted points, "
         "suspect ones left out:\n\n";
  out += "| metric | points | median \\|error\\| | worst \\|error\\| | bounds met | held out (median \\|error\\| of points) | worst point | left out |\n"
         "|---|--:|--:|--:|--:|--:|---|---|\n";
  for (const MetricSummary& s : summarize(results)) {
    const std::string left = left_out(s);
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", metric_name(s.metric), s.count, summary_median(s), summary_worst(s), summary_met(s),
                       summary_holdout(s), s.worst_id.empty() ? "-" : "`" + s.worst_id + "`", left.empty() ? "-" : left);
  }
  const std::vector<GroupSummary> groups = summarize_groups(results);
  if (!groups.empty()) {
    out += fmt::format("\n{}\n\n", kGroupsHeading);
    out += "| metric | by | group | points | median \\|error\\| | worst \\|error\\| | worst point |\n|---|---|---|--:|--:|--:|---|\n";
    for (const GroupSummary& g : groups) {
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", metric_name(g.metric), g.by, g.group, g.count, group_median(g), group_worst(g),
                         g.worst_id.empty() ? "-" : "`" + g.worst_id + "`");
    }
  }
  out += out_of_memory_line(results, true);
  const auto suspect = suspects(results);
  if (!suspect.empty()) {
    out += fmt::format("\nSuspect points ({}: the measured hardware or setup cannot be known), left out of the summaries:\n\n", suspect.size());
    out += "| id | what cannot be known |\n|---|---|\n";
    for (const ValidationResult* r : suspect) out += fmt::format("| `{}` | {} |\n", r->point.id, markdown_cell(r->point.suspect_reason));
  }
  return out;
}

}  // namespace comptrain::sim
