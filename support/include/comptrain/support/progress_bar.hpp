#pragma once
// Progress on stderr for long commands: on a terminal one line redrawn in place with a bar;
// in a log (Slurm, CI, a pipe) plain lines instead, which the caller rations.

#include <string>
#include <string_view>

namespace comptrain {

// Whether stderr is a terminal (bars and carriage returns make sense there, not in a log).
bool stderr_is_terminal();

// "[#########.....................]" for fraction in [0, 1] (clamped), `width` cells inside.
std::string progress_bar(double fraction, std::size_t width = 30);

// Redraws the terminal line: carriage return, `text`, erase to the end of the line.
void redraw_terminal_line(std::string_view text);
// Ends a redrawn line (erases it when `erase`, else moves to the next line).
void end_terminal_line(bool erase);

}  // namespace comptrain
