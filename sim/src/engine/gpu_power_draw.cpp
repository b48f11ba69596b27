#include "engine/gpu_power_draw.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

#include "engine/cluster_network.hpp"

namespace comptrain::sim::detail {

namespace {
// Work of the power exec: it never ends by itself (at the lowest load SimGrid would need
// 1e30 / 1e9 s); the power actor cancels it.
constexpr double kNeverEnding = 1e30;
}  // namespace

GpuPowerDraw::GpuPowerDraw(sg4::Host* power_host, const models::GpuSpec& gpu)
    : host_(power_host), in_job_(gpu.in_job_power), max_(gpu.max_power), busy_(gpu.busy_power()) {}

void GpuPowerDraw::start(const std::string& name) {
  if (host_ == nullptr) return;
  mutex_ = sg4::Mutex::create();
  changed_ = sg4::ConditionVariable::create();
  sg4::Actor::create(name, host_, [this] { draw(); })->daemonize();
}

double GpuPowerDraw::load(double watts) const {
  const double drawn = watts > 0 ? watts : busy_;
  return std::clamp((drawn - in_job_) / (max_ - in_job_), 0.0, 1.0);
}

void GpuPowerDraw::begin(double watts) {
  if (host_ == nullptr) return;
  ++running_;
  load_sum_ += load(watts);
  changed_->notify_one();
}

void GpuPowerDraw::end(double watts) {
  if (host_ == nullptr) return;
  --running_;
  load_sum_ = running_ > 0 ? load_sum_ - load(watts) : 0.0;
  changed_->notify_one();
}

// The power actor: whenever the running kernels change, it replaces its exec by one at their mean
// load. It starts every power exec itself, so none dies with the stream actor that ran the kernel
// (SimGrid cancels an actor's activities when it ends); a daemon, it is killed, and its exec with
// it, once the streams' actors have ended. Between checking the kernels and waiting it makes no
// simcall, so no change can slip in unseen (SimGrid switches actors only inside simcalls).
void GpuPowerDraw::draw() {
  std::unique_lock<sg4::Mutex> lock(*mutex_);
  sg4::ExecPtr exec;
  double drawn = 0;
  while (true) {
    const double mean = running_ > 0 ? std::min(load_sum_ / running_, 1.0) : 0.0;
    if (mean == drawn) {
      changed_->wait(lock);
      continue;
    }
    if (exec) std::exchange(exec, nullptr)->cancel();
    drawn = mean;
    if (mean > 0) {
      exec = sg4::Exec::init()->set_host(host_)->set_flops_amount(kNeverEnding)->set_bound(mean * kGpuPowerSpeed);
      exec->start();
    }
  }
}

}  // namespace comptrain::sim::detail
