#pragma once
// The model definitions of the zoo (private): each builds the forward pass of one network on a
// NetworkBuilder, in PyTorch's execution order, and returns the loss.

#include <cstdint>

#include "network_builder.hpp"

namespace comptrain::zoo::detail {

// torchvision's definitions, 224x224x3 images, 1000 classes.
Value alexnet(NetworkBuilder& nb);
Value vgg16(NetworkBuilder& nb);
Value resnet18(NetworkBuilder& nb);
Value resnet50(NetworkBuilder& nb);
Value resnet152(NetworkBuilder& nb);

struct TransformerShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // rows of the learned position embedding
};

// Hugging Face's BertForPreTraining: post-LN encoder, MLM head over every position (decoder
// tied to the word embeddings) and the next-sentence head.
Value bert_for_pretraining(NetworkBuilder& nb, const TransformerShape& shape, Attention attention);
// Hugging Face's GPT2LMHeadModel: pre-LN decoder, LM head tied to the token embedding.
Value gpt2_lm_head(NetworkBuilder& nb, const TransformerShape& shape, Attention attention);

}  // namespace comptrain::zoo::detail
