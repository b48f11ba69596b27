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
      return fmt::format("{:.0f}", value);
    case ValidationMetric::bus_bandwidth:
    case ValidationMetric::checkpoint_throughput:
      return fmt::format("{:.1f} GB/s", value);
    case ValidationMetric::checkpoint_iteration_seconds:
      return fmt::format("{:.2f} s", value);
  }
  return {};
}

std::string format_published(const ValidationPoint& p) {
  std::string text = format_value(p.metric, p.published);
  if (p.published_upper) text += "-" + format_value(p.metric, *p.published_upper);
  return text;
}

std::string format_error(double error) { return fmt::format("{:+.1f}%", 100 * error); }

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
    const std::string set = set_name(r.point);
    const std::string status = r.predicted ? "covered" : r.why_none;
    out += fmt::format("{:<{}}  {:<24}  {:>11}  {:>11}  {:>8}  {:<15}  {}\n", r.point.id, id_width, metric_name(r.point.metric), format_published(r.point),
                       r.predicted ? format_value(r.point.metric, *r.predicted) : "-", r.error ? format_error(*r.error) : "-", set, status);
  }
  out += "\nerror = predicted / published - 1. Summary per metric over the predicted points, suspect ones left out:\n";
  out += fmt::format("{:<24}  {:>6}  {:>14}  {:>13}  {:<}\n", "metric", "points", "median |error|", "worst |error|", "worst point");
  for (const MetricSummary& s : summarize(results)) {
    const std::string left = left_out(s);
    out += fmt::format("{:<24}  {:>6}  {:>14}  {:>13}  {}{}\n", metric_name(s.metric), s.count,
                       s.count ? fmt::format("{:.1f}%", 100 * s.median_abs_error) : "-", s.count ? fmt::format("{:.1f}%", 100 * s.worst_abs_error) : "-",
                       s.count ? s.worst_id : "-", left.empty() ? "" : " (left out: " + left + ")");
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
    p["predicted"] = r.predicted ? detail::ordered_json(*r.predicted) : detail::ordered_json(nullptr);
    p["error"] = r.error ? detail::ordered_json(*r.error) : detail::ordered_json(nullptr);
    p["covered"] = r.point.covered();
    if (!r.why_none.empty()) p["why_none"] = r.why_none;
    p["suspect"] = r.point.suspect;
    p["holdout"] = r.point.holdout;
    p["source"] = r.point.source;
    points.push_back(std::move(p));
  }
  doc["points"] = std::move(points);
  detail::ordered_json summary = detail::ordered_json::array();
  for (const MetricSummary& s : summarize(results)) {
    summary.push_back({{"metric", metric_name(s.metric)},
                       {"points", s.count},
                       {"median_abs_error", s.count ? detail::ordered_json(s.median_abs_error) : detail::ordered_json(nullptr)},
                       {"worst_abs_error", s.count ? detail::ordered_json(s.worst_abs_error) : detail::ordered_json(nullptr)},
                       {"worst_point", s.worst_id},
                       {"suspect_left_out", s.suspect},
                       {"without_prediction", s.not_covered}});
  }
  doc["summary"] = std::move(summary);
  return doc.dump(2) + "\n";
}

std::string validation_markdown(const std::vector<ValidationResult>& results) {
  std::string out = "| id | metric | published | predicted | error | set | covered |\n|---|---|--:|--:|--:|---|---|\n";
  for (const ValidationResult& r : results) {
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", r.point.id, metric_name(r.point.metric), markdown_cell(format_published(r.point)),
                       r.predicted ? format_value(r.point.metric, *r.predicted) : "-", r.error ? format_error(*r.error) : "-",
                       set_name(r.point), r.predicted ? std::string("covered") : markdown_cell(r.why_none));
  }
  out += "\nerror = predicted / published - 1. Summary per metric over the predicted points, suspect ones left out:\n\n";
  out += "| metric | points | median \\|error\\| | worst \\|error\\| | worst point | left out |\n|---|--:|--:|--:|---|---|\n";
  for (const MetricSummary& s : summarize(results)) {
    const std::string left = left_out(s);
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", metric_name(s.metric), s.count,
                       s.count ? fmt::format("{:.1f}%", 100 * s.median_abs_error) : "-", s.count ? fmt::format("{:.1f}%", 100 * s.worst_abs_error) : "-",
                       s.count ? "`" + s.worst_id + "`" : "-", left.empty() ? "-" : left);
  }
  return out;
}

}  // namespace comptrain::sim
