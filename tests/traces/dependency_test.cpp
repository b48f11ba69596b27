// The trace's dependency edges (traces/src/trace.cpp, build_dependency_graph): per storage only
// the edges from the ops since its last in-place write. These tests check that this admits
// exactly the execution orders that the rule it replaced admitted -- an edge from every earlier
// reader and writer of a storage to each op writing a view of it, quadratic in the writers --
// by comparing the transitive closures of both edge sets on random and zoo traces, and that
// the edge count grows linearly with a GPT's depth.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "hand_traces.hpp"

namespace comptrain::traces {
namespace {

using testing::HandTrace;
using Edge = std::pair<OpIndex, OpIndex>;

// The rule of traces/src/trace.cpp up to commit 4e2d313, written out again: data edges, `after`
// edges, and for each op W writing a view of a storage, an edge from every op before W in the
// recorded order that reads or writes another member of that storage.
std::vector<Edge> pairwise_rule_edges(const Trace& t) {
  std::vector<Edge> edges;
  const auto& tensors = t.tensors();
  for (OpIndex o = 0; o < t.ops().size(); ++o) {
    for (TensorIndex in : t.op(o).inputs) {
      if (tensors[in].producer) edges.emplace_back(*tensors[in].producer, o);
    }
    for (OpIndex before : t.op(o).after) edges.emplace_back(before, o);
  }
  std::vector<std::vector<TensorIndex>> members(tensors.size());
  for (TensorIndex i = 0; i < tensors.size(); ++i) members[t.storage_of(i)].push_back(i);
  for (TensorIndex root = 0; root < tensors.size(); ++root) {
    if (members[root].size() < 2) continue;
    for (TensorIndex view : members[root]) {
      const auto writer = tensors[view].producer;
      if (view == root || !writer) continue;
      for (TensorIndex member : members[root]) {
        if (member == view) continue;
        if (auto p = tensors[member].producer; p && *p < *writer) edges.emplace_back(*p, *writer);
        for (OpIndex reader : tensors[member].consumers) {
          if (reader < *writer) edges.emplace_back(reader, *writer);
        }
      }
    }
  }
  return edges;
}

std::vector<Edge> graph_edges(const Trace& t) {
  std::vector<Edge> edges;
  const OpGraph& g = t.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) edges.emplace_back(boost::source(*it, g), boost::target(*it, g));
  return edges;
}

// reach[v] has bit u set when u must run before v (u ->+ v). Every edge of a valid trace goes
// forward in the recorded order, so one pass in that order computes it.
using Closure = std::vector<std::vector<std::uint64_t>>;
Closure transitive_closure(std::size_t n, const std::vector<Edge>& edges) {
  std::vector<std::vector<OpIndex>> preds(n);
  for (auto [u, v] : edges) {
    EXPECT_LT(u, v) << "an edge against the recorded order";
    preds[v].push_back(u);
  }
  const std::size_t words = (n + 63) / 64;
  Closure reach(n, std::vector<std::uint64_t>(words, 0));
  for (OpIndex v = 0; v < n; ++v) {
    for (OpIndex u : preds[v]) {
      for (std::size_t w = 0; w < words; ++w) reach[v][w] |= reach[u][w];
      reach[v][u / 64] |= std::uint64_t{1} << (u % 64);
    }
  }
  return reach;
}

// The closures are equal, and every edge kept is one the pairwise rule had (nothing added).
void expect_same_orders(const Trace& t) {
  const std::vector<Edge> pairwise = pairwise_rule_edges(t);
  const std::vector<Edge> kept = graph_edges(t);
  const std::set<Edge> pairwise_set(pairwise.begin(), pairwise.end());
  for (const Edge& e : kept) {
    EXPECT_TRUE(pairwise_set.count(e)) << t.name() << ": edge " << e.first << " -> " << e.second << " is not one of the pairwise rule";
  }
  const std::size_t n = t.ops().size();
  const Closure a = transitive_closure(n, pairwise);
  const Closure b = transitive_closure(n, kept);
  std::size_t differing = 0;
  for (OpIndex v = 0; v < n; ++v) differing += a[v] != b[v];
  EXPECT_EQ(differing, 0u) << t.name() << ": " << differing << " of " << n << " ops have other predecessors";
}

// A random valid trace: each op reads earlier tensors and writes new ones or, in place, views of
// earlier temporaries (views of views too), sometimes with an `after` on an earlier op.
Trace random_trace(std::mt19937& rng, int op_count) {
  HandTrace h;
  std::vector<TensorIndex> readable{h.tensor("in0", 8, TensorRole::input), h.tensor("in1", 8, TensorRole::input)};
  std::vector<TensorIndex> writable;  // temporaries and their views
  const auto pick = [&](const std::vector<TensorIndex>& from) {
    return from[std::uniform_int_distribution<std::size_t>(0, from.size() - 1)(rng)];
  };
  std::bernoulli_distribution in_place(0.5);
  std::bernoulli_distribution with_after(0.1);
  std::uniform_int_distribution<int> count(1, 3);
  for (int k = 0; k < op_count; ++k) {
    std::vector<TensorIndex> inputs;
    for (int i = count(rng); i > 0; --i) inputs.push_back(pick(readable));
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    std::vector<TensorIndex> outputs;
    for (int i = count(rng) % 2 + 1; i > 0; --i) {
      const std::string name = "t" + std::to_string(h.tensors.size());
      outputs.push_back(!writable.empty() && in_place(rng) ? h.view(name, pick(writable)) : h.tensor(name, 8));
    }
    const OpIndex o = h.op("op" + std::to_string(k), inputs, outputs);
    if (k > 0 && with_after(rng)) h.ops[o].after.push_back(std::uniform_int_distribution<OpIndex>(0, o - 1)(rng));
    readable.insert(readable.end(), outputs.begin(), outputs.end());
    writable.insert(writable.end(), outputs.begin(), outputs.end());
  }
  return h.build();
}

TEST(DependencyGraph, RandomTracesAdmitTheSameOrdersAsThePairwiseRule) {
  std::mt19937 rng(20240614);
  for (int trial = 0; trial < 300; ++trial) {
    const Trace t = random_trace(rng, 10 + trial % 60);
    expect_same_orders(t);
    if (::testing::Test::HasFailure()) break;
  }
}

zoo::ModelRequest small(const std::string& model, zoo::Precision precision, std::int64_t layers) {
  zoo::ModelRequest r;
  r.model = model;
  r.batch_size = 2;
  r.precision = precision;
  if (model == "gpt" || model.rfind("bert", 0) == 0) {
    r.layers = layers;
    r.seq_len = 16;
  }
  if (model == "gpt") {
    r.hidden = 64;
    r.heads = 2;
    r.vocab = 100;
  }
  return r;
}

TEST(DependencyGraph, ZooTracesAdmitTheSameOrdersAsThePairwiseRule) {
  std::vector<zoo::ModelRequest> requests = {
      small("gpt", zoo::Precision::fp32, 3),
      small("gpt", zoo::Precision::amp_fp16, 2),
      small("gpt", zoo::Precision::mixed, 2),
      small("bert-base", zoo::Precision::fp32, 2),
      small("resnet18", zoo::Precision::fp32, 0),
      small("vgg16", zoo::Precision::amp_bf16, 0),
  };
  requests[1].optimizer = zoo::Optimizer::adamw;
  requests[2].optimizer_impl = zoo::OptimizerImpl::for_loop;
  requests[3].attention = zoo::Attention::eager;
  requests.push_back(small("gpt", zoo::Precision::fp32, 2));
  requests.back().attention = zoo::Attention::flash;
  for (const auto& request : requests) expect_same_orders(zoo::build_model(request));
}

// A gradient accumulated in place N times into one storage, each accumulation reading the
// previous sum: the pairwise rule needs N^2 / 2 edges, the frontier 3 per accumulation.
TEST(DependencyGraph, InPlaceAccumulationChainHasLinearlyManyEdges) {
  constexpr int kAccumulations = 2000;
  HandTrace h;
  const TensorIndex x = h.tensor("x", 8, TensorRole::input);
  TensorIndex sum = h.tensor("grad", 8);
  h.op("seed", {x}, {sum});
  for (int k = 0; k < kAccumulations; ++k) {
    const TensorIndex part = h.tensor("part" + std::to_string(k), 8);
    h.op("partial" + std::to_string(k), {x}, {part});
    const TensorIndex next = h.view("grad.sum" + std::to_string(k), sum);
    h.op("accumulate" + std::to_string(k), {sum, part}, {next});
    sum = next;
  }
  const Trace t = h.build();
  // Per accumulation: two data edges (previous sum, part) and one in-place edge from the
  // previous accumulation, which is also the producer of the sum it reads (a duplicate).
  EXPECT_LE(boost::num_edges(t.graph()), 3u * kAccumulations);
  EXPECT_GT(pairwise_rule_edges(t).size(), std::size_t{kAccumulations} * kAccumulations / 2);
}

// The GPT builder's edges per added layer are constant: the count is exactly linear in depth.
TEST(DependencyGraph, GptEdgesGrowLinearlyWithTheLayers) {
  const auto counts = [](std::int64_t layers) {
    const Trace t = zoo::build_model(small("gpt", zoo::Precision::fp32, layers));
    return std::pair{t.ops().size(), boost::num_edges(t.graph())};
  };
  const auto [ops4, edges4] = counts(4);
  const auto [ops5, edges5] = counts(5);
  const auto [ops64, edges64] = counts(64);
  const auto [ops65, edges65] = counts(65);
  EXPECT_EQ(ops65 - ops64, ops5 - ops4);
  EXPECT_EQ(edges65 - edges64, edges5 - edges4) << "edges per layer grow with depth";
  // A few edges per op: its inputs' producers plus the in-place orderings.
  EXPECT_LT(static_cast<double>(edges65) / static_cast<double>(ops65), 4.0);
}

}  // namespace
}  // namespace comptrain::traces
