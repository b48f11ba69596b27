#include "comptrain/traces/vocabulary.hpp"

#include <array>
#include <utility>

namespace comptrain::traces {
namespace {

// Each vocabulary is one table: the enum value and its name in files and on the command line.
template <typename Enum, std::size_t N>
using Table = std::array<std::pair<Enum, std::string_view>, N>;

constexpr Table<DType, 9> kDTypes{{{DType::f64, "f64"},
                                   {DType::f32, "f32"},
                                   {DType::f16, "f16"},
                                   {DType::bf16, "bf16"},
                                   {DType::i64, "i64"},
                                   {DType::i32, "i32"},
                                   {DType::i8, "i8"},
                                   {DType::u8, "u8"},
                                   {DType::boolean, "bool"}}};
constexpr Table<Phase, 3> kPhases{
    {{Phase::forward, "forward"}, {Phase::backward, "backward"}, {Phase::optimizer, "optimizer"}}};
constexpr Table<OpKind, 20> kOpKinds{{{OpKind::conv, "conv"},
                                      {OpKind::matmul, "matmul"},
                                      {OpKind::linear, "linear"},
                                      {OpKind::relu, "relu"},
                                      {OpKind::gelu, "gelu"},
                                      {OpKind::batchnorm, "batchnorm"},
                                      {OpKind::layernorm, "layernorm"},
                                      {OpKind::pool, "pool"},
                                      {OpKind::softmax, "softmax"},
                                      {OpKind::attention, "attention"},
                                      {OpKind::dropout, "dropout"},
                                      {OpKind::elementwise, "elementwise"},
                                      {OpKind::embedding, "embedding"},
                                      {OpKind::gather, "gather"},
                                      {OpKind::scatter, "scatter"},
                                      {OpKind::loss, "loss"},
                                      {OpKind::optimizer_update, "optimizer_update"},
                                      {OpKind::view, "view"},
                                      {OpKind::communication, "communication"},
                                      {OpKind::other, "other"}}};
constexpr Table<TensorRole, 8> kRoles{{{TensorRole::input, "input"},
                                       {TensorRole::weight, "weight"},
                                       {TensorRole::weight_copy, "weight_copy"},
                                       {TensorRole::buffer, "buffer"},
                                       {TensorRole::gradient, "gradient"},
                                       {TensorRole::optimizer_state, "optimizer_state"},
                                       {TensorRole::activation, "activation"},
                                       {TensorRole::temporary, "temporary"}}};
constexpr Table<CommunicationKind, 6> kCommunicationKinds{{{CommunicationKind::all_reduce, "all_reduce"},
                                                         {CommunicationKind::reduce_scatter, "reduce_scatter"},
                                                         {CommunicationKind::all_gather, "all_gather"},
                                                         {CommunicationKind::all_to_all, "all_to_all"},
                                                         {CommunicationKind::send, "send"},
                                                         {CommunicationKind::recv, "recv"}}};
constexpr Table<ParallelGroup, 6> kParallelGroups{{{ParallelGroup::tensor, "tensor"},
                                                   {ParallelGroup::context, "context"},
                                                   {ParallelGroup::data, "data"},
                                                   {ParallelGroup::expert, "expert"},
                                                   {ParallelGroup::expert_data, "expert_data"},
                                                   {ParallelGroup::pipeline, "pipeline"}}};

template <typename Enum, std::size_t N>
std::string_view name_of(const Table<Enum, N>& table, Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

template <typename Enum, std::size_t N>
std::optional<Enum> value_of(const Table<Enum, N>& table, std::string_view text) {
  for (const auto& [v, name] : table) {
    if (name == text) return v;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::array<Enum, N> values_of(const Table<Enum, N>& table) {
  std::array<Enum, N> values{};
  for (std::size_t i = 0; i < N; ++i) values[i] = table[i].first;
  return values;
}

}  // namespace

std::string_view to_string(DType dtype) { return name_of(kDTypes, dtype); }
std::string_view to_string(Phase phase) { return name_of(kPhases, phase); }
std::string_view to_string(OpKind kind) { return name_of(kOpKinds, kind); }
std::string_view to_string(TensorRole role) { return name_of(kRoles, role); }
std::string_view to_string(CommunicationKind kind) { return name_of(kCommunicationKinds, kind); }
std::string_view to_string(ParallelGroup group) { return name_of(kParallelGroups, group); }

std::optional<DType> parse_dtype(std::string_view text) { return value_of(kDTypes, text); }
std::optional<Phase> parse_phase(std::string_view text) { return value_of(kPhases, text); }
std::optional<OpKind> parse_op_kind(std::string_view text) { return value_of(kOpKinds, text); }
std::optional<TensorRole> parse_tensor_role(std::string_view text) { return value_of(kRoles, text); }
std::optional<CommunicationKind> parse_communication_kind(std::string_view text) {
  return value_of(kCommunicationKinds, text);
}
std::optional<ParallelGroup> parse_parallel_group(std::string_view text) { return value_of(kParallelGroups, text); }

std::span<const DType> all_dtypes() {
  static const auto values = values_of(kDTypes);
  return values;
}
std::span<const Phase> all_phases() {
  static const auto values = values_of(kPhases);
  return values;
}
std::span<const OpKind> all_op_kinds() {
  static const auto values = values_of(kOpKinds);
  return values;
}
std::span<const TensorRole> all_tensor_roles() {
  static const auto values = values_of(kRoles);
  return values;
}
std::span<const CommunicationKind> all_communication_kinds() {
  static const auto values = values_of(kCommunicationKinds);
  return values;
}
std::span<const ParallelGroup> all_parallel_groups() {
  static const auto values = values_of(kParallelGroups);
  return values;
}

std::int64_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 1;
}

}  // namespace comptrain::traces
