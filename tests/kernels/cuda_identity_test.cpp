// The CUDA driver against the CPU driver, on a GPU: for every data family of the property tests
// (NaN, Inf, denormals, huge ranges, lengths that are no multiple of a block, empty and one
// value), the repository's activation samples and several bounds, the device's stream is the CPU's
// byte for byte, and its decoding is the CPU's bit for bit. Built wherever nvcc is (so CI compiles
// it), run by scripts/gpu-check.sh only: without a CUDA device it says so in one line and exits 2
// (ctest does not register it: no CI machine has a GPU).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/kernels/array_io.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/cuda.hpp"
#include "data_families.hpp"

namespace ck = comptrain::kernels;

namespace {

// Device memory for `n` floats (at least one, so that empty arrays have a valid pointer).
class DeviceFloats {
 public:
  explicit DeviceFloats(std::size_t n) {
    if (cudaMalloc(&data_, 4 * (n > 0 ? n : 1)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~DeviceFloats() { cudaFree(data_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
};

struct Case {
  ck::CodecId codec;
  double eb;
  ck::BoundMode mode;
  bool positive_mask = false;
};

const Case kCases[] = {
    {ck::CodecId::szp, 1e-1, ck::BoundMode::rel}, {ck::CodecId::szp, 1e-3, ck::BoundMode::rel}, {ck::CodecId::szp, 1e-5, ck::BoundMode::rel},
    {ck::CodecId::szp, 1e-3, ck::BoundMode::abs}, {ck::CodecId::szp, 0.0, ck::BoundMode::abs},  {ck::CodecId::zeros, 0.0, ck::BoundMode::none},
    {ck::CodecId::szp, 1e-1, ck::BoundMode::rel, true}, {ck::CodecId::szp, 1e-3, ck::BoundMode::abs, true},
};

// The GPU's stream and decoding against the CPU's, for one array and every case.
void expect_identical(const std::string& name, const std::vector<float>& values, const ck::Shape& shape) {
  const std::size_t n = values.size();
  DeviceFloats in(n);
  DeviceFloats out(n);
  ASSERT_EQ(cudaMemcpy(in.get(), values.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name + " " + std::string(ck::codec_info(c.codec).name) + " eb " + std::to_string(c.eb) + (c.positive_mask ? " positive mask" : ""));
    const ck::CompressOptions options{.codec = c.codec, .eb = c.eb, .mode = c.mode, .positive_mask = c.positive_mask};
    const std::vector<std::byte> cpu = ck::compress(values, shape, options);
    const std::vector<std::byte> gpu = ck::cuda::compress(in.get(), shape, options);
    ASSERT_EQ(gpu.size(), cpu.size());
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), cpu.size()), 0) << "the streams differ";
    const std::vector<float> cpu_back = ck::decompress(cpu);
    ck::cuda::decompress(gpu, out.get());
    std::vector<float> gpu_back(n);
    ASSERT_EQ(cudaMemcpy(gpu_back.data(), out.get(), 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cpu_back.size(), n);
    EXPECT_EQ(std::memcmp(gpu_back.data(), cpu_back.data(), 4 * n), 0) << "the decodings differ";
  }
}

TEST(CudaIdentity, DataFamilies) {
  for (const auto& family : ck::testing::families()) {
    expect_identical(family.name, family.values, ck::Shape::flat(family.values.size()));
  }
  // Lengths around the block and chunk sizes, and one past a million.
  for (std::size_t n : {31, 32, 33, 1023, 1025, 65537, 1000003}) {
    expect_identical("relu50 x " + std::to_string(n), ck::testing::relu_like(n, 0.5, static_cast<std::uint32_t>(n)), ck::Shape::flat(n));
  }
}

TEST(CudaIdentity, RepositoryActivationSamples) {
  const std::filesystem::path folder = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "activations";
  int samples = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".npy") continue;
    std::ifstream file(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const ck::FloatArray array = ck::parse_npy(bytes, entry.path().string());
    expect_identical(entry.path().filename().string(), array.values, array.shape);
    ++samples;
  }
  EXPECT_GT(samples, 0) << "no .npy sample in " << folder;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "kernels_cuda_identity_test: no CUDA device; nothing to check\n");
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
