#include "compress_command.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/kernels/array_io.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "options.hpp"

namespace comptrain::cli {
namespace {

namespace ck = comptrain::kernels;

bool is_npy(const std::string& path) { return std::filesystem::path(path).extension() == ".npy"; }

ck::FloatArray load_array(const std::string& path) {
  const std::string bytes = read_file(path);
  return is_npy(path) ? ck::parse_npy(bytes, path) : ck::parse_raw_f32(bytes, path);
}

std::string_view as_text(std::span<const std::byte> bytes) { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }

std::string_view as_text(std::span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string mode_name(ck::BoundMode m) {
  return m == ck::BoundMode::abs ? "absolute" : m == ck::BoundMode::rel ? "relative to the value range" : "none";
}

struct CompressArgs {
  std::string codec;
  std::optional<double> eb;
  bool rel = false;
  std::optional<unsigned> bits;  // quant's only: refused with the other codecs, which have no bits per value
  unsigned threads = 1;
  bool stats = false;
  bool positive_mask = false;  // szp, szh: the sign bit per value beside the stream
  std::string in, out;
};

// Prints the --stats report: ratio, accuracy against the bound, PSNR, throughput.
void print_stats(const CompressArgs& a, const ck::FloatArray& input, std::span<const std::byte> stream, double compress_s,
                 double decompress_s, std::span<const float> back) {
  const ck::Header h = ck::inspect(stream);
  const ck::CodecInfo& info = ck::codec_info(h.codec);
  const double in_bytes = 4.0 * static_cast<double>(input.values.size());
  const ck::ErrorStats s = ck::compare(input.values, back, h.eb_abs);
  fmt::print("codec          {} ({})\n", info.name,
             info.strict && info.error_bounded ? "strict error bound"
             : info.error_bounded              ? "tolerance, not a strict bound"
             : info.strict                     ? "lossless"
                                               : "NOT error-bounded");
  fmt::print("elements       {} ({:.3f} MB of float32)\n", input.values.size(), in_bytes / 1e6);
  if (info.error_bounded) {
    fmt::print("error bound    {:g} {} = {:.6g} absolute\n", h.eb_given, mode_name(h.mode), h.eb_abs);
  }
  fmt::print("compressed     {} bytes, ratio {:.3f}\n", stream.size(),
             stream.empty() ? 0.0 : in_bytes / static_cast<double>(stream.size()));
  fmt::print("max abs error  {:.6g}\n", s.max_abs_error);
  if (info.error_bounded) {
    fmt::print("bound held     {} ({} of {} elements violate |x - x'| <= {:.6g}; NaN/Inf kept bit for bit: {})\n",
               s.violations == 0 ? "yes" : "NO", s.violations, s.count, h.eb_abs,
               s.nonfinite_mismatches == 0 ? "yes" : "no");
  } else if (info.strict) {
    fmt::print("bound held     lossless: {} (elements not bit-identical: {})\n", s.violations == 0 ? "yes" : "NO", s.violations);
  } else {
    fmt::print("bound held     n/a (codec {} is not error-bounded)\n", info.name);
  }
  fmt::print("zeros kept     {} ({} exact zeros changed)\n", s.zero_mismatches == 0 ? "yes" : "NO", s.zero_mismatches);
  if (ck::has_positive_mask(h)) {
    std::uint64_t flips = 0;
    for (std::size_t i = 0; i < back.size(); ++i) flips += (input.values[i] > 0.0f) != (back[i] > 0.0f) ? 1u : 0u;
    fmt::print("positive mask  kept: {} ({} values whose x > 0 changed)\n", flips == 0 ? "yes" : "NO", flips);
  }
  fmt::print("PSNR           {:.2f} dB\n", s.psnr_db);
  fmt::print("compress       {:.3f} GB/s ({} thread{}; GB = 10^9 bytes of input per second)\n", in_bytes / compress_s / 1e9,
             a.threads, a.threads == 1 ? "" : "s");
  fmt::print("decompress     {:.3f} GB/s\n", in_bytes / decompress_s / 1e9);
}

}  // namespace

std::function<int()> add_compress_command(CLI::App& app) {
  auto args = std::make_shared<CompressArgs>();
  auto* command = app.add_subcommand("compress", "Compress a float32 array (raw little-endian .f32/.bin or .npy)");
  std::string names;
  for (const auto& c : ck::codecs()) names += (names.empty() ? "" : ", ") + std::string(c.name);
  command->add_option("--codec", args->codec, "Codec: " + names)->required();
  command->add_option("--eb", args->eb, "Error bound (absolute; relative to max - min of the finite values with --rel)");
  command->add_flag("--rel", args->rel, "The error bound is relative to the value range");
  add_int(*command, "--bits", args->bits, "Bits per value for --codec quant: 1, 2, 4 or 8 (default 8); no other codec takes it", 1u, 8u);
  add_int(*command, "--threads", args->threads,
          fmt::format("CPU threads, 0 to {0} (0: all cores, up to {0}); the output does not depend on it", ck::kMaxThreads), 0u,
          ck::kMaxThreads)
      ->default_val(1);
  command->add_flag("--positive-mask", args->positive_mask,
                    "szp, szh: also keep one bit per value, x > 0, so that a decoded value is > 0 exactly where the original was "
                    "(what a ReLU's backward reads); n / 8 bytes more");
  command->add_flag("--stats", args->stats, "Also decompress and print ratio, errors, PSNR and throughput");
  command->add_option("in", args->in, "Input array: .npy (float32, C order) or raw little-endian float32")->required();
  command->add_option("out", args->out, "Output compressed stream; - for standard output")->required();
  return [command, args]() -> int {
    if (!command->parsed()) return -1;
    const CompressArgs& a = *args;
    const ck::CodecId codec = ck::codec_from_name(a.codec);
    const ck::CodecInfo& info = ck::codec_info(codec);
    if (info.error_bounded && !a.eb) throw InputError("--codec " + a.codec + " needs --eb VALUE");
    if (!info.error_bounded && (a.eb || a.rel)) {
      throw InputError("--codec " + a.codec + " is not error-bounded: --eb and --rel do not apply");
    }
    if (a.bits && codec != ck::CodecId::quant) {
      throw InputError("--bits applies only to --codec quant (its bits per value); --codec " + a.codec + " takes none");
    }
    const ck::FloatArray input = load_array(a.in);
    const ck::CompressOptions options{.codec = codec,
                                      .eb = a.eb.value_or(0.0),
                                      .mode = a.rel ? ck::BoundMode::rel : ck::BoundMode::abs,
                                      .quant_bits = a.bits.value_or(8),
                                      .threads = a.threads,
                                      .positive_mask = a.positive_mask};
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::byte> stream = ck::compress(input.values, input.shape, options);
    const double compress_s = seconds_since(t0);
    // The stream and the --stats report cannot share standard output: the report would corrupt it.
    if (a.stats && is_standard_output(a.out)) throw InputError("--stats prints to standard output; expected an output file, not -");
    write_output(a.out, as_text(stream));
    if (a.stats) {
      std::vector<float> back(input.values.size());
      const auto t1 = std::chrono::steady_clock::now();
      ck::decompress_into(stream, back, a.threads);
      const double decompress_s = seconds_since(t1);
      print_stats(a, input, stream, compress_s, decompress_s, back);
    }
    return 0;
  };
}

std::function<int()> add_decompress_command(CLI::App& app) {
  struct Args {
    std::string in, out;
    unsigned threads = 1;
  };
  auto args = std::make_shared<Args>();
  auto* command = app.add_subcommand("decompress", "Decompress a stream written by `comptrain compress`");
  add_int(*command, "--threads", args->threads, fmt::format("CPU threads, 0 to {0} (0: all cores, up to {0})", ck::kMaxThreads), 0u,
          ck::kMaxThreads)
      ->default_val(1);
  command->add_option("in", args->in, "Compressed stream")->required();
  command->add_option("out", args->out,
                      "Output array: .npy keeps the shape; any other name gets raw little-endian float32; - for standard output (raw)")
      ->required();
  return [command, args]() -> int {
    if (!command->parsed()) return -1;
    const std::string bytes = read_file(args->in);
    const auto stream = std::as_bytes(std::span(bytes.data(), bytes.size()));
    std::vector<float> values;
    ck::Header h;
    try {
      h = ck::inspect(stream);
      values = ck::decompress(stream, args->threads);
    } catch (const ck::StreamError& e) {
      throw InputError(args->in + ": " + e.what());
    }
    if (is_npy(args->out)) {
      ck::Shape shape;
      shape.rank = h.rank;
      shape.dims = h.dims;
      write_output(args->out, ck::format_npy(values, shape));
    } else {
      write_output(args->out, as_text(std::span<const float>(values)));
    }
    return 0;
  };
}

}  // namespace comptrain::cli
