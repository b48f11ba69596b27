#pragma once
// The energy section of a simulation's report and JSON (sim/energy.hpp, sim/README.md "Energy").
// Internal to comptrain::sim: outputs.cpp writes it.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "comptrain/sim/engine/energy.hpp"
#include "comptrain/sim/metrics/iteration_energy.hpp"

namespace comptrain::sim::detail {

// "1.23 kJ", "850.0 J", "2.40 MJ" (powers of 1000).
std::string format_joules(double joules);
// "400.0 W", "3.21 kW".
std::string format_watts(double watts);

// The report's "Energy" section; `samples`: the global batch of one iteration. Nothing when the
// run has no energy (the platform gives no power values). `with_io`: the mean iteration's energy
// with the data loader and checkpoints (sim/io_energy.hpp), a line of its own; null without them.
void add_energy_report(std::string& out, const std::optional<EnergyResult>& energy, std::int64_t samples, const IterationEnergy* with_io = nullptr);

// results.energy: null without energy; the fields are docs/io-and-energy.md's ("Energy"); `with_io` null
// without a data or checkpoint section.
nlohmann::ordered_json energy_json(const std::optional<EnergyResult>& energy, std::int64_t samples, const IterationEnergy* with_io = nullptr);

}  // namespace comptrain::sim::detail
