#include "report/energy_report.hpp"

#include <fmt/format.h>

#include <vector>

namespace comptrain::sim::detail {

using nlohmann::ordered_json;

std::string format_joules(double joules) {
  if (joules >= 1e6) return fmt::format("{:.2f} MJ", joules / 1e6);
  if (joules >= 1e3) return fmt::format("{:.2f} kJ", joules / 1e3);
  return fmt::format("{:.4g} J", joules);
}

std::string format_watts(double watts) {
  if (watts >= 1e6) return fmt::format("{:.2f} MW", watts / 1e6);
  if (watts >= 1e3) return fmt::format("{:.2f} kW", watts / 1e3);
  return fmt::format("{:.1f} W", watts);
}

namespace {

template <typename... Args>
void line(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  out += fmt::format(format, std::forward<Args>(args)...);
  out += '\n';
}

double percent(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

}  // namespace

void add_energy_report(std::string& out, const std::optional<EnergyResult>& energy, std::int64_t samples, const IterationEnergy* with_io) {
  if (!energy) return;
  const EnergyResult& e = *energy;
  line(out, "Energy per iteration (SimGrid's host and link energy plugins; GPUs at their in-job power while no kernel runs)");
  line(out, "  total            {} per iteration, {} per sample (global batch {}), {:.3g} samples/J", format_joules(e.total_joules),
       format_joules(e.joules_per_sample(samples)), samples, e.total_joules > 0 ? static_cast<double>(samples) / e.total_joules : 0.0);
  line(out, "  per GPU          {}: average {}, peak {}; busy {:.1f}% of the iteration at {} on average (each kernel its own power, at most {}), waiting at {}",
       format_joules(e.gpu_joules), format_watts(e.gpu_average_watts()), format_watts(e.gpu_peak_watts), percent(e.gpu_busy_seconds, e.seconds),
       format_watts(e.gpu_busy_average_watts()), format_watts(e.gpu_busy_watts), format_watts(e.gpu_in_job_watts));
  line(out, "  per node         {}: GPUs {}, host {}, links {}; average {}, peak {}", format_joules(e.node_joules()),
       format_joules(e.node_gpu_joules), e.host_modelled ? format_joules(e.node_host_joules) : "n/a",
       e.links_modelled ? format_joules(e.node_link_joules) : "n/a", format_watts(e.node_average_watts()), format_watts(e.node_peak_watts));
  if (e.nodes > 1) {
    line(out, "  network          {} (the links between nodes){}", e.network_modelled ? format_joules(e.network_joules) : "n/a",
         e.network_modelled ? "" : ": network.link gives no power");
  }
  if (with_io != nullptr) {
    const IterationEnergy& w = *with_io;
    line(out, "  with I/O         {} per mean iteration of {:.6f} s, {} per sample, {:.3g} samples/J: waiting {} (the job at {} while it waits"
              " for a batch or a checkpoint), loader decoding {}; per GPU average {}, per node average {}",
         format_joules(w.total_joules), w.seconds, format_joules(w.joules_per_sample(samples)),
         w.total_joules > 0 ? static_cast<double>(samples) / w.total_joules : 0.0, format_joules(w.waiting_joules), format_watts(e.waiting_watts()),
         format_joules(w.decode_joules), format_watts(w.gpu_average_watts()), format_watts(w.node_average_watts()));
  }
  if (e.gpu_power_limit_watts > 0) {
    line(out,
         "  power limit      {}: a kernel that would draw more is clocked down until it draws it (one that keeps the SMs saturated: {:.1f}% "
         "of the nominal clock, {:.2f}x longer); one that draws less keeps its speed",
         format_watts(e.gpu_power_limit_watts), 100 * e.gpu_clock_fraction, 1 / e.gpu_clock_fraction);
  }
  std::vector<std::string> missing;
  if (!e.host_modelled) missing.emplace_back("the host's CPUs (no host.power)");
  if (!e.links_modelled) missing.emplace_back("the node's links (no power on host_link, gpu_link or nic)");
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : "; ") + m;
    line(out, "  not counted      {}", list);
  }
  out += '\n';
}

ordered_json energy_json(const std::optional<EnergyResult>& energy, std::int64_t samples, const IterationEnergy* with_io) {
  if (!energy) return nullptr;
  const EnergyResult& e = *energy;
  const auto modelled = [](bool is, double value) { return is ? ordered_json(value) : ordered_json(nullptr); };
  return {{"total_joules", e.total_joules},
          {"joules_per_sample", e.joules_per_sample(samples)},
          {"samples_per_joule", e.total_joules > 0 ? ordered_json(static_cast<double>(samples) / e.total_joules) : ordered_json(nullptr)},
          {"gpu",
           {{"joules", e.gpu_joules},
            {"average_watts", e.gpu_average_watts()},
            {"peak_watts", e.gpu_peak_watts},
            {"busy_seconds", e.gpu_busy_seconds},
            {"busy_watts", e.gpu_busy_watts},
            {"busy_average_watts", e.gpu_busy_average_watts()},
            {"in_job_watts", e.gpu_in_job_watts},
            {"power_limit_watts", e.gpu_power_limit_watts > 0 ? ordered_json(e.gpu_power_limit_watts) : ordered_json(nullptr)},
            {"clock_fraction", e.gpu_clock_fraction}}},
          {"node",
           {{"joules", e.node_joules()},
            {"gpu_joules", e.node_gpu_joules},
            {"host_joules", modelled(e.host_modelled, e.node_host_joules)},
            {"link_joules", modelled(e.links_modelled, e.node_link_joules)},
            {"average_watts", e.node_average_watts()},
            {"peak_watts", e.node_peak_watts}}},
          {"network_joules", modelled(e.network_modelled, e.network_joules)},
          {"waiting_watts", e.waiting_watts()},
          {"with_io", with_io == nullptr ? ordered_json(nullptr)
                                         : ordered_json{{"mean_iteration_seconds", with_io->seconds},
                                                        {"total_joules", with_io->total_joules},
                                                        {"joules_per_sample", with_io->joules_per_sample(samples)},
                                                        {"samples_per_joule", with_io->total_joules > 0 ? ordered_json(static_cast<double>(samples) / with_io->total_joules)
                                                                                                         : ordered_json(nullptr)},
                                                        {"waiting_joules", with_io->waiting_joules},
                                                        {"decode_joules", with_io->decode_joules},
                                                        {"gpu_average_watts", with_io->gpu_average_watts()},
                                                        {"node_average_watts", with_io->node_average_watts()}}}};
}

}  // namespace comptrain::sim::detail
