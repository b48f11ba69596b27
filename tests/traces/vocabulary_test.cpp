#include "comptrain/traces/vocabulary.hpp"

#include <gtest/gtest.h>

namespace comptrain::traces {
namespace {

TEST(Vocabulary, EveryNameParsesBackToItsValue) {
  for (DType v : all_dtypes()) EXPECT_EQ(parse_dtype(to_string(v)), v);
  for (Phase v : all_phases()) EXPECT_EQ(parse_phase(to_string(v)), v);
  for (OpKind v : all_op_kinds()) EXPECT_EQ(parse_op_kind(to_string(v)), v);
  for (TensorRole v : all_tensor_roles()) EXPECT_EQ(parse_tensor_role(to_string(v)), v);
}

TEST(Vocabulary, UnknownNamesAreRejected) {
  EXPECT_FALSE(parse_dtype("float32"));
  EXPECT_FALSE(parse_phase("Forward"));
  EXPECT_FALSE(parse_op_kind(""));
  EXPECT_FALSE(parse_tensor_role("activations"));
}

TEST(Vocabulary, ElementSizesFollowPyTorch) {
  EXPECT_EQ(element_size(DType::f32), 4);
  EXPECT_EQ(element_size(DType::f16), 2);
  EXPECT_EQ(element_size(DType::bf16), 2);
  EXPECT_EQ(element_size(DType::i64), 8);
  EXPECT_EQ(element_size(DType::boolean), 1);  // torch.bool is one byte per element
}

TEST(Vocabulary, ResidentRolesAreTheOnesHeldAcrossIterations) {
  EXPECT_TRUE(is_resident(TensorRole::weight));
  EXPECT_TRUE(is_resident(TensorRole::buffer));
  EXPECT_TRUE(is_resident(TensorRole::optimizer_state));
  EXPECT_FALSE(is_resident(TensorRole::gradient));
  EXPECT_FALSE(is_resident(TensorRole::activation));
}

}  // namespace
}  // namespace comptrain::traces
