#pragma once
// fp16 casts of whole arrays on the CPU: F16C where the CPU has it (8 values per instruction),
// the scalar stages (float_to_fp16, fp16_to_float in stages.hpp) otherwise; the CUDA path has its
// own conversions. Both CPU paths give the same bits for every input (tests/kernels: all 2^16
// halves, and floats covering every exponent with the rounding ties, NaN payloads, infinities and
// subnormals). Private to the library; defined in codec.cpp.

#include <cstdint>

namespace comptrain::kernels::detail {

// Whether the F16C path runs on this machine (CPUID, checked once; false off x86-64/GCC/clang).
bool fp16_has_f16c();
// out[2i..2i+1] = float_to_fp16(x[i]), little-endian, for i < n.
void fp16_encode_cpu(const float* x, std::uint64_t n, std::uint8_t* out);
// out[i] = fp16_to_float(in[2i..2i+1]) for i < n.
void fp16_decode_cpu(const std::uint8_t* in, std::uint64_t n, float* out);
// The scalar stages over arrays (the reference the F16C path is tested against).
void fp16_encode_scalar(const float* x, std::uint64_t n, std::uint8_t* out);
void fp16_decode_scalar(const std::uint8_t* in, std::uint64_t n, float* out);

}  // namespace comptrain::kernels::detail
