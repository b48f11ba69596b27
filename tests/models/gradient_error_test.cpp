// The gradient-error model of a compressed activation (models/gradient_error.hpp, models/README.md
// "Gradient error of a compressed activation"): its sigma against Monte-Carlo measurements on
// synthetic tensors and against the szp codec's real errors; its inverse and monotonicity; and the
// adaptive error bound of a compress rule (per-storage bounds, ratios, predictions, coverage).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/must_apply.hpp"
#include "common/test_platform.hpp"
#include "gradient_mlp.hpp"

namespace comptrain::models {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::TensorRole;

// ---------------------------------------------------------------------------------------------
// Monte Carlo. A layer's weight gradient is G = δᵀX (N terms, M outputs, K inputs). Errors e,
// uniform in [-eb, eb] on X's non-zero entries and 0 on its zeros, give ΔG = δᵀE. The model
// predicts RMS(ΔG) from what a capture measures: RMS(δ), X's zero fraction z and N.

struct Synthetic {
  std::size_t n = 0, m = 0, k = 0;
  std::vector<double> delta;  // n x m, row-major
  std::vector<double> x;      // n x k
  double delta_rms = 0;
  double zero_fraction = 0;
};

// δ: normal, or Laplace (heavier tails) when `laplace`; X: normal, with each entry zeroed with
// probability z_target (ReLU-like sparsity independent of δ, as the model assumes).
Synthetic synthetic(std::size_t n, std::size_t m, std::size_t k, double z_target, bool laplace, std::uint64_t seed) {
  Synthetic s{n, m, k, std::vector<double>(n * m), std::vector<double>(n * k), 0, 0};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1e-3);
  std::exponential_distribution<double> exponential(1e3);
  std::bernoulli_distribution zero(z_target), sign(0.5);
  double sum = 0;
  for (double& d : s.delta) {
    d = laplace ? (sign(rng) ? 1 : -1) * exponential(rng) : normal(rng);
    sum += d * d;
  }
  s.delta_rms = std::sqrt(sum / static_cast<double>(s.delta.size()));
  std::normal_distribution<double> value(0.5, 1.0);
  std::size_t zeros = 0;
  for (double& v : s.x) {
    v = zero(rng) ? 0.0 : value(rng);
    if (v == 0) ++zeros;
  }
  s.zero_fraction = static_cast<double>(zeros) / static_cast<double>(s.x.size());
  return s;
}

// ΔG = δᵀE, accumulated into `out` (m x k).
void weight_gradient_error(const Synthetic& s, const std::vector<double>& e, std::vector<double>& out) {
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t row = 0; row < s.n; ++row) {
    for (std::size_t o = 0; o < s.m; ++o) {
      const double d = s.delta[row * s.m + o];
      for (std::size_t i = 0; i < s.k; ++i) out[o * s.k + i] += d * e[row * s.k + i];
    }
  }
}

struct MonteCarlo {
  double sigma = 0;         // RMS of ΔG over every entry of every trial
  double within_1 = 0;      // fraction of entries with |ΔG| <= their exact conditional σ
  double within_2 = 0;      // ... <= 2σ
  std::size_t samples = 0;
};

// `trials` draws of E for fixed δ and X. Each entry's exact conditional standard deviation is
// eb/√3 · √(Σ_{n: x_ni != 0} δ_no²); the standardized entries test the normal shape (the CLT),
// the pooled RMS tests the model's σ (which also replaces that sum by (1 − z)·N·RMS(δ)²).
MonteCarlo monte_carlo(const Synthetic& s, double eb, std::size_t trials, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-eb, eb);
  std::vector<double> conditional(s.m * s.k, 0.0);
  for (std::size_t row = 0; row < s.n; ++row) {
    for (std::size_t o = 0; o < s.m; ++o) {
      for (std::size_t i = 0; i < s.k; ++i) {
        if (s.x[row * s.k + i] != 0) conditional[o * s.k + i] += s.delta[row * s.m + o] * s.delta[row * s.m + o];
      }
    }
  }
  for (double& c : conditional) c = eb / std::sqrt(3.0) * std::sqrt(c);
  std::vector<double> e(s.n * s.k), dg(s.m * s.k);
  MonteCarlo mc;
  double sum = 0;
  std::size_t in1 = 0, in2 = 0;
  for (std::size_t t = 0; t < trials; ++t) {
    for (std::size_t j = 0; j < e.size(); ++j) e[j] = s.x[j] != 0 ? uniform(rng) : 0.0;
    weight_gradient_error(s, e, dg);
    for (std::size_t j = 0; j < dg.size(); ++j) {
      sum += dg[j] * dg[j];
      if (std::abs(dg[j]) <= conditional[j]) ++in1;
      if (std::abs(dg[j]) <= 2 * conditional[j]) ++in2;
    }
  }
  mc.samples = trials * dg.size();
  mc.sigma = std::sqrt(sum / static_cast<double>(mc.samples));
  mc.within_1 = static_cast<double>(in1) / static_cast<double>(mc.samples);
  mc.within_2 = static_cast<double>(in2) / static_cast<double>(mc.samples);
  return mc;
}

ConsumerGradientStatistics stats_of(const Synthetic& s) { return {s.delta_rms, 1.0, static_cast<double>(s.n), s.zero_fraction}; }

// The tolerance, and why. σ̂² averages `samples` squared, nearly normal entries: its relative
// standard deviation is about √(2 / samples), 0.44 % at 102,400 (entries sharing a column of E
// are uncorrelated, not independent, which changes this little), so σ̂'s is half that, 0.22 %.
// The model also replaces each entry's Σ_{x != 0} δ² by (1 − z)·N·RMS(δ)². With X's zeros drawn
// independently of δ, the mean over the entries of that sum is Σ_n (Σ_o δ_no²)(Σ_i [x_ni != 0]) /
// (M·K): each row's count of non-zeros deviates from (1 − z)·K by √(z / ((1 − z)·K)) (25 % at
// K = 16, z = 0.5), and the N rows average it to about 1 % of σ², 0.5 % of σ. 3 % is more than
// five standard deviations of both together: a model error of that size (a wrong 1/3, the
// (1 − z) left out) fails, noise does not. Measured with these seeds: σ̂ / σ = 1.0002, 1.0045,
// 0.9965, 0.9953 for the four cases below; 0.9994 at N = 8; szp at 1e-3, 0.9870.
constexpr double kSigmaTolerance = 0.03;

TEST(GradientErrorModel, SigmaMatchesMonteCarloOnSyntheticTensors) {
  struct Case {
    std::size_t n;
    double z;
    bool laplace;
  };
  // Dense (GELU / layer-norm outputs), ReLU-like, very sparse, and heavy-tailed δ.
  for (const Case c : {Case{512, 0.0, false}, Case{512, 0.5, false}, Case{2048, 0.9, false}, Case{512, 0.5, true}}) {
    SCOPED_TRACE("N = " + std::to_string(c.n) + ", z = " + std::to_string(c.z) + (c.laplace ? ", Laplace delta" : ", normal delta"));
    const Synthetic s = synthetic(c.n, 16, 16, c.z, c.laplace, 20261124);
    const double eb = 1e-2;
    const MonteCarlo mc = monte_carlo(s, eb, 400, 7);
    const double model = gradient_error_sigma(eb, stats_of(s));
    EXPECT_NEAR(mc.sigma / model, 1.0, kSigmaTolerance) << "measured " << mc.sigma << ", model " << model;
    // Normal: 68.27 % within one σ, 95.45 % within two (the standard error of a fraction over
    // 102,400 samples is 0.15 %; 1 % allows the CLT's finite-N excess kurtosis, ~2.4 / ((1 − z) N)).
    EXPECT_NEAR(mc.within_1, 0.6827, 0.01);
    EXPECT_NEAR(mc.within_2, 0.9545, 0.01);
  }
}

// σ needs no normal approximation: the variance is exact in expectation at any N. At N = 8 with
// half the values zero (4 products per entry) the shape is far from normal, σ still holds. The
// tolerance is wider: the rows' counts of non-zeros (12.5 % each at K = 64) and their weights
// Σ_o δ² (18 % each) average over 8 rows only, about 1 % of σ², and the products are far from
// normal; 8 % leaves room for both without admitting a model error (the (1 − z) is 29 %).
TEST(GradientErrorModel, SigmaHoldsAtSmallNWithoutTheNormalShape) {
  const Synthetic s = synthetic(8, 64, 64, 0.5, false, 99);
  const MonteCarlo mc = monte_carlo(s, 0.05, 200, 11);
  EXPECT_NEAR(mc.sigma / gradient_error_sigma(0.05, stats_of(s)), 1.0, 0.08);
}

// ---------------------------------------------------------------------------------------------
// The real codec: szp's errors on a ReLU-like tensor. szp quantises q = rint(x / 2eb) and
// reconstructs q·2eb (kernels/README.md, "The guarantee"): |e| <= eb, zeros exact, and e close to
// uniform when eb is small against the values' spread. One compression gives one E; ΔG = δᵀE over
// 128 x 128 entries (16,384 samples: σ̂'s standard deviation ~0.55 %), tolerance 3 %.

struct CodecRun {
  double sigma = 0;      // measured RMS(ΔG)
  double model = 0;      // predicted σ at the bound szp enforced
  double error_rms_over_bound = 0;  // RMS(e) on non-zeros / eb: 1/√3 = 0.577 for uniform errors
  double max_error_over_bound = 0;
  std::size_t zero_mismatches = 0;
};

CodecRun run_szp(double eb_rel, std::uint64_t seed) {
  const std::size_t n = 4096, m = 128, k = 128;
  Synthetic s = synthetic(n, m, k, 0.0, false, seed);
  // X = ReLU(N(0, 1)) as float32: half exact zeros, the rest half-normal.
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * k);
  std::size_t zeros = 0;
  for (float& v : x) {
    v = std::max(0.0f, normal(rng));
    if (v == 0) ++zeros;
  }
  s.zero_fraction = static_cast<double>(zeros) / static_cast<double>(x.size());
  kernels::CompressOptions options;
  options.codec = kernels::CodecId::szp;
  options.eb = eb_rel;
  options.mode = kernels::BoundMode::rel;
  const auto stream = kernels::compress(x, kernels::Shape{2, {n, k, 1, 1}}, options);
  const std::vector<float> back = kernels::decompress(stream);
  const double eb = kernels::absolute_bound(x, eb_rel, kernels::BoundMode::rel);
  CodecRun run;
  std::vector<double> e(x.size());
  double sum = 0;
  for (std::size_t j = 0; j < x.size(); ++j) {
    e[j] = static_cast<double>(back[j]) - static_cast<double>(x[j]);
    s.x[j] = x[j];
    if (x[j] == 0) {
      if (back[j] != 0) ++run.zero_mismatches;
      continue;
    }
    sum += e[j] * e[j];
    run.max_error_over_bound = std::max(run.max_error_over_bound, std::abs(e[j]) / eb);
  }
  run.error_rms_over_bound = std::sqrt(sum / static_cast<double>(x.size() - zeros)) / eb;
  std::vector<double> dg(m * k);
  weight_gradient_error(s, e, dg);
  double dg_sum = 0;
  for (double v : dg) dg_sum += v * v;
  run.sigma = std::sqrt(dg_sum / static_cast<double>(dg.size()));
  run.model = gradient_error_sigma(eb, stats_of(s));
  return run;
}

TEST(GradientErrorModel, SzpErrorsGiveTheModelsSigma) {
  // eb = 1e-3 of the range (~5 standard deviations of the half-normal: eb is ~0.005 sigma).
  const CodecRun run = run_szp(1e-3, 5);
  EXPECT_EQ(run.zero_mismatches, 0u);
  EXPECT_LE(run.max_error_over_bound, 1.0);
  EXPECT_NEAR(run.error_rms_over_bound, 1.0 / std::sqrt(3.0), 0.01);  // uniform on [-eb, eb]
  EXPECT_NEAR(run.sigma / run.model, 1.0, kSigmaTolerance) << "measured " << run.sigma << ", model " << run.model;
}

// Wide bounds. Values below eb decode to 0 (e = -x rather than uniform), so the uniform error is an
// approximation that must fail once eb is as wide as the values' spread. On ReLU(N(0, 1)) (range
// ~4.9, so eb_rel 0.2 is eb ~ 1, a step of 2 standard deviations) it still holds within the
// tolerance; at 0.3 and 0.5 of the range, e is smaller than uniform (the density falls away from
// 0) and the model over-predicts: it is then an upper bound, the safe side for an adaptive bound.
// Measured with this seed: sigma / model 0.996, 0.999, 1.003, 1.000, 0.990, 0.942, 0.706 at
// eb_rel 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5.
TEST(GradientErrorModel, HoldsUpToWideBoundsThenOverPredicts) {
  for (const double eb_rel : {0.05, 0.2}) {
    const CodecRun run = run_szp(eb_rel, 6);
    EXPECT_NEAR(run.sigma / run.model, 1.0, kSigmaTolerance) << "eb " << eb_rel;
  }
  for (const double eb_rel : {0.3, 0.5}) {
    const CodecRun run = run_szp(eb_rel, 6);
    EXPECT_LT(run.sigma, (1 - kSigmaTolerance) * run.model) << "eb " << eb_rel;
    EXPECT_LT(run.error_rms_over_bound, 1.0 / std::sqrt(3.0)) << "eb " << eb_rel;
  }
}

// ---------------------------------------------------------------------------------------------
// The inverse and its monotonicity.

TEST(GradientErrorModel, InverseMeetsTheToleranceExactly) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> log_uniform(-8, 2);
  std::uniform_real_distribution<double> fraction(0, 0.99);
  for (int i = 0; i < 1000; ++i) {
    const ConsumerGradientStatistics s{std::pow(10.0, log_uniform(rng)), std::pow(10.0, log_uniform(rng)), std::round(std::pow(10.0, 3 + log_uniform(rng) / 2)) + 1,
                                       fraction(rng)};
    const double tolerance = std::pow(10.0, log_uniform(rng) / 3);
    const double eb = largest_error_bound(tolerance, s);
    EXPECT_NEAR(relative_gradient_error(eb, s) / tolerance, 1.0, 1e-14);
  }
}

TEST(GradientErrorModel, TheBoundIsMonotoneInTheTolerance) {
  const ConsumerGradientStatistics s{2e-4, 3e-3, 4096, 0.45};
  double last = 0;
  for (double tolerance = 1e-6; tolerance < 10; tolerance *= 1.37) {
    const double eb = largest_error_bound(tolerance, s);
    EXPECT_GT(eb, last) << tolerance;
    EXPECT_LE(relative_gradient_error(eb, s), tolerance * (1 + 1e-15));
    last = eb;
  }
}

TEST(GradientErrorModel, DegenerateStatistics) {
  const double inf = std::numeric_limits<double>::infinity();
  // No δ, or every value zero: no bound perturbs G.
  EXPECT_EQ(largest_error_bound(0.01, {0, 1, 100, 0.5}), inf);
  EXPECT_EQ(largest_error_bound(0.01, {1, 1, 100, 1.0}), inf);
  EXPECT_EQ(relative_gradient_error(1.0, {0, 1, 100, 0.5}), 0.0);
  // A zero weight gradient with δ and values: any error is infinitely large relative to it.
  EXPECT_EQ(largest_error_bound(0.01, {1, 0, 100, 0.5}), 0.0);
  EXPECT_EQ(relative_gradient_error(1e-9, {1, 0, 100, 0.5}), inf);
  // σ = eb · δ · √((1 − z) N / 3), by hand: 0.1 · 2 · √(0.25 · 12 / 3) = 0.2.
  EXPECT_DOUBLE_EQ(gradient_error_sigma(0.1, {2, 1, 12, 0.75}), 0.2);
  EXPECT_THROW(gradient_error_sensitivity({-1, 1, 100, 0.5}), std::invalid_argument);
  EXPECT_THROW(gradient_error_sensitivity({1, std::nan(""), 100, 0.5}), std::invalid_argument);
  EXPECT_THROW(gradient_error_sensitivity({1, 1, 0.5, 0.5}), std::invalid_argument);
  EXPECT_THROW(gradient_error_sensitivity({1, 1, 100, 1.5}), std::invalid_argument);
  EXPECT_THROW(largest_error_bound(0, {1, 1, 100, 0.5}), std::invalid_argument);
  EXPECT_THROW(largest_error_bound(inf, {1, 1, 100, 0.5}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// The adaptive bound in a compress rule.

Platform test_platform() { return test_support::roofline_platform(); }

const OpTimeModel& time_model() {
  static const OpTimeModel model(test_platform());
  return model;
}

// A profile whose szp ratio depends on the bound: bits = 4 - 8 z - ln(eb) (post_relu) and
// bits = 6 - ln(eb) (generic), up to 32x.
std::shared_ptr<const CalibrationProfile> profile(const std::string& codec = "szp") {
  CalibrationProfile p;
  p.name = "adaptive-test";
  p.source = "embedded:adaptive-test";
  CodecProfile c;
  c.codec = codec;
  c.compress.latency = 1e-5;
  c.compress.bandwidth = 1e11;
  c.decompress.latency = 1e-5;
  c.decompress.bandwidth = 2e11;
  RatioModel post_relu;
  post_relu.c0 = 4;
  post_relu.c_log_eb = -1;
  post_relu.c_zero = -8;
  post_relu.max_ratio = 32;
  post_relu.default_features.zero_fraction = 0.5;
  RatioModel generic = post_relu;
  generic.c0 = 6;
  generic.c_zero = 0;
  c.ratio[TensorClass::post_relu] = post_relu;
  c.ratio[TensorClass::generic] = generic;
  p.codecs.push_back(c);
  return std::make_shared<const CalibrationProfile>(p);
}

CompressAction adaptive(double tolerance, std::optional<double> fallback = std::nullopt) {
  CompressAction c;
  c.profile = profile();
  c.codec = "szp";
  c.adaptive = CompressAction::Adaptive{tolerance, fallback};
  return c;
}

StrategySpec spec(CompressAction action, TensorSelector select = {}) {
  StrategySpec s;
  s.name = "adaptive";
  s.rules.push_back({std::move(select), std::move(action)});
  return s;
}

using test_support::Mlp;

TensorSelector only(const std::string& name) {
  TensorSelector s;
  s.names = {name};
  return s;
}

const TensorBoundUse& the_tensor(const Schedule& s, const std::string& name) {
  for (const auto& use : s.compression) {
    for (const auto& t : use.tensors) {
      if (t.tensor == name) return t;
    }
  }
  throw std::runtime_error("no compressed tensor " + name);
}

std::int64_t compressed_bytes(const Schedule& s, const std::string& name) {
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::compress && t.creates.size() == 1 && s.buffers[t.creates[0]].name == name + " (compressed)") return s.buffers[t.creates[0]].bytes;
  }
  return -1;
}

TEST(AdaptiveBound, EachStorageGetsTheModelsBoundAndItsRatio) {
  const Mlp mlp;
  const Schedule s = test_support::must_apply(build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1"))));
  // By hand: σ per unit bound = δ · √((1 − z) N / 3) = 1e-3 · √(0.5 · 4 / 3); the bound that
  // makes σ = 1 % of RMS(G) = 2e-3 is 2e-5 / that; relative to the range 4.
  const double eb_abs = 0.01 * 2e-3 / (1e-3 * std::sqrt(0.5 * 4.0 / 3.0));
  const TensorBoundUse& t = the_tensor(s, "y1");
  EXPECT_EQ(t.from, TensorBoundUse::From::adaptive);
  EXPECT_NEAR(*t.absolute_error_bound, eb_abs, 1e-18);
  EXPECT_NEAR(t.relative_error_bound, eb_abs / 4.0, 1e-18);
  EXPECT_NEAR(*t.predicted_gradient_error, 0.01, 1e-15);
  EXPECT_EQ(t.consumers, std::vector<std::string>{"l2"});
  EXPECT_TRUE(t.relu_mask);
  EXPECT_FALSE(t.read_by_recomputation);
  // The ratio: post_relu (last writer r1), bits = 4 − 8 · 0.5 − ln(eb_rel).
  const double ratio = 32.0 / (4.0 - 4.0 - std::log(eb_abs / 4.0));
  EXPECT_NEAR(t.ratio, ratio, 1e-12);
  EXPECT_EQ(compressed_bytes(s, "y1"), static_cast<std::int64_t>(std::ceil(4000.0 / ratio)));
  ASSERT_EQ(s.compression.size(), 1u);
  EXPECT_EQ(s.compression[0].gradient_error_tolerance, 0.01);
}

TEST(AdaptiveBound, MonotoneInTheTolerance) {
  const traces::Trace trace = Mlp().build();
  double last_bound = 0, last_ratio = 0;
  std::int64_t last_bytes = std::numeric_limits<std::int64_t>::max();
  for (const double tolerance : {1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 10.0, 1e3}) {
    SCOPED_TRACE(tolerance);
    const Schedule s = test_support::must_apply(build_schedule(trace, time_model(), spec(adaptive(tolerance), only("y1"))));
    const TensorBoundUse& t = the_tensor(s, "y1");
    EXPECT_GE(t.relative_error_bound, last_bound);
    EXPECT_GE(t.ratio, last_ratio);
    EXPECT_LE(compressed_bytes(s, "y1"), last_bytes);
    EXPECT_LE(*t.predicted_gradient_error, tolerance * (1 + 1e-12));
    EXPECT_LE(t.relative_error_bound, 1.0);  // capped at the value range
    last_bound = t.relative_error_bound;
    last_ratio = t.ratio;
    last_bytes = compressed_bytes(s, "y1");
  }
  // The widest tolerances hit the cap: the whole range, and a prediction under the tolerance.
  const Schedule wide = test_support::must_apply(build_schedule(trace, time_model(), spec(adaptive(1e3), only("y1"))));
  EXPECT_EQ(the_tensor(wide, "y1").relative_error_bound, 1.0);
  EXPECT_LT(*the_tensor(wide, "y1").predicted_gradient_error, 1e3);
}

// Two conv/linear ops read views of one storage, with statistics of their own: the bound is the
// smaller of theirs, and the prediction is at the consumer that binds, listed first.
TEST(AdaptiveBound, TheMostSensitiveConsumerBinds) {
  Mlp mlp;
  // l3 reads a second view of y1 as well (a1b), with its own statistics: 4x more sensitive.
  const auto a1b = mlp.tensor("a1b", TensorRole::activation, mlp.y1);
  mlp.tensors[a1b].gradient = {4e-3, 2e-3, 4.0, std::nullopt};
  mlp.tensors[a1b].values = mlp.tensors[mlp.a1].values;  // r1's last output is the saved content
  mlp.ops[4].inputs.push_back(a1b);                          // l3 (forward) reads p and a1b
  mlp.ops[7].inputs.push_back(a1b);                          // l3.backward reads it
  // a1b must be written: make r1 produce it too (a second in-place output).
  mlp.ops[1].outputs.push_back(a1b);
  const Schedule s = test_support::must_apply(build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1"))));
  const TensorBoundUse& t = the_tensor(s, "y1");
  const double eb_abs = 0.01 * 2e-3 / (4e-3 * std::sqrt(0.5 * 4.0 / 3.0));
  EXPECT_NEAR(*t.absolute_error_bound, eb_abs, 1e-18);
  EXPECT_NEAR(*t.predicted_gradient_error, 0.01, 1e-15);
  EXPECT_EQ(t.consumers, (std::vector<std::string>{"l3", "l2"}));
}

TEST(AdaptiveBound, UncoveredStoragesNeedAFallback) {
  const traces::Trace trace = Mlp().build();
  // p is read by softmax's backward: not covered. Without a fallback, an InputError naming the
  // tensor and the reader; with one, p takes it and says why.
  try {
    build_schedule(trace, time_model(), spec(adaptive(0.01)));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot bound 'p'"), std::string::npos) << what;
    EXPECT_NE(what.find("'sm.backward' (softmax)"), std::string::npos) << what;
    EXPECT_NE(what.find("fallback_error_bound"), std::string::npos) << what;
  }
  const Schedule s = test_support::must_apply(build_schedule(trace, time_model(), spec(adaptive(0.01, 1e-3))));
  const TensorBoundUse& p = the_tensor(s, "p");
  EXPECT_EQ(p.from, TensorBoundUse::From::fallback);
  EXPECT_EQ(p.relative_error_bound, 1e-3);
  EXPECT_EQ(*p.absolute_error_bound, 1e-3);  // range 1
  EXPECT_FALSE(p.predicted_gradient_error.has_value());
  EXPECT_NE(p.why_fallback.find("sm.backward"), std::string::npos);
  EXPECT_EQ(the_tensor(s, "y1").from, TensorBoundUse::From::adaptive);
  // The fallback in absolute units (error_bound_mode abs): relative = fallback / range.
  CompressAction abs = adaptive(0.01, 0.25);
  abs.error_bound_mode = ErrorBoundMode::abs;
  const Schedule a = test_support::must_apply(build_schedule(trace, time_model(), spec(abs)));
  EXPECT_EQ(the_tensor(a, "p").relative_error_bound, 0.25);
  EXPECT_EQ(the_tensor(a, "y1").from, TensorBoundUse::From::adaptive);
}

// A backward matmul reading the storage is a linear layer's weight-gradient GEMM (as the capture
// names it when it cannot attribute the op to its Linear module), unless a forward matmul reads
// the storage too: then the backward matmul may be that one's, whose input gradient reads it.
TEST(AdaptiveBound, BackwardMatmulsCountAsLinearsUnlessAForwardMatmulReadsTheStorage) {
  Mlp mlp;
  mlp.ops[9].kind = OpKind::matmul;  // l2.backward
  const Schedule s = test_support::must_apply(build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1"))));
  EXPECT_EQ(the_tensor(s, "y1").from, TensorBoundUse::From::adaptive);
  mlp.ops[3].kind = OpKind::matmul;  // sm becomes a forward matmul that reads a1 too
  mlp.ops[3].inputs.push_back(mlp.a1);
  try {
    build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1")));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the backward op 'l2.backward' (matmul) reads it"), std::string::npos) << e.what();
  }
}

TEST(AdaptiveBound, MissingStatisticsOrRangeAreNamed) {
  Mlp mlp;
  mlp.tensors[mlp.a1].gradient.terms.reset();
  try {
    build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1")));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tensor 'a1', which 'l2' reads, has no gradient statistics"), std::string::npos) << what;
    EXPECT_NE(what.find("comptrain_capture.py"), std::string::npos) << what;
  }
  // With a fallback it takes it.
  const Schedule s = test_support::must_apply(build_schedule(mlp.build(), time_model(), spec(adaptive(0.01, 2e-3), only("y1"))));
  EXPECT_EQ(the_tensor(s, "y1").from, TensorBoundUse::From::fallback);
  EXPECT_EQ(the_tensor(s, "y1").relative_error_bound, 2e-3);

  Mlp no_range;
  no_range.tensors[no_range.a1].values.range.reset();
  try {
    build_schedule(no_range.build(), time_model(), spec(adaptive(0.01), only("y1")));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("value range"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'y1'"), std::string::npos) << e.what();
  }
}

TEST(AdaptiveBound, RulesTheModelCannotServeAreRefused) {
  EXPECT_THROW(validate_strategy(spec(adaptive(0))), InputError);
  EXPECT_THROW(validate_strategy(spec(adaptive(std::nan("")))), InputError);
  EXPECT_THROW(validate_strategy(spec(adaptive(std::numeric_limits<double>::infinity()))), InputError);
  EXPECT_THROW(validate_strategy(spec(adaptive(0.01, 0.0))), InputError);
  CompressAction no_profile = adaptive(0.01);
  no_profile.profile.reset();
  no_profile.ratio = 4;
  no_profile.compress_bandwidth = no_profile.decompress_bandwidth = 1e9;
  EXPECT_THROW(validate_strategy(spec(no_profile)), InputError);
  CompressAction ratio = adaptive(0.01);
  ratio.ratio = 4;
  EXPECT_THROW(validate_strategy(spec(ratio)), InputError);
  CompressAction zfp = adaptive(0.01);
  zfp.profile = profile("zfp");
  zfp.codec = "zfp";
  EXPECT_THROW(validate_strategy(spec(zfp)), InputError);
  CompressAction szh = adaptive(0.01);
  szh.profile = profile("szh");
  szh.codec = "szh";
  EXPECT_NO_THROW(validate_strategy(spec(szh)));
}

// At another batch size the trace's statistics follow their laws (traces/FORMAT.md, "Gradient
// statistics and the batch size"): N ∝ batch, RMS(δ) ∝ 1 / batch, RMS(G) kept. σ at a fixed bound
// then falls as 1/√batch, and the adaptive bound grows as √batch.
TEST(AdaptiveBound, TheBoundGrowsAsTheSquareRootOfTheBatch) {
  const traces::Trace trace = Mlp().build();
  const Schedule at4 = test_support::must_apply(build_schedule(trace, time_model(), spec(adaptive(0.01), only("y1"))));
  const Schedule at16 = test_support::must_apply(build_schedule(trace.rescaled(16), time_model(), spec(adaptive(0.01), only("y1"))));
  EXPECT_NEAR(*the_tensor(at16, "y1").absolute_error_bound / *the_tensor(at4, "y1").absolute_error_bound, 2.0, 1e-12);
  EXPECT_NEAR(*the_tensor(at16, "y1").predicted_gradient_error, 0.01, 1e-15);
  // The report says the statistics are extrapolated from the batch they were measured at.
  EXPECT_FALSE(the_tensor(at4, "y1").statistics_batch.has_value());
  EXPECT_EQ(the_tensor(at16, "y1").statistics_batch, 4);
}

// A fixed-bound rule on a trace with statistics predicts the error of its bound.
TEST(AdaptiveBound, FixedBoundsGetAPrediction) {
  CompressAction fixed;
  fixed.profile = profile();
  fixed.codec = "szp";
  fixed.error_bound = 1e-3;
  const Schedule s = test_support::must_apply(build_schedule(Mlp().build(), time_model(), spec(fixed)));
  const TensorBoundUse& y1 = the_tensor(s, "y1");
  EXPECT_EQ(y1.from, TensorBoundUse::From::fixed);
  EXPECT_EQ(*y1.absolute_error_bound, 4e-3);  // 1e-3 of the range 4
  EXPECT_NEAR(*y1.predicted_gradient_error, 4e-3 * 1e-3 * std::sqrt(0.5 * 4.0 / 3.0) / 2e-3, 1e-15);
  EXPECT_FALSE(the_tensor(s, "p").predicted_gradient_error.has_value());  // softmax reads it
}

// A recomputation that reads a compressed storage's decompressed copy is flagged: the error then
// enters the recomputed activations, which the prediction leaves out.
TEST(AdaptiveBound, RecomputationsReadingTheCopyAreFlagged) {
  Mlp mlp;
  // l2's output y2 becomes a saved activation read by sm's backward (instead of p), so dropping
  // it replays l2, which reads a1 (compressed).
  mlp.tensors[3].role = TensorRole::activation;
  mlp.ops[8].inputs = {mlp.ops[8].inputs[0], 3};  // sm.backward reads gp and y2
  StrategySpec s = spec(adaptive(0.01), only("y1"));
  TensorSelector y2;
  y2.names = {"y2"};
  s.rules.push_back({y2, RecomputeAction{RecomputeAction::Mode::checkpoints, 2, 0, {"none"}, {}}});
  const Schedule built = test_support::must_apply(build_schedule(mlp.build(), time_model(), s));
  EXPECT_TRUE(the_tensor(built, "y1").read_by_recomputation);
  const Schedule alone = test_support::must_apply(build_schedule(mlp.build(), time_model(), spec(adaptive(0.01), only("y1"))));
  EXPECT_FALSE(the_tensor(alone, "y1").read_by_recomputation);
}

}  // namespace
}  // namespace comptrain::models
