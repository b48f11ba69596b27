// CPU throughput and ratio of every codec, one thread, on DRAM-sized post-ReLU-like float32 data
// (50 % exact zeros, the rest half-normal: the family that calibrates the simulator), next to
// memcpy of the same array in the same run; and ratio and error of szp, szh and ZFP at equal
// absolute bounds on the real activation samples of tests/data/activations.
//
//   kernels_bench [--values=N] [--samples=DIR] [--lorenzo_model] [Google Benchmark flags]
//
// --values: array length (default 2^26 floats = 256 MiB, far beyond the 32 MiB L3 here).
// --lorenzo_model: prints, instead of benchmarking, the ratio that 1-D, 2-D and 3-D Lorenzo
// prediction would give szp's block coder and szh's Huffman coder on the NCHW samples (a cost
// model over the quantised codes; see print_lorenzo_model) and exits.
//
// Throughput counters are GB/s with GB = 10^9 bytes of *input* (uncompressed float32) per second
// of CPU time (the machine is shared: CPU time does not count time spent descheduled), for
// compression and decompression alike. compress/ runs compress_into into one reused buffer (the
// API for repeated calls: no allocation, no page faults); compress_alloc/ runs compress(), which
// allocates, faults and copies its result into a vector each call. Both include the range pass
// (rel mode) and the checksum; decompression includes header and checksum validation and writes
// into a preallocated array.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "comptrain/kernels/array_io.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/huffman.hpp"
#include "comptrain/kernels/stages.hpp"
#include "comptrain/kernels/stream.hpp"
#include "comptrain/support/atomic_file.hpp"

namespace ck = comptrain::kernels;

namespace {

std::size_t g_values = std::size_t{1} << 26;
std::string g_samples = COMPTRAIN_BENCH_SAMPLES_DIR;

const std::vector<float>& relu_data() {
  static const std::vector<float> data = [] {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::bernoulli_distribution zero(0.5);
    std::vector<float> v(g_values);
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

void add_quality(benchmark::State& state, const std::vector<float>& x, std::span<const std::byte> stream) {
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

// compress_into a buffer reused across iterations (faulted in by one call before timing).
void BM_compress(benchmark::State& state, const std::vector<float>* data, ck::Shape shape, ck::CodecId codec, double eb, unsigned bits) {
  const auto& x = *data;
  std::vector<std::byte> buffer(std::max(ck::max_compressed_size(codec, x.size(), bits), ck::compress(x, shape, options(codec, eb, bits)).size()));
  std::size_t size = ck::compress_into(x, shape, options(codec, eb, bits), buffer);
  for (auto _ : state) {
    size = ck::compress_into(x, shape, options(codec, eb, bits), buffer);
    benchmark::DoNotOptimize(buffer.data());
  }
  set_rate(state, 4 * x.size());
  add_quality(state, x, std::span(buffer).first(size));
}

// compress(): a fresh vector per call (the allocating API).
void BM_compress_alloc(benchmark::State& state, ck::CodecId codec, double eb) {
  const auto& x = relu_data();
  std::vector<std::byte> stream;
  for (auto _ : state) {
    stream = ck::compress(x, ck::Shape::flat(x.size()), options(codec, eb, 8));
    benchmark::DoNotOptimize(stream.data());
  }
  set_rate(state, 4 * x.size());
  state.counters["ratio"] = static_cast<double>(4 * x.size()) / static_cast<double>(stream.size());
}

void BM_decompress(benchmark::State& state, const std::vector<float>* data, ck::Shape shape, ck::CodecId codec, double eb, unsigned bits) {
  const auto& x = *data;
  const auto stream = ck::compress(x, shape, options(codec, eb, bits));
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

// The stages around the codecs: the range pass of rel mode and the stream checksum.
void BM_range(benchmark::State& state) {
  const auto& x = relu_data();
  for (auto _ : state) benchmark::DoNotOptimize(ck::absolute_bound(x, 1e-3, ck::BoundMode::rel));
  set_rate(state, 4 * x.size());
}
void BM_xxh64(benchmark::State& state) {
  const auto& x = relu_data();
  const auto bytes = std::as_bytes(std::span(x));
  for (auto _ : state) benchmark::DoNotOptimize(ck::xxh64(bytes, 0));
  set_rate(state, bytes.size());
}

std::string eb_name(double eb) { return eb == 1e-2 ? "1e-2" : eb == 1e-3 ? "1e-3" : "1e-4"; }

struct Sample {
  std::string name;
  ck::FloatArray array;
};

const std::vector<Sample>& samples() {
  static const std::vector<Sample> list = [] {
    std::vector<Sample> v;
    if (!std::filesystem::is_directory(g_samples)) return v;
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::directory_iterator(g_samples)) {
      if (e.path().extension() == ".npy") paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) {
      v.push_back({p.stem().string(), ck::parse_npy(comptrain::read_file(p), p.string())});
    }
    return v;
  }();
  return list;
}

void register_all() {
  benchmark::RegisterBenchmark("memcpy", BM_memcpy)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("range_pass", BM_range)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("xxh64", BM_xxh64)->Unit(benchmark::kMillisecond);
  const std::vector<float>* relu = &relu_data();
  const ck::Shape flat = ck::Shape::flat(relu->size());
  for (double eb : {1e-2, 1e-3, 1e-4}) {
    for (ck::CodecId c : {ck::CodecId::szp, ck::CodecId::szh, ck::CodecId::zfp}) {
      const std::string name = std::string(ck::codec_info(c).name) + "/rel" + eb_name(eb);
      benchmark::RegisterBenchmark(("compress/" + name).c_str(), BM_compress, relu, flat, c, eb, 8u)->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("decompress/" + name).c_str(), BM_decompress, relu, flat, c, eb, 8u)->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("compress_alloc/szp/rel1e-3", BM_compress_alloc, ck::CodecId::szp, 1e-3)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("compress_alloc/szh/rel1e-3", BM_compress_alloc, ck::CodecId::szh, 1e-3)->Unit(benchmark::kMillisecond);
  // Codecs without an error bound: one configuration each.
  const std::pair<std::string, std::pair<ck::CodecId, unsigned>> others[] = {
      {"zeros", {ck::CodecId::zeros, 8}}, {"quant8", {ck::CodecId::quant, 8}}, {"quant4", {ck::CodecId::quant, 4}},
      {"quant2", {ck::CodecId::quant, 2}}, {"fp16", {ck::CodecId::fp16, 8}},  {"bf16", {ck::CodecId::bf16, 8}}};
  for (const auto& [name, cfg] : others) {
    benchmark::RegisterBenchmark(("compress/" + name).c_str(), BM_compress, relu, flat, cfg.first, 0.0, cfg.second)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("decompress/" + name).c_str(), BM_decompress, relu, flat, cfg.first, 0.0, cfg.second)
        ->Unit(benchmark::kMillisecond);
  }
  // Real activations (small: in cache, so their speeds are not DRAM figures; the point is the
  // ratio of szp, szh and ZFP at the same absolute bound, rel 1e-3 of each sample's range).
  for (const auto& s : samples()) {
    for (ck::CodecId c : {ck::CodecId::szp, ck::CodecId::szh, ck::CodecId::zfp}) {
      const std::string name = "sample/" + s.name + "/" + std::string(ck::codec_info(c).name) + "/rel1e-3";
      benchmark::RegisterBenchmark(name.c_str(), BM_compress, &s.array.values, s.array.shape, c, 1e-3, 8u)->Unit(benchmark::kMicrosecond);
    }
    // ZFP with the tensor's real rank (above) and flattened to 1-D: its 2-D..4-D transforms pay
    // only on data smooth along every axis.
    benchmark::RegisterBenchmark(("sample/" + s.name + "/zfp_1d/rel1e-3").c_str(), BM_compress, &s.array.values,
                                 ck::Shape::flat(s.array.values.size()), ck::CodecId::zfp, 1e-3, 8u)
        ->Unit(benchmark::kMicrosecond);
  }
}

// ---- --lorenzo_model ---------------------------------------------------------------------------
// Would a 2-D (H, W) or 3-D (C, H, W) Lorenzo predictor raise the ratio on NCHW activations? The
// codes q of LinearQuantizer are predicted from their neighbours with the full neighbourhood
// (an upper bound for any blocked variant: szp's blocks are independent and could not see the
// previous row), and the residuals are costed as the codecs would: szp = per 32-value block, one
// tag byte + 4 bytes per bit-plane and sign word, the cheaper of no prediction and the predictor;
// szh = exact bits of the length-limited Huffman code of the whole array's residual histogram
// plus its table. Raw values are ignored (equal for every predictor).
void print_lorenzo_model() {
  std::printf("%-22s %-12s %-6s | %-22s | %-30s\n", "sample", "C x H x W", "rel", "szp model: 1-D 2-D 3-D", "szh model: none 1-D 2-D 3-D");
  for (const auto& s : samples()) {
    const auto& x = s.array.values;
    const ck::Shape& sh = s.array.shape;
    const auto dim = [&](int back) -> long { return sh.rank > back ? static_cast<long>(sh.dims[sh.rank - 1 - back]) : 1; };
    const long W = dim(0), H = dim(1), C = dim(2);
    const long N = static_cast<long>(x.size()) / (C * H * W);
    for (double rel : {1e-2, 1e-3, 1e-4}) {
      const auto quantizer = ck::make_linear_quantizer(ck::absolute_bound(x, rel, ck::BoundMode::rel));
      std::vector<std::int32_t> q(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        std::uint32_t raw = 0;
        ck::LinearQuantizer::quantize_one(x[i], quantizer.eb_f, quantizer.quantum, quantizer.inv_quantum, q[i], raw);
      }
      const auto at = [&](long n, long c, long h, long w) -> std::int64_t {
        return c < 0 || h < 0 || w < 0 ? 0 : q[static_cast<std::size_t>(((n * C + c) * H + h) * W + w)];
      };
      std::vector<std::int64_t> r[4];
      for (auto& v : r) v.resize(x.size());
      for (long n = 0; n < N; ++n) {
        for (long c = 0; c < C; ++c) {
          for (long h = 0; h < H; ++h) {
            for (long w = 0; w < W; ++w) {
              const auto i = static_cast<std::size_t>(((n * C + c) * H + h) * W + w);
              r[0][i] = at(n, c, h, w);
              r[1][i] = at(n, c, h, w) - at(n, c, h, w - 1);
              r[2][i] = at(n, c, h, w) - at(n, c, h - 1, w) - at(n, c, h, w - 1) + at(n, c, h - 1, w - 1);
              r[3][i] = at(n, c, h, w) - at(n, c - 1, h, w) - at(n, c, h - 1, w) - at(n, c, h, w - 1) + at(n, c - 1, h - 1, w) +
                        at(n, c - 1, h, w - 1) + at(n, c, h - 1, w - 1) - at(n, c - 1, h - 1, w - 1);
            }
          }
        }
      }
      const double raw_bytes = 4.0 * static_cast<double>(x.size());
      const auto block_cost = [&](const std::vector<std::int64_t>& v, std::size_t b) {
        std::uint64_t ored = 0;
        bool negative = false;
        for (std::size_t i = b; i < std::min(b + ck::kBlockValues, v.size()); ++i) {
          ored |= static_cast<std::uint64_t>(v[i] < 0 ? -v[i] : v[i]);
          negative |= v[i] < 0;
        }
        const int width = ored == 0 ? 0 : 64 - __builtin_clzll(ored);
        return 4.0 * (width + (negative ? 1 : 0));
      };
      const auto szp_ratio = [&](const std::vector<std::int64_t>& v) {
        double bytes = 8.0 * static_cast<double>(ck::chunk_count(x.size()));
        for (std::size_t b = 0; b < x.size(); b += ck::kBlockValues) bytes += 1.0 + std::min(block_cost(r[0], b), block_cost(v, b));
        return raw_bytes / bytes;
      };
      const auto szh_ratio = [&](const std::vector<std::int64_t>& v) {
        std::vector<std::uint64_t> histogram(ck::HuffmanCode::kAlphabet, 0);
        double wide = 0;
        for (auto d : v) {
          if (d > -ck::ChunkLorenzo1D::kRadius + 1 && d < ck::ChunkLorenzo1D::kRadius) {
            ++histogram[static_cast<std::size_t>(d + ck::ChunkLorenzo1D::kRadius)];
          } else {
            ++histogram[ck::ChunkLorenzo1D::kWideSymbol];
            wide += 1;
          }
        }
        const auto code = ck::HuffmanCode::build(histogram);
        double bits = 0;
        for (std::uint32_t sym = 0; sym < ck::HuffmanCode::kAlphabet; ++sym) {
          bits += static_cast<double>(histogram[sym]) * code.length(static_cast<std::uint16_t>(sym));
        }
        return raw_bytes / (bits / 8 + static_cast<double>(code.state_bytes()) + 4 * wide);
      };
      char dims[64];
      std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", C, H, W);
      std::printf("%-22s %-12s %-6.0e | %6.2f %6.2f %6.2f   | %6.2f %6.2f %6.2f %6.2f\n", s.name.c_str(), dims, rel, szp_ratio(r[1]),
                  szp_ratio(r[2]), szp_ratio(r[3]), szh_ratio(r[0]), szh_ratio(r[1]), szh_ratio(r[2]), szh_ratio(r[3]));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool lorenzo_model = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--values=", 0) == 0) {
      g_values = std::stoull(a.substr(9));
    } else if (a.rfind("--samples=", 0) == 0) {
      g_samples = a.substr(10);
    } else if (a == "--lorenzo_model") {
      lorenzo_model = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (lorenzo_model) {
    print_lorenzo_model();
    return 0;
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
