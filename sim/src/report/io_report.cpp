// The report of sim/io.hpp: text and JSON.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comptrain/sim/report/io_report.hpp"
#include "comptrain/support/format.hpp"

namespace comptrain::sim {

std::string io_report_text(const IoResult& r) {
  std::string out = "\nData loading and checkpoints (sim/io.hpp: one node's training loops, loader workers and checkpoint copies)\n";
  out += fmt::format("  iteration on the GPU      {:.6f} s\n", r.gpu_iteration_seconds);
  if (r.data_loader) {
    out += fmt::format("  with the data loader      {:.6f} s (waiting {:.6f} s for the batch; a worker reads a batch in {:.6f} s, decodes it in {:.6f} s)\n",
                       r.steady_iteration_seconds, r.data_wait_seconds, r.batch_read_seconds, r.batch_decode_seconds);
    out += fmt::format("  launching thread          {:.6f} s of CPU per iteration on the workers' cores (the iteration waited {:.6f} s for it)\n",
                       r.launch_seconds, r.launch_wait_seconds);
  } else {
    out += "  data loader               none (no data: section; every batch is ready)\n";
  }
  out += fmt::format("  bound                     {}\n", to_string(r.bound));
  if (r.checkpoint) {
    const CheckpointResult& c = *r.checkpoint;
    out += fmt::format("  checkpoint                {} every {} iteration{} to {} storage: rank 0 writes {} ({} parameters, {} optimizer state)",
                       to_string(c.mode), c.every, c.every == 1 ? "" : "s", to_string(c.to), format_bytes(c.sizes.rank0.total()),
                       format_bytes(c.sizes.rank0.parameters), format_bytes(c.sizes.rank0.optimizer_states));
    out += c.sizes.other.total() > 0 ? fmt::format(", every other rank {}\n", format_bytes(c.sizes.other.total())) : std::string("\n");
    out += fmt::format("  stall per checkpoint      {:.6f} s (persisted {:.6f} s after it began)\n", c.stall_seconds, c.persist_seconds);
    if (c.save_overhead_seconds > 0) {
      out += fmt::format("  of which the save's cost  {:.6f} s before its bytes move (the platform's storage.shared.checkpoint_overhead)\n",
                         c.save_overhead_seconds);
    }
    if (c.mode == CheckpointMode::sync) {
      out += fmt::format("  of which torch.save       {:.6f} s serializing (the rest: copies to the host and writes)\n", c.serialize_seconds);
    } else {
      out += fmt::format("  copies waited for         {}\n", c.wait == CheckpointWait::step ? "before the next optimizer step (checkpoint.wait: step)"
                                                                                            : "at the end of the save (checkpoint.wait: save)");
    }
    out += fmt::format("  cost per iteration        {:.6f} s averaged over the interval ({:.2f}% of the iteration; {:.6f} s per interval)\n",
                       c.seconds_per_iteration, 100 * c.overhead, c.extra_seconds_per_interval);
    out += fmt::format("  host memory               {} per node for checkpoint copies\n", format_bytes(c.host_bytes_per_node));
    if (c.outlasts_interval) out += "  note                      the checkpoint's flush outlasts the interval: whole intervals simulated\n";
    if (c.target_overhead) {
      out += c.interval_for_target
                 ? fmt::format("  interval for {:.2f}%        every {} iterations (the smallest meeting plan.checkpoint_overhead)\n",
                               100 * *c.target_overhead, *c.interval_for_target)
                 : fmt::format("  interval for {:.2f}%        none found: the flush outlasts the interval simulated\n", 100 * *c.target_overhead);
    }
  }
  out += fmt::format("  mean iteration            {:.6f} s\n", r.mean_iteration_seconds);
  return out;
}

std::string io_report_json(const IoResult& r) {
  nlohmann::ordered_json j;
  j["data_loader"] = r.data_loader;
  j["gpu_iteration_seconds"] = r.gpu_iteration_seconds;
  j["steady_iteration_seconds"] = r.steady_iteration_seconds;
  j["data_wait_seconds"] = r.data_wait_seconds;
  j["batch_read_seconds"] = r.batch_read_seconds;
  j["batch_decode_seconds"] = r.batch_decode_seconds;
  j["launch_seconds"] = r.launch_seconds;
  j["launch_wait_seconds"] = r.launch_wait_seconds;
  j["bound"] = std::string(to_string(r.bound));
  j["mean_iteration_seconds"] = r.mean_iteration_seconds;
  j["simulated_iterations"] = r.simulated_iterations;
  if (r.checkpoint) {
    const CheckpointResult& c = *r.checkpoint;
    nlohmann::ordered_json k;
    k["mode"] = std::string(to_string(c.mode));
    if (c.mode == CheckpointMode::async) k["wait"] = std::string(to_string(c.wait));
    k["every"] = c.every;
    k["to"] = std::string(to_string(c.to));
    k["parameter_count"] = c.sizes.parameter_count;
    k["rank0_bytes"] = {{"parameters", c.sizes.rank0.parameters}, {"optimizer_states", c.sizes.rank0.optimizer_states}};
    k["other_rank_bytes"] = {{"parameters", c.sizes.other.parameters}, {"optimizer_states", c.sizes.other.optimizer_states}};
    k["stall_seconds"] = c.stall_seconds;
    k["persist_seconds"] = c.persist_seconds;
    if (c.mode == CheckpointMode::sync) k["serialize_seconds"] = c.serialize_seconds;
    if (c.save_overhead_seconds > 0) k["save_overhead_seconds"] = c.save_overhead_seconds;
    k["extra_seconds_per_interval"] = c.extra_seconds_per_interval;
    k["seconds_per_iteration"] = c.seconds_per_iteration;
    k["overhead"] = c.overhead;
    k["host_bytes_per_node"] = c.host_bytes_per_node;
    k["affected_iterations"] = c.affected_iterations;
    k["outlasts_interval"] = c.outlasts_interval;
    k["target_overhead"] = c.target_overhead ? nlohmann::ordered_json(*c.target_overhead) : nlohmann::ordered_json(nullptr);
    k["interval_for_target"] = c.interval_for_target ? nlohmann::ordered_json(*c.interval_for_target) : nlohmann::ordered_json(nullptr);
    j["checkpoint"] = std::move(k);
  } else {
    j["checkpoint"] = nullptr;
  }
  return j.dump();
}

}  // namespace comptrain::sim
