#include "comptrain/sim/report/sweep_document.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "report/documents.hpp"

namespace comptrain::sim {

using nlohmann::ordered_json;

std::string variant_report_json(const Scenario& scenario, const PreparedScenario& prepared, const RunOutcome& outcome) {
  return report(prepared, scenario.strategy, prepared.batch_size(), outcome, true);
}

std::string sweep_document(const Sweep& sweep, std::string_view command, std::string_view run_hash, const std::optional<Shard>& shard,
                           std::vector<VariantResult> results) {
  std::sort(results.begin(), results.end(), [](const VariantResult& a, const VariantResult& b) { return a.index < b.index; });
  ordered_json j = detail::document_header("sweep");
  j["sweep"] = {{"hash", run_hash},
                {"command", command},
                {"source", sweep.source},
                {"keys", sweep.keys},
                {"variant_count", sweep.variant_count}};
  if (shard) j["shard"] = {{"index", shard->index}, {"count", shard->count}};
  ordered_json variants = ordered_json::array();
  for (const VariantResult& r : results) {
    variants.push_back({{"index", r.index}, {"label", r.label}, {"result", ordered_json::parse(r.json)}});
  }
  j["variants"] = std::move(variants);
  return j.dump(2) + "\n";
}

std::string merge_sweep_documents(const std::vector<std::pair<std::string, std::string>>& documents) {
  if (documents.empty()) throw InputError("merge: no shard documents given");
  std::optional<ordered_json> sweep;
  std::string first_source;
  std::size_t count = 0;
  std::map<std::size_t, std::vector<std::string>> seen;  // variant -> the files that hold it
  std::map<std::size_t, ordered_json> variants;
  for (const auto& [source, text] : documents) {
    ordered_json doc;
    try {
      doc = ordered_json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(source + ": not a JSON document: " + e.what());
    }
    if (!doc.is_object() || !doc.contains("sweep") || !doc["sweep"].is_object() || !doc.contains("variants") || !doc["variants"].is_array() ||
        !doc["sweep"].contains("hash") || !doc["sweep"].contains("variant_count")) {
      throw InputError(source + ": not a sweep result (expected the JSON that comptrain plan/simulate --shard writes, with 'sweep' and 'variants')");
    }
    const ordered_json& n = doc["sweep"]["variant_count"];
    // The sweep's own cap: a count beyond it was not written by comptrain.
    if (!n.is_number_unsigned() || n.get<std::uint64_t>() < 1 || n.get<std::uint64_t>() > kMaxSweepVariants) {
      throw InputError(source + ": /sweep/variant_count is " + n.dump().substr(0, 40) + "; expected an integer from 1 to " + std::to_string(kMaxSweepVariants));
    }
    if (!sweep) {
      sweep = doc["sweep"];
      first_source = source;
      count = n.get<std::size_t>();
    } else if ((*sweep)["hash"] != doc["sweep"]["hash"] || (*sweep)["command"] != doc["sweep"]["command"] ||
               (*sweep)["variant_count"] != doc["sweep"]["variant_count"]) {
      throw InputError(source + ": from another sweep than " + first_source + " (sweep hash " + doc["sweep"]["hash"].dump() + " vs " +
                       (*sweep)["hash"].dump() + "; the scenario, the command and its options must be the same)");
    }
    for (std::size_t k = 0; k < doc["variants"].size(); ++k) {
      const ordered_json& v = doc["variants"][k];
      const std::string at = fmt::format("{}: /variants/{}", source, k);
      if (!v.is_object() || !v.contains("index") || !v["index"].is_number_unsigned()) throw InputError(at + "/index: expected a non-negative integer");
      if (!v.contains("label") || !v["label"].is_string()) throw InputError(at + "/label: expected a string");
      const auto index = v["index"].get<std::uint64_t>();
      if (index >= count) throw InputError(fmt::format("{}/index: variant {} is out of range; the sweep has {} (0 to {})", at, index, count, count - 1));
      seen[index].push_back(source);
      variants[index] = v;
    }
  }
  std::string duplicates;
  std::size_t duplicated = 0;
  for (const auto& [index, sources] : seen) {
    if (sources.size() < 2 || ++duplicated > 20) continue;
    std::string in;
    for (const auto& s : sources) in += (in.empty() ? "" : ", ") + s;
    duplicates += (duplicates.empty() ? "" : "; ") + std::to_string(index) + " (" + variants[index]["label"].get<std::string>() + ") in " + in;
  }
  if (duplicated > 20) duplicates += fmt::format("; and {} more", duplicated - 20);
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < count; ++i) {
    if (!seen.count(i)) missing.push_back(i);
  }
  if (!duplicates.empty()) throw InputError("merge: overlapping shards; variants given more than once: " + duplicates);
  if (!missing.empty()) {
    throw InputError(fmt::format("merge: incomplete; missing {} of {} variants (0-based): {}", missing.size(), count, detail::index_ranges(missing)));
  }
  ordered_json j = detail::document_header("sweep");
  j["sweep"] = *sweep;
  ordered_json list = ordered_json::array();
  for (auto& [index, v] : variants) list.push_back(std::move(v));
  j["variants"] = std::move(list);
  return j.dump(2) + "\n";
}

std::string simulation_table_text(const Sweep& sweep, const std::vector<VariantResult>& results) {
  std::size_t width = 7;
  for (const auto& r : results) width = std::max(width, r.label.size());
  std::string out = fmt::format("Sweep      {} ({} variants; keys: {})\n\n", sweep.source, sweep.variant_count, fmt::join(sweep.keys, ", "));
  out += fmt::format("{:>5}  {:<{}}  {:<12}  {:>12}  {:>14}  {:>10}\n", "#", "variant", width, "fits", "reserved peak", "iteration time", "samples/s");
  for (const auto& r : results) {
    const auto j = nlohmann::json::parse(r.json);
    if (j.at("fits").get<bool>()) {
      const auto& res = j.at("results");
      // With sequence bins, what training sustains: the mean over the bins (the replay's figures are the longest bin's).
      const auto& sustained = res.contains("sequence_bins") ? res.at("sequence_bins") : res;
      const auto& per_second = sustained.at("samples_per_second");
      const auto& seconds = res.contains("sequence_bins") ? sustained.at("mean_iteration_seconds") : res.at("iteration_seconds");
      const std::string rate = per_second.is_null() ? "n/a" : fmt::format("{:.1f}", per_second.get<double>());
      out += fmt::format("{:>5}  {:<{}}  {:<12}  {:>12}  {:>14}  {:>10}\n", r.index, r.label, width, "FITS",
                         format_bytes(res.at("memory").at("max_memory_reserved_bytes").get<std::int64_t>()), seconds.is_null() ? std::string("n/a") : format_seconds(seconds.get<double>()), rate);
    } else if (j.at("not_applicable").is_string()) {
      out += fmt::format("{:>5}  {:<{}}  {:<12}  {}\n", r.index, r.label, width, "NOT APPLIC.", j.at("not_applicable").get<std::string>());
    } else {
      const auto& oom = j.at("out_of_memory");
      out += fmt::format("{:>5}  {:<{}}  {:<12}  {:>12}  {:>14}  {:>10}\n", r.index, r.label, width, "DOES NOT FIT",
                         "> " + format_bytes(oom.at("usable_bytes").get<std::int64_t>()), "-", "-");
    }
  }
  return out;
}

}  // namespace comptrain::sim
