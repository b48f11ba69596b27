#include "comptrain/traces/trace.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hand_traces.hpp"

namespace comptrain::traces {
namespace {

using ::testing::HasSubstr;
using testing::HandTrace;

// Builds the trace and returns the TraceError it throws (fails the test if none).
TraceError error_of(const HandTrace& h, std::int64_t batch = 1) {
  try {
    h.build(batch);
  } catch (const TraceError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a TraceError";
  return TraceError("", "");
}

HandTrace forward_backward() {
  HandTrace h;
  auto x = h.tensor("x", 8, TensorRole::input);
  auto w = h.tensor("w", 4, TensorRole::weight);
  auto a = h.tensor("a", 16, TensorRole::activation);
  auto ga = h.tensor("grad_a", 16);
  auto gw = h.tensor("grad_w", 4, TensorRole::gradient);
  h.op("fwd", {x, w}, {a});
  h.op("loss_grad", {a}, {ga}, Phase::backward);
  h.op("bwd", {ga, a, x}, {gw}, Phase::backward);
  h.op("update", {w, gw}, {}, Phase::optimizer);
  return h;
}

TEST(Trace, DerivesProducersConsumersAndTheGraph) {
  const Trace t = forward_backward().build();
  EXPECT_EQ(t.tensor(2).producer, OpIndex{0});
  EXPECT_THAT(t.tensor(2).consumers, ::testing::ElementsAre(1, 2));
  EXPECT_FALSE(t.tensor(0).producer);
  EXPECT_EQ(boost::num_vertices(t.graph()), 4u);
  EXPECT_TRUE(boost::edge(OpIndex{0}, OpIndex{1}, t.graph()).second);
  EXPECT_TRUE(boost::edge(OpIndex{2}, OpIndex{3}, t.graph()).second);
  EXPECT_FALSE(boost::edge(OpIndex{3}, OpIndex{0}, t.graph()).second);
}

TEST(Trace, RejectsDuplicateIds) {
  HandTrace h = forward_backward();
  h.tensors[3].id = 1;
  auto e = error_of(h);
  EXPECT_EQ(e.location(), "/tensors/3/id");
  EXPECT_THAT(e.what(), HasSubstr("already used"));
  h = forward_backward();
  h.ops[2].id = 0;
  EXPECT_EQ(error_of(h).location(), "/ops/2/id");
}

TEST(Trace, RejectsDanglingReferences) {
  HandTrace h = forward_backward();
  h.ops[1].inputs.push_back(99);
  auto e = error_of(h);
  EXPECT_EQ(e.location(), "/ops/1/inputs/1");
  EXPECT_THAT(e.what(), HasSubstr("tensor index 99"));
  h = forward_backward();
  h.ops[1].after.push_back(7);
  EXPECT_EQ(error_of(h).location(), "/ops/1/after/0");
}

TEST(Trace, RejectsATensorWithTwoProducers) {
  HandTrace h = forward_backward();
  h.ops[1].outputs.push_back(2);
  auto e = error_of(h);
  EXPECT_EQ(e.location(), "/ops/1/outputs/1");
  EXPECT_THAT(e.what(), HasSubstr("already written by op 'fwd'"));
}

TEST(Trace, RejectsAnOpThatWritesAWeight) {
  HandTrace h = forward_backward();
  h.ops[3].outputs.push_back(1);
  EXPECT_THAT(error_of(h).what(), HasSubstr("cannot be an op's output"));
}

TEST(Trace, RejectsACycle) {
  HandTrace h = forward_backward();
  h.ops[0].after.push_back(2);  // fwd waits for bwd, which needs fwd's output
  auto e = error_of(h);
  EXPECT_THAT(e.what(), HasSubstr("dependency cycle"));
  EXPECT_THAT(e.what(), HasSubstr("'fwd'"));
  EXPECT_THAT(e.what(), HasSubstr("'bwd'"));
}

TEST(Trace, RejectsOpsOutOfDependencyOrder) {
  HandTrace h = forward_backward();
  std::swap(h.ops[1], h.ops[2]);  // bwd now comes before the op that makes its input
  auto e = error_of(h);
  EXPECT_EQ(e.location(), "/ops/1");
  EXPECT_THAT(e.what(), HasSubstr("dependency order"));
}

TEST(Trace, RejectsAViewWithAnotherRoleThanItsBase) {
  HandTrace h = forward_backward();
  auto v = h.view("a_view", 2);
  h.tensors[v].role = TensorRole::temporary;
  EXPECT_EQ(error_of(h).location(), "/tensors/5/role");
}

TEST(Trace, RejectsAViewLargerThanItsStorage) {
  HandTrace h = forward_backward();
  auto v = h.view("a_view", 2);
  h.tensors[v].shape = {17};
  EXPECT_THAT(error_of(h).what(), HasSubstr("larger than the storage"));
}

TEST(Trace, RejectsAnActivationThatNoBackwardOpReads) {
  HandTrace h = forward_backward();
  h.tensors[3].role = TensorRole::activation;  // grad_a is produced in backward but never read there
  h.ops[2].inputs = {2, 0};
  auto e = error_of(h);
  EXPECT_EQ(e.location(), "/tensors/3/role");
  EXPECT_THAT(e.what(), HasSubstr("no backward op reads it"));
}

TEST(Trace, RejectsABatchExtentThatIsNotAMultipleOfTheBatch) {
  HandTrace h = forward_backward();
  h.tensors[0].shape = {2, 4};
  h.tensors[0].batch_dim = 0;
  EXPECT_NO_THROW(h.build(2));
  auto e = error_of(h, 3);
  EXPECT_EQ(e.location(), "/tensors/0/shape/0");
  EXPECT_THAT(e.what(), HasSubstr("multiple of the batch size 3"));
  h.tensors[0].batch_dim = 2;
  EXPECT_EQ(error_of(h, 2).location(), "/tensors/0/batch_dim");
}

TEST(Trace, RejectsNegativeExtentsAndOverflow) {
  HandTrace h = forward_backward();
  h.tensors[1].shape = {4, -1};
  EXPECT_EQ(error_of(h).location(), "/tensors/1/shape/1");
  h.tensors[1].shape = {1LL << 40, 1LL << 30};
  EXPECT_THAT(error_of(h).what(), HasSubstr("overflows"));
}

TEST(Trace, RejectsANonPositiveBatchSize) { EXPECT_EQ(error_of(forward_backward(), 0).location(), "/batch_size"); }

TEST(Trace, InPlaceWriteWaitsForEarlierReadersOfTheStorage) {
  HandTrace h;
  auto x = h.tensor("x", 4, TensorRole::input);
  auto y = h.tensor("y", 4);
  auto z = h.tensor("z", 4);
  auto y2 = h.view("y_inplace", y);
  h.op("make_y", {x}, {y});
  h.op("read_y", {y}, {z});
  h.op("inplace", {x}, {y2});  // overwrites y: must not run before read_y
  const Trace t = h.build();
  EXPECT_TRUE(boost::edge(OpIndex{1}, OpIndex{2}, t.graph()).second);
  std::vector<OpIndex> bad{0, 2, 1};
  EXPECT_THROW(check_execution_order(t, bad), TraceError);
}

TEST(Trace, StorageOfFollowsViewChains) {
  HandTrace h;
  auto a = h.tensor("a", 8, TensorRole::input);
  auto b = h.view("b", a);
  auto c = h.view("c", b);
  const Trace t = h.build();
  EXPECT_EQ(t.storage_of(c), a);
  EXPECT_EQ(t.storage_of(b), a);
  EXPECT_EQ(t.storage_of(a), a);
}

}  // namespace
}  // namespace comptrain::traces
