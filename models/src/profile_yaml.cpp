#include "comptrain/models/profile_yaml.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>

#include "embedded_files.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/yaml_reader.hpp"

namespace comptrain::models {
namespace {

// Format 2: the ratio model gives compressed bits per value (format 1: ln ratio, without the
// block features); a format-1 profile is refused rather than read with the wrong meaning.
constexpr const char* kFormat = "comptrain-calibration-profile 2";
// Bounds of the numbers read (see read_time, count): beyond them a value is a mistake.
constexpr double kMaxLatency = 1.0;          // seconds per codec call
constexpr long long kMaxCount = 1000000000;  // samples per ratio model (calibrate fits tens)
constexpr const char* kRatioForm =
    "ratio = 32 / bits, clamped to [1, max_ratio]; bits = c0 + c_zero*zero_fraction + c_zero_block*zero_block_fraction "
    "+ (1 - zero_block_fraction)*(c_log_eb*ln(eb) + c_log_scale*ln(block_scale) + c_log_spread*ln(spread)); "
    "eb relative to the value range (max-min), spread = std/(max-min), zero_block_fraction = all-zero 32-value blocks, "
    "block_scale = geometric mean over the other blocks of the magnitude szp codes, the smaller of max|x| and "
    "max(|x0|, max|x[i]-x[i-1]|), doubled when a sign is coded, /(max-min)";

void emit_time(YAML::Emitter& out, const char* key, const TimeModel& m) {
  out << YAML::Key << key << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "latency_s" << YAML::Value << m.latency;
  out << YAML::Key << "bandwidth_bytes_per_s" << YAML::Value << m.bandwidth;
  out << YAML::Key << "r2" << YAML::Value << m.r2;
  out << YAML::Key << "max_relative_error" << YAML::Value << m.max_relative_error;
  out << YAML::Key << "provenance" << YAML::Value << std::string(to_string(m.provenance));
  out << YAML::Key << "source" << YAML::Value << m.source;
  out << YAML::EndMap;
}

void emit_ratio(YAML::Emitter& out, TensorClass c, const RatioModel& m) {
  out << YAML::Key << std::string(to_string(c)) << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "c0" << YAML::Value << m.c0;
  out << YAML::Key << "c_log_eb" << YAML::Value << m.c_log_eb;
  out << YAML::Key << "c_zero" << YAML::Value << m.c_zero;
  out << YAML::Key << "c_zero_block" << YAML::Value << m.c_zero_block;
  out << YAML::Key << "c_log_scale" << YAML::Value << m.c_log_scale;
  out << YAML::Key << "c_log_spread" << YAML::Value << m.c_log_spread;
  out << YAML::Key << "max_ratio" << YAML::Value << m.max_ratio;
  out << YAML::Key << "default_zero_fraction" << YAML::Value << m.default_features.zero_fraction;
  out << YAML::Key << "default_zero_block_fraction" << YAML::Value << m.default_features.zero_block_fraction;
  out << YAML::Key << "default_block_scale" << YAML::Value << m.default_features.block_scale;
  out << YAML::Key << "default_spread" << YAML::Value << m.default_features.spread;
  out << YAML::Key << "train_samples" << YAML::Value << m.train_samples;
  out << YAML::Key << "heldout_samples" << YAML::Value << m.heldout_samples;
  out << YAML::Key << "heldout_rms_log_error" << YAML::Value << m.heldout_rms_log_error;
  out << YAML::Key << "heldout_max_relative_error" << YAML::Value << m.heldout_max_relative_error;
  out << YAML::Key << "provenance" << YAML::Value << std::string(to_string(m.provenance));
  out << YAML::Key << "source" << YAML::Value << m.source;
  out << YAML::EndMap;
}

// Its scalars may be empty ("'F' must be a single value"), its numbers are "a finite number".
class ProfileReader : public yaml::Reader {
 public:
  explicit ProfileReader(const std::string& source) : yaml::Reader(source, {.non_empty = false, .expected = "a single value"}) {}

  CalibrationProfile read(std::string_view text) {
    const YAML::Node root = yaml::load_document(text, source());
    if (!root.IsMap()) throw InputError(where(root.Mark()) + "expected a calibration profile (a mapping; calibrate/README.md)");
    check_keys(root, "the profile", {"format", "name", "device", "platforms", "date", "comptrain_version", "ratio_model", "codecs", "gpu_measurements"});
    const std::string format = scalar(required(root, "format", "the profile"), "format");
    if (format != kFormat) throw InputError(where(root["format"].Mark()) + "unknown profile format '" + format + "'; expected '" + kFormat + "'");
    CalibrationProfile p;
    p.source = source();
    p.name = scalar(required(root, "name", "the profile"), "name");
    const YAML::Node device = required(root, "device", "the profile");
    require_map(device, "device");
    check_keys(device, "device", {"name", "kind", "threads"});
    p.device = scalar(required(device, "name", "device"), "device.name");
    p.device_kind = scalar(required(device, "kind", "device"), "device.kind");
    if (const YAML::Node platforms = root["platforms"]) {
      if (!platforms.IsSequence()) throw InputError(where(platforms.Mark()) + "'platforms' must be a list of platform names");
      for (const auto& item : platforms) p.platforms.push_back(scalar(item, "platforms"));
    }
    if (root["date"]) p.date = scalar(root["date"], "date");
    if (root["comptrain_version"]) p.comptrain_version = scalar(root["comptrain_version"], "comptrain_version");
    const YAML::Node codecs = required(root, "codecs", "the profile");
    if (!codecs.IsSequence() || codecs.size() == 0) throw InputError(where(codecs.Mark()) + "'codecs' must be a non-empty list");
    for (std::size_t i = 0; i < codecs.size(); ++i) p.codecs.push_back(read_codec(codecs[i], "codecs[" + std::to_string(i) + "]"));
    return p;
  }

 private:
  CodecProfile read_codec(const YAML::Node& node, const std::string& field) const {
    require_map(node, field);
    check_keys(node, field, {"codec", "compress", "decompress", "ratio", "measurements"});
    CodecProfile c;
    c.codec = scalar(required(node, "codec", field), field + ".codec");
    c.compress = read_time(required(node, "compress", field), field + ".compress");
    c.decompress = read_time(required(node, "decompress", field), field + ".decompress");
    const YAML::Node ratio = required(node, "ratio", field);
    require_map(ratio, field + ".ratio");
    for (const auto& entry : ratio) {
      const std::string name = entry.first.as<std::string>("");
      auto cls = parse_tensor_class(name);
      if (!cls) {
        std::string valid;
        for (auto k : kTensorClasses) valid += (valid.empty() ? "" : ", ") + std::string(to_string(k));
        throw InputError(where(entry.first.Mark()) + "unknown tensor class '" + name + "' in " + field + ".ratio; valid: " + valid);
      }
      c.ratio[*cls] = read_ratio(entry.second, field + ".ratio." + name);
    }
    if (c.ratio.count(TensorClass::generic) == 0) {
      throw InputError(where(ratio.Mark()) + "'" + field + ".ratio' needs a 'generic' model (used for tensors of other classes)");
    }
    return c;
  }

  TimeModel read_time(const YAML::Node& node, const std::string& field) const {
    require_map(node, field);
    check_keys(node, field, {"latency_s", "bandwidth_bytes_per_s", "r2", "max_relative_error", "provenance", "source"});
    TimeModel m;
    // A codec call's fixed cost is microseconds; a second or more is a unit mistake (us written
    // as s), which would otherwise dominate every compressed tensor's time without a word.
    m.latency = number(required(node, "latency_s", field), field + ".latency_s", [](double v) { return v >= 0 && v < kMaxLatency; },
                       "seconds per call, >= 0 and < 1");
    m.bandwidth = number(required(node, "bandwidth_bytes_per_s", field), field + ".bandwidth_bytes_per_s", [](double v) { return v > 0; },
                         "bytes per second, > 0");
    if (node["r2"]) m.r2 = number(node["r2"], field + ".r2", [](double v) { return v <= 1; }, "a coefficient of determination, <= 1");
    if (node["max_relative_error"]) m.max_relative_error = number(node["max_relative_error"], field + ".max_relative_error", non_negative, "a number >= 0");
    read_origin(node, field, m.provenance, m.source);
    return m;
  }

  RatioModel read_ratio(const YAML::Node& node, const std::string& field) const {
    require_map(node, field);
    check_keys(node, field, {"c0", "c_log_eb", "c_zero", "c_zero_block", "c_log_scale", "c_log_spread", "max_ratio",
                             "default_zero_fraction", "default_zero_block_fraction", "default_block_scale", "default_spread",
                             "train_samples", "heldout_samples", "heldout_rms_log_error", "heldout_max_relative_error",
                             "provenance", "source"});
    const auto get = [&](const char* key, bool (*valid)(double) = nullptr, const char* expected = "a finite number") {
      return number(required(node, key, field), field + "." + key, valid, expected);
    };
    RatioModel m;
    m.c0 = get("c0");
    m.c_log_eb = get("c_log_eb");
    m.c_zero = get("c_zero");
    m.c_zero_block = get("c_zero_block");
    m.c_log_scale = get("c_log_scale");
    m.c_log_spread = get("c_log_spread");
    m.max_ratio = get("max_ratio", [](double v) { return v >= 1; }, "a ratio >= 1");
    m.default_features.zero_fraction = get("default_zero_fraction", fraction, "a fraction in [0, 1]");
    m.default_features.zero_block_fraction = get("default_zero_block_fraction", fraction, "a fraction in [0, 1]");
    m.default_features.block_scale = get("default_block_scale", positive, "a number > 0");
    m.default_features.spread = get("default_spread", positive, "a number > 0");
    if (node["train_samples"]) m.train_samples = count(node["train_samples"], field + ".train_samples");
    if (node["heldout_samples"]) m.heldout_samples = count(node["heldout_samples"], field + ".heldout_samples");
    if (node["heldout_rms_log_error"]) {
      m.heldout_rms_log_error = number(node["heldout_rms_log_error"], field + ".heldout_rms_log_error", non_negative, "a number >= 0");
    }
    if (node["heldout_max_relative_error"]) {
      m.heldout_max_relative_error =
          number(node["heldout_max_relative_error"], field + ".heldout_max_relative_error", non_negative, "a number >= 0");
    }
    read_origin(node, field, m.provenance, m.source);
    return m;
  }

  void read_origin(const YAML::Node& node, const std::string& field, Provenance& provenance, std::string& source) const {
    const YAML::Node p = required(node, "provenance", field);
    auto value = parse_provenance(scalar(p, field + ".provenance"));
    if (!value) throw InputError(where(p.Mark()) + "unknown provenance '" + p.Scalar() + "'; expected measured, literature or assumed");
    provenance = *value;
    source = scalar(required(node, "source", field), field + ".source");
  }

  // A finite number that `valid` (when given) accepts; otherwise "expected <expected>".
  double number(const YAML::Node& node, const std::string& field, bool (*valid)(double) = nullptr,
                const char* expected = "a finite number") const {
    return yaml::Reader::number(node, field, valid, expected);
  }
  // A sample count, read as an integer: a double cast to size_t would turn -1 into 2^64 - 1 and
  // 1.5 into 1 without a word.
  std::size_t count(const YAML::Node& node, const std::string& field) const {
    long long value = 0;
    if (!node.IsScalar() || !YAML::convert<long long>::decode(node, value) || value < 0 || value > kMaxCount) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + describe(node) + "'; expected a whole number of samples in [0, " +
                       std::to_string(kMaxCount) + "]");
    }
    return static_cast<std::size_t>(value);
  }
  static bool non_negative(double v) { return v >= 0; }
  static bool positive(double v) { return v > 0; }
  static bool fraction(double v) { return v >= 0 && v <= 1; }
};

}  // namespace

std::string profile_to_yaml(const CalibrationProfile& p, const std::vector<CodecMeasurements>& measurements) {
  YAML::Emitter out;
  out.SetDoublePrecision(8);
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << kFormat;
  out << YAML::Key << "name" << YAML::Value << p.name;
  out << YAML::Key << "device" << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << p.device << YAML::Key
      << "kind" << YAML::Value << p.device_kind << YAML::EndMap;
  out << YAML::Key << "platforms" << YAML::Value << YAML::Flow << p.platforms;
  out << YAML::Key << "date" << YAML::Value << p.date;
  out << YAML::Key << "comptrain_version" << YAML::Value << p.comptrain_version;
  out << YAML::Key << "ratio_model" << YAML::Value << kRatioForm;
  out << YAML::Key << "codecs" << YAML::Value << YAML::BeginSeq;
  for (const auto& c : p.codecs) {
    out << YAML::BeginMap;
    out << YAML::Key << "codec" << YAML::Value << c.codec;
    emit_time(out, "compress", c.compress);
    emit_time(out, "decompress", c.decompress);
    out << YAML::Key << "ratio" << YAML::Value << YAML::BeginMap;
    for (const auto& [cls, model] : c.ratio) emit_ratio(out, cls, model);
    out << YAML::EndMap;
    auto m = std::find_if(measurements.begin(), measurements.end(), [&](const CodecMeasurements& x) { return x.codec == c.codec; });
    if (m != measurements.end()) {
      out << YAML::Key << "measurements" << YAML::Value << YAML::BeginMap;
      for (const auto& [key, samples] : {std::pair{"compress", &m->compress}, std::pair{"decompress", &m->decompress}}) {
        out << YAML::Key << key << YAML::Comment("[bytes, seconds (fastest run)]") << YAML::Value << YAML::BeginSeq;
        for (const auto& s : *samples) out << YAML::Flow << YAML::BeginSeq << static_cast<std::uint64_t>(s.bytes) << s.seconds << YAML::EndSeq;
        out << YAML::EndSeq;
      }
      out << YAML::Key << "ratio" << YAML::Comment("[class, eb, zero_fraction, zero_block_fraction, block_scale, spread, ratio, heldout]")
          << YAML::Value << YAML::BeginSeq;
      for (const auto& [cls, s] : m->ratio) {
        out << YAML::Flow << YAML::BeginSeq << std::string(to_string(cls)) << s.eb << s.features.zero_fraction
            << s.features.zero_block_fraction << s.features.block_scale << s.features.spread << s.ratio << s.heldout << YAML::EndSeq;
      }
      out << YAML::EndSeq << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

CalibrationProfile parse_profile(std::string_view yaml, const std::string& source) { return ProfileReader(source).read(yaml); }

CalibrationProfile load_profile_file(const std::filesystem::path& path) {
  return parse_profile(read_file(path), path.string());
}

std::vector<std::string> builtin_profile_names() { return detail::embedded_names(detail::builtin_profile_sources()); }

CalibrationProfile builtin_profile(std::string_view name) {
  if (const auto yaml = detail::embedded_text(detail::builtin_profile_sources(), name)) return parse_profile(*yaml, "embedded:" + std::string(name));
  throw InputError("unknown calibration profile '" + std::string(name) + "'; expected auto, a .yaml file or one of: " +
                   detail::embedded_name_list(detail::builtin_profile_sources()));
}

std::shared_ptr<const CalibrationProfile> resolve_profile(std::string_view spec, const std::filesystem::path& base_dir,
                                                          std::string_view platform_name) {
  if (spec == "auto") {
    if (platform_name.empty()) throw InputError("profile auto needs the scenario's platform (it picks the profile made for it)");
    std::string known;
    for (const std::string& name : builtin_profile_names()) {
      auto p = builtin_profile(name);
      if (std::find(p.platforms.begin(), p.platforms.end(), platform_name) != p.platforms.end()) {
        return std::make_shared<const CalibrationProfile>(std::move(p));
      }
      for (const auto& x : p.platforms) known += (known.empty() ? "" : ", ") + x;
    }
    throw InputError("profile auto: no shipped profile is made for platform '" + std::string(platform_name) +
                     "'; profiles exist for: " + known + " (or name a profile or a .yaml file)");
  }
  const ShippedOrFile which = shipped_or_file(spec, base_dir, "calibration profile", builtin_profile_names(), "auto");
  return std::make_shared<const CalibrationProfile>(which.file ? load_profile_file(*which.file) : builtin_profile(which.name));
}

}  // namespace comptrain::models
