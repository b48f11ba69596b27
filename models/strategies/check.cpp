// Checks of a strategy's rules before anything is built (validate_strategy): each rule's numbers,
// patterns and codec, so that a bad scenario is an InputError naming the rule. Split out of
// build_schedule.cpp.

#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {

namespace {

void check_rule(const StrategySpec& spec, std::size_t index, std::string_view source) {
  const StrategyRule& rule = spec.rules[index];
  const std::string where = rule_context(spec, index, source);
  if (rule.select.min_bytes < 0) throw InputError(where + "min_bytes must be >= 0");
  for (const std::string& pattern : rule.select.modules) {
    try {
      validate_module_pattern(pattern);
    } catch (const InputError& e) {
      throw InputError(where + "modules: " + e.what());
    }
  }
  if (const OffloadAction* o = rule.offload(); o && o->lookahead < 0) throw InputError(where + "offload lookahead must be >= 0");
  if (const OffloadAction* o = rule.offload(); o && o->stash) {
    if (*o->stash < 1) throw InputError(where + "offload stash must be >= 1");
    if (o->synchronous || o->free_by || o->stream != OffloadAction::Stream::copy) {
      throw InputError(where + "offload stash applies to asynchronous copies on the copy stream without free_by; expected no synchronous, no free_by and stream: copy");
    }
  }
  if (const OffloadAction* o = rule.offload(); o && o->free_by) {
    if (*o->free_by < 1) throw InputError(where + "offload free_by must be >= 1");
    if (o->synchronous || o->stream != OffloadAction::Stream::copy) throw InputError(where + "offload free_by applies to asynchronous copies on the copy stream; expected no synchronous and stream: copy");
  }
  if (const RecomputeAction* r = rule.recompute()) {
    if (r->mode == RecomputeAction::Mode::every_k && r->k < 1) throw InputError(where + "recompute k must be >= 1");
    if (r->mode == RecomputeAction::Mode::budget && r->budget_bytes < 0) throw InputError(where + "recompute budget_bytes must be >= 0");
    const bool keeps = r->mode == RecomputeAction::Mode::checkpoints || r->mode == RecomputeAction::Mode::selective;
    if (keeps != !r->keep.empty()) {
      throw InputError(where + (r->keep.empty() ? std::string("recompute mode ") + (r->mode == RecomputeAction::Mode::selective ? "selective" : "checkpoints") +
                                                      " needs 'keep' (name patterns of the activations kept)"
                                                : "recompute 'keep' applies to modes checkpoints and selective only"));
    }
    if ((r->mode == RecomputeAction::Mode::selective) != !r->blocks.empty()) {
      throw InputError(where + (r->blocks.empty() ? "recompute mode selective needs 'blocks' (module patterns of the checkpointed regions, e.g. model.layers.*)"
                                                  : "recompute 'blocks' applies to mode selective only"));
    }
    for (const std::string& pattern : r->blocks) {
      try {
        validate_module_pattern(pattern);
      } catch (const InputError& e) {
        throw InputError(where + "blocks: " + e.what());
      }
    }
  }
  const CompressAction* c = rule.compress();
  if (c == nullptr) return;
  const bool profiled = c->profile != nullptr;
  if (c->adaptive && !profiled) throw InputError(where + "error_bound adaptive needs a profile, whose ratio model turns each tensor's bound into its ratio");
  // Without a profile every number is needed; with one, any number given overrides its model.
  auto check = [&](const std::optional<double>& value, const char* what, const char* expected, auto ok) {
    if (!value) {
      if (!profiled) throw InputError(where + "compress needs '" + what + "' (" + expected + ") or a profile");
      return;
    }
    if (!std::isfinite(*value) || !ok(*value)) throw InputError(where + "compress " + what + " must be " + expected);
  };
  check(c->ratio, "ratio", ">= 1", [](double v) { return v >= 1; });
  check(c->compress_bandwidth, "compress_bandwidth", "> 0", [](double v) { return v > 0; });
  check(c->decompress_bandwidth, "decompress_bandwidth", "> 0", [](double v) { return v > 0; });
  if (c->latency && (!std::isfinite(*c->latency) || *c->latency < 0)) throw InputError(where + "compress latency must be >= 0");
  if (c->error_bound_mode == ErrorBoundMode::none) throw InputError(where + "error_bound_mode must be rel or abs");
  if (c->positive_mask != CompressAction::PositiveMask::none && (!profiled || !codec_has_uniform_errors(c->codec))) {
    throw InputError(where + "positive_mask needs a profile and codec szp or szh (the kernels keep the mask beside those streams only)");
  }
  if (!profiled) return;
  const CodecProfile* codec = c->profile->find(c->codec);
  if (codec == nullptr) {
    std::string names;
    for (const auto& p : c->profile->codecs) names += (names.empty() ? "" : ", ") + p.codec;
    throw InputError(where + "profile '" + c->profile->name + "' has no codec '" + c->codec + "'; it has: " + names);
  }
  if (codec->ratio.count(TensorClass::generic) == 0) {
    throw InputError(where + "profile '" + c->profile->name + "' codec '" + c->codec + "' has no generic ratio model");
  }
  if (c->adaptive) {
    // The bound comes from the model per storage, and picks the storage's ratio: an explicit
    // ratio would ignore it, and a codec whose errors are not uniform quantisation errors (zfp's
    // tolerance, the casts) is outside the model.
    if (!(c->adaptive->tolerance > 0) || !std::isfinite(c->adaptive->tolerance)) {
      throw InputError(where + "error_bound adaptive needs gradient_error_tolerance finite and > 0 (a fraction of the weight gradient's RMS, e.g. 0.01)");
    }
    if (const auto& fallback = c->adaptive->fallback_error_bound; fallback && (!(*fallback > 0) || !std::isfinite(*fallback))) {
      throw InputError(where + "fallback_error_bound must be finite and > 0");
    }
    if (c->ratio) throw InputError(where + "error_bound adaptive picks each tensor's ratio from the profile; expected no explicit ratio");
    if (!codec_has_uniform_errors(c->codec)) {
      throw InputError(where + "error_bound adaptive needs a codec whose errors the gradient-error model describes (szp or szh: uniform quantisation errors, zeros exact); codec '" +
                       c->codec + "' is not one");
    }
    return;
  }
  if (!c->ratio && (!(c->error_bound > 0) || !std::isfinite(c->error_bound))) {
    throw InputError(where + "a profile-driven compress rule needs error_bound > 0");
  }
}

}  // namespace

std::string rule_context(const StrategySpec& strategy, std::size_t rule, std::string_view source) {
  const std::string& location = strategy.rules.at(rule).location;
  // A location names its own file; the source is for rules built in code.
  if (!location.empty()) return location + ": ";
  return (source.empty() ? std::string() : std::string(source) + ": ") + "strategy '" + strategy.name + "' rule " + std::to_string(rule) + ": ";
}

void validate_strategy(const StrategySpec& strategy, std::string_view source) {
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) check_rule(strategy, r, source);
}

}  // namespace comptrain::models
