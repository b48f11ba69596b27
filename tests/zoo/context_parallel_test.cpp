// Context parallelism in the zoo: one context-parallel rank's trace (seq_len / C tokens, its
// queries against the whole sequence's keys and values), the ring's and the all-gather's bytes
// against hand computation (shared/reference/parallelism.md §3), FLOPs and saved activations
// against the whole sequence's, and the refusals.

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::CommunicationKind;
using traces::OpKind;
using traces::ParallelGroup;
using traces::Phase;
using traces::Trace;
using Variant = ContextParallelSpec::Variant;

// A small grouped-query Llama: hidden 128, 8 heads of 16, 4 KV heads, s 64, batch 2, bf16.
constexpr std::int64_t kSeq = 64;
constexpr std::int64_t kHeadDim = 16;
constexpr std::int64_t kKvHeads = 4;
constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kBf16 = 2;

ModelRequest llama(std::int64_t layers, std::int64_t c, Variant variant, std::int64_t t = 1, bool sp = false,
                   Attention attention = Attention::flash) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = 128;
  arch.heads = 8;
  arch.kv_heads = kKvHeads;
  arch.intermediate = 352;
  arch.vocab = 1000;
  arch.max_positions = 4096;
  ModelRequest request = Request("llama").batch_size(kBatch).precision(Precision::bf16).seq_len(kSeq).attention(attention);
  request.decoder = arch;
  if (t > 1) request.tensor_parallel = TensorParallelSpec{t, sp};
  if (c > 0) request.context_parallel = ContextParallelSpec{c, variant};
  return request;
}

// FLOPs of the forward and backward passes (the optimizer's step is per parameter, not per token).
std::int64_t pass_flops(const Trace& trace, const std::string& containing = "") {
  std::int64_t total = 0;
  for (const auto& op : trace.ops()) {
    if (op.phase == Phase::optimizer || op.name.find(containing) == std::string::npos) continue;
    total += trace.flops(op.id);
  }
  return total;
}

int context_ops(const Trace& trace) {
  int n = 0;
  for (const auto& op : trace.ops()) n += op.communication && op.communication->group == ParallelGroup::context;
  return n;
}

// Degree 1 is the whole sequence: the very trace the zoo made without the option.
TEST(ContextParallel, DegreeOneIsTodaysTrace) {
  EXPECT_TRUE(build_model(llama(2, 0, Variant::ring)) == build_model(llama(2, 1, Variant::ring)));
}

// Megatron's load balancing gives each rank exactly 1/C of the causal pairs (m (S + 1) per head
// with m = S / 2C: network_builder.cpp), and every other op is token-proportional: the forward
// and backward FLOPs of a rank are the whole sequence's / C, exactly, in both variants, with and
// without tensor parallelism.
TEST(ContextParallel, FlopsAreTheWholeSequencesOverC) {
  for (const std::int64_t t : {1, 2}) {
    const Trace whole = build_model(llama(2, 0, Variant::ring, t, t > 1));
    for (const std::int64_t c : {2, 4}) {
      for (const Variant variant : {Variant::ring, Variant::all_gather}) {
        SCOPED_TRACE("t " + std::to_string(t) + " c " + std::to_string(c) + " " + std::string(to_string(variant)));
        const Trace rank = build_model(llama(2, c, variant, t, t > 1));
        EXPECT_EQ(pass_flops(rank) * c, pass_flops(whole));
        EXPECT_EQ(pass_flops(rank, "scaled_dot_product_attention") * c, pass_flops(whole, "scaled_dot_product_attention"));
        EXPECT_EQ(pass_flops(rank, "q_proj") * c, pass_flops(whole, "q_proj"));
        EXPECT_GT(pass_flops(rank, "scaled_dot_product_attention"), 0);
      }
    }
  }
}

// Saved activations per layer (the second layer of a 2-layer model over a 1-layer one) are all
// token-proportional, and the attention keeps only this rank's K,V share: exactly 1/C of the whole
// sequence's.
TEST(ContextParallel, SavedActivationsPerLayerAreTheWholeSequencesOverC) {
  const auto per_layer = [](std::int64_t c, Variant variant) {
    return test_support::saved_for_backward(build_model(llama(2, c, variant))).per_sample -
           test_support::saved_for_backward(build_model(llama(1, c, variant))).per_sample;
  };
  const std::int64_t whole = per_layer(0, Variant::ring);
  for (const std::int64_t c : {2, 4}) {
    for (const Variant variant : {Variant::ring, Variant::all_gather}) {
      SCOPED_TRACE("c " + std::to_string(c) + " " + std::string(to_string(variant)));
      EXPECT_EQ(per_layer(c, variant) * c, whole);
    }
  }
}

// The ring (TE's AttnFuncWithCPAndKVP2P, shared/reference/parallelism.md §3): per layer one
// forward ring op over the context group reading this rank's K and V (2 (s/C) b g d elements) and
// writing one receive buffer of that size; C - 1 blocks pass through the rank. Backward passes KV
// and dKV: two receive buffers, twice the traffic. By hand for s 64, b 2, g 4 (2 on each of 2
// tensor-parallel ranks), d 16, bf16.
TEST(ContextParallel, RingBytesByHand) {
  for (const std::int64_t t : {1, 2}) {
    for (const std::int64_t c : {2, 4}) {
      SCOPED_TRACE("t " + std::to_string(t) + " c " + std::to_string(c));
      const Trace trace = build_model(llama(2, c, Variant::ring, t, false));
      const std::int64_t g = kKvHeads / t;
      const std::int64_t block = 2 * (kSeq / c) * kBatch * g * kHeadDim * kBf16;  // c 2, t 1: 16384 B
      if (t == 1 && c == 2) {
        EXPECT_EQ(block, 16384);
      }
      int forward = 0;
      int backward = 0;
      for (const auto& op : trace.ops()) {
        if (!op.communication || op.communication->group != ParallelGroup::context) continue;
        SCOPED_TRACE(op.name);
        EXPECT_EQ(op.communication->kind, CommunicationKind::all_gather);
        EXPECT_EQ(op.communication->ring, c);
        EXPECT_EQ(trace.flops(op.id), 0);
        EXPECT_EQ(trace.bytes_read(op.id), block);  // this rank's K and V
        const std::int64_t buffers = op.phase == Phase::forward ? 1 : 2;
        EXPECT_EQ(trace.bytes_written(op.id), buffers * block);
        // The traffic through the rank: C - 1 steps of `buffers` blocks each.
        EXPECT_EQ((op.communication->ring - 1) * trace.bytes_written(op.id), (c - 1) * buffers * block);
        (op.phase == Phase::forward ? forward : backward) += 1;
      }
      EXPECT_EQ(forward, 2);  // one per layer
      EXPECT_EQ(backward, 2);
    }
  }
}

// The all-gather variant (PyTorch context_parallel's default rotation; TE AttnFuncWithCPAndKVAllGather): per layer an
// all_gather of K,V to the whole sequence's 2 s b g d elements before the kernel; backward gathers
// them again and reduce-scatters dK,dV (the whole in, this rank's share out). By hand as above.
TEST(ContextParallel, AllGatherBytesByHand) {
  for (const std::int64_t c : {2, 4}) {
    SCOPED_TRACE("c " + std::to_string(c));
    const Trace trace = build_model(llama(2, c, Variant::all_gather));
    const std::int64_t whole = 2 * kSeq * kBatch * kKvHeads * kHeadDim * kBf16;  // 32768 B
    EXPECT_EQ(whole, 32768);
    int forward_gathers = 0;
    int backward_gathers = 0;
    int backward_scatters = 0;
    for (const auto& op : trace.ops()) {
      if (!op.communication || op.communication->group != ParallelGroup::context) continue;
      SCOPED_TRACE(op.name);
      EXPECT_EQ(op.communication->ring, 0);
      EXPECT_EQ(trace.flops(op.id), 0);
      if (op.communication->kind == CommunicationKind::all_gather) {
        EXPECT_EQ(trace.bytes_read(op.id), whole / c);
        EXPECT_EQ(trace.bytes_written(op.id), whole);
        (op.phase == Phase::forward ? forward_gathers : backward_gathers) += 1;
      } else {
        EXPECT_EQ(op.communication->kind, CommunicationKind::reduce_scatter);
        EXPECT_EQ(op.phase, Phase::backward);
        EXPECT_EQ(trace.bytes_read(op.id), whole);
        EXPECT_EQ(trace.bytes_written(op.id), whole / c);
        ++backward_scatters;
      }
    }
    EXPECT_EQ(forward_gathers, 2);
    EXPECT_EQ(backward_gathers, 2);
    EXPECT_EQ(backward_scatters, 2);
  }
}

// Pipeline stages compose: a middle stage receives s/C rows (s/(C t) under sequence parallelism).
TEST(ContextParallel, ComposesWithPipelineStages) {
  ModelRequest request = llama(4, 2, Variant::ring, 2, true);
  request.pipeline_stage = PipelineStageSpec{1, 2, false, false};
  const Trace trace = build_model(request);
  bool received = false;
  for (const auto& op : trace.ops()) {
    if (op.name != "recv_forward") continue;
    received = true;
    EXPECT_EQ(trace.bytes_written(op.id), kBatch * (kSeq / 2 / 2) * 128 * kBf16);
  }
  EXPECT_TRUE(received);
  EXPECT_EQ(context_ops(trace), 4);  // 2 layers x (forward ring, backward ring)
}

TEST(ContextParallel, Refusals) {
  const auto refused = [](const ModelRequest& request, const std::string& expected) {
    try {
      build_model(request);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  // 2 x 3 = 6 does not divide 64.
  refused(llama(1, 3, Variant::ring), "context_parallel.degree: 2 x 3 = 6 does not divide the sequence length 64");
  ModelRequest zero = llama(1, 0, Variant::ring);
  zero.context_parallel = ContextParallelSpec{0, Variant::ring};
  refused(zero, "context_parallel.degree: 0");
  // 2 x 32 divides 64, but a rank's 64 / 32 = 2 tokens do not split over 4 ranks of sequence parallelism.
  refused(llama(1, 32, Variant::ring, 4, true), "the 2 tokens of a context-parallel rank (64 / 32) do not split over the 4 tensor-parallel ranks");
  refused(llama(1, 2, Variant::ring, 1, false, Attention::eager), "context_parallel: written for flash attention");
  ModelRequest gpt2 = Request("gpt2").batch_size(1).seq_len(64);
  gpt2.context_parallel = ContextParallelSpec{2, Variant::ring};
  refused(gpt2, "context_parallel: written for models 'gpt' and 'llama'");
}

TEST(ContextParallel, VariantNames) {
  EXPECT_EQ(parse_context_parallel_variant("ring"), Variant::ring);
  EXPECT_EQ(parse_context_parallel_variant("p2p"), Variant::ring);
  EXPECT_EQ(parse_context_parallel_variant("all_gather"), Variant::all_gather);
  EXPECT_EQ(parse_context_parallel_variant("allgather"), Variant::all_gather);
  EXPECT_FALSE(parse_context_parallel_variant("a2a").has_value());
  EXPECT_EQ(to_string(Variant::all_gather), "all_gather");
}

}  // namespace
}  // namespace comptrain::zoo
