#pragma once
// Helpers shared by the zoo tests (defined in zoo_test.cpp).

#include <cstdint>
#include <string>

#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::zoo::test_support {

struct ResidentBytes {
  std::int64_t parameters = 0;  // elements of the weights
  std::int64_t weight = 0;
  std::int64_t gradient = 0;
  std::int64_t optimizer_state = 0;
};

ResidentBytes resident_bytes(const traces::Trace& trace);

struct SavedBytes {
  std::int64_t per_sample = 0;  // bytes of batch-scaling storages / batch size
  std::int64_t fixed = 0;       // bytes of the others
};

// What autograd keeps for backward, counted the way a saved-tensor hook does.
SavedBytes saved_for_backward(const traces::Trace& trace);

// A ModelRequest built field by field (GCC 12 warns about members that designated
// initializers leave out, even defaulted ones).
class Request {
 public:
  explicit Request(std::string model) { request_.model = std::move(model); }
  Request& batch_size(std::int64_t value) { request_.batch_size = value; return *this; }
  Request& precision(Precision value) { request_.precision = value; return *this; }
  Request& optimizer(Optimizer value) { request_.optimizer = value; return *this; }
  Request& layers(std::int64_t value) { request_.layers = value; return *this; }
  Request& hidden(std::int64_t value) { request_.hidden = value; return *this; }
  Request& heads(std::int64_t value) { request_.heads = value; return *this; }
  Request& seq_len(std::int64_t value) { request_.seq_len = value; return *this; }
  Request& vocab(std::int64_t value) { request_.vocab = value; return *this; }
  Request& tie_embeddings(bool value) { request_.tie_embeddings = value; return *this; }
  Request& attention(Attention value) { request_.attention = value; return *this; }
  Request& head(BertHead value) { request_.head = value; return *this; }
  Request& mlm(MlmPositions value) { request_.mlm = value; return *this; }
  Request& mlm_predictions(std::int64_t value) { request_.mlm_predictions = value; return *this; }
  Request& softmax_saves_input(bool value) { request_.softmax_saves_input = value; return *this; }
  Request& accumulate_gradients_in_place(bool value) { request_.accumulate_gradients_in_place = value; return *this; }
  operator const ModelRequest&() const { return request_; }  // NOLINT: implicit by design

 private:
  ModelRequest request_;
};

}  // namespace comptrain::zoo::test_support
