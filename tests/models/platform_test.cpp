#include "comptrain/models/platform.hpp"
#include "comptrain/models/network_size.hpp"
#include "comptrain/models/platform_yaml.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comptrain/models/units.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using traces::DType;
using traces::OpKind;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A minimal valid platform. Tests change one line of it; the line numbers below matter for
// the file:line:column assertions.
const std::string kMinimal =
    "name: test\n"                                                                                          // 1
    "gpu:\n"                                                                                                // 2
    "  name: Test GPU\n"                                                                                    // 3
    "  memory: 40 GiB\n"                                                                                    // 4
    "  memory_bandwidth: 1555 GB/s\n"                                                                       // 5
    "  peak: {fp32: 19.5 TFLOP/s, tf32: 156 TFLOP/s, fp16: 312 TFLOP/s, bf16: 312 TFLOP/s}\n"               // 6
    "  launch_overhead: 5 us\n"                                                                             // 7
    "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"     // 8
    "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n";                                         // 9

// kMinimal with the first occurrence of `from` replaced by `to`.
std::string with(const std::string& from, const std::string& to, const std::string& yaml = kMinimal) {
  const auto at = yaml.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' is not in the test YAML";
    return yaml;
  }
  std::string result = yaml;
  result.replace(at, from.size(), to);
  return result;
}

std::string error_of(const std::string& yaml) {
  try {
    parse_platform(yaml, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for:\n" << yaml;
  return "";
}

Platform parsed(const std::string& yaml) { return parse_platform(yaml, "p.yaml"); }

// ---- Shipped platforms -------------------------------------------------------------------

TEST(BuiltinPlatforms, AllShippedPlatformsAreEmbedded) {
  EXPECT_THAT(builtin_platform_names(), ElementsAre("a100-40gb", "a100-80gb", "dgx-a100-superpod", "dgx-h100-superpod", "dgx1-v100-cluster",
                                                   "h100-100k", "h100-80gb", "h100-pcie", "h200", "p5-48xlarge", "perlmutter-gpu", "polaris", "titanx-maxwell",
                                                   "v100-16gb", "v100-32gb"));
}

TEST(BuiltinPlatforms, EveryShippedPlatformParsesWithSaneValues) {
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    const Platform p = builtin_platform(name);
    EXPECT_EQ(p.name, name) << "the file's name: must match its file name";
    EXPECT_EQ(p.source, "embedded:" + name);
    EXPECT_FALSE(p.gpu.name.empty());
    EXPECT_GE(p.gpu.memory_bytes, 8 * kGiB);
    EXPECT_LE(p.gpu.memory_bytes, 256 * kGiB);
    EXPECT_GE(p.gpu.memory_bandwidth, 200e9);
    EXPECT_LE(p.gpu.memory_bandwidth, 10e12);
    EXPECT_GE(p.gpu.peak_fp32, 1e12);
    EXPECT_LE(p.gpu.peak_fp32, 100e12);
    EXPECT_GE(p.gpu.peak_fp16, p.gpu.peak_fp32);
    EXPECT_LE(p.gpu.peak_fp16, 2e15) << "dense tensor-core figures, not sparse ones";
    EXPECT_TRUE(p.gpu.peak_tf32 == 0 || (p.gpu.peak_tf32 > p.gpu.peak_fp32 && p.gpu.peak_tf32 < p.gpu.peak_fp16));
    EXPECT_TRUE(p.gpu.peak_bf16 == 0 || p.gpu.peak_bf16 == p.gpu.peak_fp16);
    EXPECT_GE(p.gpu.launch_overhead, 1e-6);
    EXPECT_LE(p.gpu.launch_overhead, 20e-6);
    EXPECT_GT(p.gpu.idle_power, 0);
    EXPECT_LT(p.gpu.idle_power, p.gpu.max_power);
    EXPECT_LE(p.gpu.max_power, 1000);
    EXPECT_FALSE(p.host.name.empty());
    EXPECT_GE(p.host.cores, 4);
    EXPECT_GT(p.host.flops, 100e9);
    EXPECT_GE(p.host.memory_bytes, p.gpu.memory_bytes);
    EXPECT_GT(p.host.memory_bandwidth, 10e9);
    EXPECT_THAT(p.host_link.name, StartsWith("PCIe"));
    EXPECT_GE(p.host_link.bandwidth, 10e9);
    EXPECT_LE(p.host_link.bandwidth, 64e9) << "per direction, at most PCIe 5.0 x16's raw rate";
    EXPECT_LT(p.host_link.latency, 100e-6);
    EXPECT_GE(p.gpus_per_node, 1);
    if (p.gpus_per_node > 1) {
      EXPECT_THAT(p.gpu_link.name, StartsWith("NVLink"));
      EXPECT_GT(p.gpu_link.bandwidth, p.host_link.bandwidth);
    } else {
      EXPECT_EQ(p.gpu_link.bandwidth, 0);
    }
    for (const OpKind kind : traces::all_op_kinds()) {
      EXPECT_GT(p.efficiency.compute_for(kind), 0);
      EXPECT_LE(p.efficiency.compute_for(kind), 1);
      EXPECT_GT(p.efficiency.memory_for(kind), 0);
      EXPECT_LE(p.efficiency.memory_for(kind), 1);
    }
  }
}

TEST(BuiltinPlatforms, EmbeddedCopiesMatchTheFilesInTheRepository) {
  const std::filesystem::path dir = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios/platforms";
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    const Platform embedded = builtin_platform(name);
    const Platform file = load_platform_file(dir / (name + ".yaml"));
    EXPECT_THAT(file.source, HasSubstr(name + ".yaml"));
    EXPECT_EQ(file.gpu.name, embedded.gpu.name);
    EXPECT_EQ(file.gpu.memory_bytes, embedded.gpu.memory_bytes);
    EXPECT_EQ(file.gpu.memory_bandwidth, embedded.gpu.memory_bandwidth);
    EXPECT_EQ(file.gpu.peak_fp16, embedded.gpu.peak_fp16);
    EXPECT_EQ(file.host_link.bandwidth, embedded.host_link.bandwidth);
  }
}

// vDNN's "oracular GPU" (scenarios/validation/titanx-maxwell-64gib.yaml) is the shipped TITAN X
// with more memory: every other line must stay the shipped file's, or the validation point
// silently compares with an out-of-date GPU.
TEST(BuiltinPlatforms, TheValidationOracleIsTheShippedTitanXWithMoreMemory) {
  const std::filesystem::path repo = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../..";
  const auto body = [](const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    std::string line;
    bool started = false;
    while (std::getline(in, line)) {
      if (line.rfind("name:", 0) == 0) started = true;  // the header comments differ
      if (!started || line.rfind("name:", 0) == 0 || line.rfind("  memory:", 0) == 0) continue;
      lines.push_back(line);
    }
    return lines;
  };
  const auto shipped = body(repo / "scenarios/platforms/titanx-maxwell.yaml");
  EXPECT_GT(shipped.size(), 20u);
  EXPECT_EQ(body(repo / "scenarios/validation/titanx-maxwell-64gib.yaml"), shipped);
  const Platform oracle = load_platform_file(repo / "scenarios/validation/titanx-maxwell-64gib.yaml");
  EXPECT_EQ(oracle.gpu.memory_bytes, std::int64_t{64} << 30);
}

TEST(BuiltinPlatforms, A100ValuesAreTheDatasheets) {
  const Platform p = builtin_platform("a100-40gb");
  EXPECT_EQ(p.gpu.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(p.gpu.memory_bytes, 40LL * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.gpu.memory_bandwidth, 1555e9);
  EXPECT_DOUBLE_EQ(p.gpu.peak_fp32, 19.5e12);
  EXPECT_DOUBLE_EQ(p.gpu.peak_tf32, 156e12);
  EXPECT_DOUBLE_EQ(p.gpu.peak_fp16, 312e12);
  EXPECT_DOUBLE_EQ(p.gpu.peak_bf16, 312e12);
  EXPECT_DOUBLE_EQ(p.gpu.launch_overhead, 5e-6);
  EXPECT_DOUBLE_EQ(p.gpu.max_power, 400);
  EXPECT_EQ(p.host.cores, 128);
  EXPECT_EQ(p.host.memory_bytes, 1LL << 40);
  EXPECT_EQ(p.host_link.name, "PCIe 4.0 x16");
  EXPECT_DOUBLE_EQ(p.host_link.bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(p.host_link.latency, 1e-6);
  EXPECT_EQ(p.gpu_link.name, "NVLink 3");
  EXPECT_DOUBLE_EQ(p.gpu_link.bandwidth, 240e9) << "effective: 12 links x NCCL's 20 GB/s (topo.h), not the 300 GB/s line rate";
  EXPECT_EQ(p.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::conv), 0.4938) << "fitted: calibrate/measurements/a100-conv.yaml";
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::linear), 0.75);
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::relu), 0.6);
  EXPECT_DOUBLE_EQ(p.efficiency.memory_for(OpKind::conv), 0.8);
}

// The V100 platforms carry fitted efficiencies (calibrate/measurements/v100.yaml), the new
// fields read back, and a platform without them keeps the neutral defaults.
TEST(BuiltinPlatforms, FittedAndLauncherFieldsReadBack) {
  const Platform v = builtin_platform("v100-16gb");
  EXPECT_DOUBLE_EQ(v.efficiency.tensor_core, 0.7415);
  EXPECT_DOUBLE_EQ(v.host.dispatch.forward, 10e-6);
  EXPECT_DOUBLE_EQ(v.host.dispatch.backward, 5e-6);
  EXPECT_EQ(v.gpu.sms, 80);
  const Platform a = builtin_platform("a100-40gb");
  EXPECT_DOUBLE_EQ(a.efficiency.tensor_core, 1.0);  // not fitted: see calibrate/measurements/a100.yaml
  EXPECT_EQ(a.efficiency.tensor_core_cuda11, std::nullopt);
  // Hopper: the tensor-core share derived from measured GEMM ceilings (H100 over A100), and the
  // CUDA 11 one fitted on the H100 SXM5 (calibrate/measurements/h100.yaml), shared by the H200
  // (the same GH100 SMs); the other efficiencies stay the assumed ones.
  for (const char* name : {"h100-80gb", "h200", "dgx-h100-superpod", "h100-100k", "p5-48xlarge"}) {
    const Platform h = builtin_platform(name);
    EXPECT_DOUBLE_EQ(h.efficiency.tensor_core, 0.9241) << name;
    EXPECT_EQ(h.efficiency.tensor_core_cuda11, 0.6333) << name;
    EXPECT_DOUBLE_EQ(h.efficiency.compute_for(traces::OpKind::linear), 0.75) << name;
    // FP8 tensor cores at twice the BF16 rate (the whitepaper's and datasheets' dense figures).
    EXPECT_DOUBLE_EQ(h.gpu.peak_fp8, 1978.9e12) << name;
  }
  EXPECT_DOUBLE_EQ(builtin_platform("h100-pcie").gpu.peak_fp8, 1513e12);
  EXPECT_DOUBLE_EQ(a.gpu.peak_fp8, 0);  // no FP8 before compute capability 8.9
  // NCCL's blocks beside compute: 24 of an H100's 132 SMs (seen), the same share of the A100's 108
  // (derived from the slowdown measured on both); none where nothing was measured.
  for (const char* name : {"h100-80gb", "h200", "dgx-h100-superpod", "h100-100k", "p5-48xlarge"}) {
    EXPECT_EQ(builtin_platform(name).gpu.collective_sms, 24) << name;
  }
  for (const char* name : {"a100-40gb", "a100-80gb", "dgx-a100-superpod", "perlmutter-gpu", "polaris"}) EXPECT_EQ(builtin_platform(name).gpu.collective_sms, 20) << name;
  for (const char* name : {"v100-16gb", "v100-32gb", "dgx1-v100-cluster", "h100-pcie", "titanx-maxwell"}) EXPECT_EQ(builtin_platform(name).gpu.collective_sms, 0) << name;
  // A GEMM block's fixed time in elements of K, fitted on XLA's measured H100 table: every Hopper
  // platform; none where no GEMM table was measured.
  for (const char* name : {"h100-80gb", "h200", "dgx-h100-superpod", "h100-100k", "h100-pcie", "p5-48xlarge"}) {
    EXPECT_DOUBLE_EQ(builtin_platform(name).efficiency.gemm_k_overhead, 160) << name;
  }
  for (const char* name : {"a100-40gb", "v100-32gb", "titanx-maxwell"}) EXPECT_DOUBLE_EQ(builtin_platform(name).efficiency.gemm_k_overhead, 0) << name;
}

// gpu.peak.fp8 is optional: absent or 0 is no FP8; a value is bounded as the other peaks, and a
// platform written back keeps it.
TEST(PlatformYaml, Fp8PeakIsOptional) {
  const auto with_fp8 = [](const std::string& value) { return with("bf16: 312 TFLOP/s}", "bf16: 312 TFLOP/s, fp8: " + value + "}"); };
  EXPECT_DOUBLE_EQ(parsed(kMinimal).gpu.peak_fp8, 0);
  EXPECT_DOUBLE_EQ(parsed(with_fp8("0")).gpu.peak_fp8, 0);
  const Platform p = parsed(with_fp8("624 TFLOP/s"));
  EXPECT_DOUBLE_EQ(p.gpu.peak_fp8, 624e12);
  EXPECT_DOUBLE_EQ(parse_platform(platform_to_yaml(p, {}), "w.yaml").gpu.peak_fp8, 624e12);
  EXPECT_THAT(error_of(with_fp8("2e30 FLOP/s")), HasSubstr("'gpu.peak.fp8'"));
  EXPECT_THAT(error_of(with_fp8("fast")), HasSubstr("'gpu.peak.fp8'"));
}

TEST(BuiltinPlatforms, VoltaAndMaxwellHaveNoTf32OrBf16) {
  for (const char* name : {"v100-16gb", "v100-32gb", "titanx-maxwell"}) {
    SCOPED_TRACE(name);
    const Platform p = builtin_platform(name);
    EXPECT_EQ(p.gpu.peak_tf32, 0);
    EXPECT_EQ(p.gpu.peak_bf16, 0);
  }
  EXPECT_EQ(builtin_platform("titanx-maxwell").gpu.peak_fp16, builtin_platform("titanx-maxwell").gpu.peak_fp32);
}

TEST(BuiltinPlatforms, UnknownNameListsTheShippedOnes) {
  try {
    builtin_platform("nope");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown platform 'nope'"));
    EXPECT_THAT(e.what(), HasSubstr("a100-40gb, a100-80gb, dgx-a100-superpod, dgx-h100-superpod, dgx1-v100-cluster, h100-100k, h100-80gb, h100-pcie, h200, "
                                    "p5-48xlarge, perlmutter-gpu, polaris, titanx-maxwell, v100-16gb, v100-32gb"));
  }
}

// ---- peak_flops ----------------------------------------------------------------------------

TEST(PeakFlops, PicksThePeakOfTheArithmeticType) {
  const Platform a100 = builtin_platform("a100-40gb");
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::f32, false), 19.5e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::f32, true), 156e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::f16, false), 312e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::bf16, true), 312e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::f64, false), 9.75e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::i64, true), 19.5e12);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::boolean, false), 19.5e12);
}

TEST(PeakFlops, WithoutTf32OrBf16UnitsFallsBackToFp32) {
  const Platform v100 = builtin_platform("v100-16gb");
  EXPECT_DOUBLE_EQ(v100.peak_flops(DType::f32, true), 15.7e12);
  EXPECT_DOUBLE_EQ(v100.peak_flops(DType::bf16, false), 15.7e12);
  EXPECT_DOUBLE_EQ(v100.peak_flops(DType::f16, false), 125e12);
}

// ---- Units ---------------------------------------------------------------------------------

// The unit tables, through the parser itself: platform values are bounded (PlatformBounds below),
// and units must be tested beyond those bounds too.
TEST(PlatformUnits, Bytes) {
  const auto memory = [](const std::string& text) { return units::parse_byte_count(text); };
  EXPECT_EQ(memory("2048 B"), 2048);
  EXPECT_EQ(memory("3 kB"), 3000);
  EXPECT_EQ(memory("3 KB"), 3000);
  EXPECT_EQ(memory("5 MB"), 5'000'000);
  EXPECT_EQ(memory("12 GB"), 12'000'000'000);
  EXPECT_EQ(memory("2 TB"), 2'000'000'000'000);
  EXPECT_EQ(memory("1 PB"), 1'000'000'000'000'000);
  EXPECT_EQ(memory("1.5 KiB"), 1536);
  EXPECT_EQ(memory("3 MiB"), 3 << 20);
  EXPECT_EQ(memory("40 GiB"), 40LL << 30);
  EXPECT_EQ(memory("40GiB"), 40LL << 30);
  EXPECT_EQ(memory("2 TiB"), 2LL << 40);
  EXPECT_EQ(memory("1 PiB"), 1LL << 50);
  EXPECT_EQ(memory("1e3 B"), 1000);
}

TEST(PlatformUnits, Bandwidth) {
  const auto bandwidth = [](const std::string& text) { return units::parse_quantity(text, units::Dimension::bandwidth); };
  EXPECT_DOUBLE_EQ(bandwidth("7 B/s"), 7);
  EXPECT_DOUBLE_EQ(bandwidth("7 kB/s"), 7e3);
  EXPECT_DOUBLE_EQ(bandwidth("7 KB/s"), 7e3);
  EXPECT_DOUBLE_EQ(bandwidth("7 MB/s"), 7e6);
  EXPECT_DOUBLE_EQ(bandwidth("1555 GB/s"), 1555e9);
  EXPECT_DOUBLE_EQ(bandwidth("3.35 TB/s"), 3.35e12);
  EXPECT_DOUBLE_EQ(bandwidth("1 PB/s"), 1e15);
  EXPECT_DOUBLE_EQ(bandwidth("1 KiB/s"), 1024);
  EXPECT_DOUBLE_EQ(bandwidth("1 MiB/s"), 1048576);
  EXPECT_DOUBLE_EQ(bandwidth("2 GiB/s"), 2 * kGiB);
  EXPECT_DOUBLE_EQ(bandwidth("1 TiB/s"), 1024 * kGiB);
}

TEST(PlatformUnits, FlopRates) {
  const auto fp32 = [](const std::string& text) { return units::parse_quantity(text, units::Dimension::flop_rate); };
  EXPECT_DOUBLE_EQ(fp32("5 FLOP/s"), 5);
  EXPECT_DOUBLE_EQ(fp32("5 kFLOP/s"), 5e3);
  EXPECT_DOUBLE_EQ(fp32("5 MFLOP/s"), 5e6);
  EXPECT_DOUBLE_EQ(fp32("672 GFLOP/s"), 672e9);
  EXPECT_DOUBLE_EQ(fp32("19.5 TFLOP/s"), 19.5e12);
  EXPECT_DOUBLE_EQ(fp32("1 PFLOP/s"), 1e15);
  EXPECT_DOUBLE_EQ(fp32("19.5 TFLOPS"), 19.5e12);
  EXPECT_DOUBLE_EQ(fp32("7 GFLOPS"), 7e9);
}

TEST(PlatformUnits, TimesAndPower) {
  const auto overhead = [](const std::string& text) { return units::parse_quantity(text, units::Dimension::time); };
  EXPECT_DOUBLE_EQ(overhead("2 s"), 2);
  EXPECT_DOUBLE_EQ(overhead("3 ms"), 3e-3);
  EXPECT_DOUBLE_EQ(overhead("5 us"), 5e-6);
  EXPECT_DOUBLE_EQ(overhead("5 \u00b5s"), 5e-6);
  EXPECT_DOUBLE_EQ(overhead("700 ns"), 700e-9);
  EXPECT_DOUBLE_EQ(overhead("0"), 0) << "zero needs no unit";

  const Platform p = parsed(with("  launch_overhead: 5 us\n", "  launch_overhead: 5 us\n  power: {idle: 50 W, max: 1.5 kW}\n"));
  EXPECT_DOUBLE_EQ(p.gpu.idle_power, 50);
  EXPECT_DOUBLE_EQ(p.gpu.max_power, 1500);
}

TEST(PlatformUnits, BadUnitsAndValuesAreRejected) {
  std::string e = error_of(with("memory: 40 GiB", "memory: 40 GX"));
  EXPECT_THAT(e, HasSubstr("p.yaml:4:11: 'gpu.memory' is '40 GX': unknown unit 'GX'"));
  EXPECT_THAT(e, HasSubstr("valid units: B, kB, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"));

  e = error_of(with("memory: 40 GiB", "memory: 40"));
  EXPECT_THAT(e, HasSubstr("p.yaml:4:11: 'gpu.memory' is '40': a quantity needs a unit"));

  e = error_of(with("memory: 40 GiB", "memory: -40 GiB"));
  EXPECT_THAT(e, HasSubstr("p.yaml:4:11: 'gpu.memory' is -40 GiB; expected between 1 MiB and 1 PiB"));

  e = error_of(with("memory: 40 GiB", "memory: lots"));
  EXPECT_THAT(e, HasSubstr("'gpu.memory' is 'lots': expected a number followed by a unit, e.g. '40 GiB'"));

  e = error_of(with("memory: 40 GiB", "memory: 40 GiB/s"));
  EXPECT_THAT(e, HasSubstr("unknown unit 'GiB/s'"));

  e = error_of(with("memory: 40 GiB", "memory: 1e400 B"));
  EXPECT_THAT(e, HasSubstr("out of range"));

  e = error_of(with("memory: 40 GiB", "memory: 16 EiB"));
  EXPECT_THAT(e, HasSubstr("unknown unit 'EiB'"));

  e = error_of(with("memory: 40 GiB", "memory: 9000 PiB"));
  EXPECT_THAT(e, HasSubstr("'gpu.memory' is 9000 PiB; expected between 1 MiB and 1 PiB"));

  e = error_of(with("memory: 40 GiB", "memory: 0.25 B"));
  EXPECT_THAT(e, HasSubstr("'gpu.memory' is 0.25 B; expected between 1 MiB and 1 PiB"));

  e = error_of(with("bandwidth: 25 GB/s", "bandwidth: 100 Gb/s"));
  EXPECT_THAT(e, HasSubstr("p.yaml:9:36: 'host_link.bandwidth' is '100 Gb/s': unknown unit 'Gb/s'"));

  e = error_of(with("latency: 1 us", "latency: -1 us"));
  EXPECT_THAT(e, HasSubstr("'host_link.latency' is -1 us; expected between 0 s and 1 s"));

  e = error_of(with("fp32: 19.5 TFLOP/s", "fp32: 0"));
  EXPECT_THAT(e, HasSubstr("'gpu.peak.fp32' is 0; expected between 1 MFLOP/s and 1000 PFLOP/s"));

  e = error_of(with("fp16: 312 TFLOP/s", "fp16: inf TFLOP/s"));
  EXPECT_THAT(e, HasSubstr("'gpu.peak.fp16' is 'inf TFLOP/s': expected a number"));

  e = error_of(with("launch_overhead: 5 us", "launch_overhead: [5, us]"));
  EXPECT_THAT(e, HasSubstr("p.yaml:7:20: 'gpu.launch_overhead' must be a quantity in seconds with a unit (s, ms, us, \u00b5s, ns)"));
}

TEST(PlatformUnits, Tf32AndBf16MayBeZero) {
  const Platform p = parsed(with("tf32: 156 TFLOP/s", "tf32: 0", with("bf16: 312 TFLOP/s", "bf16: 0 TFLOP/s")));
  EXPECT_EQ(p.gpu.peak_tf32, 0);
  EXPECT_EQ(p.gpu.peak_bf16, 0);
  EXPECT_THAT(error_of(with("tf32: 156 TFLOP/s", "tf32: -1 TFLOP/s")), HasSubstr("'gpu.peak.tf32' is -1 TFLOP/s; expected 0 (unsupported) or between 1 MFLOP/s and 1000 PFLOP/s"));
}

TEST(PlatformUnits, EveryQuantityIsFiniteAfterItsUnit) {
  // 1e300 is a finite double; 1e300 GB/s is not (defect 05: SimGrid aborted on it).
  EXPECT_THROW(units::parse_quantity("1e300 GB/s", units::Dimension::bandwidth), units::OutOfRange);
  EXPECT_THROW(units::parse_quantity("1e300 PiB", units::Dimension::bytes), units::OutOfRange);
  try {
    units::parse_quantity("1e300 TFLOP/s", units::Dimension::flop_rate);
    ADD_FAILURE() << "expected OutOfRange";
  } catch (const units::OutOfRange& e) {
    EXPECT_EQ(e.written(), "1e300 TFLOP/s") << "as written";
    EXPECT_THAT(e.what(), HasSubstr("1e300 TFLOP/s is out of range; expected a finite number of FLOP/s"));
  }
  EXPECT_DOUBLE_EQ(units::parse_quantity("1e300 B/s", units::Dimension::bandwidth), 1e300) << "finite: range checks are the caller's";
}

TEST(PlatformUnits, BoundedQuantities) {
  const units::Bounds one_second{0, 1};
  EXPECT_DOUBLE_EQ(units::parse_quantity("20 us", units::Dimension::time, one_second), 20e-6);
  EXPECT_DOUBLE_EQ(units::parse_quantity("1 s", units::Dimension::time, one_second), 1) << "bounds are inclusive";
  EXPECT_DOUBLE_EQ(units::parse_quantity("0", units::Dimension::time, one_second), 0);
  try {
    units::parse_quantity("1e300 s", units::Dimension::time, one_second);  // defect 07, s3.yaml: a codec latency
    ADD_FAILURE() << "expected OutOfRange";
  } catch (const units::OutOfRange& e) {
    EXPECT_STREQ(e.what(), "1e300 s is out of range; expected between 0 s and 1 s");
    EXPECT_EQ(e.expected(), "between 0 s and 1 s");
  }
  EXPECT_THROW(units::parse_quantity("1001 ms", units::Dimension::time, one_second), units::OutOfRange);
  EXPECT_THROW(units::parse_quantity("-1 ns", units::Dimension::time, one_second), units::OutOfRange);
  // A malformed quantity is still reported as such, not as out of range.
  try {
    units::parse_quantity("5", units::Dimension::time, one_second);
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const units::OutOfRange&) {
    ADD_FAILURE() << "a missing unit is not a range error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("a quantity needs a unit"));
  }
}

TEST(PlatformUnits, ByteCountsMustFitInt64AndSaySo) {
  EXPECT_EQ(units::parse_byte_count("4 GiB"), 4LL << 30);
  EXPECT_EQ(units::parse_byte_count("0"), 0);
  EXPECT_EQ(units::parse_byte_count("8191 PiB"), 8191LL << 50);
  try {
    units::parse_byte_count("1e19 B");  // was "budget_bytes must be >= 0" after a cast to int64
    ADD_FAILURE() << "expected OutOfRange";
  } catch (const units::OutOfRange& e) {
    EXPECT_THAT(e.what(), HasSubstr("1e19 B is out of range; expected at most 2^63-1 B (about 8 EiB), the largest representable byte count"));
    EXPECT_THAT(e.what(), Not(HasSubstr(">= 0")));
  }
  EXPECT_THROW(units::parse_byte_count("8192 PiB"), units::OutOfRange) << "2^63 B";
  EXPECT_THROW(units::parse_byte_count("1e300 PiB"), units::OutOfRange);
  try {
    units::parse_byte_count("-1 KiB");
    ADD_FAILURE() << "expected OutOfRange";
  } catch (const units::OutOfRange& e) {
    EXPECT_THAT(e.what(), HasSubstr("-1 KiB is out of range; expected between 0 B and 2^63-1 B"));
  }
  EXPECT_EQ(units::parse_byte_count("2 KiB", 1024, 4096), 2048);
  EXPECT_THROW(units::parse_byte_count("5 KiB", 1024, 4096), units::OutOfRange);
}

// Byte counts come from the decimal digits as written, not through a double, which cannot hold
// 2^63-1 (it rounds to 2^63 and was refused as "9.22337e+18 B": shared/defects-2/22).
TEST(PlatformUnits, ByteCountsAreExactAndRefusedAsWritten) {
  EXPECT_EQ(units::parse_byte_count("9223372036854775807 B"), units::kMaxByteCount);
  EXPECT_EQ(units::parse_byte_count("9.223372036854775807e18 B"), units::kMaxByteCount);
  EXPECT_EQ(units::parse_byte_count("9223372036854775806B"), units::kMaxByteCount - 1);
  // 8192 PiB is 2^63; this is 1.13 B less, which rounds to 2^63-1.
  EXPECT_EQ(units::parse_byte_count("8191.999999999999999 PiB"), units::kMaxByteCount);
  for (const std::string text : {"9223372036854775808 B", "8192 PiB", "9.2233720368547758075e18 B"}) {
    try {
      units::parse_byte_count(text);
      ADD_FAILURE() << text << ": expected OutOfRange";
    } catch (const units::OutOfRange& e) {
      EXPECT_EQ(e.written(), text) << "shown as written, never rounded";
      EXPECT_EQ(e.expected(), "at most 2^63-1 B (about 8 EiB), the largest representable byte count");
    }
  }
  EXPECT_EQ(units::parse_byte_count("1.5 KiB"), 1536);
  EXPECT_EQ(units::parse_byte_count("0.5 B"), 1) << "halves away from zero, as llround";
  EXPECT_EQ(units::parse_byte_count("0.4999999999999999999999 B"), 0);
  EXPECT_EQ(units::parse_byte_count("1e-40 PiB"), 0);
  EXPECT_EQ(units::parse_byte_count("0.001 kB"), 1);
  EXPECT_EQ(units::parse_byte_count("-0 B"), 0);
  EXPECT_EQ(units::parse_byte_count("-3 B", -5, 5), -3);
  EXPECT_THROW(units::parse_byte_count("-9223372036854775808 B"), units::OutOfRange);
  // More significant digits than 128-bit arithmetic holds: through the double, still bounded.
  EXPECT_EQ(units::parse_byte_count("1.000000000000000000000000000000000000001 KiB"), 1024);
  EXPECT_THROW(units::parse_byte_count("10000000000000000000000000000000000000000 B"), units::OutOfRange);
}

TEST(PlatformUnits, MessagesNeverPrintHundredsOfDigits) {
  const std::string huge = "1" + std::string(300, '0');
  try {
    units::parse_quantity(huge + " GB/s", units::Dimension::bandwidth, {1e3, 1e15});
    ADD_FAILURE() << "expected OutOfRange";
  } catch (const units::OutOfRange& e) {
    EXPECT_STREQ(e.what(), "1e+300 GB/s is out of range; expected between 1 kB/s and 1 PB/s");
  }
  const std::string e = error_of(with("bandwidth: 25 GB/s", "bandwidth: " + huge + " GB/s"));
  EXPECT_THAT(e, HasSubstr("p.yaml:9:36: 'host_link.bandwidth' is 1e+300 GB/s; expected between 1 kB/s and 1 PB/s"));
  EXPECT_LT(e.size(), 200u) << e;
}

TEST(PlatformUnits, FormatQuantityPicksAWholeNumberUnit) {
  EXPECT_EQ(units::format_quantity(1 << 20, units::Dimension::bytes), "1 MiB");
  EXPECT_EQ(units::format_quantity(1e15, units::Dimension::bandwidth), "1 PB/s");
  EXPECT_EQ(units::format_quantity(1e18, units::Dimension::flop_rate), "1000 PFLOP/s");
  EXPECT_EQ(units::format_quantity(3600, units::Dimension::time), "3600 s");
  EXPECT_EQ(units::format_quantity(0, units::Dimension::time), "0 s");
  EXPECT_EQ(units::format_quantity(1e-300, units::Dimension::flop_rate), "1e-300 FLOP/s");
}

// ---- Bounds: every value finite and physically plausible after units -----------------------

TEST(PlatformBounds, InfiniteBandwidthIsRejectedAtItsLine) {
  // Defect 05: 1e300 GB/s overflowed to +inf, was accepted, and SimGrid aborted.
  EXPECT_THAT(error_of(with("bandwidth: 25 GB/s", "bandwidth: 1e300 GB/s")),
              HasSubstr("p.yaml:9:36: 'host_link.bandwidth' is 1e300 GB/s; expected between 1 kB/s and 1 PB/s"));
  EXPECT_THAT(error_of(with("memory_bandwidth: 1555 GB/s", "memory_bandwidth: 1e300 GB/s")),
              HasSubstr("p.yaml:5:21: 'gpu.memory_bandwidth' is 1e300 GB/s; expected between 1 kB/s and 1 PB/s"));
}

TEST(PlatformBounds, TinyRatesAreRejectedAtTheirLine) {
  // Defect 06: fp32 1e-300 FLOP/s gave "task 0 (conv1) has an invalid duration", exit 1.
  EXPECT_THAT(error_of(with("fp32: 19.5 TFLOP/s", "fp32: 1e-300 FLOP/s")),
              HasSubstr("p.yaml:6:16: 'gpu.peak.fp32' is 1e-300 FLOP/s; expected between 1 MFLOP/s and 1000 PFLOP/s"));
  // Defect 07 (s.yaml): memory bandwidth 1e-300 B/s made every duration infinite.
  EXPECT_THAT(error_of(with("memory_bandwidth: 1555 GB/s", "memory_bandwidth: 1e-300 B/s")),
              HasSubstr("p.yaml:5:21: 'gpu.memory_bandwidth' is 1e-300 B/s; expected between 1 kB/s and 1 PB/s"));
  EXPECT_THAT(error_of(with("tf32: 156 TFLOP/s", "tf32: 1e-300 FLOP/s")),
              HasSubstr("'gpu.peak.tf32' is 1e-300 FLOP/s; expected 0 (unsupported) or between 1 MFLOP/s and 1000 PFLOP/s"));
  EXPECT_THAT(error_of(with("flops: 1 TFLOP/s", "flops: 1 kFLOP/s")), HasSubstr("p.yaml:8:"));
  EXPECT_THAT(error_of(with("flops: 1 TFLOP/s", "flops: 1 kFLOP/s")), HasSubstr("'host.flops' is 1 kFLOP/s; expected between"));
}

TEST(PlatformBounds, EveryFieldIsBoundedAndTheBoundsAreInclusive) {
  struct Case {
    std::string from;
    std::string low;       // just inside
    std::string high;      // just inside
    std::string too_low;   // just outside
    std::string too_high;  // just outside
  };
  const std::vector<Case> cases{
      {"memory: 40 GiB", "memory: 1 MiB", "memory: 1 PiB", "memory: 1048575 B", "memory: 1025 TiB"},
      {"memory: 64 GiB", "memory: 1 MiB", "memory: 1 PiB", "memory: 1 KiB", "memory: 2 PiB"},
      {"memory_bandwidth: 1555 GB/s", "memory_bandwidth: 1 kB/s", "memory_bandwidth: 1 PB/s", "memory_bandwidth: 999 B/s",
       "memory_bandwidth: 1.001 PB/s"},
      {"memory_bandwidth: 100 GB/s", "memory_bandwidth: 1 kB/s", "memory_bandwidth: 1 PB/s", "memory_bandwidth: 0 B/s",
       "memory_bandwidth: 2 PB/s"},
      {"fp32: 19.5 TFLOP/s", "fp32: 1 MFLOP/s", "fp32: 1000 PFLOP/s", "fp32: 999 kFLOP/s", "fp32: 1001 PFLOP/s"},
      {"fp16: 312 TFLOP/s", "fp16: 1 MFLOP/s", "fp16: 1000 PFLOP/s", "fp16: 0", "fp16: 1e19 FLOP/s"},
      {"bf16: 312 TFLOP/s", "bf16: 1 MFLOP/s", "bf16: 1000 PFLOP/s", "bf16: 1 FLOP/s", "bf16: 1e300 PFLOP/s"},
      {"launch_overhead: 5 us", "launch_overhead: 0 s", "launch_overhead: 1 s", "launch_overhead: -1 ns", "launch_overhead: 1.5 s"},
      {"latency: 1 us", "latency: 0", "latency: 1000 ms", "latency: -1 us", "latency: 1e300 s"},
      {"bandwidth: 25 GB/s", "bandwidth: 1000 B/s", "bandwidth: 1 PB/s", "bandwidth: 1e-300 B/s", "bandwidth: 1e300 GB/s"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.from);
    EXPECT_NO_THROW(parsed(with(c.from, c.low)));
    EXPECT_NO_THROW(parsed(with(c.from, c.high)));
    EXPECT_THAT(error_of(with(c.from, c.too_low)), HasSubstr("; expected "));
    EXPECT_THAT(error_of(with(c.from, c.too_high)), HasSubstr("; expected "));
  }
  const std::string power = "  launch_overhead: 5 us\n";
  EXPECT_NO_THROW(parsed(with(power, power + "  power: {idle: 0 W, max: 1000 kW}\n")));
  EXPECT_THAT(error_of(with(power, power + "  power: {idle: 50 W, max: 1e300 kW}\n")),
              HasSubstr("'gpu.power.max' is 1e300 kW; expected between 1 W and 1000 kW"));
  EXPECT_THAT(error_of(with(power, power + "  power: {idle: -1 W, max: 400 W}\n")), HasSubstr("'gpu.power.idle' is -1 W; expected"));
  const std::string link = "gpu_link: {name: NVLink, bandwidth: 300 GB/s, latency: 2 us}\n";
  EXPECT_NO_THROW(parsed(kMinimal + link));
  EXPECT_THAT(error_of(kMinimal + "gpu_link: {name: NVLink, bandwidth: 1e300 GB/s, latency: 2 us}\n"),
              HasSubstr("p.yaml:10:37: 'gpu_link.bandwidth' is 1e300 GB/s"));
}

TEST(PlatformBounds, EfficienciesBelowATenthOfAPercentAreRejected) {
  EXPECT_NO_THROW(parsed(kMinimal + "efficiency:\n  compute: {default: 0.001}\n"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  compute: {default: 1e-300}\n"),
              HasSubstr("p.yaml:11:22: 'efficiency.compute.default' is '1e-300'; expected a fraction of peak between 0.001 and 1"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  memory: {conv: 0.0009}\n"), HasSubstr("'efficiency.memory.conv' is '0.0009'"));
  EXPECT_DOUBLE_EQ(*parsed(kMinimal + "efficiency:\n  tensor_core_cuda11: 0.5\n").efficiency.tensor_core_cuda11, 0.5);
  EXPECT_DOUBLE_EQ(parsed(kMinimal + "efficiency:\n  conv_wave_loss: 0.25\n").efficiency.conv_wave_loss, 0.25);
  EXPECT_DOUBLE_EQ(parsed(kMinimal).efficiency.conv_wave_loss, 1.0);
  EXPECT_DOUBLE_EQ(parsed(kMinimal + "efficiency:\n  gemm_k_overhead: 160\n").efficiency.gemm_k_overhead, 160);
  EXPECT_DOUBLE_EQ(parsed(kMinimal).efficiency.gemm_k_overhead, 0);
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  gemm_k_overhead: -1\n"),
              HasSubstr("'efficiency.gemm_k_overhead' is '-1'; expected a number of elements of K from 0 to 65536"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  gemm_k_overhead: 1e6\n"), HasSubstr("'efficiency.gemm_k_overhead' is '1e6'"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  gemm_k_overhead: .nan\n"), HasSubstr("'efficiency.gemm_k_overhead' is '.nan'"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  gemm_k_overhead: [1]\n"), HasSubstr("'efficiency.gemm_k_overhead' is "));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  conv_wave_loss: 0\n"), HasSubstr("'efficiency.conv_wave_loss' is "));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  tensor_core_cuda11: 2\n"), HasSubstr("'efficiency.tensor_core_cuda11' is '2'"));
}

TEST(PlatformBounds, ShippedPlatformsAreWithinTheBounds) {
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(builtin_platform(name));
  }
}

// ---- Structure -----------------------------------------------------------------------------

TEST(PlatformYaml, MinimalPlatformTakesTheDefaults) {
  const Platform p = parsed(kMinimal);
  EXPECT_EQ(p.name, "test");
  EXPECT_EQ(p.source, "p.yaml");
  EXPECT_EQ(p.gpu.name, "Test GPU");
  EXPECT_EQ(p.host.cores, 8);
  EXPECT_EQ(p.gpus_per_node, 1);
  EXPECT_EQ(p.gpu_link.bandwidth, 0) << "no gpu_link";
  EXPECT_EQ(p.gpu.max_power, 0) << "power unknown";
  EXPECT_EQ(p.efficiency.compute_for(OpKind::conv), 1.0);
  EXPECT_EQ(p.efficiency.memory_for(OpKind::relu), 1.0);
}

TEST(PlatformYaml, ReadsEfficienciesPerOpKind) {
  const Platform p = parsed(kMinimal + "efficiency:\n  compute: {default: 0.5, conv: 0.7, attention: 1}\n  memory: {default: 0.8, embedding: 0.3}\n");
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::conv), 0.7);
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::attention), 1.0);
  EXPECT_DOUBLE_EQ(p.efficiency.compute_for(OpKind::linear), 0.5);
  EXPECT_DOUBLE_EQ(p.efficiency.memory_for(OpKind::embedding), 0.3);
  EXPECT_DOUBLE_EQ(p.efficiency.memory_for(OpKind::conv), 0.8);
}

TEST(PlatformYaml, UnknownKeysAreRejectedWithTheValidOnes) {
  std::string e = error_of(kMinimal + "gpus: 8\n");
  // The closest valid key is suggested, between the key and the list (support's did_you_mean).
  EXPECT_THAT(e, HasSubstr("p.yaml:10:1: unknown key 'gpus' in the platform; did you mean 'gpu'? "
                           "valid keys: name, gpu, host, host_link, gpu_link, gpus_per_node, efficiency"));

  e = error_of(with("  launch_overhead: 5 us\n", "  launch_overhead: 5 us\n  tdp: 400 W\n"));
  EXPECT_THAT(e, HasSubstr("p.yaml:8:3: unknown key 'tdp' in gpu; valid keys: name, memory, memory_visible, cuda_context, compute_capability, memory_bandwidth, peak, launch_overhead, sms, collective_sms, power"));

  e = error_of(with("fp16: 312", "fp4: 1248 TFLOP/s, fp16: 312"));
  EXPECT_THAT(e, HasSubstr("p.yaml:6:49: unknown key 'fp4' in gpu.peak; did you mean 'fp8'? valid keys: fp32, tf32, fp16, bf16, fp8"));

  e = error_of(kMinimal + "efficiency:\n  compute: {convolution: 0.7}\n");
  EXPECT_THAT(e, HasSubstr("p.yaml:11:13: unknown key 'convolution' in efficiency.compute"));
  EXPECT_THAT(e, HasSubstr("valid keys: default, conv, matmul, linear, relu"));
  // The op-kind maps read their keys themselves, and suggest too.
  e = error_of(kMinimal + "efficiency:\n  compute: {matmull: 0.7}\n");
  EXPECT_THAT(e, HasSubstr("p.yaml:11:13: unknown key 'matmull' in efficiency.compute; did you mean 'matmul'? valid keys: default, conv,"));

  e = error_of(kMinimal + "gpu_link: {name: NVLink, bandwidth: 300 GB/s, latency: 2 us, lanes: 12}\n");
  EXPECT_THAT(e, HasSubstr("p.yaml:10:62: unknown key 'lanes' in gpu_link; valid keys: name, bandwidth, latency"));
}

TEST(PlatformYaml, MissingKeysAndWrongTypesAreNamed) {
  EXPECT_THAT(error_of(with("  memory: 40 GiB\n", "")), HasSubstr("p.yaml:3:3: missing key 'memory' in gpu"));
  EXPECT_THAT(error_of(with("bf16: 312 TFLOP/s", "")), HasSubstr("missing key 'bf16' in gpu.peak"));
  EXPECT_THAT(error_of(with("host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n", "")),
              HasSubstr("p.yaml:1:1: missing key 'host_link' in the platform"));
  EXPECT_THAT(error_of(with("name: test\n", "")), HasSubstr("missing key 'name' in the platform"));
  EXPECT_THAT(error_of(with("  name: Test GPU\n", "  name: [a, b]\n")), HasSubstr("p.yaml:3:9: 'gpu.name' must be a non-empty string"));
  EXPECT_THAT(error_of(with("cores: 8", "cores: 8.5")), HasSubstr("p.yaml:8:32: 'host.cores' is '8.5'; expected a positive integer"));
  EXPECT_THAT(error_of(kMinimal + "gpus_per_node: 0\n"), HasSubstr("p.yaml:10:16: 'gpus_per_node' is '0'; expected a positive integer"));
  EXPECT_THAT(error_of(with("peak: {", "peak: 3 #")), HasSubstr("p.yaml:6:9: 'gpu.peak' must be a mapping with the keys fp32, tf32, fp16, bf16"));
  EXPECT_THAT(error_of("- a\n- b\n"), HasSubstr("p.yaml:1:1: expected a mapping with the keys name, gpu"));
  EXPECT_THAT(error_of("gpu: {name: [\n"), HasSubstr("p.yaml:"));
  EXPECT_THAT(error_of("gpu: {name: [\n"), HasSubstr("malformed YAML"));
  EXPECT_THAT(error_of(kMinimal + "name: again\n"), HasSubstr("p.yaml:10:1: key 'name' appears twice in the platform"));
}

TEST(PlatformYaml, RangesAreChecked) {
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  memory: {default: 1.5}\n"),
              HasSubstr("p.yaml:11:21: 'efficiency.memory.default' is '1.5'; expected a fraction of peak between 0.001 and 1"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  compute: {conv: 0}\n"), HasSubstr("'efficiency.compute.conv' is '0'; expected a fraction"));
  EXPECT_THAT(error_of(kMinimal + "efficiency:\n  compute: 0.7\n"), HasSubstr("'efficiency.compute' must be a mapping"));
  EXPECT_THAT(error_of(with("  launch_overhead: 5 us\n", "  launch_overhead: 5 us\n  power: {idle: 500 W, max: 400 W}\n")),
              HasSubstr("p.yaml:8:17: 'gpu.power.idle' (500 W) exceeds 'gpu.power.max' (400 W)"));
  EXPECT_THAT(error_of(with("memory_bandwidth: 100 GB/s", "memory_bandwidth: 0 GB/s")),
              HasSubstr("'host.memory_bandwidth' is 0 GB/s; expected between 1 kB/s and 1 PB/s"));
}

TEST(PlatformYaml, StreamingMultiprocessorsAreOptionalAndBounded) {
  const std::string sms = "  launch_overhead: 5 us\n";
  EXPECT_EQ(parsed(kMinimal).gpu.sms, 0) << "not given: no wave quantization";
  EXPECT_EQ(parsed(with(sms, sms + "  sms: 108\n")).gpu.sms, 108);
  EXPECT_EQ(parsed(with(sms, sms + "  sms: 1\n")).gpu.sms, 1);
  EXPECT_EQ(parsed(with(sms, sms + "  sms: 10000\n")).gpu.sms, 10000);
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 0\n")),
              HasSubstr("p.yaml:8:8: 'gpu.sms' is '0'; expected a whole number of streaming multiprocessors from 1 to 10000"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 16896\n")), HasSubstr("'gpu.sms' is '16896'; expected a whole number"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 108.5\n")), HasSubstr("'gpu.sms' is '108.5'; expected"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: -4\n")), HasSubstr("'gpu.sms' is '-4'; expected"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 1e300\n")), HasSubstr("'gpu.sms' is '1e300'; expected"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: [108]\n")), HasSubstr("p.yaml:8:8: 'gpu.sms' is "));
}

// The SMs a running collective holds: optional (0: none), a share of gpu.sms, so it needs them.
TEST(PlatformYaml, CollectiveSmsAreAShareOfTheSms) {
  const std::string sms = "  launch_overhead: 5 us\n";
  EXPECT_EQ(parsed(kMinimal).gpu.collective_sms, 0) << "not given: collectives hold no SMs";
  EXPECT_EQ(parsed(with(sms, sms + "  collective_sms: 24\n  sms: 132\n")).gpu.collective_sms, 24) << "in either order";
  EXPECT_EQ(parsed(with(sms, sms + "  sms: 132\n  collective_sms: 0\n")).gpu.collective_sms, 0);
  EXPECT_EQ(parsed(with(sms, sms + "  sms: 132\n  collective_sms: 132\n")).gpu.collective_sms, 132);
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 132\n  collective_sms: 133\n")),
              HasSubstr("p.yaml:9:19: 'gpu.collective_sms' is '133'; expected a whole number of streaming multiprocessors from 0 to gpu.sms (132)"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 132\n  collective_sms: -1\n")), HasSubstr("'gpu.collective_sms' is '-1'; expected"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 132\n  collective_sms: 2.5\n")), HasSubstr("'gpu.collective_sms' is '2.5'; expected"));
  EXPECT_THAT(error_of(with(sms, sms + "  sms: 132\n  collective_sms: [24]\n")), HasSubstr("p.yaml:9:19: 'gpu.collective_sms' is "));
  EXPECT_THAT(error_of(with(sms, sms + "  collective_sms: 24\n")),
              HasSubstr("p.yaml:8:19: 'gpu.collective_sms' is given without 'gpu.sms'; expected both"));
}

TEST(PlatformYaml, PageableBandwidthIsOptionalAndAtMostThePinnedRate) {
  EXPECT_EQ(parsed(kMinimal).host_link.pageable_bandwidth, 0) << "not given: pageable copies are refused";
  const std::string link = "latency: 1 us}";
  const auto pageable = [&](const std::string& rate) { return with(link, "latency: 1 us, pageable_bandwidth: " + rate + "}"); };
  EXPECT_DOUBLE_EQ(parsed(pageable("6 GB/s")).host_link.pageable_bandwidth, 6e9);
  EXPECT_THAT(error_of(pageable("30 GB/s")),
              HasSubstr("'host_link.pageable_bandwidth' (30 GB/s) exceeds host_link.bandwidth; expected at most the pinned rate"));
  EXPECT_THAT(error_of(pageable("0 GB/s")), HasSubstr("pageable_bandwidth"));
}

TEST(PlatformYaml, CheckpointCopyBandwidthIsOptionalAndAtMostTheLinksRate) {
  EXPECT_EQ(parsed(kMinimal).host_link.checkpoint_copy_bandwidth, 0) << "not given: the link's rate";
  const std::string link = "latency: 1 us}";
  const auto copy = [&](const std::string& rate) { return with(link, "latency: 1 us, checkpoint_copy_bandwidth: " + rate + "}"); };
  EXPECT_DOUBLE_EQ(parsed(copy("11.5 GB/s")).host_link.checkpoint_copy_bandwidth, 11.5e9);
  EXPECT_THAT(error_of(copy("30 GB/s")),
              HasSubstr("'host_link.checkpoint_copy_bandwidth' (30 GB/s) exceeds host_link.bandwidth; expected at most the link's rate"));
  EXPECT_THAT(error_of(copy("0 GB/s")), HasSubstr("checkpoint_copy_bandwidth"));
  EXPECT_THAT(error_of(copy("1 s")), HasSubstr("checkpoint_copy_bandwidth"));
}

TEST(PlatformYaml, SharedStoragesCheckpointOverheadIsOptionalAndATime) {
  const std::string shared =
      "storage:\n  shared: {name: fs, read_bandwidth: 100 GB/s, write_bandwidth: 100 GB/s, per_node_bandwidth: 10 GB/s, latency: 100 us";
  const Platform none = parsed(kMinimal + shared + "}\n");
  ASSERT_TRUE(none.storage && none.storage->shared);
  EXPECT_EQ(none.storage->shared->checkpoint_overhead, 0) << "not given: none";
  const auto overhead = [&](const std::string& value) { return kMinimal + shared + ", checkpoint_overhead: " + value + "}\n"; };
  EXPECT_DOUBLE_EQ(parsed(overhead("120 ms")).storage->shared->checkpoint_overhead, 0.12);
  EXPECT_THAT(error_of(overhead("2 s")), HasSubstr("storage.shared.checkpoint_overhead"));
  EXPECT_THAT(error_of(overhead("fast")), HasSubstr("checkpoint_overhead"));
  EXPECT_THAT(error_of(overhead("-1 ms")), HasSubstr("checkpoint_overhead"));
}

TEST(BuiltinPlatforms, EveryPlatformWithStorageGivesTorchSavesRate) {
  // A sync checkpoint needs it (sim/io.hpp, check_io_inputs); the platforms without storage can
  // simulate no checkpoint at all.
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    const Platform p = builtin_platform(name);
    if (p.storage) {
      EXPECT_GT(p.host.torch_save_bandwidth, 0);
    }
  }
}

TEST(PlatformYaml, TorchSaveBandwidthIsOptionalAndARate) {
  EXPECT_EQ(parsed(kMinimal).host.torch_save_bandwidth, 0) << "not given: sync checkpoints are refused (sim/io.hpp)";
  const std::string host = "memory_bandwidth: 100 GB/s}";
  const auto rate = [&](const std::string& value) { return with(host, "memory_bandwidth: 100 GB/s, torch_save_bandwidth: " + value + "}"); };
  EXPECT_DOUBLE_EQ(parsed(rate("0.77 GB/s")).host.torch_save_bandwidth, 0.77e9);
  EXPECT_THAT(error_of(rate("0 GB/s")), HasSubstr("'host.torch_save_bandwidth' is 0 GB/s; expected"));
  EXPECT_THAT(error_of(rate("fast")), HasSubstr("p.yaml:8:"));
  EXPECT_THAT(error_of(rate("1 GHz")), HasSubstr("host.torch_save_bandwidth"));
}

TEST(BuiltinPlatforms, StreamingMultiprocessorsAreTheWhitepapers) {
  // Volta, A100 and H100 whitepapers; GM200: 3072 cores / 128 per Maxwell SM.
  EXPECT_EQ(builtin_platform("v100-16gb").gpu.sms, 80);
  EXPECT_EQ(builtin_platform("v100-32gb").gpu.sms, 80);
  EXPECT_EQ(builtin_platform("a100-40gb").gpu.sms, 108);
  EXPECT_EQ(builtin_platform("a100-80gb").gpu.sms, 108);
  EXPECT_EQ(builtin_platform("h100-80gb").gpu.sms, 132);
  EXPECT_EQ(builtin_platform("h200").gpu.sms, 132);
  EXPECT_EQ(builtin_platform("titanx-maxwell").gpu.sms, 24);
}

// ---- Clusters: nic, network, collectives -------------------------------------------------

// kMinimal as a cluster of 8-GPU nodes. Line numbers matter for the file:line:column assertions.
const std::string kCluster = kMinimal +
                             "gpus_per_node: 8\n"                                                      // 10
                             "nic: {name: NIC, bandwidth: 24 GB/s, latency: 1 us}\n"                   // 11
                             "network:\n"                                                              // 12
                             "  topology: fat_tree\n"                                                  // 13
                             "  nodes: 4\n"                                                            // 14
                             "  fat_tree: {levels: 2, down: [2, 2], up: [1, 2], links: [1, 1]}\n"      // 15
                             "  link: {name: net, bandwidth: 192 GB/s, latency: 0}\n";                 // 16

std::string cluster_with(const std::string& from, const std::string& to) { return with(from, to, kCluster); }

// kCluster with another topology and its parameters (one line, line 15).
std::string cluster_of(const std::string& topology, const std::string& parameters) {
  return with("topology: fat_tree", "topology: " + topology,
              cluster_with("  fat_tree: {levels: 2, down: [2, 2], up: [1, 2], links: [1, 1]}\n", "  " + parameters + "\n"));
}

TEST(PlatformCluster, WithoutANetworkAPlatformIsOneNode) {
  const Platform p = parsed(kMinimal);
  EXPECT_FALSE(p.nic);
  EXPECT_FALSE(p.network);
  EXPECT_EQ(p.max_nodes(), 1);
  EXPECT_EQ(p.collectives.base, 0) << "no collectives: bandwidth terms only";
  // The single-node platforms stay one node; a cluster is one whose network has nodes.
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-80gb", "h100-pcie", "h200", "titanx-maxwell", "v100-16gb", "v100-32gb"}) {
    const Platform shipped = builtin_platform(name);
    EXPECT_FALSE(shipped.network) << name;
    EXPECT_EQ(shipped.max_nodes(), 1) << name;
  }
  for (const std::string& name : builtin_platform_names()) {
    const Platform shipped = builtin_platform(name);
    EXPECT_EQ(shipped.max_nodes(), shipped.network ? shipped.network->nodes : 1) << name;
  }
}

TEST(PlatformCluster, ReadsNicNetworkAndCollectives) {
  const Platform p = parsed(kCluster + "collectives: {base_latency: 8.4 us, intra_node_step: 3.4 us, inter_node_step: 14 us, network_overhead: 2 us}\n");
  ASSERT_TRUE(p.nic);
  EXPECT_EQ(p.nic->name, "NIC");
  EXPECT_DOUBLE_EQ(p.nic->bandwidth, 24e9);
  EXPECT_EQ(p.nic->per_node, 8) << "default: one NIC per GPU";
  ASSERT_TRUE(p.network);
  EXPECT_EQ(p.network->topology, NetworkTopology::fat_tree);
  EXPECT_EQ(p.network->nodes, 4);
  EXPECT_EQ(p.max_nodes(), 4);
  EXPECT_EQ(p.network->fat_tree.levels, 2);
  EXPECT_THAT(p.network->fat_tree.down, ElementsAre(2, 2));
  EXPECT_THAT(p.network->fat_tree.up, ElementsAre(1, 2));
  EXPECT_EQ(p.network->leaves(), 4);
  EXPECT_DOUBLE_EQ(p.network->link.bandwidth, 192e9);
  EXPECT_DOUBLE_EQ(p.collectives.base, 8.4e-6);
  EXPECT_DOUBLE_EQ(p.collectives.intra_node_step, 3.4e-6);
  EXPECT_DOUBLE_EQ(p.collectives.inter_node_step, 14e-6);
  EXPECT_DOUBLE_EQ(p.collectives.network_overhead, 2e-6);

  const Platform fly = parsed(cluster_of("dragonfly", "dragonfly: {groups: [2, 1], chassis: [1, 1], routers: [3, 1], nodes: 2}"));
  EXPECT_EQ(fly.network->topology, NetworkTopology::dragonfly);
  EXPECT_EQ(fly.network->dragonfly.routers, 3);
  EXPECT_EQ(fly.network->leaves(), 12);
  const Platform torus = parsed(cluster_of("torus", "torus: [2, 3, 2]"));
  EXPECT_THAT(torus.network->torus, ElementsAre(2, 3, 2));
  EXPECT_EQ(torus.network->leaves(), 12);
  EXPECT_EQ(parsed(cluster_with("1 us}\nnetwork", "1 us, per_node: 2}\nnetwork")).nic->per_node, 2);
}

// What SimGrid will build, counted as its builders do (SimGrid 3.32: FatTreeZone, DragonflyZone,
// TorusZone), and bounded by the reader at the topology's line (shared/defects-2/10).
TEST(PlatformCluster, TopologySizesAreCountedAsSimGridBuildsThem) {
  // kCluster's tree: 4 places, 2 + 2 switches (level 1: up[0] x down[1]; level 2: up[0] x up[1]);
  // links 4 x 1 x 1 + 2 x 2 x 1; pairs 4 x 2 + 2 x 2.
  const Platform tree = parsed(kCluster);
  EXPECT_EQ(network_switches(*tree.network), 4);
  EXPECT_EQ(network_links(*tree.network), 8);
  EXPECT_EQ(fat_tree_pairs(*tree.network), 12);
  // The shipped DGX H100 SuperPOD: 2,048 places, 64 + 256 + 256 switches.
  const Platform h100 = builtin_platform("dgx-h100-superpod");
  EXPECT_EQ(network_switches(*h100.network), 576);
  EXPECT_EQ(network_links(*h100.network), 2048 + 64 * 32 + 256 * 8);
  // A dragonfly of 2 groups x 1 chassis x 3 routers x 2 nodes: 6 routers; 12 node links, 3 pairs
  // of routers in each chassis, no other chassis, 1 pair of groups.
  const Platform fly = parsed(cluster_of("dragonfly", "dragonfly: {groups: [2, 1], chassis: [1, 1], routers: [3, 1], nodes: 2}"));
  EXPECT_EQ(network_switches(*fly.network), 6);
  EXPECT_EQ(network_links(*fly.network), 12 + 2 * 3 + 0 + 1);
  EXPECT_EQ(fat_tree_pairs(*fly.network), 0);
  // A torus: one link per place and dimension, the dimensions of 1 left out as sim builds it.
  EXPECT_EQ(network_links(*parsed(cluster_of("torus", "torus: [2, 3, 2]")).network), 12 * 3);
  EXPECT_EQ(network_links(*parsed(with("nodes: 4", "nodes: 2", cluster_of("torus", "torus: [1, 1, 2]"))).network), 2);
  EXPECT_EQ(network_switches(*parsed(cluster_of("torus", "torus: [4]")).network), 0);
}

TEST(PlatformCluster, TopologiesBeyondTheBoundsAreRefusedAtTheirLine) {
  // 4 places under 8 levels of 10 parents each: 1 + 10 + ... + 10^7 switches (the first reproducer).
  EXPECT_THAT(error_of(cluster_of("fat_tree", "fat_tree: {levels: 8, down: [4,1,1,1,1,1,1,1], up: [1,10,10,10,10,10,10,10], links: [1,1,1,1,1,1,1,1]}")),
              HasSubstr("p.yaml:15:13: 'network.fat_tree' builds 11111111 switches; expected at most 100000"));
  // 100,000 chassis all-to-all: 5 x 10^9 links, besides the 100,000 to the nodes.
  EXPECT_THAT(error_of(cluster_of("dragonfly", "dragonfly: {groups: [1, 1], chassis: [100000, 1], routers: [1, 1], nodes: 1}")),
              HasSubstr("p.yaml:15:14: 'network.dragonfly' builds 5000050000 links; expected at most 200000"));
  // A dragonfly's routers are at most its places (each router holds `nodes` of them): the places'
  // bound holds them.
  EXPECT_THAT(error_of(cluster_of("dragonfly", "dragonfly: {groups: [1, 1], chassis: [1000, 1], routers: [101, 1], nodes: 1}")),
              HasSubstr("p.yaml:15:14: 'network.dragonfly' has 101000 places for nodes; expected at most 100000"));
  EXPECT_THAT(error_of(cluster_of("fat_tree", "fat_tree: {levels: 2, down: [1, 100000], up: [1, 1], links: [1, 1]}")),
              HasSubstr("'network.fat_tree' builds 100001 switches"));
  // Few switches (10,001), few links (110,000), but 100,000 places each tested against 10,000
  // switches: 10^9 pairs.
  EXPECT_THAT(error_of(cluster_of("fat_tree", "fat_tree: {levels: 2, down: [10, 10000], up: [1, 1], links: [1, 1]}")),
              HasSubstr("'network.fat_tree' builds 1000010000 pairs of elements of adjacent levels to wire"));
  EXPECT_THAT(error_of(cluster_of("torus", "torus: [2, 2, 2, 2, 2, 2, 2, 2, 2]")),
              HasSubstr("p.yaml:15:10: 'network.torus' has 9 dimensions; expected 1 to 8"));
  // Products that overflow 64 bits are counted as "more than 2^62", never wrapped.
  EXPECT_THAT(error_of(cluster_of("fat_tree", "fat_tree: {levels: 8, down: [1,1,1,1,1,1,1,4], up: [100000,100000,100000,100000,100000,1,1,1], "
                                              "links: [1,1,1,1,1,1,1,1]}")),
              HasSubstr("builds more than 2^62 switches"));
}

TEST(PlatformCluster, GpusPerNodeIsBounded) {
  EXPECT_EQ(parsed(with("name: test\n", "name: test\ngpus_per_node: 1024\n")).gpus_per_node, 1024);
  EXPECT_THAT(error_of(with("name: test\n", "name: test\ngpus_per_node: 10000\n")),
              HasSubstr("p.yaml:2:16: 'gpus_per_node' is 10000; expected at most 1024"));
}

// network.routing: static (the default, SimGrid's fixed paths) or adaptive, on a non-blocking fat
// tree whose nodes have one link each; elsewhere refused at the key, as is a link power the
// one-switch stand-in would leave undrawn. The writer keeps it.
TEST(PlatformCluster, AdaptiveRoutingOnNonBlockingFatTreesOnly) {
  EXPECT_EQ(parsed(kCluster).network->routing, NetworkRouting::static_paths);
  EXPECT_EQ(parsed(kCluster + "  routing: static\n").network->routing, NetworkRouting::static_paths);
  const Platform adaptive = parsed(kCluster + "  routing: adaptive\n");
  EXPECT_EQ(adaptive.network->routing, NetworkRouting::adaptive);
  EXPECT_EQ(parse_platform(platform_to_yaml(adaptive, {}), "again.yaml").network->routing, NetworkRouting::adaptive);
  EXPECT_THAT(error_of(kCluster + "  routing: ecmp\n"), HasSubstr("p.yaml:17:12: 'network.routing' is 'ecmp'; expected static"));
  EXPECT_THAT(error_of(cluster_with("up: [1, 2]", "up: [1, 1]") + "  routing: adaptive\n"),
              HasSubstr("'network.routing' is adaptive but a switch of level 1 has 2 links down and 1 up (oversubscribed)"));
  EXPECT_THAT(error_of(cluster_with("up: [1, 2], links: [1, 1]", "up: [1, 2], links: [2, 2]") + "  routing: adaptive\n"),
              HasSubstr("'network.routing' is adaptive but a node has 2 links up"));
  EXPECT_THAT(error_of(cluster_of("torus", "torus: [4]") + "  routing: adaptive\n"),
              HasSubstr("p.yaml:17:12: 'network.routing' is adaptive but network.topology is torus"));
  EXPECT_THAT(error_of(cluster_with("bandwidth: 192 GB/s, latency: 0}", "bandwidth: 192 GB/s, latency: 0, power: {idle: 1 W, busy: 2 W}}") +
                       "  routing: adaptive\n"),
              HasSubstr("'network.routing' is adaptive and network.link has a power"));
  for (const char* name : {"dgx-h100-superpod", "dgx-a100-superpod", "h100-100k", "p5-48xlarge"}) {
    EXPECT_EQ(builtin_platform(name).network->routing, NetworkRouting::adaptive) << name;
  }
}

// The p5.48xlarge's EFA network: its rate and its per-step latency fitted on nccl-tests all-gathers
// (calibrate --from-collectives calibrate/measurements/p5-efa.yaml; scenarios/platforms/README.md,
// "EFA"); the link carries the node's 8 rails; no shared file system is given (it is provisioned apart).
TEST(BuiltinPlatforms, P5CarriesItsFittedEfaNetwork) {
  const Platform p5 = builtin_platform("p5-48xlarge");
  ASSERT_TRUE(p5.nic.has_value());
  EXPECT_DOUBLE_EQ(p5.nic->bandwidth, 39.36e9);
  EXPECT_EQ(p5.nic->per_node, 8);
  ASSERT_TRUE(p5.network.has_value());
  EXPECT_DOUBLE_EQ(p5.network->link.bandwidth, 8 * p5.nic->bandwidth);
  EXPECT_DOUBLE_EQ(p5.collectives.inter_node_step, 54.43e-6);
  EXPECT_DOUBLE_EQ(p5.collectives.intra_node_step, builtin_platform("dgx-h100-superpod").collectives.intra_node_step);
  ASSERT_TRUE(p5.storage.has_value());
  EXPECT_FALSE(p5.storage->shared.has_value());
  EXPECT_TRUE(p5.storage->local.has_value());
}

TEST(PlatformCluster, ASingleNodeNeedsNoNetworkLatencies) {
  const Platform p = parsed(kMinimal + "collectives: {base_latency: 8.4 us, intra_node_step: 3.4 us}\n");
  EXPECT_DOUBLE_EQ(p.collectives.intra_node_step, 3.4e-6);
  EXPECT_EQ(p.collectives.inter_node_step, 0);
  // With a network, a collective crosses it: its latency terms are required.
  EXPECT_THAT(error_of(kCluster + "collectives: {base_latency: 8.4 us, intra_node_step: 3.4 us}\n"),
              HasSubstr("p.yaml:17:14: missing key 'inter_node_step' in collectives"));
}

TEST(PlatformCluster, BadValuesAreNamedAtTheirLine) {
  EXPECT_THAT(error_of(kMinimal + "nic: {name: NIC, bandwidth: 24 GB/s, latency: 1 us}\n"),
              HasSubstr("p.yaml:10:6: 'nic' is given but 'network' is not; expected both (a cluster) or neither (one node)"));
  EXPECT_THAT(error_of(cluster_with("nic: {name: NIC, bandwidth: 24 GB/s, latency: 1 us}\n", "")),
              HasSubstr("p.yaml:12:3: 'network' is given but 'nic' is not"));
  EXPECT_THAT(error_of(cluster_with("1 us}\nnetwork", "1 us, per_node: 3}\nnetwork")),
              HasSubstr("p.yaml:11:63: 'nic.per_node' is 3; expected a divisor of gpus_per_node (8)"));
  EXPECT_THAT(error_of(cluster_with("1 us}\nnetwork", "1 us, per_node: 16}\nnetwork")), HasSubstr("'nic.per_node' is 16; expected a divisor"));
  EXPECT_THAT(error_of(cluster_with("bandwidth: 24 GB/s", "bandwidth: 24 Gb/s")), HasSubstr("p.yaml:11:29: 'nic.bandwidth' is '24 Gb/s': unknown unit 'Gb/s'"));
  EXPECT_THAT(error_of(cluster_with("topology: fat_tree", "topology: mesh")),
              HasSubstr("p.yaml:13:13: 'network.topology' is 'mesh'; expected one of fat_tree, dragonfly, torus"));
  EXPECT_THAT(error_of(cluster_with("  nodes: 4\n", "  nodes: 4\n  torus: [4]\n")),
              HasSubstr("p.yaml:15:10: 'network.torus' is given but network.topology is fat_tree; expected network.fat_tree alone"));
  EXPECT_THAT(error_of(cluster_with("nodes: 4", "nodes: 5")),
              HasSubstr("p.yaml:14:10: 'network.nodes' is 5 but network.fat_tree has places for 4; expected at most as many nodes"));
  EXPECT_THAT(error_of(cluster_with("nodes: 4", "nodes: 0")), HasSubstr("p.yaml:14:10: 'network.nodes' is '0'; expected a positive integer"));
  EXPECT_THAT(error_of(cluster_with("down: [2, 2]", "down: [2, 2, 2]")),
              HasSubstr("p.yaml:15:31: 'network.fat_tree.down' is a list of 3; expected a list of 2 positive integers"));
  EXPECT_THAT(error_of(cluster_with("down: [2, 2]", "down: [2, 0]")),
              HasSubstr("p.yaml:15:35: 'network.fat_tree.down[1]' is '0'; expected a positive integer"));
  EXPECT_THAT(error_of(cluster_with("down: [2, 2]", "down: 4")), HasSubstr("'network.fat_tree.down' is '4'; expected a list of 2"));
  EXPECT_THAT(error_of(cluster_with("levels: 2", "levels: 9")), HasSubstr("'network.fat_tree.levels' is 9; expected 1 to 8 switch levels"));
  EXPECT_THAT(error_of(cluster_with("down: [2, 2]", "down: [1000, 1000]")),
              HasSubstr("p.yaml:15:13: 'network.fat_tree' has 1000000 places for nodes; expected at most 100000"));
  EXPECT_THAT(error_of(cluster_of("dragonfly", "dragonfly: {groups: [4, 1], chassis: [1, 1], routers: [3, 1], nodes: 2}")),
              HasSubstr("p.yaml:15:23: 'network.dragonfly.groups' has 4 groups but only 3 routers per chassis; expected at most one group per router"));
  EXPECT_THAT(error_of(cluster_of("torus", "torus: []")),
              HasSubstr("'network.torus' is a list of 0; expected a list of positive integers"));
  EXPECT_THAT(error_of(cluster_with("  fat_tree: {levels: 2, down: [2, 2], up: [1, 2], links: [1, 1]}\n", "")),
              HasSubstr("missing key 'fat_tree' in network"));
  EXPECT_THAT(error_of(cluster_with("bandwidth: 192 GB/s", "bandwidth: 1e300 GB/s")),
              HasSubstr("p.yaml:16:32: 'network.link.bandwidth' is 1e300 GB/s; expected between 1 kB/s and 1 PB/s"));
  EXPECT_THAT(error_of(cluster_with("  nodes: 4\n", "  nodes: 4\n  switches: 3\n")),
              HasSubstr("p.yaml:15:3: unknown key 'switches' in network; valid keys: topology, nodes, fat_tree, dragonfly, torus, link"));
  EXPECT_THAT(error_of(kCluster + "collectives: {base_latency: -1 us, intra_node_step: 3.4 us, inter_node_step: 14 us, network_overhead: 2 us}\n"),
              HasSubstr("p.yaml:17:29: 'collectives.base_latency' is -1 us; expected between 0 s and 1 s"));
}

// The shipped clusters: their networks as their sources give them (see each file's comments).
TEST(BuiltinPlatforms, ClustersAreTheirSystemsPages) {
  const Platform a = builtin_platform("dgx-a100-superpod");
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(a.nic->per_node, 8);
  EXPECT_DOUBLE_EQ(a.nic->bandwidth, 24e9);
  EXPECT_EQ(a.network->topology, NetworkTopology::fat_tree);
  EXPECT_EQ(a.network->nodes, 140);
  EXPECT_DOUBLE_EQ(a.network->link.bandwidth, 8 * a.nic->bandwidth) << "the 8 rails aggregated";
  EXPECT_DOUBLE_EQ(a.collectives.network_overhead, 2e-6) << "AMD host";
  const Platform h = builtin_platform("dgx-h100-superpod");
  EXPECT_DOUBLE_EQ(h.nic->bandwidth, 47e9);
  EXPECT_EQ(h.network->nodes, 2048);
  EXPECT_EQ(h.network->leaves(), 2048);
  EXPECT_DOUBLE_EQ(h.network->link.bandwidth, 8 * h.nic->bandwidth);
  EXPECT_DOUBLE_EQ(h.collectives.network_overhead, 1e-6) << "Intel host";
  const Platform p = builtin_platform("perlmutter-gpu");
  EXPECT_EQ(p.gpus_per_node, 4);
  EXPECT_EQ(p.nic->per_node, 4);
  EXPECT_EQ(p.network->topology, NetworkTopology::dragonfly);
  EXPECT_EQ(p.network->nodes, 1536);
  EXPECT_EQ(p.network->leaves(), 1536);
  EXPECT_DOUBLE_EQ(p.network->link.bandwidth, 4 * p.nic->bandwidth);
  const Platform q = builtin_platform("polaris");
  EXPECT_EQ(q.gpus_per_node, 4);
  EXPECT_EQ(q.nic->per_node, 2) << "a pair of Slingshot NICs for 4 GPUs";
  EXPECT_EQ(q.network->nodes, 560);
  EXPECT_DOUBLE_EQ(q.network->link.bandwidth, 2 * q.nic->bandwidth);
  const Platform d = builtin_platform("dgx1-v100-cluster");
  EXPECT_EQ(d.gpus_per_node, 8);
  EXPECT_EQ(d.nic->per_node, 4) << "4 EDR NICs, one per pair of GPUs";
  EXPECT_DOUBLE_EQ(d.nic->bandwidth, 12e9);
  EXPECT_EQ(d.network->leaves(), 8);
  EXPECT_DOUBLE_EQ(d.network->link.bandwidth, 4 * d.nic->bandwidth);
  EXPECT_DOUBLE_EQ(d.collectives.network_overhead, 1e-6) << "Intel host";
  for (const std::string& name : builtin_platform_names()) {
    const Platform x = builtin_platform(name);
    if (x.gpus_per_node == 1) continue;
    SCOPED_TRACE(name);
    EXPECT_DOUBLE_EQ(x.collectives.base, 8.4e-6) << "NCCL tuning.cc, Ring/Simple";
    EXPECT_DOUBLE_EQ(x.collectives.intra_node_step, 3.4e-6);
    // NCCL's InfiniBand step, but on EFA, whose step was fitted (P5CarriesItsFittedEfaNetwork).
    if (x.network && name != "p5-48xlarge") {
      EXPECT_DOUBLE_EQ(x.collectives.inter_node_step, 14e-6);
    }
  }
  // A calibration of an A100 or H100 describes the single-node platforms; the clusters copy them.
  EXPECT_THAT(builtin_platforms_with_gpu("NVIDIA A100-SXM4-40GB"), ElementsAre("a100-40gb"));
  EXPECT_THAT(builtin_platforms_with_gpu("NVIDIA H100 80GB HBM3"), ElementsAre("h100-80gb"));
  EXPECT_THAT(builtin_platforms_with_gpu("Tesla V100-SXM2-16GB"), ElementsAre("v100-16gb"));
}

// The clusters reuse the single-node files' GPU sections (and the DGX ones their hosts and links):
// every line of those sections must stay the same, or a cluster silently runs an out-of-date GPU.
TEST(BuiltinPlatforms, ClustersKeepTheirNodesSectionsInSync) {
  const std::filesystem::path dir = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios/platforms";
  // The lines of a top-level section of a platform file, its key line included.
  const auto section = [&](const std::string& file, const std::string& key) {
    std::ifstream in(dir / (file + ".yaml"));
    std::vector<std::string> lines;
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != ' ' && line[0] != '#') inside = line.rfind(key + ":", 0) == 0;
      if (inside) lines.push_back(line);
    }
    return lines;
  };
  struct Copy {
    std::string cluster, node;
    std::vector<std::string> sections;
    // Lines the cluster adds to a copied section (its own measurements or fits), by key.
    std::vector<std::string> own = {};
  };
  const std::vector<Copy> copies{
      {"dgx-a100-superpod", "a100-80gb", {"gpu", "host", "host_link", "gpu_link", "gpus_per_node", "efficiency"}},
      {"dgx-h100-superpod", "h100-80gb", {"gpu", "host", "host_link", "gpu_link", "gpus_per_node", "efficiency"}},
      {"dgx1-v100-cluster", "v100-16gb", {"gpu", "host", "host_link", "gpu_link", "gpus_per_node", "efficiency"}},
      {"h100-100k", "dgx-h100-superpod", {"gpu", "host", "host_link", "gpu_link", "gpus_per_node", "nic", "collectives", "efficiency"}},
      {"p5-48xlarge", "h100-80gb", {"gpu", "host_link", "gpu_link", "efficiency"}},
      {"perlmutter-gpu", "a100-40gb", {"gpu", "host_link", "efficiency"}},
      {"polaris", "a100-40gb", {"gpu", "host_link", "efficiency"}, {"  checkpoint_copy_bandwidth:"}},
  };
  for (const Copy& c : copies) {
    for (const std::string& key : c.sections) {
      SCOPED_TRACE(c.cluster + " " + key);
      const auto node = section(c.node, key);
      EXPECT_FALSE(node.empty());
      std::vector<std::string> cluster = section(c.cluster, key);
      std::erase_if(cluster, [&](const std::string& line) {
        return std::any_of(c.own.begin(), c.own.end(), [&](const std::string& own) { return line.rfind(own, 0) == 0; });
      });
      EXPECT_EQ(cluster, node);
    }
  }
}

TEST(PlatformFile, ErrorsNameTheFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "comptrain_platform_test_bad.yaml";
  {
    std::ofstream out(path);
    out << with("memory: 40 GiB", "memory: 40 GX");
  }
  try {
    load_platform_file(path);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), StartsWith(path.string() + ":4:11: "));
  }
  std::filesystem::remove(path);
  EXPECT_THROW(load_platform_file(path), InputError);
}

}  // namespace
}  // namespace comptrain::models
