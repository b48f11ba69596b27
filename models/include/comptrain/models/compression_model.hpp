#pragma once
// The compression cost model that calibration profiles provide (calibrate/README.md): time
// models (latency + bytes / bandwidth) and ratio models (compression ratio as a function of the
// error bound and of the data's features) per codec and per tensor class. Pure C++: the YAML
// reading and writing lives in comptrain::calibrate, so the models library stays free of it.

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Features of a tensor's values that the ratio depends on.
struct DataFeatures {
  double zero_fraction = 0;  // fraction of exact zeros
  double spread = 0;         // standard deviation / (max - min) over all values, in (0, 0.5]
};

// ln(ratio) = c0 + c_log_eb * ln(eb) + c_zero * zero_fraction + c_log_spread * ln(spread), with
// eb the error bound relative to the value range. Clamped to [1, max_ratio]: no codec here
// expands data by more than its header, and max_ratio is the largest ratio seen while fitting
// (the log-linear form must not extrapolate to absurd ratios).
struct RatioModel {
  double c0 = 0;
  double c_log_eb = 0;
  double c_zero = 0;
  double c_log_spread = 0;
  double max_ratio = 1;
  DataFeatures default_features;  // used for tensors of this class (means of the fitting samples)
  // Fit quality on samples held back from the fit.
  std::size_t train_samples = 0;
  std::size_t heldout_samples = 0;
  double heldout_rms_log_error = 0;
  double heldout_max_relative_error = 0;
  Provenance provenance = Provenance::measured;
  std::string source;

  double ratio(double eb, const DataFeatures& f) const {
    const double spread = std::max(f.spread, 1e-6);
    const double log_ratio = c0 + c_log_eb * std::log(eb) + c_zero * f.zero_fraction + c_log_spread * std::log(spread);
    return std::clamp(std::exp(log_ratio), 1.0, std::max(1.0, max_ratio));
  }
  double ratio(double eb) const { return ratio(eb, default_features); }
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
  TimeModel compress;    // effective (explicit overrides applied)
  TimeModel decompress;
  bool ratio_overridden = false;
  std::vector<std::pair<TensorClass, double>> ratios;  // effective ratio per class the rule compressed
};

}  // namespace comptrain::models
