#pragma once
// The compression cost model that calibration profiles provide (calibrate/README.md): time
// models (latency + bytes / bandwidth) and ratio models (compression ratio as a function of the
// error bound and of the data's features) per codec and per tensor class, and the raw samples
// they are fitted to. Pure data: the profiles' YAML is in profile_yaml.hpp, the fits in
// comptrain::calibrate (which measures the kernels).

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/support/error_bound.hpp"

namespace comptrain::models {

// Where a number comes from. Profiles mark every model with one of these and a source.
//   measured    timed / compressed on the device named by the profile (comptrain calibrate)
//   literature  taken (or derived, the source says how) from a publication
//   assumed     neither: a placeholder the source explains, to be replaced by a measurement
enum class Provenance { measured, literature, assumed };
std::string_view to_string(Provenance p);
std::optional<Provenance> parse_provenance(std::string_view text);

// Activation classes, by the op that produces the tensor (tensor_class_of_op in the strategy).
enum class TensorClass { post_relu, batchnorm, gelu, linear, generic };
inline constexpr std::array<TensorClass, 5> kTensorClasses = {TensorClass::post_relu, TensorClass::batchnorm, TensorClass::gelu,
                                                              TensorClass::linear, TensorClass::generic};
std::string_view to_string(TensorClass c);
std::optional<TensorClass> parse_tensor_class(std::string_view text);

// seconds(bytes) = latency + bytes / bandwidth; bytes are the uncompressed size (input of the
// compressor, output of the decompressor).
struct TimeModel {
  double latency = 0;    // seconds per call
  double bandwidth = 0;  // bytes per second
  // Quality of the fit over the measured sizes (0 when not fitted).
  double r2 = 0;
  double max_relative_error = 0;
  Provenance provenance = Provenance::measured;
  std::string source;

  double seconds(double bytes) const { return latency + bytes / bandwidth; }
};

// Features of a tensor's values that the ratio depends on (comptrain::calibrate::features_of
// computes them; calibrate/README.md, "Compression ratio"). Blocks are 32 consecutive values in
// memory order, as the block codecs (szp, zeros) cut them.
struct DataFeatures {
  double zero_fraction = 0;        // fraction of exact zeros
  double spread = 0;               // standard deviation / (max - min) over all values, in (0, 0.5]
  double zero_block_fraction = 0;  // fraction of 32-value blocks whose values are all exactly zero
  // Geometric mean, over the blocks that are not all zero, of the magnitude a block codec must
  // code after the better of no prediction and 1-D Lorenzo, relative to the value range: the
  // smaller of max |x_i| and max(|x_0|, max |x_i - x_(i-1)|), doubled when the coded values
  // include negative ones (a sign bit per value), / (max - min). 0 when the range is 0.
  double block_scale = 0;
};

// Compressed bits per value (32 / ratio), with eb the error bound relative to the value range:
//   bits = c0 + c_zero * zero_fraction + c_zero_block * zero_block_fraction
//        + (1 - zero_block_fraction) * (c_log_eb * ln(eb) + c_log_scale * ln(block_scale)
//                                       + c_log_spread * ln(spread))
// Why this form: a block codec's output is a sum over blocks. A block of zeros costs a constant;
// any other block costs about log2(magnitude / eb) bits per value (its bit-plane width, or the
// entropy of its quantisation codes: the high-resolution rate log2(sigma / step)), so the size,
// not its log, is linear in ln(eb) and ln(block_scale), weighted by the fraction of blocks that
// are not all zero. spread adds the shape of the distribution inside the range (heavy tails,
// outlier features), which the block maxima alone miss. The fit sets the coefficients of each
// codec (zeros: bits = 33 - 32 zero_fraction; fp16: c0 = 16 and nothing else).
// ratio = 32 / bits, clamped to [1, max_ratio] (bits <= 0 gives max_ratio): no codec here expands
// data by more than its header, and max_ratio is the largest ratio seen while fitting.
struct RatioModel {
  double c0 = 0;
  double c_log_eb = 0;
  double c_zero = 0;
  double c_zero_block = 0;
  double c_log_scale = 0;
  double c_log_spread = 0;
  double max_ratio = 1;
  DataFeatures default_features;  // used for tensors of this class (fit_ratio_model: from the fitting samples)
  // Fit quality on samples held back from the fit.
  std::size_t train_samples = 0;
  std::size_t heldout_samples = 0;
  double heldout_rms_log_error = 0;
  double heldout_max_relative_error = 0;
  Provenance provenance = Provenance::measured;
  std::string source;

  // The log features are floored at 1e-6: constant data (range 0) has spread and block scale 0.
  double bits_per_value(double eb, const DataFeatures& f) const {
    const double nonzero_blocks = 1.0 - f.zero_block_fraction;
    return c0 + c_zero * f.zero_fraction + c_zero_block * f.zero_block_fraction +
           nonzero_blocks * (c_log_eb * std::log(eb) + c_log_scale * std::log(std::max(f.block_scale, 1e-6)) +
                             c_log_spread * std::log(std::max(f.spread, 1e-6)));
  }
  double ratio(double eb, const DataFeatures& f) const {
    const double top = std::max(1.0, max_ratio);
    const double bits = bits_per_value(eb, f);
    return bits > 0 ? std::clamp(32.0 / bits, 1.0, top) : top;
  }
  double ratio(double eb) const { return ratio(eb, default_features); }
};

// One timing: `seconds` to compress (or decompress) `bytes` of float32 input. Here rather than
// in calibrate, which measures them, because profiles carry them (profile_yaml.hpp) and models
// must not depend on calibrate and the kernels.
struct TimeSample {
  double bytes = 0;
  double seconds = 0;
};

// One compression: the ratio reached at relative error bound `eb` on data with `features`.
struct RatioSample {
  double eb = 0;
  DataFeatures features;
  double ratio = 1;
  bool heldout = false;  // kept out of the fit, used to report its error
};

struct CodecProfile {
  std::string codec;  // kernels' codec name: szp, zeros, quant, fp16, bf16, zfp
  TimeModel compress;
  TimeModel decompress;
  std::map<TensorClass, RatioModel> ratio;  // every class that was fitted; `generic` always

  // The class's model, or the generic one when the class was not fitted.
  const RatioModel& ratio_model(TensorClass c) const;
};

struct CalibrationProfile {
  std::string name;               // "a100-literature", "cpu-epyc-2core"
  std::string device;             // "NVIDIA A100-SXM4-40GB", CPU model name
  std::string device_kind;        // cpu or cuda
  std::vector<std::string> platforms;  // shipped platforms this profile stands for (profile: auto)
  std::string date;               // ISO 8601 date of the calibration
  std::string comptrain_version;
  std::string source;             // where it was read from (file path or embedded:NAME); not written
  std::vector<CodecProfile> codecs;

  const CodecProfile* find(std::string_view codec) const;
};

// One compress rule's costs as the strategy applied them, for reports.
struct CompressionModelUse {
  std::size_t rule = 0;
  std::string profile;         // name; empty when the rule gives explicit numbers only
  std::string profile_source;  // file or embedded:NAME
  std::string codec;
  double error_bound = 0;
  ErrorBoundMode error_bound_mode = ErrorBoundMode::rel;  // abs: error_bound in the tensors' units
  TimeModel compress;    // effective (explicit overrides applied)
  TimeModel decompress;
  bool ratio_overridden = false;
  // The profile's ratio models are fitted on float32 data (bits per value); some tensors this
  // rule compressed have another element size, and their ratios were converted (same bits per
  // value, so ratio * element_size / 4).
  bool ratio_converted_to_element_size = false;
  std::vector<std::pair<TensorClass, double>> ratios;  // effective ratio per class the rule compressed
  // `error_bound: adaptive` (CompressAction::Adaptive): the relative gradient error allowed and
  // the bound of the storages the model does not cover; error_bound is then unused.
  std::optional<double> gradient_error_tolerance;
  std::optional<double> fallback_error_bound;
  // Per compressed storage, in the schedule's storage order: its bound, ratio and predicted
  // gradient error (gradient_error.hpp).
  std::vector<TensorBoundUse> tensors;
};

}  // namespace comptrain::models
