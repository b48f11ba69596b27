#include "comptrain/sim/runtime/workers.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "comptrain/support/input_error.hpp"
#include "comptrain/support/progress_bar.hpp"

namespace comptrain::sim {
namespace {

// Writes all of `data`, retrying on EINTR; gives up if the reader has gone (the parent then
// sees a child without a result).
void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The first byte of what a child sends: how its job ended; the text follows.
constexpr char kResult = 'R';
constexpr char kInputError = 'I';
constexpr char kFailure = 'E';

// Diagnostics are kept to their end: a crash's last lines say the most.
constexpr std::size_t kMaxDiagnostics = 16 * 1024;

}  // namespace

std::string prefix_lines(const std::string& prefix, const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += prefix + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return fmt::format("signal {} ({})", sig, name ? name : "unknown");
  }
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  return "an unknown wait status";
}

std::string&& JobOutcome::result_or_throw() && {
  switch (status) {
    case Status::result: return std::move(text);
    case Status::input_error: throw InputError(text);
    case Status::failed:
    case Status::died: break;
  }
  std::string message = text;
  if (!diagnostics.empty()) message += "; its stderr ended with:\n" + diagnostics;
  throw std::runtime_error(message);
}

// --- ChildProcess ------------------------------------------------------------------------

ChildProcess::ChildProcess(const Work& work) {
  int result[2], err[2];
  if (::pipe(result) != 0) throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  if (::pipe(err) != 0) {
    ::close(result[0]);
    ::close(result[1]);
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  std::fflush(nullptr);  // otherwise buffered output would be written twice
  pid_ = ::fork();
  if (pid_ < 0) {
    for (int fd : {result[0], result[1], err[0], err[1]}) ::close(fd);
    throw std::runtime_error(std::string("cannot fork a worker process: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    ::close(result[0]);
    ::close(err[0]);
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[1]);
    std::string message;
    int code = 0;
    try {
      message = kResult + work();
    } catch (const InputError& e) {
      message = kInputError + std::string(e.what());
      code = 1;
    } catch (const std::exception& e) {
      message = kFailure + std::string(e.what());
      code = 1;
    }
    write_all(result[1], message);
    ::close(result[1]);
    std::fflush(stderr);
    ::_exit(code);  // skip the parent's atexit handlers and SimGrid's static destructors
  }
  ::close(result[1]);
  ::close(err[1]);
  result_fd_ = result[0];
  stderr_fd_ = err[0];
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      result_fd_(std::exchange(other.result_fd_, -1)),
      stderr_fd_(std::exchange(other.stderr_fd_, -1)),
      result_(std::move(other.result_)),
      stderr_(std::move(other.stderr_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    end();
    pid_ = std::exchange(other.pid_, -1);
    result_fd_ = std::exchange(other.result_fd_, -1);
    stderr_fd_ = std::exchange(other.stderr_fd_, -1);
    result_ = std::move(other.result_);
    stderr_ = std::move(other.stderr_);
  }
  return *this;
}

ChildProcess::~ChildProcess() { end(); }

void ChildProcess::end() noexcept {
  close_fd(result_fd_);
  close_fd(stderr_fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

bool ChildProcess::read_some(int fd) {
  char chunk[1 << 16];
  const ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n < 0 && errno == EINTR) return true;
  if (n > 0) {
    std::string& into = fd == result_fd_ ? result_ : stderr_;
    into.append(chunk, static_cast<std::size_t>(n));
    if (fd == stderr_fd_ && stderr_.size() > 2 * kMaxDiagnostics) stderr_.erase(0, stderr_.size() - kMaxDiagnostics);
  } else {
    close_fd(fd == result_fd_ ? result_fd_ : stderr_fd_);
  }
  return result_fd_ >= 0 || stderr_fd_ >= 0;
}

JobOutcome ChildProcess::finish() {
  close_fd(result_fd_);
  close_fd(stderr_fd_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  JobOutcome out;
  if (stderr_.size() > kMaxDiagnostics) stderr_ = "[...]" + stderr_.substr(stderr_.size() - kMaxDiagnostics);
  out.diagnostics = std::move(stderr_);
  if (result_.empty()) {
    out.status = JobOutcome::Status::died;
    if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
    out.text = "a worker process ended without a result (" + describe_wait_status(status) + ")";
    return out;
  }
  switch (result_[0]) {
    case kResult: out.status = JobOutcome::Status::result; break;
    case kInputError: out.status = JobOutcome::Status::input_error; break;
    default: out.status = JobOutcome::Status::failed; break;
  }
  out.text = result_.substr(1);
  return out;
}

JobOutcome ChildProcess::wait() {
  while (true) {
    pollfd fds[2];
    nfds_t n = 0;
    for (int fd : {result_fd_, stderr_fd_}) {
      if (fd >= 0) fds[n++] = {fd, POLLIN, 0};
    }
    if (n == 0) break;
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    }
    bool open = true;
    for (nfds_t i = 0; i < n && open; ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) open = read_some(fds[i].fd);
    }
    if (!open) break;
  }
  return finish();
}

// --- WorkerPool --------------------------------------------------------------------------

int default_jobs() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

WorkerPool::WorkerPool(int workers) : workers_(workers <= 0 ? default_jobs() : workers) {}

std::size_t WorkerPool::submit(Work work) {
  queue_.emplace_back(next_id_, std::move(work));
  return next_id_++;
}

void WorkerPool::start_queued() {
  while (!queue_.empty() && running_.size() < static_cast<std::size_t>(workers_)) {
    auto [id, work] = std::move(queue_.front());
    queue_.pop_front();
    running_.emplace_back(id, ChildProcess(work));
  }
}

std::optional<WorkerPool::Finished> WorkerPool::next() {
  start_queued();
  if (running_.empty()) return std::nullopt;
  std::vector<pollfd> fds;
  std::vector<std::size_t> owner;  // index into running_ per pollfd
  while (true) {
    fds.clear();
    owner.clear();
    for (std::size_t i = 0; i < running_.size(); ++i) {
      for (int fd : {running_[i].second.result_fd(), running_[i].second.stderr_fd()}) {
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owner.push_back(i);
      }
    }
    if (::poll(fds.data(), static_cast<nfds_t>(fds.size()), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      auto& [id, child] = running_[owner[k]];
      if (child.read_some(fds[k].fd)) continue;
      // Both pipes closed: the job is done. Take it out of the running list first.
      Finished done{id, child.finish()};
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(owner[k]));
      return done;
    }
  }
}

// --- Progress ----------------------------------------------------------------------------

Progress::Progress(std::string what, bool enabled)
    : what_(std::move(what)), enabled_(enabled), tty_(stderr_is_terminal()), start_(std::chrono::steady_clock::now()), last_line_(start_) {}

Progress::~Progress() {
  // An exception left the bar unfinished: end its line so that the error starts on its own.
  if (enabled_ && tty_ && !finished_) end_terminal_line(false);
}

void Progress::update(std::size_t done, std::size_t total, bool estimate) {
  done_ = done;
  total_ = total;
  estimate_ = estimate;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  total = std::max(total, done);
  std::string eta = "ETA --";
  if (done > 0 && total > done) eta = fmt::format("ETA {:.0f} s", elapsed / static_cast<double>(done) * static_cast<double>(total - done));
  if (done > 0 && total == done) eta = "ETA 0 s";
  const std::string count = fmt::format("{}/{}{} simulations", done, estimate ? "~" : "", total);
  if (tty_) {
    const double fraction = total == 0 ? 0.0 : static_cast<double>(done) / static_cast<double>(total);
    redraw_terminal_line(fmt::format("{} {} {}  {:.0f} s  {}", what_, progress_bar(fraction), count, elapsed, eta));
    return;
  }
  // Logs (Slurm, CI): a line every few seconds at most.
  if (now - last_line_ >= std::chrono::seconds(5)) {
    last_line_ = now;
    fmt::print(stderr, "comptrain {}: {}, {:.0f} s elapsed, {}\n", what_, count, elapsed, eta);
  }
}

void Progress::print(const std::string& text) {
  if (text.empty()) return;
  const bool redraw = enabled_ && tty_ && !finished_;
  if (redraw) end_terminal_line(true);
  fmt::print(stderr, "{}{}", text, text.back() == '\n' ? "" : "\n");
  if (redraw) update(done_, total_, estimate_);
}

void Progress::finish(std::size_t done) {
  if (!enabled_ || finished_) return;
  finished_ = true;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) end_terminal_line(true);
  fmt::print(stderr, "comptrain {}: {} simulations in {:.1f} s\n", what_, done, elapsed);
}

std::vector<JobOutcome> run_jobs(std::vector<ChildProcess::Work> works, int workers,
                                 const std::function<void(std::size_t index, const JobOutcome& outcome)>& on_finished) {
  WorkerPool pool(workers);
  for (auto& work : works) pool.submit(std::move(work));  // ids are 0, 1, ...: the jobs' indices
  std::vector<JobOutcome> outcomes(works.size());
  while (auto finished = pool.next()) {
    if (on_finished) on_finished(finished->id, finished->outcome);
    outcomes[finished->id] = std::move(finished->outcome);
  }
  return outcomes;
}

const JobOutcome* first_failure(const std::vector<JobOutcome>& outcomes) {
  for (const JobOutcome& outcome : outcomes) {
    if (outcome.status != JobOutcome::Status::result) return &outcome;
  }
  return nullptr;
}

}  // namespace comptrain::sim
