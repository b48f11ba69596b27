#pragma once
// Worker processes: SimGrid's engine runs once per process, so every simulation runs in a
// forked child. One fork helper (ChildProcess) serves a single simulation (sim::simulate) and
// the pool that the planner and sweeps share (WorkerPool); progress on stderr (Progress).
//
// A child sends back the string its job returns, or the message of the exception it threw.
// Whatever it writes to stderr (SimGrid's diagnostics, a crash's backtrace) is captured and
// handed to the caller with the outcome, so it reaches the user next to the job it belongs to
// instead of being lost or interleaved with a progress bar. A child killed by a signal is an
// outcome too (`died`, with the signal), not an exception that ends the whole run.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace comptrain::sim {

// How a job in a child process ended.
struct JobOutcome {
  enum class Status {
    result,       // the job returned; `text` is what it returned
    input_error,  // it threw comptrain::InputError; `text` is the message
    failed,       // it threw another exception; `text` is the message
    died,         // it ended without a result (a signal, or exit); `text` says how
  };
  Status status = Status::result;
  std::string text;
  std::string diagnostics;  // what the child wrote to stderr
  int signal = 0;           // died by this signal (0: it exited)

  // Rethrows a failure in the caller: InputError as InputError, anything else as
  // std::runtime_error with the diagnostics appended. Returns the result otherwise.
  std::string&& result_or_throw() &&;
};

// `text` with `prefix` before each of its lines ("variant 3: ..."), for diagnostics.
std::string prefix_lines(const std::string& prefix, const std::string& text);

// "signal 6 (Aborted)" / "exit status 1".
std::string describe_wait_status(int status);

// One forked child running `work`, with pipes for its result and its stderr.
class ChildProcess {
 public:
  using Work = std::function<std::string()>;
  explicit ChildProcess(const Work& work);
  ~ChildProcess();  // kills and reaps a child still running
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads both pipes until the child closes them, reaps it, and says how it ended.
  JobOutcome wait();

  // For a caller that polls many children: the two descriptors (-1 once closed) and one read
  // from whichever is ready. read_some returns false when both pipes are closed.
  int result_fd() const { return result_fd_; }
  int stderr_fd() const { return stderr_fd_; }
  bool read_some(int fd);
  JobOutcome finish();  // after read_some returned false: reap and decode

 private:
  void end() noexcept;  // closes the pipes, kills and reaps a child still running

  pid_t pid_ = -1;
  int result_fd_ = -1;
  int stderr_fd_ = -1;
  std::string result_;
  std::string stderr_;
};

// The number of worker processes for jobs = 0: the core count (at least 1).
int default_jobs();

// A pool of forked workers, driven from one thread with poll(): each job runs in a fresh child
// and its outcome comes back through next(). Jobs start in submission order; at most `workers`
// run at once.
class WorkerPool {
 public:
  using Work = ChildProcess::Work;
  struct Finished {
    std::size_t id = 0;
    JobOutcome outcome;
  };

  explicit WorkerPool(int workers);  // 0: default_jobs()
  ~WorkerPool() = default;           // ChildProcess kills and reaps the jobs still running
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t submit(Work work);  // returns the job's id (0, 1, ...)
  // Starts queued jobs up to the worker count and waits for one to finish; nullopt when none is
  // queued or running.
  std::optional<Finished> next();

  std::size_t running() const { return running_.size(); }
  std::size_t queued() const { return queue_.size(); }
  int workers() const { return workers_; }

 private:
  void start_queued();

  int workers_;
  std::size_t next_id_ = 0;
  std::deque<std::pair<std::size_t, Work>> queue_;
  std::vector<std::pair<std::size_t, ChildProcess>> running_;
};

// Runs every job of `works` on a pool of `workers` forked processes (0: default_jobs()) and
// returns their outcomes in the jobs' order; `on_finished(index, outcome)` is called as each one
// ends (progress, diagnostics). Every job runs to its end, so a caller that reads the outcomes in
// order reports the lowest-numbered failure whatever the worker count: the one rule of every
// study (plan, sweep, validate, platform fit, hybrid plan) for which error a user sees.
std::vector<JobOutcome> run_jobs(std::vector<ChildProcess::Work> works, int workers,
                                 const std::function<void(std::size_t index, const JobOutcome& outcome)>& on_finished = {});

// The first outcome, in the jobs' order, that is not a result; nullptr when all are.
const JobOutcome* first_failure(const std::vector<JobOutcome>& outcomes);

// Progress on stderr: a one-line bar with the count and an ETA when stderr is a terminal,
// otherwise a plain line every few seconds; nothing when disabled.
class Progress {
 public:
  Progress(std::string what, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // `total` may be an estimate (the planner's searches adapt); shown with a "~".
  void update(std::size_t done, std::size_t total, bool estimate);
  void finish(std::size_t done);
  // Prints `text` (lines) to stderr on lines of its own, then redraws the bar.
  void print(const std::string& text);

 private:
  std::string what_;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  std::size_t done_ = 0, total_ = 0;
  bool estimate_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_line_;
};

}  // namespace comptrain::sim
