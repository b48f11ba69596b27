// A cluster search split over a job array (plan --shard I/N without a sweep; report/plan_shards.hpp):
// each shard plans configurations I, I+N, ... of the whole search, and merging every shard gives
// the unsharded plan, its JSON byte for byte and its table; what does not belong together is
// refused, naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/sim/report/plan_shards.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;
using Documents = std::vector<std::pair<std::string, std::string>>;

// A small GPT (4 layers, 8 heads) on one node of 8 H100s: tensor 1, 2 and 3 (3 divides no head
// count: left out before simulating, a note) x pipeline 1 and 2, so 4 configurations, each with
// two strategies (8 candidates).
Scenario layout_search() {
  return parse_scenario(
      "model: {zoo: gpt, layers: 4, hidden: 256, heads: 8, seq_len: 256, vocab: 1024, attention: flash}\n"
      "training: {batch_size: 1, precision: mixed, optimizer: adamw}\n"
      "platform: dgx-h100-superpod\n"
      "parallelism: {nodes: 1, gpus_per_node: 8, zero: {stage: 1}}\n"
      "plan:\n  target_global_batch: 16\n  tensor: [1, 2, 3]\n  pipeline: [1, 2]\n  micro_batches: [1, 2]\n  strategies: [baseline, recompute]\n",
      "search.yaml", ".");
}

PlanRequest request_for(const Scenario& scenario, std::optional<Shard> shard) {
  PlanRequest r;
  r.scenario = scenario;
  r.strategies = strategies_to_plan(scenario);
  r.options = plan_options_for(scenario);
  r.shard = shard;
  return r;
}

BatchSizePlan plan_of(const PlanRequest& r) { return make_plans({r}, 2, false).front(); }

const BatchSizePlan& whole_plan() {
  static const BatchSizePlan plan = plan_of(request_for(layout_search(), std::nullopt));
  return plan;
}

// Every shard's document of a --shard I/`count` split, as "shard-I.json".
Documents shard_documents(std::size_t count) {
  const Scenario scenario = layout_search();
  Documents out;
  for (std::size_t i = 0; i < count; ++i) {
    const Shard shard{i, count};
    out.emplace_back("shard-" + std::to_string(i) + ".json", plan_shard_document(plan_of(request_for(scenario, shard)), scenario_run_hash(scenario, "plan", ""), shard));
  }
  return out;
}

const Documents& three_shards() {
  static const Documents documents = shard_documents(3);
  return documents;
}

std::string merge_error(const Documents& documents) {
  try {
    (void)merge_plan_shards(documents);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PlanShards, EachShardPlansItsConfigurationsAndCarriesTheWholeSearchsNotes) {
  const BatchSizePlan& whole = whole_plan();
  ASSERT_EQ(whole.cluster_search->configuration_count, 4U) << "TP {1, 2} x PP {1, 2}; TP 3 left out";
  ASSERT_EQ(whole.cluster_search->candidates.size(), 8U);
  ASSERT_EQ(whole.cluster_search->notes.size(), 2U);
  EXPECT_THAT(whole.cluster_search->notes[0], HasSubstr("TP 3 x PP 1: left out"));
  EXPECT_THAT(whole.cluster_search->notes[1], HasSubstr("TP 3 x PP 2: left out"));
  const std::vector<std::vector<std::size_t>> expected{{0, 0, 3, 3}, {1, 1}, {2, 2}};  // configurations I, I+3, each with both strategies
  for (std::size_t i = 0; i < 3; ++i) {
    const auto doc = nlohmann::json::parse(three_shards()[i].second);
    EXPECT_EQ(doc["schema"]["name"], "comptrain.plan_shard");
    EXPECT_EQ(doc["shard"]["index"], i);
    EXPECT_EQ(doc["shard"]["count"], 3);
    EXPECT_EQ(doc["plan_shard"]["configuration_count"], 4);
    EXPECT_EQ(doc["candidate_configurations"].get<std::vector<std::size_t>>(), expected[i]);
    EXPECT_EQ(doc["plan"]["cluster_search"]["notes"], nlohmann::json(whole.cluster_search->notes)) << "every shard has every note";
  }
}

TEST(PlanShards, MergingEveryShardGivesTheUnshardedPlansJsonAndTable) {
  const BatchSizePlan& whole = whole_plan();
  ASSERT_TRUE(whole.cluster_search->fastest.has_value());
  Documents shuffled = three_shards();
  std::reverse(shuffled.begin(), shuffled.end());
  const MergedPlan merged = merge_plan_shards(shuffled);
  EXPECT_EQ(merged.json, plan_json(whole)) << "the same candidates, numbers, ranking and notes, byte for byte";
  EXPECT_EQ(plan_table_text(merged.plan), plan_table_text(whole));
  EXPECT_EQ(merged.plan.cluster_search->fastest, whole.cluster_search->fastest);

  // More shards than configurations: shard 4 plans none and still merges.
  const Documents five = shard_documents(5);
  EXPECT_EQ(nlohmann::json::parse(five[4].second)["plan"]["cluster_search"]["candidates"].size(), 0U);
  const MergedPlan from_five = merge_plan_shards(five);
  EXPECT_EQ(from_five.json, plan_json(whole));
  EXPECT_EQ(plan_table_text(from_five.plan), plan_table_text(whole));
}

// A ZeRO++ search (plan.zero_plus_plus) in two shards: the merge reads each candidate's setting and
// hpZ partition and the list searched back, so its JSON and table are the unsharded plan's.
TEST(PlanShards, MergingKeepsEachCandidatesZeroPlusPlusSetting) {
  const Scenario scenario = parse_scenario(
      "model: {zoo: gpt, layers: 2, hidden: 256, heads: 8, seq_len: 256, vocab: 1024, attention: flash}\n"
      "training: {batch_size: 1, precision: mixed, optimizer: adamw}\n"
      "platform: dgx-a100-superpod\n"
      "parallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 3}}\n"
      "plan: {target_global_batch: 32, strategies: [baseline], zero_plus_plus: [none, qwz, all]}\n",
      "zeropp.yaml", ".");
  const BatchSizePlan whole = plan_of(request_for(scenario, std::nullopt));
  ASSERT_EQ(whole.cluster_search->candidates.size(), 3U);
  Documents shards;
  for (std::size_t i = 0; i < 2; ++i) {
    const Shard shard{i, 2};
    shards.emplace_back("shard-" + std::to_string(i) + ".json", plan_shard_document(plan_of(request_for(scenario, shard)), scenario_run_hash(scenario, "plan", ""), shard));
  }
  const MergedPlan merged = merge_plan_shards(shards);
  EXPECT_EQ(merged.json, plan_json(whole));
  EXPECT_EQ(plan_table_text(merged.plan), plan_table_text(whole));
  const auto& candidates = merged.plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 3U);
  EXPECT_EQ(candidates[1].zero_plus_plus, (ZeroPlusPlus{false, true, false}));
  EXPECT_EQ(candidates[1].hpz_partition_size, 1);
  EXPECT_EQ(candidates[2].zero_plus_plus, (ZeroPlusPlus{true, true, true}));
  EXPECT_EQ(candidates[2].hpz_partition_size, 8);
  EXPECT_EQ(merged.plan.cluster_search->zero_plus_plus, (std::vector<ZeroPlusPlus>{{}, {false, true, false}, {true, true, true}}));
  EXPECT_THAT(plan_table_text(merged.plan), HasSubstr("ZeRO-3+hpZ+qwZ+qgZ"));

  // A setting the reader does not know, or an hpZ partition that contradicts it, is refused.
  auto unknown = nlohmann::ordered_json::parse(shards[0].second);
  unknown["plan"]["cluster_search"]["candidates"][0]["zero_plus_plus"] = "hpz+zz";
  EXPECT_THAT(merge_error({{"unknown.json", unknown.dump()}, shards[1]}), HasSubstr("zero_plus_plus: \"hpz+zz\" is not a ZeRO++ setting"));
  auto contradicts = nlohmann::ordered_json::parse(shards[0].second);
  contradicts["plan"]["cluster_search"]["candidates"][0]["hpz_partition_size"] = 8;
  EXPECT_THAT(merge_error({{"contradicts.json", contradicts.dump()}, shards[1]}), HasSubstr("hpz_partition_size: 8 does not match zero_plus_plus \"none\""));
}

TEST(PlanShards, TheFastestIsRankedOverEveryShardsCandidates) {
  // Shard 1's baseline (configuration 1: TP 1 x PP 2) made the fastest by far: the merge's fastest
  // is its place among all candidates (after configuration 0's two), not the shard's own 0.
  ASSERT_EQ(whole_plan().cluster_search->fastest, std::optional<std::size_t>(0)) << "TP 1 x PP 1's baseline, unsharded";
  auto faster = nlohmann::ordered_json::parse(three_shards()[1].second);
  auto& candidate = faster["plan"]["cluster_search"]["candidates"][0];
  ASSERT_EQ(candidate["strategy"]["name"], "baseline");
  candidate["samples_per_second"] = 1e12;
  const MergedPlan merged = merge_plan_shards({three_shards()[0], {"faster.json", faster.dump()}, three_shards()[2]});
  EXPECT_EQ(merged.plan.cluster_search->fastest, std::optional<std::size_t>(2));
  EXPECT_EQ(nlohmann::json::parse(merged.json)["cluster_search"]["fastest"], 2);
  EXPECT_THAT(plan_table_text(merged.plan), HasSubstr("Fastest: 8 GPUs (1 node x 8), TP 1 x PP 2 x DP 4, ZeRO-1, optimizer on GPU, baseline"));
}

TEST(PlanShards, ShardsThatDoNotMakeOneRunAreRefusedNamingTheFile) {
  const Documents& docs = three_shards();
  EXPECT_THAT(merge_error({docs[0], docs[2]}), HasSubstr("missing 1 of 3 shards (0-based): 1"));
  EXPECT_THAT(merge_error({docs[0], docs[1], docs[2], {"again.json", docs[1].second}}), HasSubstr("shard 1/3 given twice: shard-1.json and again.json"));

  auto other = nlohmann::ordered_json::parse(docs[1].second);
  other["plan_shard"]["hash"] = "0123456789abcdef";
  EXPECT_THAT(merge_error({docs[0], {"other.json", other.dump()}, docs[2]}), HasSubstr("other.json: from another run than shard-0.json"));

  auto halves = nlohmann::ordered_json::parse(docs[1].second);
  halves["shard"]["count"] = 2;  // configuration 1 is shard 1's of 2 as well
  EXPECT_THAT(merge_error({docs[0], {"halves.json", halves.dump()}}), HasSubstr("halves.json: shard 1/2, but shard-0.json is shard 0/3"));

  auto stolen = nlohmann::ordered_json::parse(docs[1].second);
  stolen["candidate_configurations"][0] = 2;
  EXPECT_THAT(merge_error({docs[0], {"stolen.json", stolen.dump()}, docs[2]}),
              HasSubstr("stolen.json: /candidate_configurations/0: configuration 2 belongs to shard 2/3"));

  auto twice = nlohmann::ordered_json::parse(docs[1].second);
  twice["candidate_configurations"].push_back(1);
  twice["plan"]["cluster_search"]["candidates"].push_back(twice["plan"]["cluster_search"]["candidates"][0]);
  EXPECT_THAT(merge_error({docs[0], {"twice.json", twice.dump()}, docs[2]}), HasSubstr("twice.json: /plan/cluster_search/candidates/2: configuration 1 with strategy 'baseline' a second time"));

  auto broken = nlohmann::ordered_json::parse(docs[2].second);
  broken["plan"]["cluster_search"]["candidates"][1].erase("limit");
  EXPECT_THAT(merge_error({docs[0], docs[1], {"broken.json", broken.dump()}}), HasSubstr("broken.json (/plan): /cluster_search/candidates/1"));

  EXPECT_THAT(merge_error({docs[0], {"sweep.json", R"({"sweep": {}, "variants": []})"}}), HasSubstr("sweep.json: not a plan shard"));
  EXPECT_THAT(merge_error({{"text.txt", "not json"}}), HasSubstr("text.txt: not a JSON document"));
  EXPECT_FALSE(is_plan_shard_document("sweep.json", R"({"schema": {"name": "comptrain.sweep"}})"));
  EXPECT_TRUE(is_plan_shard_document("shard-0.json", docs[0].second));
}

}  // namespace
}  // namespace comptrain::sim
