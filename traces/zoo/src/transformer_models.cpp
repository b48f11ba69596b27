// The transformers, following Hugging Face's modules (op and parameter names are theirs) with
// the attention and MLP kernels of Megatron-LM, whose saved activations Korthikanti et al.
// 2022 count: scaling folded into the score GEMM, a fused (scale-)mask-softmax that saves its
// output, GELU saving its input. See traces/zoo/README.md for where that differs from eager
// Hugging Face code.

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::DType;

// Softmax(Q Kᵀ / sqrt(d)) V over `heads` heads; q, k, v are [N, heads, S, d] views. Megatron-LM's
// core: the 1/sqrt(d) scale folded into the score GEMM (baddbmm), the causal or padding mask
// inside the fused softmax kernel, which keeps the 16-bit dtype of its input.
Value megatron_core(NetworkBuilder& nb, const std::string& p, Value q, Value k, Value v,
                    const std::string& dropout_name) {
  Value scores = nb.matmul(p + "scores", q, k, true);
  Value probs = nb.fused_softmax(p + "softmax", scores);
  probs = nb.dropout(dropout_name, probs);
  const Value context = nb.matmul(p + "context", probs, v, false);
  return nb.merge_heads(p + "merge_heads", context);
}

// torch.nn.functional.scaled_dot_product_attention dispatched to the flash kernel (dropout in
// the kernel, causal or no mask): nothing S x S is stored. `causal`: GPT's is_causal (the
// kernel skips the pairs above the diagonal); BERT attends to every position.
Value flash_core(NetworkBuilder& nb, const std::string& p, Value q, Value k, Value v, bool causal) {
  const Value context = nb.flash_attention(p + "scaled_dot_product_attention", q, k, v, causal);
  return nb.merge_heads(p + "merge_heads", context);
}

// transformers v4.25.1, modeling_bert.py, BertSelfAttention.forward (absolute positions):
//   attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
//   attention_scores = attention_scores / math.sqrt(self.attention_head_size)
//   attention_scores = attention_scores + attention_mask
//   attention_probs = nn.functional.softmax(attention_scores, dim=-1)
//   attention_probs = self.dropout(attention_probs)
//   context_layer = torch.matmul(attention_probs, value_layer)
// torch.matmul reshapes its permuted operands for bmm, which copies them (the copies are what
// BmmBackward0 saves); the contiguous probabilities need no copy.
Value bert_eager_core(NetworkBuilder& nb, const std::string& self, Value q, Value k, Value v, Value mask) {
  const Value q_copy = nb.contiguous(self + "scores.query_copy", q, false);
  const Value k_copy = nb.contiguous(self + "scores.key_copy", k, true);  // key_layer.transpose(-1, -2)
  Value scores = nb.matmul(self + "scores", q_copy, k_copy, false);
  scores = nb.scale(self + "scores.div", scores);
  scores = nb.add(self + "scores.add_mask", scores, mask);  // the mask has the model's dtype
  Value probs = nb.softmax(self + "softmax", scores);
  probs = nb.dropout(self + "dropout", probs);
  const Value v_copy = nb.contiguous(self + "context.value_copy", v, false);
  const Value context = nb.matmul(self + "context", probs, v_copy, false);
  return nb.merge_heads(self + "merge_heads", context);
}

// transformers v4.25.1, modeling_gpt2.py, GPT2Attention._attn:
//   attn_weights = torch.matmul(query, key.transpose(-1, -2))
//   attn_weights = attn_weights / torch.tensor(value.size(-1) ** 0.5, dtype=attn_weights.dtype, ...)
//   causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].to(torch.bool)
//   attn_weights = torch.where(causal_mask, attn_weights, mask_value)
//   attn_weights = nn.functional.softmax(attn_weights, dim=-1)
//   attn_weights = attn_weights.type(value.dtype)   # "Downcast (if necessary) back to V's dtype"
//   attn_weights = self.attn_dropout(attn_weights)
//   attn_output = torch.matmul(attn_weights, value)
// `bias` is a uint8 [1, 1, n_positions, n_positions] buffer; the 0-dim divisor and mask value
// (a few bytes each) are left out.
Value gpt2_eager_core(NetworkBuilder& nb, const std::string& p, Value q, Value k, Value v, Value bias) {
  const std::int64_t s = nb.dim(q, 2);
  const Value q_copy = nb.contiguous(p + "attn.scores.query_copy", q, false);
  const Value k_copy = nb.contiguous(p + "attn.scores.key_copy", k, true);
  Value weights = nb.matmul(p + "attn.scores", q_copy, k_copy, false);
  weights = nb.scale(p + "attn.scores.div", weights);
  const Value causal = nb.constant_op(p + "attn.causal_mask", bias, traces::DType::boolean, {1, 1, s, s});
  weights = nb.where(p + "attn.where", causal, weights);
  weights = nb.softmax(p + "attn.softmax", weights);
  weights = nb.to_dtype(p + "attn.type", weights, nb.dtype(v));
  weights = nb.dropout(p + "attn.attn_dropout", weights);
  const Value v_copy = nb.contiguous(p + "attn.context.value_copy", v, false);
  const Value context = nb.matmul(p + "attn.context", weights, v_copy, false);
  return nb.merge_heads(p + "attn.merge_heads", context);
}

// transformers.models.gpt2.modeling_gpt2.GPT2Block (pre-LN). On t tensor-parallel ranks
// (NetworkBuilder::set_tensor_parallel) one rank's share as Megatron-LM splits the layer
// (shared/reference/parallelism.md §1): c_attn column-parallel by whole heads (3h/t outputs,
// a/t heads), c_proj row-parallel (h/t -> h, bias after the reduction), c_fc column-parallel
// (4h/t), the MLP's c_proj row-parallel; the LayerNorms and dropouts replicated, on S/t rows under
// sequence parallelism. At t = 1 the column- and row-parallel linears are plain linears.
Value gpt2_block(NetworkBuilder& nb, const std::string& p, Value x, const TransformerShape& shape,
                 Attention attention) {
  const std::int64_t h = shape.hidden;
  const std::int64_t t = nb.tensor_parallel_degree();
  // HF's causal-mask buffer, which only the eager code reads.
  const std::optional<Value> bias =
      attention == Attention::eager
          ? std::optional(nb.buffer(p + "attn.bias", traces::DType::u8, {1, 1, shape.max_positions, shape.max_positions}))
          : std::nullopt;
  Value a = nb.layernorm(p + "ln_1", x);
  const Value qkv = nb.column_parallel_linear(p + "attn.c_attn", nb.column_parallel_input(p + "attn.c_attn", a), 3 * h / t, true);
  const auto heads = nb.split_heads(p + "attn.split_heads", qkv, 3, shape.heads / t);
  switch (attention) {
    case Attention::fused_softmax:
      a = megatron_core(nb, p + "attn.", heads[0], heads[1], heads[2], p + "attn.attn_dropout");
      break;
    case Attention::eager: a = gpt2_eager_core(nb, p, heads[0], heads[1], heads[2], *bias); break;
    case Attention::flash: a = flash_core(nb, p + "attn.", heads[0], heads[1], heads[2], true); break;
    case Attention::sdpa_mem_efficient: throw std::logic_error("gpt2: sdpa-mem-efficient is refused before building");
  }
  a = nb.row_parallel_linear(p + "attn.c_proj", a, h, true);
  a = nb.dropout(p + "attn.resid_dropout", a);
  x = nb.add(p + "add", a, x);  // hidden_states = attn_output + residual

  Value m = nb.layernorm(p + "ln_2", x);
  m = nb.column_parallel_linear(p + "mlp.c_fc", nb.column_parallel_input(p + "mlp.c_fc", m), 4 * h / t, true);
  m = nb.gelu(p + "mlp.act", m);
  m = nb.row_parallel_linear(p + "mlp.c_proj", m, h, true);
  m = nb.dropout(p + "mlp.dropout", m);
  return nb.add(p + "add", x, m);  // hidden_states = residual + feed_forward_hidden_states
}

// transformers.models.bert.modeling_bert.BertLayer (post-LN).
Value bert_layer(NetworkBuilder& nb, const std::string& p, Value x, const TransformerShape& shape,
                 Attention attention, std::optional<Value> mask) {
  const std::int64_t h = shape.hidden;
  const std::string self = p + "attention.self.";
  const Value query = nb.linear(self + "query", x, h, true);
  const Value key = nb.linear(self + "key", x, h, true);
  const Value value = nb.linear(self + "value", x, h, true);
  const Value q = nb.split_heads(self + "transpose_query", query, 1, shape.heads).front();
  const Value k = nb.split_heads(self + "transpose_key", key, 1, shape.heads).front();
  const Value v = nb.split_heads(self + "transpose_value", value, 1, shape.heads).front();
  Value a;
  switch (attention) {
    case Attention::fused_softmax: a = megatron_core(nb, self, q, k, v, self + "dropout"); break;
    case Attention::eager: a = bert_eager_core(nb, self, q, k, v, *mask); break;
    case Attention::flash: a = flash_core(nb, self, q, k, v, false); break;
    case Attention::sdpa_mem_efficient: throw std::logic_error("bert: sdpa-mem-efficient is refused before building");
  }
  a = nb.linear(p + "attention.output.dense", a, h, true);
  a = nb.dropout(p + "attention.output.dropout", a);
  a = nb.add(p + "attention.output.add", a, x);  // LayerNorm(hidden_states + input_tensor)
  a = nb.layernorm(p + "attention.output.LayerNorm", a);

  Value m = nb.linear(p + "intermediate.dense", a, 4 * h, true);
  m = nb.gelu(p + "intermediate.intermediate_act_fn", m);
  m = nb.linear(p + "output.dense", m, h, true);
  m = nb.dropout(p + "output.dropout", m);
  m = nb.add(p + "output.add", m, a);
  return nb.layernorm(p + "output.LayerNorm", m);
}

}  // namespace

Value gpt2_lm_head(NetworkBuilder& nb, const TransformerShape& shape, Attention attention, const PipelineStageSpec& stage, bool tied) {
  // Context parallelism: this rank's seq_len / C tokens (NetworkBuilder::context_parallel_attention).
  const std::int64_t s = shape.seq_len / nb.context_parallel_degree();
  // A pipeline stage reads the mini-batch's tensors its ops use: the token ids where the
  // embedding runs, the labels where the loss does (Megatron loads no batch at all on the middle
  // stages, pretrain_gpt.py:129-134 at NVIDIA/Megatron-LM@d98e8a64).
  const std::optional<Value> ids = stage.first ? std::optional(nb.input("input_ids", DType::i64, {1, s})) : std::nullopt;
  // Labels already shifted by one token (Megatron's data loader), so the loss covers all s
  // positions rather than Hugging Face's s - 1.
  const std::optional<Value> labels = stage.last ? std::optional(nb.input("labels", DType::i64, {1, s})) : std::nullopt;
  // Tensor parallelism: this rank's rows of the padded vocabulary (tensor_parallel_vocab).
  const std::int64_t t = nb.tensor_parallel_degree();
  const std::int64_t vocab_rows = tensor_parallel_vocab(shape.vocab, t) / t;

  Value x;
  std::optional<Value> wte;
  if (stage.first) {
    const Value positions = nb.buffer("transformer.position_ids", DType::i64, {1, s});
    wte = nb.parameter("transformer.wte.weight", {vocab_rows, shape.hidden});
    // Megatron's LanguageModelEmbedding.forward (megatron/core/models/common/embeddings/
    // language_model_embedding.py:113-156 at NVIDIA/Megatron-LM@d98e8a64): with learned positions
    // the word embeddings are all-reduced (reduce_scatter_embeddings is false, :51-56), the
    // positions added, and under sequence parallelism this rank's S/t rows taken
    // (scatter_to_sequence_parallel_region) and cloned (clone_scatter_output_in_embedding) before
    // the dropout.
    x = nb.vocab_parallel_embedding("transformer.wte", *ids, *wte, false);
    const Value position_embeds = nb.embedding("transformer.wpe", positions, shape.max_positions, shape.hidden);
    x = nb.add("transformer.add", x, position_embeds);  // broadcast over the batch
    if (nb.sequence_parallel()) {
      x = nb.scatter_to_sequence_parallel("transformer.scatter_to_sequence_parallel", x);
      x = nb.contiguous("transformer.scatter_to_sequence_parallel.clone", x, false);
    }
    x = nb.dropout("transformer.drop", x);
  } else {
    // The previous stage's output: the residual stream [S, H] per sample, S/t rows of it under
    // sequence parallelism (Megatron's get_tensor_shapes, schedules.py:2137-2143).
    x = nb.receive_from_previous_stage("recv_forward", nb.compute_dtype(),
                                       {1, nb.sequence_parallel() ? s / t : s, shape.hidden});
  }
  for (std::int64_t layer = stage.first_layer; layer < stage.first_layer + stage.layers; ++layer) {
    x = gpt2_block(nb, "transformer.h." + std::to_string(layer) + ".", x, shape, attention);
  }
  // A tied embedding split over two or more stages: its gradient all-reduced between them.
  if (tied && stage.first && !stage.last) nb.set_embedding_group_weight(*wte);
  if (!stage.last) return nb.send_to_next_stage("send_forward", x);  // the autograd root: what was sent
  x = nb.layernorm("transformer.ln_f", x);
  // The head is tied to wte. On a last stage without the embedding, Megatron keeps its own copy
  // of the word embedding as the output layer's weight (language_module.py:278-290): a parameter
  // of its own here, with its gradient and optimizer state, whose gradient the two stages
  // all-reduce before the step (finalize_model_grads.py:164-199; an exchange with the first
  // stage, pipeline_stage.cpp). Untied (--untie-embeddings-and-output-weights), the output
  // layer's weight is its own on every last stage, the first included (gpt_model.py:
  // share_embeddings_and_output_weights), and nothing is exchanged.
  const Value head = tied && wte ? *wte : nb.parameter("lm_head.weight", {vocab_rows, shape.hidden});
  if (tied && !wte) nb.set_embedding_group_weight(head);
  if (t == 1) return nb.lm_loss("lm_head", x, head, *labels, false);  // no bias; the loss kind's CE (loss.cpp)
  // Megatron's output layer: a column-parallel linear over this rank's vocabulary rows (of wte
  // when tied), its logits [S, V/t] into the vocabulary-parallel cross-entropy.
  Value logits = nb.column_parallel_linear("lm_head", nb.column_parallel_input("lm_head", x), head);
  logits = nb.reshape("logits.view", logits, {s, vocab_rows});
  return nb.vocab_parallel_cross_entropy("loss", logits, nb.reshape("labels.view", *labels, {s}));
}

namespace {

// NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/BERT (NVIDIA/DeepLearningExamples@
// 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd), with its default dense sequence output
// (run_pretraining.py: sequence_output_is_dense = not args.no_dense_sequence_output):
//   modeling.py, BertPreTrainingHeads.forward:
//     sequence_flattened = torch.index_select(sequence_output.view(-1, sequence_output.shape[-1]), 0,
//                                             torch.nonzero(masked_lm_labels.view(-1) != -1).squeeze())
//     prediction_scores = self.predictions(sequence_flattened)
//   run_pretraining.py, BertPretrainingCriterion.forward:
//     masked_lm_labels_flat = masked_lm_labels.view(-1)
//     mlm_labels = masked_lm_labels_flat[masked_lm_labels_flat != -1]
//     masked_lm_loss = self.loss_fn(prediction_scores.view(-1, self.vocab_size), mlm_labels.view(-1))
// so the transform, the decoder and the loss see `predictions` rows per sample instead of s.
// `labels` is DLE's masked_lm_labels [N, s], -1 where nothing is masked. Returns the gathered
// hidden states [N * predictions, h] and their labels [N * predictions].
std::pair<Value, Value> gather_masked_positions(NetworkBuilder& nb, Value x, Value labels, std::int64_t s,
                                                std::int64_t h, std::int64_t predictions) {
  const Value flat = nb.reshape("cls.sequence_output.view", x, {s, h});
  // The compare and nonzero need no gradient: kernels without autograd nodes. nonzero's result
  // is [N * predictions, 1], squeezed to the index (a view of a tensor needing no gradient); its
  // size is the data's, so the host waits for it, as for the criterion's boolean indexing below.
  const Value is_masked = nb.constant_op("cls.masked_lm_labels.ne", labels, DType::boolean, {s});
  const Value index = nb.data_sized_op("cls.nonzero", {is_masked}, DType::i64, {predictions});
  const Value selected = nb.index_select("cls.index_select", flat, index);
  // The criterion computes the mask again and indexes the labels with it (boolean indexing
  // reads both).
  const Value label_mask = nb.constant_op("masked_lm_labels.ne", labels, DType::boolean, {s});
  const Value mlm_labels = nb.data_sized_op("masked_lm_labels.index", {labels, label_mask}, DType::i64, {predictions});
  return {selected, mlm_labels};
}

}  // namespace

Value bert(NetworkBuilder& nb, const TransformerShape& shape, Attention attention, const BertOptions& options) {
  constexpr std::int64_t kTokenTypes = 2;
  constexpr std::int64_t kNextSentenceClasses = 2;
  // PretrainedConfig's default num_labels is 2 (transformers v4.25.1, configuration_utils.py:
  // id2label defaults to two labels), which BertForSequenceClassification's classifier takes,
  // and BertForQuestionAnswering's qa_outputs too (one start and one end logit per position).
  constexpr std::int64_t kSequenceLabels = 2;
  constexpr std::int64_t kSpanLogits = 2;
  const std::int64_t s = shape.seq_len;
  const std::int64_t h = shape.hidden;
  const BertHead head = options.head;
  const bool pretraining = head == BertHead::pretraining;
  const bool question_answering = head == BertHead::question_answering;
  const Value ids = nb.input("input_ids", DType::i64, {1, s});
  const Value token_types = nb.input("token_type_ids", DType::i64, {1, s});
  // The labels are part of the mini-batch, made with the other inputs: BertForPreTraining's
  // token labels and next-sentence label, BertForSequenceClassification's one int64 class per
  // sequence, or BertForQuestionAnswering's int64 start and end positions per sequence.
  std::optional<Value> labels;
  std::optional<Value> nsp_labels;
  std::optional<Value> start_positions;
  std::optional<Value> end_positions;
  if (question_answering) {
    start_positions = nb.input("start_positions", DType::i64, {1});
    end_positions = nb.input("end_positions", DType::i64, {1});
  } else {
    labels = nb.input("labels", DType::i64, pretraining ? std::vector<std::int64_t>{1, s} : std::vector<std::int64_t>{1});
    if (pretraining) nsp_labels = nb.input("next_sentence_label", DType::i64, {1});
  }
  const Value positions = nb.buffer("bert.embeddings.position_ids", DType::i64, {1, s});
  // Eager attention adds the extended mask to the scores. BertModel.forward (v4.25.1) makes it
  // from the tokenizer's int64 attention_mask (all ones without padding) with
  // get_extended_attention_mask: mask[:, None, None, :] in the model's dtype, (1 - mask) * min;
  // one op here. The fused kernels take no mask when nothing is padded.
  std::optional<Value> mask;
  if (attention == Attention::eager) {
    const Value attention_mask = nb.input("attention_mask", DType::i64, {1, s});
    mask = nb.constant_op("bert.get_extended_attention_mask", attention_mask, nb.compute_dtype(), {1, 1, 1, s});
  }

  // BertModel: embeddings, encoder, pooler.
  const std::string e = "bert.embeddings.";
  const Value words = nb.parameter(e + "word_embeddings.weight", {shape.vocab, h});
  Value x = nb.embedding(e + "word_embeddings", ids, words);
  const Value types = nb.embedding(e + "token_type_embeddings", token_types, kTokenTypes, h);
  x = nb.add(e + "add", x, types);
  const Value position_embeds = nb.embedding(e + "position_embeddings", positions, shape.max_positions, h);
  x = nb.add_(e + "add", x, position_embeds);  // embeddings += position_embeddings
  x = nb.layernorm(e + "LayerNorm", x);
  x = nb.dropout(e + "dropout", x);
  for (std::int64_t layer = 0; layer < shape.layers; ++layer) {
    x = bert_layer(nb, "bert.encoder.layer." + std::to_string(layer) + ".", x, shape, attention, mask);
  }

  if (question_answering) {
    // BertForQuestionAnswering (transformers v4.25.1, modeling_bert.py) builds
    // BertModel(config, add_pooling_layer=False) -- no pooler -- and in forward:
    //   logits = self.qa_outputs(sequence_output)          # nn.Linear(hidden_size, num_labels)
    //   start_logits, end_logits = logits.split(1, dim=-1)
    //   start_logits = start_logits.squeeze(-1).contiguous()
    //   end_logits = end_logits.squeeze(-1).contiguous()
    //   ignored_index = start_logits.size(1)
    //   start_positions = start_positions.clamp(0, ignored_index)
    //   end_positions = end_positions.clamp(0, ignored_index)
    //   loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
    //   total_loss = (loss_fct(start_logits, start_positions) + loss_fct(end_logits, end_positions)) / 2
    // NVIDIA DeepLearningExamples' SQuAD fine-tuning (modeling.py BertForQuestionAnswering and
    // run_squad.py at NVIDIA/DeepLearningExamples@729963dd47e7c8bd462ad10bfac7a7b0b604e6dd) has
    // the same head and loss, but without the .contiguous() copies (log_softmax then copies
    // internally, unsaved), with in-place clamp_ and with a pooler that runs and gets no gradient.
    const Value logits = nb.linear("qa_outputs", x, kSpanLogits, true);
    const std::vector<Value> span = nb.split_last("logits.split", logits);
    const Value start_logits = nb.contiguous("start_logits.contiguous", span[0], false);
    const Value end_logits = nb.contiguous("end_logits.contiguous", span[1], false);
    // The clamps need no gradient: kernels, no autograd nodes; nll_loss saves their results.
    const Value start = nb.constant_op("start_positions.clamp", *start_positions, DType::i64, {1});
    const Value end = nb.constant_op("end_positions.clamp", *end_positions, DType::i64, {1});
    const Value start_loss = nb.cross_entropy("start_loss", start_logits, start);
    const Value end_loss = nb.cross_entropy("end_loss", end_logits, end);
    const Value total = nb.add("total_loss", start_loss, end_loss);
    return nb.scale("total_loss.div", total);  // / 2
  }

  Value pooled = nb.select_first("bert.pooler.select", x);  // hidden_states[:, 0]
  pooled = nb.linear("bert.pooler.dense", pooled, h, true);
  pooled = nb.tanh("bert.pooler.activation", pooled);

  if (!pretraining) {
    // BertForSequenceClassification.forward (v4.25.1), single_label_classification (int64
    // labels, num_labels > 1):
    //   pooled_output = self.dropout(outputs[1])   # classifier_dropout or hidden_dropout_prob
    //   logits = self.classifier(pooled_output)    # nn.Linear(hidden_size, num_labels)
    //   loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
    pooled = nb.dropout("dropout", pooled);
    Value logits = nb.linear("classifier", pooled, kSequenceLabels, true);
    logits = nb.reshape("logits.view", logits, {1, kSequenceLabels});  // already [N, 2]: a view op
    return nb.cross_entropy("loss", logits, nb.reshape("labels.view", *labels, {1}));
  }

  // BertForPreTraining: the MLM head over every position (Hugging Face) or over the masked
  // positions only (NVIDIA DeepLearningExamples), and the next-sentence head.
  std::int64_t rows = s;  // MLM rows per sample
  Value mlm_input = x;
  std::optional<Value> mlm_labels;
  if (options.mlm == MlmPositions::masked) {
    rows = options.mlm_predictions;
    std::tie(mlm_input, mlm_labels) = gather_masked_positions(nb, x, *labels, s, h, rows);
  }
  const std::string c = "cls.predictions.";
  Value t = nb.linear(c + "transform.dense", mlm_input, h, true);
  t = nb.gelu(c + "transform.transform_act_fn", t);
  t = nb.layernorm(c + "transform.LayerNorm", t);
  const Value decoder_bias = nb.parameter(c + "bias", {shape.vocab});
  Value scores = nb.linear(c + "decoder", t, words, decoder_bias);  // tied to word_embeddings
  const Value nsp = nb.linear("cls.seq_relationship", pooled, kNextSentenceClasses, true);

  scores = nb.reshape("prediction_scores.view", scores, {rows, shape.vocab});
  const Value mlm_targets = mlm_labels ? *mlm_labels : nb.reshape("labels.view", *labels, {s});
  const Value mlm_loss = nb.cross_entropy("masked_lm_loss", scores, mlm_targets);
  const Value nsp_loss = nb.cross_entropy("next_sentence_loss", nsp, *nsp_labels);
  return nb.add("total_loss", mlm_loss, nsp_loss);
}

}  // namespace comptrain::zoo::detail
