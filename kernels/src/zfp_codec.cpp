#include "zfp_codec.hpp"

#include <zfp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

namespace comptrain::kernels::detail {
namespace {

struct FieldDeleter {
  void operator()(zfp_field* f) const { zfp_field_free(f); }
};
struct StreamDeleter {
  void operator()(zfp_stream* s) const { zfp_stream_close(s); }
};
struct BitstreamDeleter {
  void operator()(bitstream* b) const { stream_close(b); }
};

// zfp's x is the fastest-varying dimension; our shape is C order (last dimension fastest).
std::unique_ptr<zfp_field, FieldDeleter> make_field(void* data, const Shape& s) {
  const auto d = [&](int i) { return static_cast<std::size_t>(s.dims[static_cast<std::size_t>(s.rank - 1 - i)]); };
  zfp_field* f = nullptr;
  switch (s.rank) {
    case 1: f = zfp_field_1d(data, zfp_type_float, d(0)); break;
    case 2: f = zfp_field_2d(data, zfp_type_float, d(0), d(1)); break;
    case 3: f = zfp_field_3d(data, zfp_type_float, d(0), d(1), d(2)); break;
    default: f = zfp_field_4d(data, zfp_type_float, d(0), d(1), d(2), d(3)); break;
  }
  if (f == nullptr) throw std::bad_alloc();
  return std::unique_ptr<zfp_field, FieldDeleter>(f);
}

std::unique_ptr<zfp_stream, StreamDeleter> make_stream(double tolerance) {
  std::unique_ptr<zfp_stream, StreamDeleter> zs(zfp_stream_open(nullptr));
  if (!zs) throw std::bad_alloc();
  zfp_stream_set_accuracy(zs.get(), tolerance);
  zfp_stream_set_execution(zs.get(), zfp_exec_serial);
  return zs;
}

}  // namespace

std::uint64_t zfp_max_payload(const Shape& shape, double tolerance) {
  if (shape.count() == 0) return 0;
  auto zs = make_stream(tolerance);
  auto field = make_field(nullptr, shape);
  return zfp_stream_maximum_size(zs.get(), field.get());
}

std::uint64_t zfp_compress(std::span<const float> data, const Shape& shape, double tolerance, std::span<std::byte> out) {
  if (data.empty()) return 0;
  for (float x : data) {
    // zfp's lossy modes are undefined on NaN/Inf (zfp issue #242 reports SIGILL).
    if (!std::isfinite(x)) throw InputError("zfp cannot compress NaN or Inf values (undefined in zfp's lossy modes)");
  }
  auto zs = make_stream(tolerance);
  auto field = make_field(const_cast<float*>(data.data()), shape);  // zfp reads only
  const std::size_t cap = zfp_stream_maximum_size(zs.get(), field.get());
  // zfp's worst case for this shape can exceed the flat one that max_compressed_size gives (its
  // partial 4^d blocks are padded): then encode into a buffer of zfp's worst case and copy.
  std::vector<std::byte> spill;
  std::span<std::byte> target = out;
  if (cap > out.size()) {
    spill.resize(cap);
    target = spill;
  }
  std::unique_ptr<bitstream, BitstreamDeleter> bs(stream_open(target.data(), target.size()));
  zfp_stream_set_bit_stream(zs.get(), bs.get());
  zfp_stream_rewind(zs.get());
  const std::size_t bytes = zfp_compress(zs.get(), field.get());
  if (bytes == 0) throw std::runtime_error("zfp_compress failed");
  if (!spill.empty()) {
    if (bytes > out.size()) {
      throw InputError("zfp needs " + std::to_string(bytes) + " bytes for this shape, more than the " + std::to_string(out.size()) +
                       "-byte output buffer (compress() sizes it for the shape)");
    }
    std::memcpy(out.data(), spill.data(), bytes);
  }
  return bytes;
}

void zfp_decompress(std::span<const std::byte> payload, const Shape& shape, double tolerance, std::span<float> out) {
  if (out.empty()) {
    if (!payload.empty()) throw_corrupt_at(kHeaderSize, "zfp payload of " + std::to_string(payload.size()) + " bytes for an empty array (expected none)");
    return;
  }
  auto zs = make_stream(tolerance);
  auto field = make_field(out.data(), shape);
  const std::size_t cap = zfp_stream_maximum_size(zs.get(), field.get());
  if (payload.size() > cap) {
    throw_corrupt_at(field::kPayloadSize, "zfp payload of " + std::to_string(payload.size()) + " bytes is larger than zfp's maximum size for this shape (" +
                             std::to_string(cap) + ")");
  }
  // zfp's bit reader does not check bounds; decoding from a zero-padded copy of the worst-case
  // size keeps a forged payload from making it read past our buffer.
  std::vector<std::byte> padded(cap + 64);
  std::memcpy(padded.data(), payload.data(), payload.size());
  std::unique_ptr<bitstream, BitstreamDeleter> bs(stream_open(padded.data(), padded.size()));
  zfp_stream_set_bit_stream(zs.get(), bs.get());
  zfp_stream_rewind(zs.get());
  const std::size_t bytes = zfp_decompress(zs.get(), field.get());
  if (bytes == 0 || bytes > payload.size() + 8) throw_corrupt_at(kHeaderSize, "zfp payload does not decode to the header's shape");
}

}  // namespace comptrain::kernels::detail
