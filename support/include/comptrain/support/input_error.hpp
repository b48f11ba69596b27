#pragma once
// One exception type for every "the user gave us something wrong" condition, so the
// command line can map all of them to exit code 2 and everything else to exit code 1.

#include <stdexcept>
#include <string>

namespace comptrain {

// Thrown when an input (a file, a command-line value, a scenario key) is malformed or
// inconsistent. what() must name where the problem is (file, line or JSON path, field)
// and what was expected, so the message can be shown to the user unchanged.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace comptrain
