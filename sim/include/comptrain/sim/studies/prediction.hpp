#pragma once
// One predicted number, or why there is none: what a worker of the validation table and of the
// platform fit sends back for a measurement.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim {

struct Prediction {
  std::optional<double> value;
  std::string why_none;  // when there is no value: the run did not fit, did not apply, ...
  bool out_of_memory = false;  // the run went out of memory at the measured batch

  static Prediction of(double value) { return {value, {}, false}; }
  static Prediction none(std::string why) { return {std::nullopt, std::move(why), false}; }
  static Prediction out_of_memory_at(std::string why) { return {std::nullopt, std::move(why), true}; }
};

template <>
struct wire::Codec<Prediction> {
  static constexpr std::string_view tag = "Prediction";
  static constexpr std::uint32_t version = 2;
  static void write(wire::Writer& w, const Prediction& p) {
    w.put(p.value);
    w.put_string(p.why_none);
    w.put(static_cast<std::uint8_t>(p.out_of_memory));
  }
  static Prediction read(wire::Reader& in) {
    Prediction p;
    p.value = in.get<std::optional<double>>();
    p.why_none = in.get_string();
    p.out_of_memory = in.get<std::uint8_t>() != 0;
    return p;
  }
};

// The predictions of the points one worker answers together (the validation table's points
// that read the same run), in the order it was given them.
struct Predictions {
  std::vector<Prediction> items;
};

template <>
struct wire::Codec<Predictions> {
  static constexpr std::string_view tag = "Predictions";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const Predictions& p) {
    w.put<std::uint64_t>(p.items.size());
    for (const Prediction& item : p.items) wire::Codec<Prediction>::write(w, item);
  }
  static Predictions read(wire::Reader& in) {
    Predictions p;
    const auto n = in.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n && !in.at_end(); ++i) p.items.push_back(wire::Codec<Prediction>::read(in));
    return p;
  }
};

}  // namespace comptrain::sim
