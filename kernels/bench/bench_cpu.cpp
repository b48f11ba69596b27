// CPU throughput and ratio of every codec, one thread, on post-ReLU-like float32 data (50 %
// exact zeros, the rest half-normal): the family that calibrates the simulator.
//
// Throughput counters are in GB/s with GB = 10^9 bytes of *input* (uncompressed float32) per
// second, for compression and decompression alike. Compression timings include the range pass
// (rel mode), the checksum and the output allocation; decompression includes header/checksum
// validation and writing into a preallocated output.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "comptrain/kernels/codec.hpp"

namespace ck = comptrain::kernels;

namespace {

constexpr std::size_t kValues = std::size_t{1} << 23;  // 32 MiB of float32: well beyond the caches

const std::vector<float>& relu_data() {
  static const std::vector<float> data = [] {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::bernoulli_distribution zero(0.5);
    std::vector<float> v(kValues);
    for (auto& x : v) x = zero(rng) ? 0.0f : std::fabs(normal(rng));
    return v;
  }();
  return data;
}

void set_rate(benchmark::State& state, std::size_t bytes) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}

ck::CompressOptions options(ck::CodecId codec, double eb, unsigned bits) {
  return {.codec = codec, .eb = eb, .mode = ck::BoundMode::rel, .quant_bits = bits, .threads = 1};
}

void add_quality(benchmark::State& state, const std::vector<std::byte>& stream) {
  const auto& x = relu_data();
  const ck::Header h = ck::inspect(stream);
  const auto back = ck::decompress(stream);
  const ck::ErrorStats s = ck::compare(x, back, h.eb_abs);
  state.counters["ratio"] = static_cast<double>(4 * x.size()) / static_cast<double>(stream.size());
  if (ck::codec_info(h.codec).error_bounded) state.counters["bound_violations"] = static_cast<double>(s.violations);
  if (h.eb_abs > 0) {
    state.counters["max_err_over_eb"] = s.max_abs_error / h.eb_abs;
  } else {
    state.counters["max_abs_err"] = s.max_abs_error;
  }
  state.counters["psnr_dB"] = s.psnr_db;
}

void BM_compress(benchmark::State& state, ck::CodecId codec, double eb, unsigned bits) {
  const auto& x = relu_data();
  std::vector<std::byte> stream;
  for (auto _ : state) {
    stream = ck::compress(x, ck::Shape::flat(x.size()), options(codec, eb, bits));
    benchmark::DoNotOptimize(stream.data());
  }
  set_rate(state, 4 * x.size());
  add_quality(state, stream);
}

void BM_decompress(benchmark::State& state, ck::CodecId codec, double eb, unsigned bits) {
  const auto& x = relu_data();
  const auto stream = ck::compress(x, ck::Shape::flat(x.size()), options(codec, eb, bits));
  std::vector<float> out(x.size());
  for (auto _ : state) {
    ck::decompress_into(stream, out);
    benchmark::DoNotOptimize(out.data());
  }
  set_rate(state, 4 * x.size());
  state.counters["ratio"] = static_cast<double>(4 * x.size()) / static_cast<double>(stream.size());
}

void BM_memcpy(benchmark::State& state) {
  const auto& x = relu_data();
  std::vector<float> out(x.size());
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), 4 * x.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, 4 * x.size());
}

void register_all() {
  benchmark::RegisterBenchmark("memcpy", BM_memcpy)->Unit(benchmark::kMillisecond);
  for (double eb : {1e-2, 1e-3, 1e-4}) {
    for (ck::CodecId c : {ck::CodecId::szp, ck::CodecId::szh, ck::CodecId::zfp}) {
      const std::string name = std::string(ck::codec_info(c).name) + "/rel" + (eb == 1e-2 ? "1e-2" : eb == 1e-3 ? "1e-3" : "1e-4");
      benchmark::RegisterBenchmark(("compress/" + name).c_str(), BM_compress, c, eb, 8u)->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("decompress/" + name).c_str(), BM_decompress, c, eb, 8u)->Unit(benchmark::kMillisecond);
    }
  }
  // Codecs without an error bound: one configuration each.
  const std::pair<std::string, std::pair<ck::CodecId, unsigned>> others[] = {
      {"zeros", {ck::CodecId::zeros, 8}}, {"quant8", {ck::CodecId::quant, 8}}, {"quant4", {ck::CodecId::quant, 4}},
      {"quant2", {ck::CodecId::quant, 2}}, {"fp16", {ck::CodecId::fp16, 8}},  {"bf16", {ck::CodecId::bf16, 8}}};
  for (const auto& [name, cfg] : others) {
    benchmark::RegisterBenchmark(("compress/" + name).c_str(), BM_compress, cfg.first, 0.0, cfg.second)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("decompress/" + name).c_str(), BM_decompress, cfg.first, 0.0, cfg.second)->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
