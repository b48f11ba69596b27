#include "comptrain/sim/report/plan_shards.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/support/input_error.hpp"
#include "report/documents.hpp"
#include "report/plan_from_json.hpp"

namespace comptrain::sim {

using nlohmann::ordered_json;

namespace {

constexpr const char* kKind = "plan_shard";

ordered_json parse_document(const std::string& source, const std::string& text) {
  try {
    return ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(source + ": not a JSON document: " + e.what());
  }
}

bool is_plan_shard(const ordered_json& doc) {
  return doc.is_object() && doc.contains("schema") && doc["schema"].is_object() && doc["schema"].contains("name") &&
         doc["schema"]["name"] == std::string("comptrain.") + kKind;
}

// One shard document, checked in itself.
struct ShardDocument {
  std::string source;
  ordered_json header;  // /plan_shard
  Shard shard;
  std::size_t configuration_count = 0;
  ordered_json plan;    // /plan
  BatchSizePlan read;   // /plan read back, each candidate's configuration set
};

ShardDocument read_shard(const std::string& source, const std::string& text) {
  const ordered_json doc = parse_document(source, text);
  if (!is_plan_shard(doc)) {
    throw InputError(source + ": not a plan shard (schema " + (doc.is_object() && doc.contains("schema") ? doc["schema"].dump() : std::string("missing")) +
                     "); expected the JSON that comptrain plan --shard I/N writes for a cluster search (schema comptrain.plan_shard)");
  }
  const auto field = [&](const ordered_json& parent, const char* name, const char* where, bool ok_if(const ordered_json&), const char* expected) -> const ordered_json& {
    if (!parent.is_object() || !parent.contains(name) || !ok_if(parent[name])) throw InputError(fmt::format("{}: {}/{}: expected {}", source, where, name, expected));
    return parent[name];
  };
  const auto is_string = [](const ordered_json& j) { return j.is_string(); };
  const auto is_count = [](const ordered_json& j) { return j.is_number_unsigned(); };
  const auto is_bool = [](const ordered_json& j) { return j.is_boolean(); };
  const auto is_object = [](const ordered_json& j) { return j.is_object(); };
  const auto is_array = [](const ordered_json& j) { return j.is_array(); };
  ShardDocument d;
  d.source = source;
  d.header = field(doc, "plan_shard", "", is_object, "an object");
  field(d.header, "hash", "/plan_shard", is_string, "a string");
  d.configuration_count = field(d.header, "configuration_count", "/plan_shard", is_count, "a non-negative integer").get<std::size_t>();
  const bool layouts = field(d.header, "layouts", "/plan_shard", is_bool, "true or false").get<bool>();
  const bool fsdp = field(d.header, "fsdp", "/plan_shard", is_bool, "true or false").get<bool>();
  const ordered_json& shard = field(doc, "shard", "", is_object, "an object");
  d.shard.index = field(shard, "index", "/shard", is_count, "a non-negative integer").get<std::size_t>();
  d.shard.count = field(shard, "count", "/shard", is_count, "a positive integer").get<std::size_t>();
  if (d.shard.count == 0 || d.shard.index >= d.shard.count) {
    throw InputError(fmt::format("{}: /shard: {}/{}; expected index I of count N with 0 <= I < N", source, d.shard.index, d.shard.count));
  }
  const ordered_json& configurations = field(doc, "candidate_configurations", "", is_array, "an array");
  d.plan = field(doc, "plan", "", is_object, "an object (a comptrain.plan document)");
  d.read = detail::cluster_plan_from_json(d.plan, source + " (/plan)", layouts, fsdp);
  std::vector<ClusterCandidate>& candidates = d.read.cluster_search->candidates;
  if (configurations.size() != candidates.size()) {
    throw InputError(fmt::format("{}: /candidate_configurations has {} entries; expected one per candidate of /plan/cluster_search/candidates ({})", source,
                                 configurations.size(), candidates.size()));
  }
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    const ordered_json& c = configurations[k];
    if (!c.is_number_unsigned() || c.get<std::size_t>() >= d.configuration_count) {
      throw InputError(fmt::format("{}: /candidate_configurations/{}: {}; expected a configuration from 0 to {} (the search has {})", source, k, c.dump().substr(0, 40),
                                   d.configuration_count == 0 ? std::string("none") : std::to_string(d.configuration_count - 1), d.configuration_count));
    }
    candidates[k].configuration = c.get<std::size_t>();
    if (candidates[k].configuration % d.shard.count != d.shard.index) {
      throw InputError(fmt::format("{}: /candidate_configurations/{}: configuration {} belongs to shard {}/{}; expected only this shard's ({} + {} k)", source, k,
                                   candidates[k].configuration, candidates[k].configuration % d.shard.count, d.shard.count, d.shard.index, d.shard.count));
    }
  }
  return d;
}

}  // namespace

std::string plan_shard_document(const BatchSizePlan& plan, std::string_view run_hash, const Shard& shard) {
  const ClusterSearch& search = plan.cluster_search.value();  // make_plans shards cluster searches only
  ordered_json j = detail::document_header(kKind);
  j["plan_shard"] = {{"hash", run_hash},
                     {"command", "plan"},
                     {"source", plan.scenario_source},
                     {"configuration_count", search.configuration_count},
                     {"layouts", search.layouts},
                     {"fsdp", plan.fsdp}};
  j["shard"] = {{"index", shard.index}, {"count", shard.count}};
  ordered_json configurations = ordered_json::array();
  for (const ClusterCandidate& c : search.candidates) configurations.push_back(c.configuration);
  j["candidate_configurations"] = std::move(configurations);
  j["plan"] = ordered_json::parse(plan_json(plan));
  return j.dump(2) + "\n";
}

bool is_plan_shard_document(const std::string& source, const std::string& text) { return is_plan_shard(parse_document(source, text)); }

MergedPlan merge_plan_shards(const std::vector<std::pair<std::string, std::string>>& documents) {
  if (documents.empty()) throw InputError("merge: no shard documents given");
  std::vector<ShardDocument> shards;
  std::map<std::size_t, std::size_t> by_index;  // shard index -> its document in `shards`
  for (const auto& [source, text] : documents) {
    ShardDocument d = read_shard(source, text);
    if (!shards.empty()) {
      const ShardDocument& first = shards.front();
      if (d.header["hash"] != first.header["hash"] || d.header["command"] != first.header["command"]) {
        throw InputError(fmt::format("{}: from another run than {} (hash {} vs {}; the scenario, the command and its options must be the same)", source, first.source,
                                     d.header["hash"].dump(), first.header["hash"].dump()));
      }
      if (d.shard.count != first.shard.count) {
        throw InputError(fmt::format("{}: shard {}/{}, but {} is shard {}/{}; expected the shards of one --shard I/N split", source, d.shard.index, d.shard.count,
                                     first.source, first.shard.index, first.shard.count));
      }
      if (d.configuration_count != first.configuration_count) {
        throw InputError(fmt::format("{}: a search of {} configurations, but {} has {}; expected the shards of one run", source, d.configuration_count, first.source,
                                     first.configuration_count));
      }
    }
    if (const auto seen = by_index.find(d.shard.index); seen != by_index.end()) {
      throw InputError(fmt::format("merge: shard {}/{} given twice: {} and {}; expected each shard once", d.shard.index, d.shard.count, shards[seen->second].source, source));
    }
    by_index[d.shard.index] = shards.size();
    shards.push_back(std::move(d));
  }
  const std::size_t count = shards.front().shard.count;
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < count; ++i) {
    if (!by_index.count(i)) missing.push_back(i);
  }
  if (!missing.empty()) {
    throw InputError(fmt::format("merge: incomplete; missing {} of {} shards (0-based): {}; expected every shard 0 to {} once", missing.size(), count,
                                 detail::index_ranges(missing), count - 1));
  }

  // The candidates in the search's order: by configuration, each configuration's strategies as
  // its shard planned them. A configuration's candidates come from one shard (read_shard checked).
  struct Entry {
    std::size_t configuration;
    const ShardDocument* shard;
    std::size_t k;  // in the shard's candidates
  };
  std::vector<Entry> entries;
  std::set<std::pair<std::size_t, std::string>> seen;  // (configuration, strategy)
  std::set<std::size_t> configurations;
  for (const auto& [index, position] : by_index) {
    const ShardDocument& d = shards[position];
    const auto& candidates = d.read.cluster_search->candidates;
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      if (!seen.emplace(candidates[k].configuration, candidates[k].plan.strategy).second) {
        throw InputError(fmt::format("{}: /plan/cluster_search/candidates/{}: configuration {} with strategy '{}' a second time; expected each candidate once", d.source, k,
                                     candidates[k].configuration, candidates[k].plan.strategy));
      }
      configurations.insert(candidates[k].configuration);
      entries.push_back({candidates[k].configuration, &d, k});
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.configuration < b.configuration; });
  // Every configuration is planned with every strategy, so each has candidates in its shard.
  const std::size_t configuration_count = shards.front().configuration_count;
  for (std::size_t c = 0; c < configuration_count; ++c) {
    if (!configurations.count(c)) missing.push_back(c);
  }
  if (!missing.empty()) {
    throw InputError(fmt::format("merge: the shards hold no candidate of configuration{} {} of {}; expected every configuration planned", missing.size() == 1 ? "" : "s",
                                 detail::index_ranges(missing), configuration_count));
  }

  // The header, the search and its notes are every shard's; the strategies' notes (duplicates
  // planned once) are those of any shard that planned a configuration.
  const ShardDocument& first = shards[by_index.at(0)];
  MergedPlan merged;
  merged.plan = first.read;
  ordered_json json = first.plan;
  ClusterSearch& search = *merged.plan.cluster_search;
  search.candidates.clear();
  ordered_json& candidates_json = json["cluster_search"]["candidates"];
  candidates_json = ordered_json::array();
  for (const Entry& e : entries) {
    search.candidates.push_back(e.shard->read.cluster_search->candidates[e.k]);
    candidates_json.push_back(e.shard->plan["cluster_search"]["candidates"][e.k]);
  }
  search.configuration_count = configuration_count;
  for (const auto& [index, position] : by_index) {
    if (!merged.plan.notes.empty()) break;
    merged.plan.notes = shards[position].read.notes;
    json["notes"] = shards[position].plan["notes"];
  }
  search.fastest = fastest_candidate(search.candidates, merged.plan.options.objective);
  json["cluster_search"]["fastest"] = search.fastest ? ordered_json(*search.fastest) : ordered_json(nullptr);
  merged.json = json.dump(2) + "\n";
  return merged;
}

}  // namespace comptrain::sim
