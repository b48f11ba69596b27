#include "comptrain/support/atomic_file.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

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

// "a FIFO", "a directory", ...: what a file that is not a regular one is, for messages.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Linux's limit on the symbolic links one lookup follows (MAXSYMLINKS in the kernel's
// include/linux/namei.h): a longer chain is a loop for every other program too.
constexpr int kMaxSymlinkHops = 40;

// An open file descriptor of this process named by a path: "/dev/fd/N" (bash's process
// substitution), "/proc/self/fd/N", "/proc/thread-self/fd/N" or "/proc/PID/fd/N" with our PID
// (/dev/stdout and /dev/stderr are links to /proc/self/fd/1 and 2). Nothing for other paths.
std::optional<int> own_descriptor_number(const std::string& path) {
  std::string_view rest = path;
  const std::string own_pid = "/proc/" + std::to_string(::getpid()) + "/fd/";
  bool matched = false;
  for (std::string_view prefix : {std::string_view("/dev/fd/"), std::string_view("/proc/self/fd/"),
                                  std::string_view("/proc/thread-self/fd/"), std::string_view(own_pid)}) {
    if (rest.starts_with(prefix)) {
      rest.remove_prefix(prefix.size());
      matched = true;
      break;
    }
  }
  if (!matched || rest.empty() || rest.size() > 9) return std::nullopt;
  int fd = 0;
  for (char c : rest) {
    if (c < '0' || c > '9') return std::nullopt;
    fd = fd * 10 + (c - '0');
  }
  return fd;
}

// Where writing to a path lands once its symbolic links are followed: a path (which need not
// exist yet: a new file, or the target of a dangling link), or an open file descriptor of ours.
struct Destination {
  std::filesystem::path path;
  std::optional<int> descriptor;
};

Destination destination_of(const std::filesystem::path& path, const std::string& shown) {
  std::filesystem::path current = path;
  for (int hops = 0;; ++hops) {
    if (const std::optional<int> fd = own_descriptor_number(current.string())) {
      if (::fcntl(*fd, F_GETFL) < 0) {
        throw InputError("cannot write " + shown + ": file descriptor " + std::to_string(*fd) + " is not open");
      }
      return {current, fd};
    }
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return {current, std::nullopt};
    if (hops == kMaxSymlinkHops) {
      throw InputError("cannot write " + shown + ": more than " + std::to_string(kMaxSymlinkHops) +
                       " symbolic links in a row; expected a chain that ends (a loop?)");
    }
    std::string target(PATH_MAX, '\0');
    const ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
    if (n < 0) throw InputError("cannot write " + shown + ": cannot read the symbolic link '" + current.string() + "': " + errno_text());
    target.resize(static_cast<std::size_t>(n));
    const std::filesystem::path next(target);
    current = next.is_absolute() ? next : current.parent_path() / next;
  }
}

// Closes a file descriptor when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() { ::close(fd_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

 private:
  int fd_;
};

// "it is larger than 1 GiB (1073741824 bytes), the most comptrain reads from one file; ...".
std::string too_large(std::int64_t max_bytes) {
  std::string bound = std::to_string(max_bytes) + " bytes";
  if (max_bytes >= 1024 && max_bytes % 1024 == 0) {
    std::int64_t scaled = max_bytes / 1024;
    const char* unit = "KiB";
    for (const char* larger : {"MiB", "GiB", "TiB"}) {
      if (scaled % 1024 != 0) break;
      scaled /= 1024;
      unit = larger;
    }
    bound = std::to_string(scaled) + " " + unit + " (" + bound + ")";
  }
  return "it is larger than " + bound + ", the most comptrain reads from one input file; expected a smaller file";
}

// Writes all of `contents` to `fd`; answers false (errno set) when a write fails.
bool write_all(int fd, std::string_view contents) {
  const char* data = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

// A regular file or a new path: written to a temporary file in the target's directory, flushed,
// then renamed over the target. `mode` is the replaced file's permissions, kept; a new file gets
// the usual ones (0666 less the umask; mkstemp creates 0600).
void replace_atomically(const std::filesystem::path& target, const std::string& shown, std::string_view contents, std::optional<mode_t> mode) {
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  // Built with append: GCC 12 at -O3 reports a false -Wrestrict on `"." + string` (GCC PR 105329).
  std::string name = ".";
  name.append(target.filename().string()).append(".tmp.XXXXXX");
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
    throw InputError("cannot write " + shown + ": cannot create a temporary file in '" + dir.string() + "': " + errno_text());
  }
  auto fail = [&](const std::string& what) {
    std::string reason = errno_text();
    ::close(fd);
    ::unlink(pattern.c_str());
    throw InputError("cannot write " + shown + ": " + what + ": " + reason);
  };
  if (!write_all(fd, contents)) fail("write failed");
  if (!mode) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd, *mode) != 0) fail("cannot set its permissions");
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(pattern.c_str());
    throw InputError("cannot write " + shown + ": close failed: " + errno_text());
  }
  if (::rename(pattern.c_str(), target.c_str()) != 0) {
    std::string reason = errno_text();
    ::unlink(pattern.c_str());
    throw InputError("cannot write " + shown + ": rename failed: " + reason);
  }
}

// A FIFO or a character device: opened as the shell's `>` would (a FIFO waits for its reader)
// but neither created nor truncated, and written in place. Replacing it would break whatever
// reads it (and, run as root, turn /dev/null into a regular file).
void write_in_place(const std::filesystem::path& target, const std::string& shown, std::string_view contents) {
  int fd = -1;
  do {
    fd = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw InputError("cannot write " + shown + ": cannot open it: " + errno_text());
  if (!write_all(fd, contents)) {
    const std::string reason = errno_text();
    ::close(fd);
    throw InputError("cannot write " + shown + ": write failed: " + reason);
  }
  if (::close(fd) != 0 && errno != EINTR) throw InputError("cannot write " + shown + ": close failed: " + errno_text());
}

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
  const std::string given = "'" + path.string() + "'";
  if (!path.has_filename()) throw InputError("cannot write " + given + ": expected a file name, not a directory");
  const Destination destination = destination_of(path, given);
  if (destination.descriptor) {
    // Our own descriptor (/dev/stdout, a process substitution's /dev/fd/63): written through it,
    // at its offset and with its flags (an appending redirection keeps appending), after what
    // stdio still holds for standard output.
    if (*destination.descriptor == STDOUT_FILENO && std::fflush(stdout) != 0) {
      throw InputError("cannot write " + given + ": " + errno_text());
    }
    if (!write_all(*destination.descriptor, contents)) throw InputError("cannot write " + given + ": write failed: " + errno_text());
    return;
  }
  const std::string shown = destination.path == path ? given : given + " (a symbolic link to '" + destination.path.string() + "')";
  struct stat st {};
  if (::stat(destination.path.c_str(), &st) != 0) {
    if (errno != ENOENT) throw InputError("cannot write " + shown + ": " + errno_text());
    replace_atomically(destination.path, shown, contents, std::nullopt);
  } else if (S_ISREG(st.st_mode)) {
    replace_atomically(destination.path, shown, contents, st.st_mode & 0777);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    write_in_place(destination.path, shown, contents);
  } else {
    throw InputError("cannot write " + shown + ": it is " + kind_of(st.st_mode) +
                     "; expected a regular file (or a new one), a FIFO or a character device");
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

void check_standard_output() {
  errno = 0;
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int reason = errno;
  if (flushed && !std::ferror(stdout) && !std::cout.fail()) return;
  // A write that failed earlier (stdio flushes a full buffer by itself) left its errno long ago.
  throw InputError(std::string("cannot write to standard output: ") + (reason != 0 ? std::strerror(reason) : "an earlier write failed"));
}

std::string read_file(const std::filesystem::path& path, std::int64_t max_bytes) {
  const std::string shown = "'" + path.string() + "'";
  const auto refuse_unless_readable = [&](const struct stat& st) {
    if (!S_ISREG(st.st_mode)) throw InputError("cannot read " + shown + ": it is " + kind_of(st.st_mode) + "; expected a regular file");
    if (st.st_size > max_bytes) throw InputError("cannot read " + shown + ": " + too_large(max_bytes));
  };
  // Checked before opening, so that a device is never opened (opening one can have effects).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError("cannot read " + shown + ": " + errno_text());
  refuse_unless_readable(st);
  // O_NONBLOCK: should the path become a FIFO after the check, opening it does not wait for a writer.
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw InputError("cannot read " + shown + ": " + errno_text());
  const Descriptor open_file(fd);
  if (::fstat(fd, &st) != 0) throw InputError("cannot read " + shown + ": " + errno_text());
  refuse_unless_readable(st);  // what was opened, whatever the path named a moment before
  // The size is a hint (a file can grow while read, and /proc's files say 0): the bound is
  // enforced on the bytes actually read.
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));  // no reallocation while the file keeps its size
  const auto limit = static_cast<std::size_t>(max_bytes);
  std::vector<char> chunk(std::size_t{1} << 16);
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot read " + shown + ": " + errno_text());
    }
    if (n == 0) break;
    text.append(chunk.data(), static_cast<std::size_t>(n));
    if (text.size() > limit) throw InputError("cannot read " + shown + ": " + too_large(max_bytes));
  }
  return text;
}

}  // namespace comptrain
