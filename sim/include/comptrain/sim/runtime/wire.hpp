#pragma once
// The one format in which results cross the pipe from a worker process to its parent.
//
// A message is a type tag and a version followed by the value's fields, each as its bytes
// (doubles bit for bit, so a number read back is the number computed). Each result type that
// crosses has one Codec, written once beside the type's room, and the reader checks the tag
// and the version before reading: a child and a parent that disagree (a result of another type,
// an older build's layout) fail with a message instead of reading garbage.
//
//   template <> struct wire::Codec<MyResult> {
//     static constexpr std::string_view tag = "MyResult";
//     static constexpr std::uint32_t version = 1;
//     static void write(wire::Writer& w, const MyResult& r) { w.put(r.x); w.put_string(r.note); }
//     static MyResult read(wire::Reader& in) { MyResult r; r.x = in.get<double>(); r.note = in.get_string(); return r; }
//   };
//   std::string bytes = wire::encode(result);            // in the child
//   MyResult back = wire::decode<MyResult>(bytes);       // in the parent

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace comptrain::sim::wire {

class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "a field of trivially copyable type; write others field by field");
    const auto* p = reinterpret_cast<const char*>(&value);
    bytes_.append(p, sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    put<std::uint64_t>(values.size());
    for (const T& v : values) put(v);
  }
  void put_string(std::string_view text) {
    put<std::uint64_t>(text.size());
    bytes_.append(text);
  }
  std::string take() && { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > (bytes_.size() - offset_) / sizeof(T)) truncated();
    std::vector<T> values(n);
    for (auto& v : values) v = get<T>();
    return values;
  }
  std::string get_string() {
    const auto n = get<std::uint64_t>();
    need(n);
    std::string text(bytes_.substr(offset_, n));
    offset_ += n;
    return text;
  }
  bool at_end() const { return offset_ == bytes_.size(); }

 private:
  void need(std::uint64_t n) const {
    if (n > bytes_.size() - offset_) truncated();
  }
  [[noreturn]] static void truncated() { throw std::runtime_error("a worker process sent a truncated result"); }

  std::string_view bytes_;
  std::size_t offset_ = 0;
};

// Specialised once per type that crosses the pipe (see the top of this file).
template <typename T>
struct Codec;

template <typename T>
std::string encode(const T& value) {
  Writer w;
  w.put_string(Codec<T>::tag);
  w.put<std::uint32_t>(Codec<T>::version);
  Codec<T>::write(w, value);
  return std::move(w).take();
}

template <typename T>
T decode(std::string_view bytes) {
  Reader in(bytes);
  const std::string tag = in.get_string();
  const auto version = in.get<std::uint32_t>();
  if (tag != Codec<T>::tag || version != Codec<T>::version) {
    throw std::runtime_error("a worker process sent a " + tag + " v" + std::to_string(version) + " where a " + std::string(Codec<T>::tag) + " v" +
                             std::to_string(Codec<T>::version) + " was expected");
  }
  T value = Codec<T>::read(in);
  if (!in.at_end()) throw std::runtime_error("a worker process sent bytes after its " + tag);
  return value;
}

}  // namespace comptrain::sim::wire
