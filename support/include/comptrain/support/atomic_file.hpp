#pragma once
// Writing output files so that a reader never sees a half-written one.

#include <filesystem>
#include <string_view>

namespace comptrain {

// Writes `contents` to `path` through a temporary file in the same directory, flushed and
// then renamed over `path`. If the process is interrupted before the rename, `path` is
// untouched (an old version stays intact) and the temporary file is removed where possible.
// Throws InputError when the directory does not exist or is not writable.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Reads a whole file. Throws InputError naming the path when it cannot be opened.
std::string read_file(const std::filesystem::path& path);

}  // namespace comptrain
