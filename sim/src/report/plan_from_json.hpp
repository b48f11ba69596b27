#pragma once
// A cluster search's plan read back from its JSON (plan_json, report/plan_report.cpp, writes
// it): what plan_table_text prints of it, so that the merge of a search's shards
// (report/plan_shards.hpp) prints the table the unsharded plan prints. Private to the sim library.
//
// Read back as far as the table reads: a candidate's strategy by its name only (its rules stay in
// the JSON), a pipeline layout's bubble at the best micro-batch only (the points carry none).

#include <nlohmann/json.hpp>
#include <string>

#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim::detail {

// `document`: a comptrain.plan document of a cluster search; `layouts` and `fsdp`: the search's
// facts the document does not carry (ClusterSearch::layouts, BatchSizePlan::fsdp). InputError
// naming `source` and the field when a field is missing or of the wrong type.
BatchSizePlan cluster_plan_from_json(const nlohmann::ordered_json& document, const std::string& source, bool layouts, bool fsdp);

}  // namespace comptrain::sim::detail
