#pragma once
// Calibration profiles as YAML files (format: calibrate/README.md, "Profile format"), the shipped
// ones embedded in the binary (calibrate/profiles/*.yaml, which `comptrain calibrate` produces),
// and the lookup that scenarios use. Here, beside the platforms' YAML, so that reading a
// scenario needs neither calibrate nor the compressor kernels.

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/models/compression_model.hpp"

namespace comptrain::models {

// The raw measurements behind one codec's models (written to the profile, ignored on reading).
struct CodecMeasurements {
  std::string codec;
  std::vector<TimeSample> compress;
  std::vector<TimeSample> decompress;
  std::vector<std::pair<TensorClass, RatioSample>> ratio;
};

// The profile as YAML; `measurements` (may be empty) go under each codec's `measurements` key.
std::string profile_to_yaml(const CalibrationProfile& profile, const std::vector<CodecMeasurements>& measurements = {});

// Parses a profile; `source` names it in errors ("SOURCE:LINE:COLUMN: message", InputError)
// and is stored in profile.source. Every number is checked before use: counts are whole and in
// range, other numbers finite, bandwidths > 0, latencies in [0, 1 s), fractions in [0, 1].
CalibrationProfile parse_profile(std::string_view yaml, const std::string& source);
CalibrationProfile load_profile_file(const std::filesystem::path& path);

std::vector<std::string> builtin_profile_names();
CalibrationProfile builtin_profile(std::string_view name);  // InputError listing the names

// A scenario's `profile:` value: "auto" (the shipped profile whose `platforms` list
// `platform_name`; empty platform_name: error), a shipped profile's name, or a .yaml / .yml
// path (relative to `base_dir`), as shipped_or_file.hpp decides.
std::shared_ptr<const CalibrationProfile> resolve_profile(std::string_view spec, const std::filesystem::path& base_dir,
                                                          std::string_view platform_name);

}  // namespace comptrain::models
