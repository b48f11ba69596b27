#pragma once
// One predicted number, or why there is none: what a worker of the validation table and of the
// platform fit sends back for a measurement.

#include <optional>
#include <string>

#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim {

struct Prediction {
  std::optional<double> value;
  std::string why_none;  // when there is no value: the run did not fit, did not apply, ...

  static Prediction of(double value) { return {value, {}}; }
  static Prediction none(std::string why) { return {std::nullopt, std::move(why)}; }
};

template <>
struct wire::Codec<Prediction> {
  static constexpr std::string_view tag = "Prediction";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const Prediction& p) {
    w.put(p.value);
    w.put_string(p.why_none);
  }
  static Prediction read(wire::Reader& in) {
    Prediction p;
    p.value = in.get<std::optional<double>>();
    p.why_none = in.get_string();
    return p;
  }
};

}  // namespace comptrain::sim
