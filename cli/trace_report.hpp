#pragma once
// The report of `comptrain trace show`: counts, FLOPs and the static memory breakdown.

#include <string>

#include "comptrain/traces/summary.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::cli {

std::string trace_report_text(const traces::Trace& trace, const traces::TraceSummary& summary, std::size_t largest);
std::string trace_report_json(const traces::Trace& trace, const traces::TraceSummary& summary);

}  // namespace comptrain::cli
