#pragma once
// The checks every YAML reader makes (scenarios, strategies, platforms, calibration profiles),
// written once: a field's node is looked up, checked and read, or an InputError says
// "SOURCE:LINE:COLUMN: ..." what was wrong. Each reader words a few messages its own way (its
// users and tests know them), so those words are parameters, never rewritten here.
// Header-only: its users link yaml-cpp themselves.

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "comptrain/support/input_error.hpp"
#include "comptrain/support/yaml_errors.hpp"

namespace comptrain::yaml {

// How a reader words what it expects of a scalar: the scenario reader wants a non-empty string
// ("'F' must be a non-empty string"), the profile reader any single value ("'F' must be a single
// value").
struct ScalarWording {
  bool non_empty = true;
  const char* expected = "a non-empty string";
};

class Reader {
 public:
  explicit Reader(std::string_view source, ScalarWording scalar_wording = {}) : source_(source), scalar_wording_(scalar_wording) {}

  const std::string& source() const { return source_; }

  // "SOURCE:LINE:COLUMN: " for a node's mark.
  std::string where(const YAML::Mark& mark) const { return location(source_, mark); }
  // "SOURCE:LINE:COLUMN" for a node's mark, to keep beside a value read from it.
  std::string position_of(const YAML::Mark& mark) const { return position(source_, mark); }

  void check_keys(const YAML::Node& map, const std::string& section, std::initializer_list<const char*> valid) const {
    yaml::check_keys(source_, map, section, valid);
  }

  // map[key], or "missing key 'KEY' in SECTION".
  YAML::Node required(const YAML::Node& map, const char* key, const std::string& section) const {
    YAML::Node node = map[key];
    if (!node) throw InputError(where(map.Mark()) + "missing key '" + key + "' in " + section);
    return node;
  }

  void require_map(const YAML::Node& node, const std::string& field) const {
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a mapping");
  }

  std::string scalar(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar() || (scalar_wording_.non_empty && node.Scalar().empty())) {
      throw InputError(where(node.Mark()) + "'" + field + "' must be " + scalar_wording_.expected);
    }
    return node.Scalar();
  }

  // A finite number that `valid` (when given) accepts; otherwise "'F' is 'TEXT'; expected
  // EXPECTED". The finiteness check catches .nan and .inf, which YAML spells as numbers.
  double number(const YAML::Node& node, const std::string& field, bool (*valid)(double) = nullptr, const char* expected = "a number") const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) || (valid && !valid(value))) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + describe(node) + "'; expected " + expected);
    }
    return value;
  }

  // A count of bytes or a quantity with a unit ("4 GiB", "300 GB/s"), parsed by `parse`, which
  // throws `OutOfRange` (with written() and expected()) for a value outside its bounds and
  // std::invalid_argument for text that is no such quantity (models/units.hpp).
  template <typename OutOfRange, typename Parse>
  auto parsed(const YAML::Node& node, const std::string& field, Parse&& parse) const {
    const std::string text = scalar(node, field);
    try {
      return std::forward<Parse>(parse)(text);
    } catch (const OutOfRange& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + e.written() + "; expected " + e.expected());
    } catch (const std::invalid_argument& e) {
      throw InputError(where(node.Mark()) + "'" + field + "': " + e.what());
    }
  }

  // An integer in [min, max], checked before any narrowing: "k: 4294967299" must not run as 3.
  std::int64_t bounded_integer(const YAML::Node& node, const std::string& field, std::int64_t min, std::int64_t max) const {
    std::int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<std::int64_t>::decode(node, value) || value < min || value > max) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + describe(node) + "'; expected an integer from " + std::to_string(min) + " to " +
                       std::to_string(max));
    }
    return value;
  }

  bool boolean(const YAML::Node& node, const std::string& field) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + describe(node) + "'; expected true or false");
    }
    return value;
  }

  // A scalar as written, for messages; a collection is named as such.
  static std::string describe(const YAML::Node& node) { return node.IsScalar() ? node.Scalar() : std::string("a collection"); }

 private:
  std::string source_;
  ScalarWording scalar_wording_;
};

}  // namespace comptrain::yaml
