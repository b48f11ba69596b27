#include "comptrain/support/progress_bar.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace comptrain {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string progress_bar(double fraction, std::size_t width) {
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const auto filled = static_cast<std::size_t>(f * static_cast<double>(width));
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

void redraw_terminal_line(std::string_view text) {
  fmt::print(stderr, "\r{}\x1b[K", text);
  std::fflush(stderr);
}

void end_terminal_line(bool erase) {
  std::fputs(erase ? "\r\x1b[K" : "\n", stderr);
  std::fflush(stderr);
}

}  // namespace comptrain
