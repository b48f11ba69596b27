#include "comptrain/support/atomic_file.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "comptrain/support/input_error.hpp"

namespace comptrain {
namespace {

// Temporary files being written right now. A signal handler may only touch async-signal-safe
// state, so the paths live in fixed buffers and slots are claimed with atomics.
constexpr std::size_t kSlots = 16;
constexpr std::size_t kPathMax = 4096;
std::array<std::atomic<bool>, kSlots> slot_used{};
std::array<std::array<char, kPathMax>, kSlots> slot_path{};

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (slot_used[i].load()) ::unlink(slot_path[i].data());
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_handlers_once() {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction action {};
      struct sigaction previous {};
      sigaction(sig, nullptr, &previous);
      if (previous.sa_handler != SIG_DFL) continue;  // someone else handles it: leave alone
      action.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&action.sa_mask);
      sigaction(sig, &action, nullptr);
    }
    return true;
  }();
  (void)installed;
}

// The fatal signals blocked while a temporary file is created and registered, so that none
// can land between the two and leave the file behind.
class FatalSignalsBlocked {
 public:
  FatalSignalsBlocked() {
    sigset_t fatal;
    sigemptyset(&fatal);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&fatal, sig);
    ::pthread_sigmask(SIG_BLOCK, &fatal, &previous_);
  }
  ~FatalSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  FatalSignalsBlocked(const FatalSignalsBlocked&) = delete;
  FatalSignalsBlocked& operator=(const FatalSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

RemovedOnFatalSignal::RemovedOnFatalSignal(const std::string& path) {
  install_handlers_once();
  if (path.size() >= kPathMax) return;
  for (std::size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (slot_used[i].compare_exchange_strong(expected, true)) {
      std::memcpy(slot_path[i].data(), path.c_str(), path.size() + 1);
      slot_ = static_cast<int>(i);
      return;
    }
  }
}

RemovedOnFatalSignal::~RemovedOnFatalSignal() {
  if (slot_ >= 0) slot_used[static_cast<std::size_t>(slot_)].store(false);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  // Built with append: GCC 12 at -O3 reports a false -Wrestrict on `"." + string` (GCC PR 105329).
  std::string name = ".";
  name.append(path.filename().string()).append(".tmp.XXXXXX");
  std::string pattern = (dir / name).string();
  install_handlers_once();
  int fd = -1;
  std::optional<RemovedOnFatalSignal> guard;
  {
    const FatalSignalsBlocked blocked;
    fd = ::mkstemp(pattern.data());
    if (fd >= 0) guard.emplace(pattern);
  }
  if (fd < 0) {
    throw InputError("cannot write '" + path.string() + "': cannot create a temporary file in '" +
                     dir.string() + "': " + errno_text());
  }
  auto fail = [&](const std::string& what) {
    std::string reason = errno_text();
    ::close(fd);
    ::unlink(pattern.c_str());
    throw InputError("cannot write '" + path.string() + "': " + what + ": " + reason);
  };
  const char* data = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  // New files get the usual permissions (mkstemp creates 0600).
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(pattern.c_str());
    throw InputError("cannot write '" + path.string() + "': close failed: " + errno_text());
  }
  if (::rename(pattern.c_str(), path.c_str()) != 0) {
    std::string reason = errno_text();
    ::unlink(pattern.c_str());
    throw InputError("cannot write '" + path.string() + "': rename failed: " + reason);
  }
}

void write_output(const std::string& path, std::string_view contents) {
  if (!is_standard_output(path)) {
    write_file_atomically(path, contents);
    return;
  }
  // Through C stdio (std::cout is synchronised with it), flushed here so that a failure shows now.
  const bool ok = std::fwrite(contents.data(), 1, contents.size(), stdout) == contents.size();
  if (!ok || std::fflush(stdout) != 0) throw InputError("cannot write to standard output: " + errno_text());
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError("cannot read '" + path.string() + "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read '" + path.string() + "': " + errno_text());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace comptrain
