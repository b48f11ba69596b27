// The CUDA probe of `comptrain calibrate --device cuda` (calibrate/README.md, "On a GPU"): the
// only CUDA code of the calibration, built when nvcc is found into the module
// libcomptrain_cuda_probe.so, which probe_loader.cpp loads.

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "comptrain/calibrate/gpu_probe.hpp"
#include "comptrain/kernels/cuda.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::calibrate {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t count = 0;
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : count(n) { check(cudaMalloc(&ptr, sizeof(T) * std::max<std::size_t>(n, 1)), "cudaMalloc"); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  // Grows (contents lost) to at least n elements.
  void reserve(std::size_t n) {
    if (n <= count && ptr) return;
    cudaFree(ptr);
    ptr = nullptr;
    count = n;
    check(cudaMalloc(&ptr, sizeof(T) * std::max<std::size_t>(n, 1)), "cudaMalloc");
  }
};

struct PinnedBytes {
  std::byte* ptr = nullptr;
  std::size_t size = 0;
  ~PinnedBytes() { cudaFreeHost(ptr); }
  void reserve(std::size_t n) {
    if (n <= size && ptr) return;
    cudaFreeHost(ptr);
    ptr = nullptr;
    size = n;
    check(cudaMallocHost(&ptr, n), "cudaMallocHost");
    std::memset(ptr, 1, n);
  }
};

struct Events {
  cudaEvent_t start{}, stop{};
  Events() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  double seconds() const {
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms / 1e3;
  }
};

// Fastest of `reps` runs after one untimed warm-up; `run` returns the seconds of one run.
template <class F>
double fastest(int reps, F&& run) {
  run();
  double best = 1e300;
  for (int r = 0; r < std::max(1, reps); ++r) best = std::min(best, run());
  return best;
}

__global__ void empty_kernel() {}

// Values in [-1, 1) from a hash of the index: GEMM speed and power depend on the data (zeros
// toggle fewer bits and let the clocks rise), so the operands are not left zero.
template <class T>
__global__ void fill_kernel(T* out, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = static_cast<float>(h & 0xFFFFu) / 32768.0f - 1.0f;
    if constexpr (std::is_same_v<T, __half>) {
      out[i] = __float2half(v);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      out[i] = __float2bfloat16(v);
    } else {
      out[i] = v;
    }
  }
}

template <class T>
void fill(DeviceArray<T>& a, unsigned seed) {
  fill_kernel<T><<<1024, 256>>>(a.ptr, a.count, seed);
  check(cudaGetLastError(), "fill kernel launch");
}

const char* blas_status(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
  }
}

class CudaProbe final : public GpuProbe {
 public:
  CudaProbe() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      throw InputError(std::string("--device cuda: the CUDA runtime finds no usable GPU (") +
                       (e != cudaSuccess ? cudaGetErrorString(e) : "no devices") + "); use --device cpu");
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    info_.name = prop.name;
    info_.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    info_.multiprocessors = prop.multiProcessorCount;
    info_.compute_major = prop.major;
    info_.compute_minor = prop.minor;
    info_.device_count = count;
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    info_.runtime = "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", driver " +
                    std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
    const cublasStatus_t s = cublasCreate(&blas_);
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cublasCreate: ") + blas_status(s));
  }
  ~CudaProbe() override { cublasDestroy(blas_); }
  CudaProbe(const CudaProbe&) = delete;
  CudaProbe& operator=(const CudaProbe&) = delete;

  GpuInfo info() const override { return info_; }
  std::vector<kernels::CodecId> codecs() const override { return {kernels::CodecId::szp, kernels::CodecId::zeros}; }

  CodecTimes time_codec(kernels::CodecId codec, std::span<const float> values, double eb, int reps) override {
    upload(values);
    output_.reserve(values.size());
    const kernels::CompressOptions o = options(codec, eb);
    const kernels::Shape shape = kernels::Shape::flat(values.size());
    std::vector<std::byte> stream;
    CodecTimes t;
    // The driver's own events time its kernels (and the compressor's chunk-size round trip);
    // its device allocations and the stream's copy to the host are outside them.
    t.compress = fastest(reps, [&] {
      kernels::cuda::Timings k;
      stream = kernels::cuda::compress(input_.ptr, shape, o, &k);
      return (static_cast<double>(k.range_ms) + k.encode_ms) / 1e3;
    });
    t.decompress = fastest(reps, [&] {
      kernels::cuda::Timings k;
      kernels::cuda::decompress(stream, output_.ptr, &k);
      return static_cast<double>(k.encode_ms) / 1e3;
    });
    return t;
  }

  std::size_t compressed_size(kernels::CodecId codec, std::span<const float> values, double eb) override {
    upload(values);
    return kernels::cuda::compress(input_.ptr, kernels::Shape::flat(values.size()), options(codec, eb)).size();
  }

  double time_copy(CopyKind kind, std::uint64_t bytes, int reps) override {
    device_a_.reserve(bytes);
    device_b_.reserve(bytes);
    if (kind == CopyKind::h2d_pageable || kind == CopyKind::d2h_pageable) {
      // Pageable memory: the driver stages it through its own pinned buffers with the CPU, so
      // the host's wall clock around the synchronous copy is what a program sees.
      if (pageable_.size() < bytes) pageable_.assign(bytes, std::byte{1});
      return fastest(reps, [&] {
        const auto t0 = std::chrono::steady_clock::now();
        if (kind == CopyKind::h2d_pageable) {
          check(cudaMemcpy(device_a_.ptr, pageable_.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
        } else {
          check(cudaMemcpy(pageable_.data(), device_a_.ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
        }
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      });
    }
    if (kind != CopyKind::d2d) pinned_.reserve(bytes);
    Events ev;
    return fastest(reps, [&] {
      check(cudaEventRecord(ev.start), "cudaEventRecord");
      switch (kind) {
        case CopyKind::h2d_pinned: check(cudaMemcpyAsync(device_a_.ptr, pinned_.ptr, bytes, cudaMemcpyHostToDevice), "H2D"); break;
        case CopyKind::d2h_pinned: check(cudaMemcpyAsync(pinned_.ptr, device_a_.ptr, bytes, cudaMemcpyDeviceToHost), "D2H"); break;
        default: check(cudaMemcpyAsync(device_b_.ptr, device_a_.ptr, bytes, cudaMemcpyDeviceToDevice), "D2D"); break;
      }
      check(cudaEventRecord(ev.stop), "cudaEventRecord");
      return ev.seconds();
    });
  }

  std::optional<double> time_gemm(GemmPrecision precision, const GemmShape& shape, int reps) override {
    const bool ampere = info_.compute_major >= 8;
    switch (precision) {
      case GemmPrecision::fp32: return gemm<float>(CUDA_R_32F, CUBLAS_COMPUTE_32F, shape, reps);
      case GemmPrecision::tf32:
        if (!ampere) return std::nullopt;
        return gemm<float>(CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, shape, reps);
      case GemmPrecision::fp16: return gemm<__half>(CUDA_R_16F, CUBLAS_COMPUTE_32F, shape, reps);
      case GemmPrecision::bf16:
        if (!ampere) return std::nullopt;
        return gemm<__nv_bfloat16>(CUDA_R_16BF, CUBLAS_COMPUTE_32F, shape, reps);
    }
    return std::nullopt;
  }

  double launch_overhead(int launches) override {
    Events ev;
    empty_kernel<<<1, 1>>>();
    check(cudaDeviceSynchronize(), "empty kernel");
    check(cudaEventRecord(ev.start), "cudaEventRecord");
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1>>>();
    check(cudaGetLastError(), "empty kernel launch");
    check(cudaEventRecord(ev.stop), "cudaEventRecord");
    return ev.seconds() / std::max(1, launches);
  }

 private:
  static kernels::CompressOptions options(kernels::CodecId codec, double eb) {
    kernels::CompressOptions o;
    o.codec = codec;
    o.eb = eb;
    o.mode = codec == kernels::CodecId::szp ? kernels::BoundMode::rel : kernels::BoundMode::none;
    return o;
  }

  void upload(std::span<const float> values) {
    input_.reserve(values.size());
    check(cudaMemcpy(input_.ptr, values.data(), values.size_bytes(), cudaMemcpyHostToDevice), "upload");
  }

  // C = A B in `type` with fp32 scaling factors; the compute type picks the tensor-core path.
  template <class T>
  std::optional<double> gemm(cudaDataType_t type, cublasComputeType_t compute, const GemmShape& shape, int reps) {
    DeviceArray<T> a(static_cast<std::size_t>(shape.m * shape.k)), b(static_cast<std::size_t>(shape.k * shape.n)),
        c(static_cast<std::size_t>(shape.m * shape.n));
    fill(a, 1);
    fill(b, 2);
    check(cudaDeviceSynchronize(), "fill");
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(shape.m), n = static_cast<int>(shape.n), k = static_cast<int>(shape.k);
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    Events ev;
    const double seconds = fastest(reps, [&] {
      check(cudaEventRecord(ev.start), "cudaEventRecord");
      status = cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.ptr, type, m, b.ptr, type, k, &beta, c.ptr, type, m,
                            compute, CUBLAS_GEMM_DEFAULT);
      check(cudaEventRecord(ev.stop), "cudaEventRecord");
      return ev.seconds();
    });
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) return std::nullopt;
    if (status != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cublasGemmEx: ") + blas_status(status));
    return seconds;
  }

  GpuInfo info_;
  cublasHandle_t blas_{};
  DeviceArray<float> input_, output_;
  DeviceArray<std::byte> device_a_, device_b_;
  PinnedBytes pinned_;
  std::vector<std::byte> pageable_;
};

}  // namespace

}  // namespace comptrain::calibrate

// The module's one entry point (dlsym'd by probe_loader.cpp); the caller owns the probe.
// Throws InputError when no GPU is usable.
extern "C" __attribute__((visibility("default"))) comptrain::calibrate::GpuProbe* comptrain_open_cuda_probe() {
  return new comptrain::calibrate::CudaProbe();
}
