#pragma once
// Writing output files so that a reader never sees a half-written one.

#include <filesystem>
#include <string>
#include <string_view>

namespace comptrain {

// Writes `contents` to `path` through a temporary file in the same directory, flushed and
// then renamed over `path`. If the process is interrupted before the rename, `path` is
// untouched (an old version stays intact) and the temporary file is removed where possible.
// Throws InputError when the directory does not exist or is not writable.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Writes an output option's text: "-" means standard output (so that any output can be piped),
// anything else is a file written atomically (write_file_atomically). Throws InputError when
// the file cannot be written, or standard output fails (closed pipe, full disk).
void write_output(const std::string& path, std::string_view contents);

// Whether an output option's value means standard output rather than a file.
inline bool is_standard_output(const std::string& path) { return path == "-"; }

// While it lives, `path` is removed if the process is ended by SIGINT, SIGTERM or SIGHUP: for
// temporary files that someone other than write_file_atomically writes (gnuplot's plots).
// At most 16 at once; paths of 4096 bytes or more are not registered.
class RemovedOnFatalSignal {
 public:
  explicit RemovedOnFatalSignal(const std::string& path);
  ~RemovedOnFatalSignal();
  RemovedOnFatalSignal(const RemovedOnFatalSignal&) = delete;
  RemovedOnFatalSignal& operator=(const RemovedOnFatalSignal&) = delete;

 private:
  int slot_ = -1;
};

// Reads a whole file. Throws InputError naming the path when it cannot be opened.
std::string read_file(const std::filesystem::path& path);

}  // namespace comptrain
