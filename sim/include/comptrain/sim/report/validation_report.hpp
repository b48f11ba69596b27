#pragma once
// The validation table's results as a user reads them.

#include <string>
#include <vector>

#include "comptrain/sim/studies/validate.hpp"

namespace comptrain::sim {

// The table as `comptrain validate` prints it, then the summaries; the same as JSON; and as
// Markdown tables (`comptrain validate --markdown`, the table of docs/validation.md).
std::string validation_text(const std::vector<ValidationResult>& results);
std::string validation_json(const std::string& table_source, const std::vector<ValidationResult>& results);
std::string validation_markdown(const std::vector<ValidationResult>& results);

}  // namespace comptrain::sim
