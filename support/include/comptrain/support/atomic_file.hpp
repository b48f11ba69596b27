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

// Reads a whole file. Throws InputError naming the path when it cannot be opened.
std::string read_file(const std::filesystem::path& path);

}  // namespace comptrain
