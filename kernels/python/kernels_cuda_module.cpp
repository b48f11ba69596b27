// comptrain_codecs._kernels_cuda: the kernels' CUDA driver (szp, zeros) on device pointers, for
// CUDA torch tensors. A separate module, imported only when a CUDA tensor is compressed, so that
// importing comptrain_codecs never loads the CUDA runtime. The runtime is linked statically: it
// has its own current device per thread, separate from PyTorch's runtime, so every call selects
// the tensor's device first; both runtimes use the device's primary context, where PyTorch's
// pointers are valid.
//
// The driver runs on the legacy default stream and copies the stream (compress) or the error
// flag (decompress) back with cudaMemcpy, so it returns with its work done; the caller
// synchronises PyTorch's stream before compressing (comptrain_codecs does).
//
// Built where nvcc is found; it has never run here (no GPU on the development machine).

#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/cuda.hpp"
#include "comptrain/kernels/stream.hpp"
#include "comptrain/support/input_error.hpp"

namespace py = pybind11;
namespace ck = comptrain::kernels;

namespace {

void select_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: cudaSetDevice: ") + cudaGetErrorString(e));
}

ck::Shape shape_of(const std::vector<std::uint64_t>& dims) {
  if (dims.empty() || dims.size() > ck::kMaxRank) throw py::value_error("expected 1 to 4 dimensions");
  ck::Shape s;
  s.rank = static_cast<std::uint8_t>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) s.dims[i] = dims[i];
  return s;
}

}  // namespace

PYBIND11_MODULE(_kernels_cuda, m) {
  m.doc() = "comptrain's compressor kernels, CUDA driver (szp, zeros) on device pointers";
  // The same Python exception types as the CPU module's (comptrain_codecs passes them in), so that
  // callers catch one CodecError whatever the device.
  m.def(
      "set_exceptions",
      [](const py::object& codec_error, const py::object& stream_error) {
        // Held for the life of the process (never decref'ed after the interpreter is gone).
        static const auto* input_type = new py::object(codec_error);
        static const auto* stream_type = new py::object(stream_error);
        py::register_local_exception_translator([](std::exception_ptr p) {
          try {
            if (p) std::rethrow_exception(p);
          } catch (const ck::StreamError& e) {
            PyErr_SetString(stream_type->ptr(), e.what());
          } catch (const comptrain::InputError& e) {
            PyErr_SetString(input_type->ptr(), e.what());
          }
        });
      },
      py::arg("codec_error"), py::arg("stream_error"));

  m.def(
      "compress",
      [](std::uintptr_t device_pointer, const std::vector<std::uint64_t>& dims, int device, const std::string& codec,
         double error_bound, const std::string& mode, bool positive_mask) {
        if (mode != "rel" && mode != "abs") throw py::value_error("mode must be 'rel' or 'abs', got '" + mode + "'");
        const ck::CompressOptions options{.codec = ck::codec_from_name(codec),
                                          .eb = error_bound,
                                          .mode = mode == "rel" ? ck::BoundMode::rel : ck::BoundMode::abs,
                                          .positive_mask = positive_mask};
        const ck::Shape shape = shape_of(dims);
        std::vector<std::byte> stream;
        {
          py::gil_scoped_release release;
          select_device(device);
          stream = ck::cuda::compress(reinterpret_cast<const float*>(device_pointer), shape, options);
        }
        return py::bytes(reinterpret_cast<const char*>(stream.data()), stream.size());
      },
      py::arg("device_pointer"), py::arg("shape"), py::arg("device"), py::arg("codec"), py::arg("error_bound"),
      py::arg("mode"), py::arg("positive_mask") = false,
      "Compresses shape's floats at a device pointer of `device` (szp or zeros; szp can keep the positive mask) into a "
      "host stream.");

  m.def(
      "decompress_into",
      [](const py::bytes& stream, std::uintptr_t device_pointer, std::uint64_t count, int device) {
        const std::string_view view = stream;
        const auto bytes = std::as_bytes(std::span(view.data(), view.size()));
        const std::uint64_t stream_count = ck::inspect(bytes).count;
        if (stream_count != count) {
          throw comptrain::InputError("decompress: the destination holds " + std::to_string(count) +
                                      " elements, the stream " + std::to_string(stream_count));
        }
        py::gil_scoped_release release;
        select_device(device);
        ck::cuda::decompress(bytes, reinterpret_cast<float*>(device_pointer));
      },
      py::arg("stream"), py::arg("device_pointer"), py::arg("count"), py::arg("device"),
      "Decodes a host stream (szp or zeros) into `count` floats at a device pointer of `device`.");
}
