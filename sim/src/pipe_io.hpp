#pragma once
// Writing a child process's result to its pipe (the simulation and the worker pool both fork
// a child per job and read its result back).

#include <unistd.h>

#include <cerrno>
#include <string>

namespace comptrain::sim::detail {

// Writes all of `data`, retrying on EINTR; gives up silently if the reader has gone (the parent
// then reports a missing result).
inline void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace comptrain::sim::detail
