#pragma once
// For tests whose strategy must apply: the schedule out of build_schedule's result, failing the
// test with the reason when the strategy does not apply.

#include <gtest/gtest.h>

#include <variant>

#include "comptrain/models/strategy.hpp"

namespace comptrain::test_support {

inline models::Schedule must_apply(std::variant<models::Schedule, models::NotApplicable> built) {
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&built)) {
    ADD_FAILURE() << "the strategy does not apply: " << not_applicable->reason;
    return {};
  }
  return std::move(std::get<models::Schedule>(built));
}

}  // namespace comptrain::test_support
