#pragma once
// Fitting a platform's op-time efficiencies to the user's own end-to-end measurements
// (`comptrain calibrate --from-measurements FILE -o PLATFORM.yaml`, issue 13 item 4).
//
// A measured training throughput is the most common number a user has about their machine; the
// datasheet peaks and the assumed efficiencies of a shipped platform are not. This fits the few
// efficiencies that decide an iteration's time so that comptrain reproduces those numbers, and
// writes the platform back with every fitted value marked as such.
//
// Usage: comptrain calibrate --from-measurements FILE -o PLATFORM.yaml [--holdout K]
//                            [--fit-parameters gemm,memory_default,compute_default] [--name NAME]
// prints per measurement the measured throughput, the prediction before and after and their
// errors, and writes PLATFORM.yaml (use it as a scenario's `platform:` or `--platform`).
//
// FILE (YAML):
//   platform: a100-40gb            # a shipped name, or a platform file relative to FILE
//   measurements:                  # one or more
//     - scenario: runs/bert-b32.yaml   # relative to FILE; simulated at its own batch size,
//       samples_per_second: 412.5      #   on `platform` (as `simulate --platform` replaces it)
//     - {scenario: runs/resnet50-b64.yaml, samples_per_second: 1210}
//
// Parameters (FitParameter): each scales a group of Efficiency values together, keeping their
// ratios, so a platform's relative judgement (conv above attention, say) survives the fit:
//   gemm             compute efficiency of conv, linear, matmul and attention (the tensor-core
//                    kinds, which decide compute-bound time); one scale for all precisions,
//                    since Efficiency has no per-precision values
//   conv, matmul     the same kinds in two groups: conv alone, and linear, matmul and attention
//                    together; for sets of CNN and transformer runs whose convolutions (cuDNN's
//                    implicit GEMMs) and matrix products (cuBLAS) part ways. Either these or
//                    gemm, not both
//   memory_default   memory efficiency of every kind without its own memory value (the
//                    elementwise, normalization and optimizer kernels: memory-bound time)
//   compute_default  compute efficiency of the other kinds; rarely binding on a roofline (those
//                    kernels move far more bytes than they compute), so not fitted by default
//   tensor_core      Efficiency::tensor_core, the extra factor of ops on tensor cores (TF32,
//                    FP16, BF16 peaks): separates fp32 runs from tensor-core runs, which gemm
//                    alone cannot; fit it with measurements of both
//   tensor_core_cuda11  Efficiency::tensor_core_cuda11, the same share for runs whose scenario
//                    says framework.cuda below 12 on Hopper (models/op_time.hpp,
//                    tensor_core_share); only those measurements depend on it
//   conv_wave_loss   Efficiency::conv_wave_loss, the share of the modelled wave-quantization
//                    loss convolutions see (models/README.md, "Wave quantization"); the
//                    small-batch CNN runs depend on it, large batches hardly
//   gemm_k_overhead  Efficiency::gemm_k_overhead, the short-reduction curve's k0 (elements of K;
//                    models/README.md, "Short reductions"): from the base platform's value, or
//                    from 128 where it has none, over 1 to 4,096, written as a whole number.
//                    Throughputs confound it with the GEMMs' level unless their K differ
//                    (BERT-base's 768 beside a 4,096-wide LLM); `calibrate --device cuda` fits
//                    it from a sweep of measured GEMMs instead
// Every resulting efficiency stays within the platform bounds [0.001, 1].
//
// Objective: sum over the fitted measurements of log(predicted / measured)^2, where predicted =
// batch / iteration time of sim::run_scenario. Optimizer: a direction-set search in log space.
// Each sweep runs a line search (a grid scan, then golden section around the best grid point)
// along each parameter, each pair of parameters together and against each other (an op's time
// is max(compute, memory), so the objective has kinks where only a diagonal descends), and the
// sweep's net move (Powell's direction, for smooth valleys). The first sweep scans each
// parameter's whole range, later ones a shrinking window. Derivative-free, deterministic,
// bounded. A parameter the predictions do not depend on keeps its value (no move improves).
//
// The last `holdout` measurements are left out of the fit and reported apart, so that the error
// on runs the fit never saw stays known.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"

namespace comptrain::sim {

struct Measurement {
  std::filesystem::path scenario;  // absolute, or relative to the working directory
  double samples_per_second = 0;
  int line = 0;  // in the measurements file, for messages
};

struct MeasurementSet {
  std::string source;         // the file, for messages and the fitted values' comments
  std::string platform_spec;  // as written: a shipped name or a file
  int platform_line = 0;
  models::Platform platform;  // resolved
  std::string platform_text;  // the platform file's text when it is a file (its comments are kept); empty when shipped
  std::vector<Measurement> measurements;
};

// Parses FILE. InputError "SOURCE:LINE:COLUMN: problem; expected ..." for malformed YAML,
// unknown or missing keys, an empty list, a non-positive or non-finite throughput, an unknown
// platform. The scenarios are read by fit_measurements (which names the measurement's line).
MeasurementSet parse_measurements(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir);
MeasurementSet load_measurements(const std::filesystem::path& path);

enum class FitParameter { gemm, conv, matmul, memory_default, compute_default, tensor_core, tensor_core_cuda11, conv_wave_loss, gemm_k_overhead };
std::string_view to_string(FitParameter parameter);
std::optional<FitParameter> parse_fit_parameter(std::string_view text);
// Every parameter's name, for errors: "gemm, conv, ... or conv_wave_loss".
std::string fit_parameter_choices();

struct FitOptions {
  std::vector<FitParameter> parameters{FitParameter::gemm, FitParameter::memory_default};
  int holdout = 0;  // the last K measurements are not fitted; 0 <= K < the measurement count
  int jobs = 0;     // simulations at once (worker processes); 0 = the core count
  int max_sweeps = 8;
  std::string output_name = "fitted";  // the written platform's `name:`
};

struct MeasurementFit {
  Measurement measurement;
  std::string scenario_name;
  std::int64_t batch = 0;
  double before = 0;  // predicted samples/s on the base platform
  double after = 0;   // predicted samples/s on the fitted platform, as written
  bool held_out = false;
};

struct ParameterFit {
  FitParameter parameter = FitParameter::gemm;
  double scale = 1;  // fitted value / base value, for every efficiency of the group (gemm_k_overhead: / 128 where the base has none)
  // max over the fitted measurements of |d log(predicted) / d log(scale)| at the fit: 0 means
  // the measurements say nothing about the parameter (it kept its value).
  double sensitivity = 0;
};

struct FitResult {
  models::Platform base;
  models::Platform fitted;  // read back from platform_yaml
  std::vector<MeasurementFit> rows;
  std::vector<ParameterFit> parameters;
  double rms_before = 0, rms_after = 0;                  // rms log error over the fitted measurements
  std::optional<double> holdout_rms_before, holdout_rms_after;  // over the held-out ones
  int evaluations = 0;                                   // objective evaluations (each: one simulation per fitted measurement)
  std::string platform_yaml;                             // the fitted platform file
};

// Reads every scenario (InputError "SOURCE:LINE: measurement N: ..." for one that does not read,
// has a sweep, or cannot run: out of memory or a strategy that does not apply), fits, and emits
// the platform. Deterministic for any `jobs`.
FitResult fit_measurements(const MeasurementSet& set, const FitOptions& options);

// The table `calibrate --from-measurements` prints: per measurement, measured, predicted before
// and after, the errors; then the parameters and the rms errors (held-out ones apart).
std::string fit_table(const FitResult& result);

// The platform `fitted` as YAML (readable by models::parse_platform), every value commented:
// `fitted_comment` on the fitted efficiencies, otherwise the base file's own comment for the
// value (when `base_text` is its text and the value sits alone on its line) or "copied from
// platform NAME (SOURCE)". Exposed for the tests.
std::string fitted_platform_yaml(const models::Platform& base, std::string_view base_text, const models::Platform& fitted,
                                 const std::vector<ParameterFit>& parameters, const std::string& fitted_comment);

}  // namespace comptrain::sim
