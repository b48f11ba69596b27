// comptrain_codecs._kernels: the compressor kernels (comptrain::kernels, CPU driver) for Python.
//
// Arrays come in through the buffer protocol (NumPy arrays; CPU torch tensors through .numpy()),
// read in place: float32, C-contiguous, 1 to 4 dimensions. Streams are the checksummed format the
// CLI writes (`comptrain compress`), byte for byte: the same library call with the same options.
// The GIL is released while a codec runs. The kernels' InputError and StreamError become
// comptrain_codecs.CodecError and StreamError (both ValueErrors) with the kernels' message.

#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/stream.hpp"
#include "comptrain/support/input_error.hpp"

namespace py = pybind11;
namespace ck = comptrain::kernels;

namespace {

// A contiguous read-only byte view of any buffer (bytes, bytearray, memoryview, uint8 arrays),
// released on scope exit. PyBUF_SIMPLE refuses non-contiguous exporters itself.
class ByteView {
 public:
  explicit ByteView(const py::handle& object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ByteView(const ByteView&) = delete;
  ByteView& operator=(const ByteView&) = delete;
  ~ByteView() { PyBuffer_Release(&view_); }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

bool is_float32_format(const std::string& format) {
  // Native, little-endian or standard-size float32; the kernels read host-order floats (x86-64,
  // aarch64: little-endian), so a big-endian '>f' array would be misread and is refused.
  return format == "f" || format == "<f" || format == "=f" || format == "@f";
}

// The float32 elements and the stream shape of an array, or a TypeError/ValueError naming what
// is wrong with it. `writable` also refuses read-only buffers (decompress_into's destination).
struct FloatArray {
  py::buffer_info info;
  std::span<float> values;
  ck::Shape shape;
};

FloatArray float_array(const py::buffer& buffer, bool writable, const char* what) {
  py::buffer_info info = buffer.request(writable);
  if (!is_float32_format(info.format) || info.itemsize != 4) {
    throw py::type_error(std::string(what) + ": expected float32 elements, got buffer format '" + info.format +
                         "' (convert with .astype(numpy.float32) or .float())");
  }
  if (info.ndim < 1 || info.ndim > static_cast<py::ssize_t>(ck::kMaxRank)) {
    throw py::value_error(std::string(what) + ": expected 1 to 4 dimensions (the stream's shape), got " +
                          std::to_string(info.ndim) + " (reshape it)");
  }
  // C order: the last dimension moves fastest. Dimensions of size 1 may carry any stride.
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (info.shape[i] != 1 && info.strides[i] != expected) {
      throw py::value_error(std::string(what) +
                            ": expected a C-contiguous array, read in place (use numpy.ascontiguousarray or .contiguous())");
    }
    expected *= info.shape[i];
  }
  FloatArray out{std::move(info), {}, {}};
  out.shape.rank = static_cast<std::uint8_t>(out.info.ndim);
  std::uint64_t count = 1;
  for (std::size_t i = 0; i < out.shape.rank; ++i) {
    out.shape.dims[i] = static_cast<std::uint64_t>(out.info.shape[i]);
    count *= out.shape.dims[i];
  }
  out.values = {static_cast<float*>(out.info.ptr), static_cast<std::size_t>(count)};
  return out;
}

ck::BoundMode bound_mode(std::string_view mode) {
  if (mode == "rel") return ck::BoundMode::rel;
  if (mode == "abs") return ck::BoundMode::abs;
  throw py::value_error("mode must be 'rel' (relative to max - min of the finite values) or 'abs', got '" +
                        std::string(mode) + "'");
}

// A Python int argument as a value of [0, max], or CodecError (a ValueError) naming the argument
// and the range; a non-int is a TypeError. Taken as a Python object, not as a C++ unsigned, so
// that -1 or 2**70 get this message instead of pybind11's "incompatible function arguments".
std::uint64_t int_in_range(const py::handle& value, const char* name, std::uint64_t max, const std::string& meaning) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw py::type_error(std::string(name) + ": expected an int, got " + std::string(py::str(py::type::of(value).attr("__name__"))));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < 0 || static_cast<unsigned long long>(v) > max) {
    // The value as Python writes it, cut to a few dozen characters (2**1000 has 302 digits).
    std::string text = py::str(value);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    throw comptrain::InputError(std::string(name) + " " + text + " is out of range; expected " + meaning);
  }
  return static_cast<std::uint64_t>(v);
}

unsigned thread_count(const py::handle& threads) {
  return static_cast<unsigned>(int_in_range(threads, "threads", ck::kMaxThreads,
                                            "0 (all cores, up to " + std::to_string(ck::kMaxThreads) + ") to " +
                                                std::to_string(ck::kMaxThreads)));
}

// quant's bits per value: None is its default, 8; any other codec refuses them (it has no bits
// per value: the CLI's --bits rule).
unsigned quant_bits(ck::CodecId codec, const py::handle& bits) {
  if (codec != ck::CodecId::quant) {
    if (!bits.is_none()) {
      throw comptrain::InputError("bits applies only to codec quant (its bits per value); codec " +
                                  std::string(ck::codec_info(codec).name) + " takes none (pass None)");
    }
    return 8;
  }
  if (bits.is_none()) return 8;
  const auto b = static_cast<unsigned>(int_in_range(bits, "bits", 8, "1, 2, 4 or 8"));
  if (b != 1 && b != 2 && b != 4 && b != 8) throw comptrain::InputError("quant bits must be 1, 2, 4 or 8 (got " + std::to_string(b) + ")");
  return b;
}

// The CLI's rules (cli/compress_command.cpp), so that the same arguments give the same stream or
// the same refusal: an error-bounded codec needs a bound; the others take none; bits are quant's.
ck::CompressOptions compress_options(const std::string& codec, std::optional<double> error_bound,
                                     const std::string& mode, const py::handle& bits, const py::handle& threads,
                                     bool positive_mask) {
  const ck::CodecId id = ck::codec_from_name(codec);
  const ck::CodecInfo& info = ck::codec_info(id);
  const ck::BoundMode m = bound_mode(mode);
  if (info.error_bounded && !error_bound) throw comptrain::InputError("codec " + codec + " needs an error_bound");
  if (!info.error_bounded && error_bound) {
    throw comptrain::InputError("codec " + codec + " is not error-bounded: error_bound does not apply (pass None)");
  }
  if (error_bound) ck::check_error_bound(*error_bound);
  return ck::CompressOptions{.codec = id,
                             .eb = error_bound.value_or(0.0),
                             .mode = error_bound ? m : ck::BoundMode::abs,
                             .quant_bits = quant_bits(id, bits),
                             .threads = thread_count(threads),
                             .positive_mask = positive_mask};
}

// Compresses into a bytes object of the worst-case size, then shrinks it in place
// (_PyBytes_Resize: realloc, which for large blocks is an mremap, not a copy): the codec writes
// straight into the object Python gets back. zfp's worst case depends on the shape beyond what
// max_compressed_size covers, so zfp goes through compress() and one copy.
py::bytes compress_to_bytes(std::span<const float> values, const ck::Shape& shape, const ck::CompressOptions& options) {
  if (options.codec == ck::CodecId::zfp) {
    std::vector<std::byte> stream;
    {
      py::gil_scoped_release release;
      stream = ck::compress(values, shape, options);
    }
    return py::bytes(reinterpret_cast<const char*>(stream.data()), stream.size());
  }
  const std::uint64_t room = ck::max_compressed_size(options.codec, values.size(), options.quant_bits);
  py::object holder = py::reinterpret_steal<py::object>(PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(room)));
  if (!holder) throw py::error_already_set();
  auto* out = reinterpret_cast<std::byte*>(PyBytes_AS_STRING(holder.ptr()));
  std::size_t size = 0;
  {
    py::gil_scoped_release release;
    size = ck::compress_into(values, shape, options, {out, static_cast<std::size_t>(room)});
  }
  PyObject* raw = holder.release().ptr();
  if (_PyBytes_Resize(&raw, static_cast<Py_ssize_t>(size)) != 0) throw py::error_already_set();  // raw freed on failure
  return py::reinterpret_steal<py::bytes>(raw);
}

py::dict header_dict(const ck::Header& h) {
  py::dict d;
  d["codec"] = std::string(ck::codec_info(h.codec).name);
  d["mode"] = h.mode == ck::BoundMode::rel ? "rel" : h.mode == ck::BoundMode::abs ? "abs" : "none";
  py::tuple shape(h.rank);
  for (std::size_t i = 0; i < h.rank; ++i) shape[i] = h.dims[i];
  d["shape"] = shape;
  d["count"] = h.count;
  d["error_bound"] = h.eb_given;
  d["absolute_bound"] = h.eb_abs;
  d["codec_parameter"] = h.codec_param;
  d["positive_mask"] = ck::has_positive_mask(h);
  d["payload_bytes"] = h.payload_size;
  d["checksum"] = h.checksum;
  return d;
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "comptrain's compressor kernels (CPU driver); use the comptrain_codecs package around it";

  // Module-local translators, tried newest first: the subclass is registered after its base.
  auto& codec_error = py::register_local_exception<comptrain::InputError>(m, "CodecError", PyExc_ValueError);
  py::register_local_exception<ck::StreamError>(m, "StreamError", codec_error);
  m.attr("MAX_THREADS") = ck::kMaxThreads;
  m.attr("MAX_ELEMENTS") = ck::kMaxElements;

  m.def(
      "check_threads", [](const py::object& threads) { thread_count(threads); }, py::arg("threads"),
      "Raises what compress and decompress would for this thread count (CodecError, TypeError).");
  m.def(
      "check_options",
      [](const std::string& codec, const py::object& bits, const py::object& threads) {
        quant_bits(ck::codec_from_name(codec), bits);
        thread_count(threads);
      },
      py::arg("codec"), py::arg("bits"), py::arg("threads"),
      "Raises what compress would for these bits and threads (CodecError, TypeError); for callers that compress later.");

  m.def(
      "codecs",
      [] {
        py::list out;
        for (const ck::CodecInfo& c : ck::codecs()) {
          py::dict d;
          d["name"] = std::string(c.name);
          d["error_bounded"] = c.error_bounded;
          d["strict"] = c.strict;
          d["summary"] = std::string(c.summary);
          out.append(d);
        }
        return out;
      },
      "The kernels' codecs: name, error_bounded, strict, summary.");

  m.def(
      "compress",
      [](const py::buffer& data, const std::string& codec, std::optional<double> error_bound, const std::string& mode,
         const py::object& bits, const py::object& threads, bool positive_mask) {
        const ck::CompressOptions options = compress_options(codec, error_bound, mode, bits, threads, positive_mask);
        const FloatArray array = float_array(data, false, "compress");
        return compress_to_bytes(array.values, array.shape, options);
      },
      py::arg("data"), py::arg("codec"), py::arg("error_bound"), py::arg("mode") = "rel", py::arg("bits") = py::none(),
      py::arg("threads") = 1, py::arg("positive_mask") = false,
      "Compresses a C-contiguous float32 buffer (1-4 dimensions) in place into the CLI's stream format; positive_mask "
      "(szp, szh) keeps one bit per value, x > 0, so that the decoded value is > 0 exactly when the original was.");

  m.def(
      "inspect",
      [](const py::buffer& stream) {
        const ByteView bytes(stream);
        return header_dict(ck::inspect(bytes.bytes()));
      },
      py::arg("stream"), "Validates a stream's header, checksum and codec fields; returns the header as a dict.");

  m.def(
      "decompress",
      [](const py::buffer& stream, const py::object& threads_arg) {
        const unsigned threads = thread_count(threads_arg);
        const ByteView bytes(stream);
        const ck::Header h = ck::inspect(bytes.bytes());
        std::vector<py::ssize_t> shape(h.dims.begin(), h.dims.begin() + h.rank);
        py::array_t<float> out(shape);
        float* dst = out.mutable_data();
        {
          py::gil_scoped_release release;
          ck::decompress_into(bytes.bytes(), {dst, static_cast<std::size_t>(h.count)}, threads);
        }
        return out;
      },
      py::arg("stream"), py::arg("threads") = 1, "Decodes a stream into a new float32 NumPy array of its shape.");

  m.def(
      "decompress_into",
      [](const py::buffer& stream, const py::buffer& out, const py::object& threads_arg) {
        const unsigned threads = thread_count(threads_arg);
        const ByteView bytes(stream);
        const FloatArray array = float_array(out, true, "decompress_into");
        py::gil_scoped_release release;
        ck::decompress_into(bytes.bytes(), array.values, threads);
      },
      py::arg("stream"), py::arg("out"), py::arg("threads") = 1,
      "Decodes a stream into a writable C-contiguous float32 buffer holding as many elements (any shape).");

  m.def(
      "max_compressed_size",
      [](const std::string& codec, const py::object& count, const py::object& bits) {
        const ck::CodecId id = ck::codec_from_name(codec);
        const std::uint64_t n = int_in_range(count, "count", ck::kMaxElements,
                                             "0 to the kernels' maximum " + std::to_string(ck::kMaxElements) + " elements (2^40)");
        return ck::max_compressed_size(id, n, quant_bits(id, bits));
      },
      py::arg("codec"), py::arg("count"), py::arg("bits") = py::none(),
      "An upper bound of the stream size of `count` values (header included); count at most MAX_ELEMENTS.");

  m.def(
      "absolute_bound",
      [](const py::buffer& data, double error_bound, const std::string& mode) {
        ck::check_error_bound(error_bound);  // compress refuses the same bounds
        const FloatArray array = float_array(data, false, "absolute_bound");
        return ck::absolute_bound(array.values, error_bound, bound_mode(mode));
      },
      py::arg("data"), py::arg("error_bound"), py::arg("mode") = "rel",
      "The absolute bound compress enforces: error_bound, or error_bound * (max - min) of the finite values.");
}
