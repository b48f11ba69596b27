// Packed sequences (issue 31, item 5): documents per sample attended separately, as the varlen
// flash kernel, SDPA with a block mask and eager attention with a per-sample mask do it. FLOPs
// and bytes by hand.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using testing::HasSubstr;
using traces::Trace;

// 4 heads of 16, S = 40, bf16, one sample unless given.
ModelRequest small(Attention attention, std::int64_t layers, std::optional<std::int64_t> documents, std::int64_t batch = 1) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 4;
  arch.intermediate = 176;
  arch.vocab = 1000;
  arch.max_positions = 4096;
  ModelRequest request = test_support::Request("llama").batch_size(batch).precision(Precision::bf16).seq_len(40).attention(attention);
  request.decoder = arch;
  request.packed_documents = documents;
  return request;
}

using Flops = std::pair<std::int64_t, std::int64_t>;  // forward, backward

Flops attention_flops(const Trace& trace) {
  std::int64_t forward = 0;
  std::int64_t backward = 0;
  for (const auto& op : trace.ops()) {
    if (op.kind != traces::OpKind::attention) continue;
    (op.phase == traces::Phase::forward ? forward : backward) += trace.flops(op.id);
  }
  return {forward, backward};
}

// The flash kernel's FLOPs (decoder_test.cpp: forward 2 GEMMs and a 5-FLOP softmax per score,
// backward 5 GEMMs and 4 per score) over the pairs within each document, per head of 16:
//   4 documents of 10: 4·(10·11/2) = 220 pairs; MACs 4·16·220 = 14,080, scores 4·220 = 880:
//     forward 4·14,080 + 5·880 = 60,720, backward 10·14,080 + 4·880 = 144,320;
//   3 documents of 14, 13, 13: 105 + 2·91 = 287 pairs; MACs 18,368, scores 1,148:
//     forward 79,212, backward 188,272;
//   unpacked, 40·41/2 = 820 pairs: MACs 52,480, scores 3,280: forward 226,320.
// The memory-efficient kernel with the block mask computes all 40·40 = 1,600 pairs: MACs
// 102,400, scores 6,400: forward 441,600, backward 1,049,600.
TEST(Packing, AttentionFlopsCountTheDocumentsPairs) {
  EXPECT_EQ(attention_flops(build_model(small(Attention::flash, 1, 4))), Flops(60'720, 144'320));
  EXPECT_EQ(attention_flops(build_model(small(Attention::flash, 1, 3))), Flops(79'212, 188'272));
  EXPECT_EQ(attention_flops(build_model(small(Attention::flash, 1, std::nullopt))).first, 226'320);
  EXPECT_EQ(attention_flops(build_model(small(Attention::flash, 1, 1))).first, 226'320);  // one document: unpacked
  EXPECT_EQ(attention_flops(build_model(small(Attention::sdpa_mem_efficient, 1, 4))),
            Flops(441'600, 1'049'600));
}

// Saved bytes, packed minus unpacked, by hand (bf16, 2 bytes):
// - flash: the rotary tables follow the per-sample position_ids: cos and sin [N, 40, 16] per
//   sample, 2·40·16·2 = 2,560 bytes, instead of 2,560 fixed; cu_seqlens, int32 per document,
//   4·4 = 16 bytes per sample (one storage every layer's kernel keeps). Nothing else, per layer.
// - sdpa-mem-efficient: besides the tables, each layer keeps its own additive bias [N, 1, 40, 48]
//   (the last dimension padded to 16): 2·40·48 = 3,840 bytes per sample and layer.
// - eager: the additive mask becomes per sample, but nothing saves it (the add keeps nothing).
TEST(Packing, SavedBytesByHand) {
  const auto saved = [](Attention attention, std::int64_t layers, std::optional<std::int64_t> documents) {
    return test_support::saved_for_backward(build_model(small(attention, layers, documents, 2)));
  };
  const auto flash = saved(Attention::flash, 1, 4);
  const auto flash_plain = saved(Attention::flash, 1, std::nullopt);
  EXPECT_EQ(flash.per_sample - flash_plain.per_sample, 2'560 + 16);
  EXPECT_EQ(flash_plain.fixed - flash.fixed, 2'560);
  const auto mem = [&](std::int64_t layers, std::optional<std::int64_t> documents) { return saved(Attention::sdpa_mem_efficient, layers, documents).per_sample; };
  EXPECT_EQ((mem(2, 4) - mem(1, 4)) - (mem(2, std::nullopt) - mem(1, std::nullopt)), 3'840);
  EXPECT_EQ(mem(1, 4) - mem(1, std::nullopt), 2'560 + 3'840);
  const auto eager = saved(Attention::eager, 1, 4);
  const auto eager_plain = saved(Attention::eager, 1, std::nullopt);
  EXPECT_EQ(eager.per_sample - eager_plain.per_sample, 2'560);
  // The mask itself: [2, 1, 40, 40] bf16 = 6,400 bytes, scaling with the batch.
  const Trace trace = build_model(small(Attention::eager, 1, 4, 2));
  bool found = false;
  for (const auto& t : trace.tensors()) {
    if (t.name != "model.causal_mask.out") continue;
    found = true;
    EXPECT_TRUE(t.scales_with_batch());
    EXPECT_EQ(t.bytes(), 2 * 40 * 40 * 2);
  }
  EXPECT_TRUE(found);
}

TEST(Packing, Errors) {
  const auto message = [](const ModelRequest& request) {
    try {
      build_model(request);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(small(Attention::flash, 1, 41)), HasSubstr("packing.documents: must be between 1 and seq_len (40), got 41"));
  ModelRequest gpt2 = test_support::Request("gpt2");
  gpt2.packed_documents = 2;
  EXPECT_THAT(message(gpt2), HasSubstr("packing: packed documents are written for the decoders"));
}

}  // namespace
}  // namespace comptrain::zoo
