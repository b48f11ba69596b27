// CUDA throughput of the chunked codecs (szp, zeros) on post-ReLU-like data, timed with CUDA
// events on device-resident input and output. Compression = encode kernel + the chunk-size
// round trip to the host (8 bytes per chunk) + gather kernel; the range pass of rel mode is
// reported separately; the copy of the stream to the host and the host-side checksum are
// excluded. Decompression = decode kernel only.
// GB = 10^9 bytes of input per second. Also checks that the device stream is byte-identical to
// the CPU stream and that the bound holds.
//
// Usage: kernels_bench_cuda [values (default 2^26)] [repetitions (default 10)]

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/cuda.hpp"

namespace ck = comptrain::kernels;

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (std::size_t{1} << 26);
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  std::vector<float> x(n);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution zero(0.5);
  for (auto& v : x) v = zero(rng) ? 0.0f : std::fabs(normal(rng));
  float *d_in = nullptr, *d_out = nullptr;
  if (cudaMalloc(&d_in, 4 * n) != cudaSuccess || cudaMalloc(&d_out, 4 * n) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(d_in, x.data(), 4 * n, cudaMemcpyHostToDevice);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %zu values (%.1f MB)\n", prop.name, n, 4.0 * static_cast<double>(n) / 1e6);
  std::printf("%-8s %-6s %10s %12s %14s %8s %10s %8s\n", "codec", "rel eb", "ratio", "compress", "decompress", "range",
              "identical", "bound");
  struct Case {
    ck::CodecId codec;
    double eb;
  };
  const Case cases[] = {{ck::CodecId::szp, 1e-2}, {ck::CodecId::szp, 1e-3}, {ck::CodecId::szp, 1e-4}, {ck::CodecId::zeros, 0.0}};
  std::vector<float> back(n);
  for (const Case& c : cases) {
    const ck::CompressOptions o{.codec = c.codec, .eb = c.eb, .mode = c.codec == ck::CodecId::szp ? ck::BoundMode::rel : ck::BoundMode::none};
    float best_c = 1e30f, best_d = 1e30f, range = 0;
    std::vector<std::byte> stream;
    for (int r = 0; r < reps; ++r) {
      ck::cuda::Timings t;
      stream = ck::cuda::compress(d_in, ck::Shape::flat(n), o, &t);
      best_c = std::min(best_c, t.encode_ms);
      range = t.range_ms;
      ck::cuda::decompress(stream, d_out, &t);
      best_d = std::min(best_d, t.encode_ms);
    }
    const auto cpu = ck::compress(x, ck::Shape::flat(n), o);
    cudaMemcpy(back.data(), d_out, 4 * n, cudaMemcpyDeviceToHost);
    const ck::ErrorStats s = ck::compare(x, back, ck::inspect(stream).eb_abs);
    const double gb = 4.0 * static_cast<double>(n) / 1e9;
    std::printf("%-8s %-6g %10.3f %9.1f GB/s %11.1f GB/s %5.2f ms %10s %8s\n", ck::codec_info(c.codec).name.data(), c.eb,
                4.0 * static_cast<double>(n) / static_cast<double>(stream.size()), gb / (best_c / 1e3), gb / (best_d / 1e3),
                range, cpu == stream ? "yes" : "NO", s.violations == 0 ? "held" : "VIOLATED");
  }
  cudaFree(d_in);
  cudaFree(d_out);
  return 0;
}
