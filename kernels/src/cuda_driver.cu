// CUDA driver of the chunked codecs. One thread block per chunk (256 blocks of 32 values), one
// thread per value block running the same stage code as the CPU driver (stages.hpp); block-wide
// scans (CUB) place the bodies and raw side values exactly where the CPU driver puts them, so
// the stream is byte-identical. Compiled with -fmad=false (cmake/OptionalCuda.cmake).

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cstring>
#include <stdexcept>
#include <string>

#include "comptrain/kernels/cuda.hpp"
#include "comptrain/kernels/stages.hpp"
#include "cpu_driver.hpp"

namespace comptrain::kernels::cuda {
namespace {

static_assert(kChunkBlocks == 256, "one CUDA thread per value block");
constexpr int kThreads = static_cast<int>(kChunkBlocks);
constexpr std::uint32_t kStateBytes = LinearQuantizer::kStateBytes + 4;  // as codec.cpp

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t count) { check(cudaMalloc(&ptr, sizeof(T) * (count == 0 ? 1 : count)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct EventPair {
  cudaEvent_t start{}, stop{};
  EventPair() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  float elapsed() {
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms;
  }
};

// Order-preserving map of float bits to unsigned (for atomicMin/atomicMax on floats).
__device__ std::uint32_t ordered(float x) {
  const std::uint32_t u = hd::float_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
float unordered(std::uint32_t u) { return hd::bits_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u); }

// (cub::Min/Max were removed in CUDA 13; small functors work with every CUB.)
struct MinOp {
  __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const { return a < b ? b : a; }
};

__global__ void range_kernel(const float* x, std::uint64_t n, std::uint32_t* lo_hi) {
  using Reduce = cub::BlockReduce<std::uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  std::uint32_t lo = 0xFFFFFFFFu, hi = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    if (isfinite(v)) {
      lo = min(lo, ordered(v));
      hi = max(hi, ordered(v));
    }
  }
  const std::uint32_t block_lo = Reduce(tmp).Reduce(lo, MinOp{});
  __syncthreads();
  const std::uint32_t block_hi = Reduce(tmp).Reduce(hi, MaxOp{});
  if (threadIdx.x == 0) {
    atomicMin(&lo_hi[0], block_lo);
    atomicMax(&lo_hi[1], block_hi);
  }
}

template <class Codec>
__global__ void encode_kernel(Codec codec, const float* x, std::uint64_t n, std::uint8_t* scratch, std::uint64_t slot,
                              std::uint64_t* chunk_sizes) {
  using Scan = cub::BlockScan<std::uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const std::uint64_t c = blockIdx.x;
  const std::uint64_t values = min(kChunkValues, n - c * kChunkValues);
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  const std::uint32_t tb = tag_bytes(blocks);
  std::uint8_t* out = scratch + c * slot;
  const std::uint32_t b = threadIdx.x;
  std::uint8_t body[4 * kBlockValues];
  float side[kBlockValues];
  EncodedBlock e{0, 0, 0};
  if (b < blocks) {
    const auto nb = static_cast<std::uint32_t>(min(std::uint64_t{kBlockValues}, values - std::uint64_t{b} * kBlockValues));
    e = codec.encode(x + c * kChunkValues + std::uint64_t{b} * kBlockValues, nb, body, side);
  }
  std::uint32_t body_off, body_total, side_off, side_total;
  Scan(tmp).ExclusiveSum(e.body_words, body_off, body_total);
  __syncthreads();
  Scan(tmp).ExclusiveSum(e.side_count, side_off, side_total);
  if (b < tb) out[b] = b < blocks ? e.tag : 0;
  std::uint8_t* bd = out + tb + 4 * std::uint64_t{body_off};
  for (std::uint32_t i = 0; i < 4 * e.body_words; ++i) bd[i] = body[i];
  std::uint8_t* sd = out + tb + 4 * (std::uint64_t{body_total} + side_off);
  for (std::uint32_t i = 0; i < e.side_count; ++i) hd::store_u32(sd + 4 * i, hd::float_bits(side[i]));
  if (b == 0) chunk_sizes[c] = tb + 4 * (std::uint64_t{body_total} + side_total);
}

__global__ void gather_kernel(const std::uint8_t* scratch, std::uint64_t slot, const std::uint64_t* offsets, std::uint8_t* packed) {
  const std::uint64_t c = blockIdx.x;
  const std::uint64_t size = offsets[c + 1] - offsets[c];
  for (std::uint64_t i = threadIdx.x; i < size; i += blockDim.x) packed[offsets[c] + i] = scratch[c * slot + i];
}

// Offsets were validated on the host; every other count is validated here, and a corrupt chunk
// sets *error (block-uniform decisions, so no thread skips a barrier).
template <class Codec>
__global__ void decode_kernel(Codec codec, const std::uint8_t* data, const std::uint64_t* offsets, std::uint64_t n, float* out,
                              int* error) {
  using Scan = cub::BlockScan<std::uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const std::uint64_t c = blockIdx.x;
  const std::uint8_t* in = data + offsets[c];
  const std::uint64_t size = offsets[c + 1] - offsets[c];
  const std::uint64_t values = min(kChunkValues, n - c * kChunkValues);
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  const std::uint32_t tb = tag_bytes(blocks);
  if (size < tb) {
    if (threadIdx.x == 0) atomicExch(error, 1);
    return;
  }
  const std::uint32_t b = threadIdx.x;
  const auto nb = b < blocks ? static_cast<std::uint32_t>(min(std::uint64_t{kBlockValues}, values - std::uint64_t{b} * kBlockValues)) : 0u;
  const std::uint8_t tag = b < tb ? in[b] : 0;
  std::uint32_t w = b < blocks ? codec.body_words(tag, nb) : 0u;
  bool bad = (b >= blocks && b < tb && tag != 0) || w == kInvalidCount;
  if (bad) w = 0;
  std::uint32_t body_off, body_total;
  Scan(tmp).ExclusiveSum(w, body_off, body_total);
  if (__syncthreads_or(bad) || tb + 4 * std::uint64_t{body_total} > size) {
    if (threadIdx.x == 0) atomicExch(error, 1);
    return;
  }
  std::uint32_t s = b < blocks ? codec.side_count(tag, in + tb + 4 * std::uint64_t{body_off}, nb) : 0u;
  bad = s == kInvalidCount;
  if (bad) s = 0;
  std::uint32_t side_off, side_total;
  Scan(tmp).ExclusiveSum(s, side_off, side_total);
  if (__syncthreads_or(bad) || tb + 4 * (std::uint64_t{body_total} + side_total) != size) {
    if (threadIdx.x == 0) atomicExch(error, 1);
    return;
  }
  if (b < blocks) {
    codec.decode(tag, in + tb + 4 * std::uint64_t{body_off}, in + tb + 4 * (std::uint64_t{body_total} + side_off), nb,
                 out + c * kChunkValues + std::uint64_t{b} * kBlockValues);
  }
}

// The positive mask (stages.hpp, PositiveMask): one thread per byte of it, 8 values.
__global__ void positive_mask_kernel(const float* x, std::uint64_t n, std::uint8_t* mask) {
  const std::uint64_t bytes = PositiveMask::bytes(n);
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < bytes; k += std::uint64_t{gridDim.x} * blockDim.x) {
    mask[k] = PositiveMask::pack(x + 8 * k, static_cast<std::uint32_t>(min(std::uint64_t{8}, n - 8 * k)));
  }
}
__global__ void apply_positive_mask_kernel(const std::uint8_t* mask, std::uint64_t n, float* y) {
  const std::uint64_t bytes = PositiveMask::bytes(n);
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < bytes; k += std::uint64_t{gridDim.x} * blockDim.x) {
    PositiveMask::apply(mask[k], static_cast<std::uint32_t>(min(std::uint64_t{8}, n - 8 * k)), y + 8 * k);
  }
}

template <class Codec>
void encode_device(const Codec& codec, const float* x, std::uint64_t n, std::vector<std::byte>& out, float* ms) {
  const std::uint64_t chunks = chunk_count(n);
  const std::uint64_t slot = max_chunk_bytes(kChunkValues);
  DeviceBuffer<std::uint8_t> scratch(chunks * slot);
  DeviceBuffer<std::uint64_t> sizes(chunks + 1);
  EventPair ev;
  check(cudaEventRecord(ev.start), "cudaEventRecord");
  if (chunks > 0) encode_kernel<<<static_cast<unsigned>(chunks), kThreads>>>(codec, x, n, scratch.ptr, slot, sizes.ptr);
  check(cudaGetLastError(), "encode kernel launch");
  std::vector<std::uint64_t> offsets(chunks + 1, 0);
  check(cudaMemcpy(offsets.data(), sizes.ptr, 8 * chunks, cudaMemcpyDeviceToHost), "copy chunk sizes");
  std::uint64_t total = 0;
  for (std::uint64_t c = 0; c < chunks; ++c) {
    const std::uint64_t size = offsets[c];
    offsets[c] = total;
    total += size;
  }
  offsets[chunks] = total;
  DeviceBuffer<std::uint64_t> d_offsets(chunks + 1);
  DeviceBuffer<std::uint8_t> packed(total);
  check(cudaMemcpy(d_offsets.ptr, offsets.data(), 8 * (chunks + 1), cudaMemcpyHostToDevice), "copy offsets");
  if (chunks > 0) gather_kernel<<<static_cast<unsigned>(chunks), kThreads>>>(scratch.ptr, slot, d_offsets.ptr, packed.ptr);
  check(cudaGetLastError(), "gather kernel launch");
  check(cudaEventRecord(ev.stop), "cudaEventRecord");
  const std::size_t at = out.size();
  out.resize(at + 8 * (chunks + 1) + total);
  std::memcpy(out.data() + at, offsets.data(), 8 * (chunks + 1));
  check(cudaMemcpy(out.data() + at + 8 * (chunks + 1), packed.ptr, total, cudaMemcpyDeviceToHost), "copy stream");
  if (ms) *ms = ev.elapsed();
}

template <class Codec>
void decode_device(const Codec& codec, std::span<const std::byte> payload, std::uint64_t n, float* out, float* ms,
                   std::uint64_t base) {
  const std::uint64_t chunks = chunk_count(n);
  const std::vector<std::uint64_t> offsets = detail::read_chunk_table(payload, n, base);
  const std::uint64_t data_size = payload.size() - 8 * (chunks + 1);
  DeviceBuffer<std::uint8_t> data(data_size);
  DeviceBuffer<std::uint64_t> d_offsets(chunks + 1);
  DeviceBuffer<int> error(1);
  check(cudaMemcpy(data.ptr, payload.data() + 8 * (chunks + 1), data_size, cudaMemcpyHostToDevice), "copy stream");
  check(cudaMemcpy(d_offsets.ptr, offsets.data(), 8 * (chunks + 1), cudaMemcpyHostToDevice), "copy offsets");
  check(cudaMemset(error.ptr, 0, sizeof(int)), "cudaMemset");
  EventPair ev;
  check(cudaEventRecord(ev.start), "cudaEventRecord");
  if (chunks > 0) decode_kernel<<<static_cast<unsigned>(chunks), kThreads>>>(codec, data.ptr, d_offsets.ptr, n, out, error.ptr);
  check(cudaGetLastError(), "decode kernel launch");
  check(cudaEventRecord(ev.stop), "cudaEventRecord");
  int host_error = 0;
  check(cudaMemcpy(&host_error, error.ptr, sizeof(int), cudaMemcpyDeviceToHost), "copy error flag");
  if (ms) *ms = ev.elapsed();
  if (host_error) {
    throw_corrupt_at(base + 8 * (chunks + 1), "a chunk (the chunks start here) failed validation on the device");
  }
}

}  // namespace

std::vector<std::byte> compress(const float* device_data, const Shape& shape, const CompressOptions& options, Timings* timings) {
  if (options.codec != CodecId::szp && options.codec != CodecId::zeros) {
    throw InputError("the CUDA driver implements szp and zeros only");
  }
  if (options.positive_mask && options.codec != CodecId::szp) {
    throw InputError("positive_mask applies to the strict codecs szp and szh only (codec zeros)");
  }
  if (shape.rank < 1 || shape.rank > kMaxRank) throw InputError("shape rank must be 1..4");
  const std::uint64_t n = shape.count();
  Header h;
  h.codec = options.codec;
  h.rank = shape.rank;
  for (std::size_t i = 0; i < kMaxRank; ++i) h.dims[i] = i < shape.rank ? shape.dims[i] : 1;
  h.count = n;
  Timings t;
  std::vector<std::byte> out(kHeaderSize);
  if (options.codec == CodecId::szp) {
    if (!std::isfinite(options.eb) || options.eb < 0.0 || options.mode == BoundMode::none) {
      throw InputError("szp needs a finite error bound >= 0, abs or rel");
    }
    h.mode = options.mode;
    h.eb_given = options.eb;
    h.eb_abs = options.eb;
    if (options.mode == BoundMode::rel) {
      DeviceBuffer<std::uint32_t> lo_hi(2);
      const std::uint32_t init[2] = {0xFFFFFFFFu, 0u};
      check(cudaMemcpy(lo_hi.ptr, init, sizeof init, cudaMemcpyHostToDevice), "copy range init");
      EventPair ev;
      check(cudaEventRecord(ev.start), "cudaEventRecord");
      if (n > 0) range_kernel<<<1024, kThreads>>>(device_data, n, lo_hi.ptr);
      check(cudaGetLastError(), "range kernel launch");
      check(cudaEventRecord(ev.stop), "cudaEventRecord");
      std::uint32_t r[2];
      check(cudaMemcpy(r, lo_hi.ptr, sizeof r, cudaMemcpyDeviceToHost), "copy range");
      t.range_ms = ev.elapsed();
      // Same arithmetic as absolute_bound() on the host.
      h.eb_abs = r[0] > r[1] ? 0.0 : options.eb * (static_cast<double>(unordered(r[1])) - static_cast<double>(unordered(r[0])));
    }
    const SzpBlockCodec<> codec{make_linear_quantizer(h.eb_abs)};
    out.resize(kHeaderSize + kStateBytes);
    codec.quantizer.save(reinterpret_cast<std::uint8_t*>(out.data() + kHeaderSize));
    std::memcpy(out.data() + kHeaderSize + LinearQuantizer::kStateBytes, &kChunkBlocks, 4);
    encode_device(codec, device_data, n, out, &t.encode_ms);
    if (options.positive_mask) {
      const std::uint64_t bytes = PositiveMask::bytes(n);
      DeviceBuffer<std::uint8_t> mask(bytes);
      if (bytes > 0) positive_mask_kernel<<<1024, kThreads>>>(device_data, n, mask.ptr);
      check(cudaGetLastError(), "positive mask kernel launch");
      const std::size_t at = out.size();
      out.resize(at + bytes);
      check(cudaMemcpy(out.data() + at, mask.ptr, bytes, cudaMemcpyDeviceToHost), "copy positive mask");
      h.codec_param = kPositiveMaskParam;
    }
  } else {
    h.mode = BoundMode::none;
    const std::uint32_t state[2] = {0, kChunkBlocks};
    out.resize(kHeaderSize + kStateBytes);
    std::memcpy(out.data() + kHeaderSize, state, 8);
    encode_device(ZerosBlockCodec{}, device_data, n, out, &t.encode_ms);
  }
  h.payload_size = out.size() - kHeaderSize;
  write_header(h, out.data());
  h.checksum = stream_checksum(out);
  write_header(h, out.data());
  if (timings) *timings = t;
  return out;
}

void decompress(std::span<const std::byte> stream, float* device_out, Timings* timings) {
  if (const Header peek = read_header(stream); peek.codec != CodecId::szp && peek.codec != CodecId::zeros) {
    throw InputError("the CUDA driver implements szp and zeros only");
  }
  // The same header-vs-state checks as the CPU path (step vs bound, chunk size, sizes).
  const Header h = inspect(stream);
  const std::uint64_t mask_bytes = has_positive_mask(h) ? PositiveMask::bytes(h.count) : 0;  // inspect checked the size
  const auto payload = stream.subspan(kHeaderSize, h.payload_size - mask_bytes);
  Timings t;
  if (h.codec == CodecId::szp) {
    SzpBlockCodec<> codec;
    codec.quantizer.load(reinterpret_cast<const std::uint8_t*>(payload.data()));  // checked by inspect
    decode_device(codec, payload.subspan(kStateBytes), h.count, device_out, &t.encode_ms, kHeaderSize + kStateBytes);
    if (mask_bytes > 0) {
      DeviceBuffer<std::uint8_t> mask(mask_bytes);
      check(cudaMemcpy(mask.ptr, stream.data() + kHeaderSize + payload.size(), mask_bytes, cudaMemcpyHostToDevice), "copy positive mask");
      apply_positive_mask_kernel<<<1024, kThreads>>>(mask.ptr, h.count, device_out);
      check(cudaGetLastError(), "positive mask kernel launch");
      check(cudaDeviceSynchronize(), "positive mask kernel");
    }
  } else {
    decode_device(ZerosBlockCodec{}, payload.subspan(kStateBytes), h.count, device_out, &t.encode_ms, kHeaderSize + kStateBytes);
  }
  if (timings) *timings = t;
}

}  // namespace comptrain::kernels::cuda
