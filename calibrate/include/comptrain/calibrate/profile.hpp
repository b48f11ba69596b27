#pragma once
// Calibration profiles as YAML files (format: calibrate/README.md, "Profile format"), shipped
// ones embedded in the binary (calibrate/profiles/*.yaml), and the lookup that scenarios use.

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/calibrate/fit.hpp"
#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate {

// The raw measurements behind one codec's models (written to the profile, ignored on reading).
struct CodecMeasurements {
  std::string codec;
  std::vector<TimeSample> compress;
  std::vector<TimeSample> decompress;
  std::vector<std::pair<models::TensorClass, RatioSample>> ratio;
};

// The profile as YAML; `measurements` (may be empty) go under each codec's `measurements` key.
std::string profile_to_yaml(const models::CalibrationProfile& profile, const std::vector<CodecMeasurements>& measurements = {});

// Parses a profile; `source` names it in errors ("SOURCE:LINE:COLUMN: message", InputError)
// and is stored in profile.source.
models::CalibrationProfile parse_profile(std::string_view yaml, const std::string& source);
models::CalibrationProfile load_profile_file(const std::filesystem::path& path);

std::vector<std::string> builtin_profile_names();
models::CalibrationProfile builtin_profile(std::string_view name);  // InputError listing the names

// A scenario's `profile:` value: "auto" (the shipped profile whose `platforms` list the
// scenario's platform name; `platform` empty: error), a shipped profile's name, or a .yaml /
// .yml path (relative to `base_dir`).
std::shared_ptr<const models::CalibrationProfile> resolve_profile(std::string_view spec, const std::filesystem::path& base_dir,
                                                                  std::string_view platform);

}  // namespace comptrain::calibrate
