// libFuzzer target: decompressing arbitrary bytes must either succeed or throw StreamError /
// InputError - never crash, hang or touch memory out of bounds (build with
// -fsanitize=fuzzer,address,undefined; see tests/CMakeLists.txt).
//
// Inputs are taken two ways: as a whole stream (exercises the header checks and checksum), and
// as a payload behind a valid header with a recomputed checksum (exercises every payload
// validation path, which the checksum would otherwise shield).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/stages.hpp"

namespace ck = comptrain::kernels;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    (void)ck::decompress(bytes);
  } catch (const comptrain::InputError&) {
  }
  if (size < 2) return 0;
  // First byte picks the codec, second the element count (0..255 * 37); the rest is payload.
  static const ck::CodecId codecs[] = {ck::CodecId::szp,  ck::CodecId::zeros, ck::CodecId::quant, ck::CodecId::fp16,
                                       ck::CodecId::bf16, ck::CodecId::zfp,   ck::CodecId::szh};
  constexpr unsigned kCodecs = sizeof codecs / sizeof codecs[0];
  ck::Header h;
  h.codec = codecs[data[0] % kCodecs];
  h.mode = ck::codec_info(h.codec).error_bounded ? ck::BoundMode::abs : ck::BoundMode::none;
  h.codec_param = h.codec == ck::CodecId::quant ? (1u << (data[0] / kCodecs % 4)) : 0u;
  h.count = std::uint64_t{data[1]} * 37;
  h.dims = {h.count, 1, 1, 1};
  // Header fields consistent with each other as an encoder writes them (no bound without a mode,
  // the step the bound implies), so that the payload decoders are reached, not just the checks.
  h.eb_given = h.eb_abs = h.mode == ck::BoundMode::none ? 0.0 : 1e-3;
  h.payload_size = size - 2;
  std::vector<std::byte> stream(ck::kHeaderSize + size - 2);
  if (size > 2) std::memcpy(stream.data() + ck::kHeaderSize, data + 2, size - 2);
  if ((h.codec == ck::CodecId::szp || h.codec == ck::CodecId::szh) && size >= 6) {
    const float step = ck::make_linear_quantizer(1e-3).quantum;
    std::memcpy(stream.data() + ck::kHeaderSize, &step, 4);
  }
  ck::write_header(h, stream.data());
  h.checksum = ck::stream_checksum(stream);
  ck::write_header(h, stream.data());
  try {
    const auto out = ck::decompress(stream);
    if (out.size() != h.count) __builtin_trap();
  } catch (const comptrain::InputError&) {
  }
  return 0;
}
