#pragma once
// `comptrain compress ...` and `comptrain decompress ...`: the compressor kernels on float32
// arrays stored as raw little-endian files or NumPy .npy files.

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

// Each adds its subcommand to `app` and returns the action: the exit code when the subcommand
// was chosen, -1 otherwise.
std::function<int()> add_compress_command(CLI::App& app);
std::function<int()> add_decompress_command(CLI::App& app);

}  // namespace comptrain::cli
