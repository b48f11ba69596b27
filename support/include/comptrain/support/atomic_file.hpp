#pragma once
// The one writer of output files and the one reader of input files. Outputs: a reader never
// sees a half-written file, and a FIFO, a device or a symbolic link is never replaced. Inputs:
// regular files only, of a bounded size.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace comptrain {

// Writes `contents` to `path`, according to what `path` is:
// - a regular file, or nothing yet: through a temporary file in the same directory, flushed and
//   then renamed over `path`. If the process is interrupted before the rename, `path` is
//   untouched (an old version stays intact) and the temporary file is removed where possible.
//   A replaced file keeps its permissions; a new one gets 0666 less the umask;
// - a symbolic link: followed (a chain of them too, and a dangling one to where it points), and
//   its target written as above, in the target's directory; the link itself stays;
// - a FIFO or a character device (/dev/null, a terminal): opened for writing, neither created
//   nor truncated, and written in place (a FIFO waits for its reader, as the shell's `>` does);
// - one of this process's open file descriptors (/dev/stdout, /dev/fd/N as bash's process
//   substitution `>(gzip > t.gz)` passes it, /proc/self/fd/N): written through that descriptor;
// - anything else (a directory, a socket, a block device): refused.
// Throws InputError naming the path (and a link's target) and the reason: a missing or
// unwritable directory, a failed write (a full disk, /dev/full), a refused kind of file.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Writes an output option's text: "-" means standard output (so that any output can be piped),
// anything else is a file written atomically (write_file_atomically). Throws InputError when
// the file cannot be written, or standard output fails (closed pipe, full disk).
void write_output(const std::string& path, std::string_view contents);

// Flushes standard output (std::cout and C stdio alike) and checks that nothing written to it
// failed. Throws InputError "cannot write to standard output: REASON" otherwise: the CLI calls
// it after every command, so that a report sent to a full disk or a closed file is no success.
void check_standard_output();

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

// The most bytes read_file reads from one input file: 1 GiB. Every input is read whole and then
// parsed into structures several times its size (measured: a 2.8 MB JSON trace of a 96-layer
// GPT raises `trace show`'s peak RSS by 21 MB, 7.5 times its text), so a larger input could not
// be used within the 8 GiB of address space the tests allow anyway; the largest real inputs are a
// few MB (tests/data's activations, 0.5 MB; a golden sweep document, 0.7 MB). Without a bound,
// /dev/zero (or a link to it) given as any input read until memory ran out
// (shared/defects-2/12). Documented in docs/using.md.
inline constexpr std::int64_t kMaxInputFileBytes = std::int64_t{1} << 30;

// Reads a whole input file: a regular file (a symbolic link to one included) of at most
// `max_bytes`. Throws InputError naming the path when it cannot be opened or read, when it is
// not a regular file ("'x': it is a FIFO; expected a regular file": a FIFO would block, a
// device such as /dev/zero never ends) or when it is larger than `max_bytes`.
std::string read_file(const std::filesystem::path& path, std::int64_t max_bytes = kMaxInputFileBytes);

}  // namespace comptrain
