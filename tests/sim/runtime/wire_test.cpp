// The wire format: a value crosses bit for bit, and a message of another type, another version,
// cut short or with bytes after it is an error rather than garbage.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim {
namespace {

struct Sample {
  double x = 0;
  std::optional<double> maybe;
  std::vector<int> list;
  std::string note;
};
struct Other {
  int n = 0;
};

}  // namespace

template <>
struct wire::Codec<Sample> {
  static constexpr std::string_view tag = "Sample";
  static constexpr std::uint32_t version = 2;
  static void write(wire::Writer& w, const Sample& s) {
    w.put(s.x);
    w.put(s.maybe);
    w.put_vector(s.list);
    w.put_string(s.note);
  }
  static Sample read(wire::Reader& in) {
    Sample s;
    s.x = in.get<double>();
    s.maybe = in.get<std::optional<double>>();
    s.list = in.get_vector<int>();
    s.note = in.get_string();
    return s;
  }
};
template <>
struct wire::Codec<Other> {
  static constexpr std::string_view tag = "Other";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const Other& o) { w.put(o.n); }
  static Other read(wire::Reader& in) { return {in.get<int>()}; }
};

namespace {

TEST(Wire, AValueCrossesBitForBit) {
  const Sample s{0.1 + 0.2, std::numeric_limits<double>::infinity(), {1, -2, 3}, "a note\nwith a line"};
  const Sample back = wire::decode<Sample>(wire::encode(s));
  EXPECT_EQ(back.x, s.x);  // exactly, not nearly
  ASSERT_TRUE(back.maybe.has_value());
  EXPECT_TRUE(std::isinf(*back.maybe));
  EXPECT_EQ(back.list, s.list);
  EXPECT_EQ(back.note, s.note);
  EXPECT_FALSE(wire::decode<Sample>(wire::encode(Sample{})).maybe.has_value());
}

TEST(Wire, AnotherTypeIsAnError) {
  try {
    wire::decode<Sample>(wire::encode(Other{7}));
    FAIL() << "decoded an Other as a Sample";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "a worker process sent a Other v1 where a Sample v2 was expected");
  }
}

TEST(Wire, ATruncatedOrLongerMessageIsAnError) {
  const std::string bytes = wire::encode(Sample{1.0, 2.0, {4, 5}, "x"});
  EXPECT_THROW(wire::decode<Sample>(bytes.substr(0, bytes.size() - 1)), std::runtime_error);
  EXPECT_THROW(wire::decode<Sample>(bytes.substr(0, 3)), std::runtime_error);
  EXPECT_THROW(wire::decode<Sample>(bytes + "!"), std::runtime_error);
}

}  // namespace
}  // namespace comptrain::sim
