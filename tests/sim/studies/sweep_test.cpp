// Sweep expansion (lists, ranges, key paths, errors with lines), shards and their merge.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comptrain/sim/studies/sweep.hpp"
#include "comptrain/sim/config/sweep.hpp"
#include "comptrain/sim/report/sweep_document.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

const char* kBase =
    "model: {zoo: gpt, layers: 1, hidden: 32, heads: 2, seq_len: 16, vocab: 64}\n"
    "training: {batch_size: 2}\n"
    "platform: a100-40gb\n"
    "strategy:\n"
    "  name: c\n"
    "  rules:\n"
    "    - compress: {ratio: 2, compress_bandwidth: 300 GB/s, decompress_bandwidth: 500 GB/s}\n";

Sweep expand(const std::string& sweep_section) {
  return expand_sweep(parse_scenario(std::string(kBase) + sweep_section, "s.yaml", "."));
}

std::string error_of(const std::string& sweep_section) {
  try {
    (void)expand(sweep_section);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Sweep, CrossProductOfListsAndRanges) {
  const Sweep s = expand(
      "sweep:\n"
      "  training.batch_size: [1, 4]\n"
      "  model.layers: {from: 1, to: 3}\n"
      "  strategy.rules[0].compress.ratio: [4, 8]\n"
      "  platform: [a100-40gb, h100-80gb]\n");
  ASSERT_EQ(s.variant_count, 2U * 3U * 2U * 2U);
  EXPECT_EQ(s.keys, (std::vector<std::string>{"training.batch_size", "model.layers", "strategy.rules[0].compress.ratio", "platform"}));
  EXPECT_EQ(s.label(0), "training.batch_size=1, model.layers=1, strategy.rules[0].compress.ratio=4, platform=a100-40gb");
  EXPECT_EQ(s.variant(1).label, "training.batch_size=1, model.layers=1, strategy.rules[0].compress.ratio=4, platform=h100-80gb");
  const Scenario last = s.variant(s.variant_count - 1).scenario;
  EXPECT_EQ(last.batch_size, 4);
  EXPECT_EQ(last.zoo_model->layers, 3);
  EXPECT_DOUBLE_EQ(*last.strategy.rules[0].compress()->ratio, 8);
  EXPECT_EQ(last.platform->name, "h100-80gb");
  EXPECT_FALSE(last.has_sweep);
  EXPECT_EQ(s.hash.size(), 16U);
}

TEST(Sweep, RangesWithStepsAndMissingKeysCreated) {
  const Sweep s = expand("sweep:\n  model.layers: {from: 12, to: 48, step: 12}\n  training.tf32: [true]\n");
  ASSERT_EQ(s.variant_count, 4U);
  EXPECT_EQ(s.variant(3).scenario.zoo_model->layers, 48);
  EXPECT_TRUE(s.variant(0).scenario.allow_tf32_matmul);
  EXPECT_EQ(expand("sweep:\n  strategy.rules[0].compress.ratio: {from: 1.5, to: 2.5, step: 0.5}\n").variant_count, 3U);
}

TEST(Sweep, ErrorsNameTheSweepKeysLine) {
  // The base scenario has 7 lines; "sweep:" is line 8 and its first key line 9.
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  std::string e = error_of("sweep:\n  training.batch_size: [1]\n  strategy.rules[3].compress.ratio: [4]\n");
  EXPECT_TRUE(has(e, "s.yaml:10:3:") && has(e, "has 1 entries")) << e;
  e = error_of("sweep:\n  training.batchsize: [1, 2]\n");
  EXPECT_TRUE(has(e, "s.yaml:9:3:") && has(e, "unknown key 'batchsize'") && has(e, "valid keys")) << e;
  e = error_of("sweep:\n  training.batch_size: [1, 0]\n");
  EXPECT_TRUE(has(e, "s.yaml:9:3:") && has(e, "positive integer")) << e;
  e = error_of("sweep:\n  model.zoo.name: [x]\n");
  EXPECT_TRUE(has(e, "s.yaml:9:3:") && has(e, "not a mapping")) << e;
  e = error_of("sweep:\n  training..batch_size: [1]\n");
  EXPECT_TRUE(has(e, "s.yaml:9:3:") && has(e, "bad sweep key")) << e;
  e = error_of("sweep:\n  model.layers: {from: 4, to: 2}\n");
  EXPECT_TRUE(has(e, "s.yaml:9:") && has(e, "from <= to")) << e;
  e = error_of("sweep:\n  model.layers: []\n");
  EXPECT_TRUE(has(e, "s.yaml:9:3:") && has(e, "empty list")) << e;
  e = error_of("sweep: [1]\n");
  EXPECT_TRUE(has(e, "s.yaml:8:") && has(e, "non-empty mapping")) << e;
}

TEST(Sweep, ShardsSplitEveryNthVariant) {
  EXPECT_EQ(shard_variants(7, Shard{1, 3}), (std::vector<std::size_t>{1, 4}));
  EXPECT_EQ(shard_variants(3, std::nullopt), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(parse_shard("2/5").index, 2U);
  EXPECT_THROW(parse_shard("5/5"), InputError);
  EXPECT_THROW(parse_shard("1"), InputError);
  EXPECT_THROW(parse_shard("-1/2"), InputError);
}

TEST(Sweep, MergedShardsEqualTheUnshardedRun) {
  const Sweep s = expand("sweep:\n  training.batch_size: [1, 2, 3]\n  platform: [a100-40gb, v100-32gb]\n");
  const std::string hash = sweep_run_hash(s, "simulate", "");
  const std::vector<std::size_t> all = shard_variants(s.variant_count, std::nullopt);
  const std::string whole = sweep_document(s, "simulate", hash, std::nullopt, simulate_variants(s, all, 2, false, variant_report_json));
  std::vector<std::pair<std::string, std::string>> shards;
  for (std::size_t i = 0; i < 2; ++i) {
    const Shard shard{i, 2};
    shards.emplace_back("shard" + std::to_string(i), sweep_document(s, "simulate", hash, shard, simulate_variants(s, shard_variants(6, shard), 1, false, variant_report_json)));
  }
  EXPECT_EQ(merge_sweep_documents({shards[1], shards[0]}), whole);
  EXPECT_NE(simulation_table_text(s, simulate_variants(s, {5}, 1, false, variant_report_json)).find("platform=v100-32gb"), std::string::npos);

  auto error = [](const std::vector<std::pair<std::string, std::string>>& docs) {
    try {
      (void)merge_sweep_documents(docs);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({shards[0]}).find("missing 3 of 6 variants (0-based): 1, 3, 5"), std::string::npos) << error({shards[0]});
  EXPECT_NE(error({shards[0], shards[1], shards[0]}).find("given more than once: 0"), std::string::npos);
  const std::string other = sweep_document(s, "simulate", sweep_run_hash(s, "simulate", "batch=4"), Shard{1, 2}, {});
  EXPECT_NE(error({shards[0], {"other", other}}).find("from another sweep"), std::string::npos);
  EXPECT_NE(error({{"x", "{}"}}).find("not a sweep result"), std::string::npos);
}

// Defect 02: a forged variant_count or index, a label that is not a string.
TEST(Sweep, MergeChecksCountsIndicesAndLabels) {
  auto error = [](const std::string& text) {
    try {
      (void)merge_sweep_documents({{"d.json", text}});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto doc = [](const std::string& count, const std::string& index, const std::string& label) {
    return R"({"sweep": {"hash": "h", "command": "simulate", "source": "s.yaml", "keys": ["k"], "variant_count": )" + count +
           R"(}, "variants": [{"index": )" + index + R"(, "label": )" + label + R"(, "result": {}}]})";
  };
  EXPECT_EQ(error(doc("-1", "0", "\"x\"")), "d.json: /sweep/variant_count is -1; expected an integer from 1 to 100000");
  EXPECT_EQ(error(doc("1000000000000", "0", "\"x\"")), "d.json: /sweep/variant_count is 1000000000000; expected an integer from 1 to 100000");
  EXPECT_EQ(error(doc("\"3\"", "0", "\"x\"")), "d.json: /sweep/variant_count is \"3\"; expected an integer from 1 to 100000");
  EXPECT_EQ(error(doc("3.5", "0", "\"x\"")), "d.json: /sweep/variant_count is 3.5; expected an integer from 1 to 100000");
  EXPECT_EQ(error(doc("1", "0", "5")), "d.json: /variants/0/label: expected a string");
  EXPECT_EQ(error(doc("2", "7", "\"x\"")), "d.json: /variants/0/index: variant 7 is out of range; the sweep has 2 (0 to 1)");
  // A long missing list is summarised as runs.
  EXPECT_EQ(error(doc("100000", "5", "\"x\"")), "merge: incomplete; missing 99999 of 100000 variants (0-based): 0-4, 6-99999");
}

// Defects 03 and 04: ranges near the int64 limit, indices beyond 2^64.
TEST(Sweep, RangesAndIndicesNearTheLimits) {
  const Sweep near = expand("sweep:\n  training.batch_size: {from: 9223372036854775800, to: 9223372036854775807, step: 5}\n");
  EXPECT_EQ(near.variant_count, 2U);
  EXPECT_EQ(near.label(1), "training.batch_size=9223372036854775805");
  try {
    (void)expand("sweep:\n  \"strategy.rules[99999999999999999999].offload.lookahead\": [1]\n");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("index 99999999999999999999 is too large"));
  }
  try {
    (void)expand("sweep:\n  training.batch_size: {from: 1, to: 9223372036854775807}\n");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("has more than 100000 values"));
  }
}

// Expansion is lazy: a sweep of 100000 variants is counted, not built.
TEST(Sweep, ExpansionIsLazy) {
  const Sweep s = expand("sweep:\n  training.batch_size: {from: 1, to: 1000}\n  model.layers: {from: 1, to: 100}\n");
  EXPECT_EQ(s.variant_count, 100000U);
  EXPECT_EQ(s.variant(99999).scenario.zoo_model->layers, 100);
}

}  // namespace
}  // namespace comptrain::sim
