#include <gtest/gtest.h>

#include <cmath>

#include "comptrain/traces/summary.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::traces {
namespace {

Tensor make_tensor(std::uint64_t id, std::string name, DType dtype, std::vector<std::int64_t> shape, TensorRole role,
                   std::optional<std::size_t> batch_dim = std::nullopt) {
  Tensor t;
  t.id = id;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.role = role;
  t.batch_dim = batch_dim;
  return t;
}

Op make_op(std::uint64_t id, std::string name, Phase phase, std::vector<TensorIndex> inputs, std::vector<TensorIndex> outputs,
           BatchLinear flops, BatchLinear read, BatchLinear written) {
  Op op;
  op.id = id;
  op.name = std::move(name);
  op.phase = phase;
  op.kind = OpKind::linear;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.flops = flops;
  op.bytes_read = read;
  op.bytes_written = written;
  return op;
}

// x[b,3] -> linear -> y[b,5] saved; the weight does not scale, the op's cost is affine in b.
Trace linear_layer(std::int64_t batch) {
  std::vector<Tensor> tensors{make_tensor(10, "x", DType::f32, {batch, 3}, TensorRole::input, 0),
                              make_tensor(11, "w", DType::f32, {5, 3}, TensorRole::weight),
                              make_tensor(12, "y", DType::f16, {batch, 5}, TensorRole::activation, 0),
                              make_tensor(13, "g", DType::f32, {5, 3}, TensorRole::gradient)};
  std::vector<Op> ops{make_op(7, "fc", Phase::forward, {0, 1}, {2}, {0, 30}, {60, 12}, {0, 10}),
                      make_op(8, "fc.backward", Phase::backward, {2, 0}, {3}, {0, 30}, {0, 22}, {60, 0})};
  ops[0].measured = MeasuredDuration{1e-6, "TestGPU", batch};
  return Trace("linear", batch, tensors, ops, {{"source", "test"}});
}

TEST(Rescale, ScalesBatchDimensionsAndAffineQuantities) {
  const Trace t = linear_layer(4).rescaled(10);
  EXPECT_EQ(t.batch_size(), 10);
  EXPECT_EQ(t.tensor(0).shape, (std::vector<std::int64_t>{10, 3}));
  EXPECT_EQ(t.tensor(1).shape, (std::vector<std::int64_t>{5, 3}));  // weights do not scale
  EXPECT_EQ(t.tensor(2).bytes(), 10 * 5 * 2);
  EXPECT_EQ(t.flops(0), 300);
  EXPECT_EQ(t.bytes_read(0), 60 + 120);
  EXPECT_EQ(summarize(t).saved_activation_bytes, 100);
  // A measured duration keeps the batch it was measured at; the op-time model scales it.
  EXPECT_EQ(t.op(0).measured->batch_size, 4);
}

// BatchLinear rescaling never overflows silently: a batch at which fixed + per_sample x batch
// leaves int64 is an InputError naming the op's field, not a wrapped (negative) count.
TEST(Rescale, ABatchThatOverflowsAnOpQuantityIsAnInputErrorNamingIt) {
  std::vector<Tensor> tensors{make_tensor(10, "x", DType::f32, {2, 3}, TensorRole::input, 0),
                              make_tensor(12, "y", DType::f16, {2, 5}, TensorRole::temporary, 0)};
  const std::int64_t per_sample = std::int64_t{1} << 40;
  std::vector<Op> ops{make_op(7, "fc", Phase::forward, {0}, {1}, {0, per_sample}, {0, 12}, {0, 10})};
  const Trace trace("big", 2, tensors, ops);
  EXPECT_EQ(trace.rescaled(1 << 20).flops(0), per_sample << 20);
  try {
    (void)trace.rescaled(std::int64_t{1} << 23);  // 2^63 FLOPs
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("/ops/0/flops"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("overflows 64 bits"), std::string::npos) << error.what();
  }
}

TEST(Rescale, RoundTripGivesBackTheOriginalExactly) {
  const Trace original = linear_layer(6);
  for (std::int64_t b : {1, 2, 7, 64, 1000}) {
    EXPECT_EQ(original.rescaled(b).rescaled(6), original) << "via batch " << b;
  }
  EXPECT_EQ(linear_layer(6).rescaled(5).tensors(), linear_layer(5).tensors());
}

TEST(Rescale, ExtentsThatAreMultiplesOfTheBatchStayMultiples) {
  // A [b*s, h] layout (tokens flattened): the batch dimension holds s = 3 rows per sample.
  std::vector<Tensor> tensors{make_tensor(0, "tokens", DType::f16, {2 * 3, 8}, TensorRole::input, 0)};
  const Trace t("flat", 2, tensors, {});
  EXPECT_EQ(t.rescaled(5).tensor(0).shape[0], 15);
  EXPECT_EQ(t.rescaled(5).rescaled(2), t);
}

// Gradient statistics (FORMAT.md, "Gradient statistics") on the linear layer's input x[b,3]:
// each weight-gradient entry sums b products, so terms = b scales with the batch; the RMSs stay
// as measured and gain the batch they were measured at. On w (no batch dimension) terms stay.
Trace linear_layer_with_gradient(std::int64_t batch, std::optional<std::int64_t> measured_at = std::nullopt) {
  const Trace plain = linear_layer(batch);
  std::vector<Tensor> tensors = plain.tensors();
  for (Tensor& t : tensors) {
    t.producer.reset();
    t.consumers.clear();
  }
  tensors[0].gradient = GradientStatistics{0.3, 0.7, static_cast<double>(batch), measured_at};
  tensors[1].gradient.terms = 5;
  return Trace(plain.name(), batch, tensors, plain.ops(), plain.metadata());
}

TEST(Rescale, GradientTermsScaleWithTheBatchAndTheRmsKeepTheBatchTheyWereMeasuredAt) {
  const Trace original = linear_layer_with_gradient(4);
  const Trace t = original.rescaled(10);
  EXPECT_EQ(t.tensor(0).gradient, (GradientStatistics{0.3, 0.7, 10.0, 4}));
  EXPECT_EQ(t.tensor(1).gradient, (GradientStatistics{std::nullopt, std::nullopt, 5.0, std::nullopt}));
  // Under a mean-reduced loss delta is 1 / batch times a per-sample gradient.
  EXPECT_DOUBLE_EQ(*t.tensor(0).gradient.delta_rms_at(t.batch_size()), 0.3 * 4 / 10);
  EXPECT_EQ(*original.tensor(0).gradient.delta_rms_at(original.batch_size()), 0.3);
  EXPECT_FALSE(t.tensor(1).gradient.delta_rms_at(t.batch_size()).has_value());
  // Back at the measured batch the mark goes: the round trip is exact, through any batch.
  for (std::int64_t b : {1, 3, 4, 7, 1000}) {
    EXPECT_EQ(original.rescaled(b).rescaled(4), original) << "via batch " << b;
    EXPECT_EQ(original.rescaled(b).rescaled(7).rescaled(4), original) << "via batch " << b << " and 7";
  }
  // A trace rescaled once (measured at 4, now at 10) comes back to itself too.
  const Trace moved = linear_layer_with_gradient(10, 4);
  EXPECT_EQ(moved.tensors(), t.tensors());  // (the ops differ: a measured duration keeps its batch)
  for (std::int64_t b : {1, 4, 9}) EXPECT_EQ(moved.rescaled(b).rescaled(10), moved) << "via batch " << b;
  // Saying the trace's own batch is saying nothing: one form per trace.
  EXPECT_EQ(linear_layer_with_gradient(4, 4), original);
  EXPECT_FALSE(linear_layer_with_gradient(4, 4).tensor(0).gradient.batch_size.has_value());
}

// Terms are whole numbers up to 2^53, where doubles stop holding every integer: a batch that
// takes them past it is an InputError naming the tensor, never a rounded count.
TEST(Rescale, ABatchThatTakesGradientTermsPast2To53IsAnInputError) {
  std::vector<Tensor> tensors{make_tensor(10, "x", DType::f32, {2, 3}, TensorRole::input, 0)};
  tensors[0].gradient.terms = std::ldexp(1.0, 41);  // 2^40 per sample at batch 2
  const Trace trace("big", 2, tensors, {});
  EXPECT_EQ(*trace.rescaled(1 << 13).tensor(0).gradient.terms, std::ldexp(1.0, 53));
  try {
    (void)trace.rescaled((1 << 13) + 1);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("gradient terms of tensor 'x'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("2^53"), std::string::npos) << error.what();
  }
}

TEST(Rescale, RejectsANonPositiveBatch) {
  EXPECT_THROW(linear_layer(2).rescaled(0), InputError);
  EXPECT_THROW(linear_layer(2).rescaled(-3), InputError);
}

}  // namespace
}  // namespace comptrain::traces
