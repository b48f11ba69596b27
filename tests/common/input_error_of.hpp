#pragma once
// The parsers' tests: the message of the InputError a call raises, or "no error" (which no
// expected message contains, so an assertion on the message fails).

#include <string>

#include "comptrain/support/input_error.hpp"

namespace comptrain::test_support {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace comptrain::test_support
