#pragma once
// Declaring numeric command-line options that are read exactly.
//
// Why not CLI11's own conversion and CLI::PositiveNumber / CLI::Range: CLI11 2.1 reads integers
// with strtoll and ignores ERANGE, so `-b 9223372036854775808` silently becomes 2^63 - 1; its
// range messages print the bounds as doubles (PositiveNumber's upper bound is a 309-digit
// number); and its messages do not follow the `found X; expected Y` form of our other errors.
// Here the string is checked first with std::from_chars (no locale, no whitespace, no partial
// reads), so CLI11's conversion only ever sees a value that fits the target type.
//
// A failed check is a CLI::ValidationError whose text is "OPTION: found 'TEXT'; expected ...";
// main.cpp prints it as a usage error (exit 2).

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace comptrain::cli {

namespace detail {

template <class T>
struct value_of {
  using type = T;
};
template <class T>
struct value_of<std::optional<T>> {
  using type = T;
};

// "an integer from 1 to 9223372036854775807", "a non-negative integer", ...
template <std::integral T>
std::string integer_expectation(T min, T max) {
  if (max == std::numeric_limits<T>::max()) {
    if (min == 1) return fmt::format("a positive integer (at most {})", max);
    if (min == 0) return fmt::format("a non-negative integer (at most {})", max);
  }
  return fmt::format("an integer from {} to {}", min, max);
}

// Empty when `text` is an integer in [min, max]; otherwise the reason, "found ...; expected ...".
template <std::integral T>
std::string check_integer(const std::string& text, T min, T max) {
  const std::string expected = "; expected " + integer_expectation(min, max);
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const bool negative = !digits.empty() && digits.front() == '-';
  std::string_view magnitude = negative ? digits.substr(1) : digits;
  const bool all_digits = !magnitude.empty() && magnitude.find_first_not_of("0123456789") == std::string_view::npos;
  if (!all_digits) return "found '" + text + "', not an integer" + expected;
  // An unsigned type cannot hold a negative number: out of range, not malformed.
  if (negative && std::is_unsigned_v<T>) return "found " + text + ", out of range" + expected;
  T value{};
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range || (ec == std::errc{} && (value < min || value > max))) {
    return "found " + text + ", out of range" + expected;
  }
  if (ec != std::errc{} || end != digits.data() + digits.size()) return "found '" + text + "', not an integer" + expected;
  return {};
}

inline std::string format_real(double v) { return fmt::format("{:g}", v); }

inline std::string check_real(const std::string& text, double min, double max) {
  const std::string expected = "; expected a number from " + format_real(min) + " to " + format_real(max);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return "found '" + text + "', not a number" + expected;
  }
  if (value < min || value > max) return "found " + text + ", out of range" + expected;
  return {};
}

}  // namespace detail

// An integer option holding a value of [min, max]. `Target` is an integer type or a
// std::optional of one. The range defaults to everything the type holds.
template <class Target, class T = typename detail::value_of<Target>::type>
  requires std::integral<T>
CLI::Option* add_int(CLI::App& command, const std::string& name, Target& target, const std::string& help,
                     T min = std::numeric_limits<T>::min(), T max = std::numeric_limits<T>::max()) {
  CLI::Validator exact(
      [min, max](const std::string& text) { return detail::check_integer<T>(text, min, max); },
      min == 1 && max == std::numeric_limits<T>::max()   ? std::string("POSITIVE")
      : min == 0 && max == std::numeric_limits<T>::max() ? std::string("NONNEGATIVE")
                                                         : fmt::format("[{}..{}]", min, max));
  return command.add_option(name, target, help)->check(exact);
}

// An integer option of at least 1 (batch sizes, counts of workers, of layers...).
template <class Target, class T = typename detail::value_of<Target>::type>
  requires std::integral<T>
CLI::Option* add_positive_int(CLI::App& command, const std::string& name, Target& target, const std::string& help) {
  return add_int(command, name, target, help, T{1}, std::numeric_limits<T>::max());
}

// An integer option of at least 0 (0 often meaning "all cores" or "none").
template <class Target, class T = typename detail::value_of<Target>::type>
  requires std::integral<T>
CLI::Option* add_nonnegative_int(CLI::App& command, const std::string& name, Target& target, const std::string& help) {
  return add_int(command, name, target, help, T{0}, std::numeric_limits<T>::max());
}

// A finite floating-point option in [min, max]. `Target` is double or std::optional<double>.
template <class Target>
  requires std::same_as<typename detail::value_of<Target>::type, double>
CLI::Option* add_real(CLI::App& command, const std::string& name, Target& target, const std::string& help, double min, double max) {
  CLI::Validator exact([min, max](const std::string& text) { return detail::check_real(text, min, max); },
                       "[" + detail::format_real(min) + ".." + detail::format_real(max) + "]");
  return command.add_option(name, target, help)->check(exact);
}

// A text option that must be one of `choices`: "found 'x'; expected one of: a, b, c".
template <class Target>
CLI::Option* add_choice(CLI::App& command, const std::string& name, Target& target, const std::string& help,
                        std::vector<std::string> choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  CLI::Validator member(
      [choices, list](const std::string& text) -> std::string {
        for (const auto& c : choices) {
          if (c == text) return {};
        }
        return "found '" + text + "'; expected one of: " + list;
      },
      "{" + list + "}");
  return command.add_option(name, target, help)->check(member);
}

}  // namespace comptrain::cli
