#pragma once
// The I/O simulation's result in the simulate report.

#include <string>

#include "comptrain/sim/engine/io_simulation.hpp"

namespace comptrain::sim {

// The report's "Data loading and checkpoints" section, and the same as the JSON `io` object
// (a JSON text, so that this header does not expose the JSON library).
std::string io_report_text(const IoResult& result);
std::string io_report_json(const IoResult& result);

}  // namespace comptrain::sim
