#include "comptrain/sim/report/plots.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"

extern char** environ;  // POSIX: the environment the child inherits (not declared by <unistd.h> in C++)

namespace comptrain::sim {
namespace {

using models::MemoryRole;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What a user sees when gnuplot is missing: the Debian package, since the plain "gnuplot"
// package would pull in X11 that a headless machine does not need.
constexpr std::string_view kInstallHint =
    "gnuplot is needed to draw plots but was not found on PATH: install Debian's gnuplot-nox package "
    "(apt-get install gnuplot-nox)";

// One colour per line, distinguishable with the common colour-vision deficiencies
// (Okabe-Ito, then two darker extras).
constexpr std::array<std::string_view, 10> kLineColours{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                                        "#56B4E9", "#000000", "#F0E442", "#7F3C8D", "#666666"};

// ---- Running gnuplot -------------------------------------------------------------------------

struct ProcessResult {
  int exit_status = -1;  // -1: killed by a signal
  std::string output;    // stdout and stderr together
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

class FileActions {
 public:
  FileActions() { posix_spawn_file_actions_init(&actions_); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_{};
};

// Writes all of `data` to `fd`. A child that exits early (a gnuplot syntax error) closes its
// stdin; SIGPIPE is blocked in this thread for the write so that this shows up as EPIPE rather
// than killing the whole program, and a SIGPIPE left pending by us is consumed.
void write_all_ignoring_broken_pipe(int fd, std::string_view data) {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;

  bool broken = false;
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      broken = true;  // EPIPE: the child's exit status and output say why
      break;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  if (broken && !was_pending) {
    const timespec no_wait{0, 0};
    sigtimedwait(&pipe_only, nullptr, &no_wait);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

// Runs `program` (looked up on PATH, no shell in between, so no quoting of paths) with `input`
// on its stdin through a pipe. Its stdout and stderr go to an anonymous temporary file rather
// than a second pipe: gnuplot may write while we still write its script, and two pipes would
// need a poll loop to avoid a deadlock. `fd3`, when >= 0, becomes the program's descriptor 3.
// Throws std::system_error when it cannot be started.
ProcessResult run_program(const std::vector<std::string>& args, std::string_view input, int fd3 = -1) {
  std::unique_ptr<std::FILE, FileCloser> output(std::tmpfile());
  if (!output) throw std::system_error(errno, std::generic_category(), "cannot create a temporary file");
  const int output_fd = fileno(output.get());

  std::array<int, 2> pipe_fds{};
  if (::pipe2(pipe_fds.data(), O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");

  FileActions actions;
  posix_spawn_file_actions_adddup2(actions.get(), pipe_fds[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(actions.get(), output_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(actions.get(), output_fd, STDERR_FILENO);
  if (fd3 >= 0) posix_spawn_file_actions_adddup2(actions.get(), fd3, 3);

  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));  // posix_spawn's signature
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, argv[0], actions.get(), nullptr, argv.data(), environ);
  ::close(pipe_fds[0]);
  if (spawn_error != 0) {
    ::close(pipe_fds[1]);
    throw std::system_error(spawn_error, std::generic_category(), fmt::format("cannot run {}", args.front()));
  }
  write_all_ignoring_broken_pipe(pipe_fds[1], input);
  ::close(pipe_fds[1]);  // end of the script: gnuplot exits

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
  }

  ProcessResult result;
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::rewind(output.get());
  std::array<char, 4096> chunk{};
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), output.get())) > 0) result.output.append(chunk.data(), n);
  return result;
}

void require_gnuplot() {
  if (!gnuplot_available()) throw InputError(std::string(kInstallHint));
}

// A gnuplot single-quoted string: only the quote itself is special (doubled). Control
// characters, which could end the command line early, become spaces.
std::string gnuplot_string(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "''";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

// The script's preamble: the terminal the plots share, the output file, and the look.
std::string preamble(const std::string& output) {
  std::string s;
  s += "set encoding utf8\n";
  // An explicit white background: viewers that show transparency as black would hide the text.
  s += "set terminal svg size 900,560 dynamic enhanced font 'sans,12' background rgb 'white'\n";
  s += fmt::format("set output {}\n", gnuplot_string(output));
  s += "set border 3 lc rgb '#444444'\n";
  s += "set tics nomirror\n";
  s += "set grid xtics ytics lc rgb '#dddddd' lt 1 dt 1\n";
  // Below the plotting area, so the legend never hides data; below rather than beside it
  // because legend entries carry long strategy names that would squeeze the plot's width.
  s += "set key outside below center vertical Left reverse noopaque spacing 1.2 samplen 2.5 width 2\n";
  return s;
}

// Runs the script, which draws into an anonymous temporary file (deleted from the start, handed
// to gnuplot as its descriptor 3, which it opens as /dev/fd/3), then writes the SVG atomically.
// No named temporary file exists at any time, so an interrupt (which reaches gnuplot too, or
// not) can leave none behind, and an existing plot is never replaced by a half-drawn one.
void draw(const std::filesystem::path& svg, const std::string& body) {
  require_gnuplot();
  const std::filesystem::path directory = svg.parent_path().empty() ? std::filesystem::path(".") : svg.parent_path();
  if (!std::filesystem::is_directory(directory)) {
    throw InputError(fmt::format("cannot write {}: the directory {} does not exist", svg.string(), directory.string()));
  }
  std::unique_ptr<std::FILE, FileCloser> drawing(std::tmpfile());
  if (!drawing) throw std::system_error(errno, std::generic_category(), "cannot create a temporary file");
  const std::string script = preamble("/dev/fd/3") + body + "unset output\n";
  const ProcessResult r = run_program({"gnuplot"}, script, fileno(drawing.get()));
  std::string content;
  std::rewind(drawing.get());
  std::array<char, 4096> chunk{};
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), drawing.get())) > 0) content.append(chunk.data(), n);
  if (r.exit_status != 0 || content.empty()) {
    throw std::runtime_error(
        fmt::format("gnuplot failed to draw {} (exit status {}):\n{}", svg.string(), r.exit_status, r.output));
  }
  write_output(svg.string(), content);  // "-": the SVG on standard output
}

// ---- Plans --------------------------------------------------------------------------------------

std::string number(double value) { return fmt::format("{:.9g}", value); }
double gib(std::int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

std::string plan_subject(const BatchSizePlan& plan) {
  return plan.platform_name.empty() ? plan.scenario_name : fmt::format("{} on {}", plan.scenario_name, plan.platform_name);
}

// A data block named `name` with one `columns` row per selected point; "" when none is selected.
template <typename Select, typename Row>
std::string data_block(std::string_view name, const std::vector<PlanPoint>& points, Select select, Row row) {
  std::string rows;
  for (const PlanPoint& p : points) {
    if (select(p)) rows += row(p) + "\n";
  }
  if (rows.empty()) return "";
  return fmt::format("${} << EOD\n{}EOD\n", name, rows);
}

// x range over every point of every strategy, so the axes of the two plan plots agree; gnuplot's
// own autoscale would fail with a log axis when a plot has no points at all.
std::pair<std::int64_t, std::int64_t> batch_range(const BatchSizePlan& plan) {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  for (const StrategyPlan& s : plan.strategies) {
    for (const PlanPoint& p : s.points) {
      if (p.batch <= 0) continue;
      lo = lo == 0 ? p.batch : std::min(lo, p.batch);
      hi = std::max(hi, p.batch);
    }
  }
  if (lo == 0) return {1, 2};
  if (hi == lo) hi = lo * 2;
  return {lo, hi};
}

// Batch sizes on a log2 axis: a tic at each power of two, labelled as a plain number.
std::string log2_batch_axis(const BatchSizePlan& plan) {
  const auto [lo, hi] = batch_range(plan);
  std::string s;
  s += "set logscale x 2\n";
  // A little air either side (a factor 2^0.15) so end points are not drawn on the border.
  s += fmt::format("set xrange [{}:{}]\n", number(static_cast<double>(lo) / 1.11), number(static_cast<double>(hi) * 1.11));
  s += "set format x '%.0f'\n";
  // More than ~14 labels would collide at this width: label every other power of two then.
  const double decades = std::log2(static_cast<double>(hi) / static_cast<double>(lo));
  s += decades > 13 ? "set xtics 4\n" : "set xtics 2\n";
  // A Unicode subscript, not enhanced-text '_{2}': SVG renderers drop the space after a subscript span.
  s += "set xlabel 'batch size (samples per iteration, log₂ scale)'\n";
  return s;
}

std::string colour(std::size_t i) { return std::string(kLineColours[i % kLineColours.size()]); }

}  // namespace

bool gnuplot_available() {
  try {
    const ProcessResult r = run_program({"gnuplot", "--version"}, "");
    return r.exit_status == 0 && r.output.starts_with("gnuplot");
  } catch (const std::system_error&) {
    return false;  // not on PATH, or not executable
  }
}

void write_throughput_plot(const BatchSizePlan& plan, const std::filesystem::path& svg) {
  std::string s;
  s += fmt::format("set title {} noenhanced\n", gnuplot_string(fmt::format("Throughput by batch size: {}", plan_subject(plan))));
  s += log2_batch_axis(plan);
  s += "set ylabel 'throughput (samples/s)'\n";
  s += "set yrange [0:*]\n";

  std::vector<std::string> elements;
  bool any = false;
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& sp = plan.strategies[i];
    // Only batches that fit have a throughput a user could get.
    const std::string block = data_block(
        fmt::format("fit{}", i), sp.points, [](const PlanPoint& p) { return p.fits && p.samples_per_second > 0; },
        [](const PlanPoint& p) { return fmt::format("{} {}", p.batch, number(p.samples_per_second)); });
    const std::string legend =
        sp.best_batch ? fmt::format("{} (best: batch {}, {:.0f} samples/s)", sp.strategy, *sp.best_batch,
                                    sp.best_samples_per_second)
                      : fmt::format("{} (no batch fits)", sp.strategy);
    if (block.empty()) {
      // Keeps the strategy in the legend, so a strategy with nothing to show is not silently missing.
      elements.push_back(fmt::format("NaN title {} noenhanced with linespoints lc rgb '{}' lw 2 pt 7", gnuplot_string(legend), colour(i)));
      continue;
    }
    any = true;
    s += block;
    elements.push_back(fmt::format("$fit{} using 1:2 title {} noenhanced with linespoints lc rgb '{}' lw 2 pt 7 ps 0.8", i,
                                   gnuplot_string(legend), colour(i)));
    if (sp.best_batch) {
      s += fmt::format("$best{} << EOD\n{} {}\nEOD\n", i, *sp.best_batch, number(sp.best_samples_per_second));
      elements.push_back(fmt::format("$best{} using 1:2 notitle with points lc rgb '{}' pt 6 ps 2.2 lw 2", i, colour(i)));
    }
  }
  if (any) {
    elements.push_back("NaN title 'best batch (highest samples/s)' with points lc rgb '#444444' pt 6 ps 2.2 lw 2");
  } else {
    s += "set yrange [0:1]\n";
    s += "set label 1 'no batch size fits' at graph 0.5, graph 0.5 center\n";
  }
  if (elements.empty()) elements.push_back("NaN notitle");
  s += "plot ";
  for (std::size_t i = 0; i < elements.size(); ++i) s += (i ? ", \\\n     " : "") + elements[i];
  s += "\n";
  draw(svg, s);
}

void write_peak_memory_plot(const BatchSizePlan& plan, const std::filesystem::path& svg) {
  const double capacity = gib(plan.capacity_bytes);
  const double usable = (1.0 - plan.options.margin) * capacity;
  std::string s;
  s += fmt::format("set title {} noenhanced\n", gnuplot_string(fmt::format("Peak GPU memory by batch size: {}", plan_subject(plan))));
  s += log2_batch_axis(plan);
  s += "set ylabel 'peak GPU memory (GiB)'\n";
  // Room above the capacity line for out-of-memory points, which may ask for far more.
  double top = capacity * 1.15;
  for (const StrategyPlan& sp : plan.strategies) {
    for (const PlanPoint& p : sp.points) top = std::max(top, gib(p.peak_bytes) * 1.05);
  }
  top = std::min(top, capacity * 2.0);  // beyond twice the GPU the exact figure no longer matters
  if (top <= 0) top = 1;
  s += fmt::format("set yrange [0:{}]\n", number(top));

  std::vector<std::string> elements;
  bool any_out_of_memory = false;
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& sp = plan.strategies[i];
    const std::string ran = data_block(
        fmt::format("ran{}", i), sp.points, [](const PlanPoint& p) { return !p.out_of_memory; },
        [](const PlanPoint& p) { return fmt::format("{} {}", p.batch, number(gib(p.peak_bytes))); });
    const std::string oom = data_block(
        fmt::format("oom{}", i), sp.points, [](const PlanPoint& p) { return p.out_of_memory; },
        [top](const PlanPoint& p) { return fmt::format("{} {}", p.batch, number(std::min(gib(p.peak_bytes), top))); });
    const std::string legend = sp.max_batch ? fmt::format("{} (max batch {})", sp.strategy, *sp.max_batch)
                                            : fmt::format("{} (no batch fits)", sp.strategy);
    s += ran + oom;
    if (!ran.empty()) {
      elements.push_back(fmt::format("$ran{} using 1:2 title {} noenhanced with linespoints lc rgb '{}' lw 2 pt 7 ps 0.8", i,
                                     gnuplot_string(legend), colour(i)));
    } else {
      elements.push_back(fmt::format("NaN title {} noenhanced with linespoints lc rgb '{}' lw 2 pt 7", gnuplot_string(legend), colour(i)));
    }
    if (!oom.empty()) {
      any_out_of_memory = true;
      elements.push_back(fmt::format("$oom{} using 1:2 notitle with points lc rgb '{}' pt 2 ps 1.6 lw 2", i, colour(i)));
    }
  }
  if (any_out_of_memory) {
    elements.push_back("NaN title 'out of memory (reserved + new segment)' with points lc rgb '#444444' pt 2 ps 1.6 lw 2");
  }
  elements.push_back(fmt::format("{} title {} with lines lc rgb '#C00000' lw 2 dt 1", number(capacity),
                                 gnuplot_string(fmt::format("GPU capacity ({:.2f} GiB)", capacity))));
  elements.push_back(fmt::format("{} title {} with lines lc rgb '#C00000' lw 1.5 dt 2", number(usable),
                                 gnuplot_string(fmt::format("(1 − margin) × capacity ({:.2f} GiB, margin {:g}%)", usable,
                                                    plan.options.margin * 100))));
  s += "plot ";
  for (std::size_t i = 0; i < elements.size(); ++i) s += (i ? ", \\\n     " : "") + elements[i];
  s += "\n";
  draw(svg, s);
}

// ---- Memory over time --------------------------------------------------------------------------

namespace {

struct MemoryRow {
  double time = 0;
  BytesByMemoryRole live{};
  std::int64_t total() const {
    std::int64_t t = 0;
    for (std::int64_t b : live) t += b;
    return t;
  }
};

// Live bytes per role after each instant with events (events at the same time are one change:
// a free and an allocation at one instant must not show a spike between them).
std::vector<MemoryRow> memory_rows(const SimulationRun& run) {
  std::vector<MemoryRow> rows;
  BytesByMemoryRole live{};
  for (const MemoryEvent& e : run.result.memory_events) {
    live[static_cast<std::size_t>(run.schedule.buffers.at(e.buffer).role)] += e.delta;
    if (!rows.empty() && rows.back().time == e.time) {
      rows.back().live = live;
    } else {
      rows.push_back({e.time, live});
    }
  }
  return rows;
}

// A large model has tens of thousands of events: more than the SVG can show, and a file of many
// megabytes. Over kMaxRows, keeps per time bucket the row with the largest total, so the
// peak and the overall shape survive while brief dips between two allocations may not.
std::vector<MemoryRow> thin_out(std::vector<MemoryRow> rows, double end) {
  constexpr std::size_t kMaxRows = 2000;
  constexpr std::size_t kBuckets = 1000;
  if (rows.size() <= kMaxRows || end <= 0) return rows;
  std::vector<MemoryRow> kept;
  std::size_t current = kBuckets + 1;  // no bucket yet
  for (const MemoryRow& r : rows) {
    const auto bucket = std::min(kBuckets - 1, static_cast<std::size_t>(r.time / end * static_cast<double>(kBuckets)));
    if (bucket != current) {
      kept.push_back(r);
      current = bucket;
    } else if (r.total() > kept.back().total()) {
      kept.back().live = r.live;  // keeps the bucket's first time: steps stay in time order
    }
  }
  return kept;
}

// Distinct, fixed colours per role, so two charts of different strategies compare at a glance.
std::string_view role_colour(MemoryRole role) {
  switch (role) {
    case MemoryRole::input: return "#999999";
    case MemoryRole::weight: return "#0072B2";
    case MemoryRole::weight_copy: return "#66A3D2";
    case MemoryRole::buffer: return "#56B4E9";
    case MemoryRole::gradient: return "#E69F00";
    case MemoryRole::optimizer_state: return "#7F3C8D";
    case MemoryRole::activation: return "#009E73";
    case MemoryRole::compressed: return "#F0E442";
    case MemoryRole::prefetch: return "#CC79A7";
    case MemoryRole::temporary: return "#D55E00";
  }
  return "#000000";
}

}  // namespace

void write_memory_timeline_plot(const SimulationRun& run, const std::filesystem::path& svg) {
  const SimulationResult& r = run.result;
  // What PyTorch's allocator may reserve: the visible memory less the CUDA context.
  const double capacity = gib(r.device.framework.usable_bytes());
  std::vector<MemoryRow> rows = memory_rows(run);
  const double end = std::max(r.out_of_memory ? r.out_of_memory->time : r.iteration_seconds,
                              rows.empty() ? 0.0 : rows.back().time);
  rows = thin_out(std::move(rows), end);

  // The bands: every role that ever holds bytes, bottom to top in the report's role order
  // (resident state first, then what the strategy changes).
  std::vector<std::size_t> roles;
  for (std::size_t role = 0; role < models::kMemoryRoleCount; ++role) {
    const bool used = std::any_of(rows.begin(), rows.end(), [role](const MemoryRow& m) { return m.live[role] != 0; });
    if (used) roles.push_back(role);
  }

  // Column 1 is the time in ms, column 2 the zero baseline, column k+3 the top of band k.
  // Each change is a vertical step: the old stack and the new one at the same time.
  auto stacked = [&](double time, const BytesByMemoryRole& live) {
    std::string line = fmt::format("{} 0", number(time * 1e3));
    double sum = 0;
    for (std::size_t role : roles) {
      sum += gib(live[role]);
      line += " " + number(sum);
    }
    return line + "\n";
  };
  std::string data = "$memory << EOD\n";
  BytesByMemoryRole previous{};
  if (rows.empty() || rows.front().time > 0) data += stacked(0, previous);
  for (const MemoryRow& row : rows) {
    data += stacked(row.time, previous);
    data += stacked(row.time, row.live);
    previous = row.live;
  }
  data += stacked(end, previous);
  data += "EOD\n";

  // The schedule's description is "name: what it did to each tensor"; the title takes the name
  // only, or it runs off the 900-pixel canvas.
  const std::string& description = run.schedule.strategy;
  const std::string strategy = description.substr(0, description.find(": "));
  const std::string subject = fmt::format("{} ({}) on {}", run.scenario_name, strategy, run.platform.name);
  const std::string outcome =
      r.out_of_memory ? fmt::format("out of memory at t = {:.2f} ms: {:.2f} GiB reserved + {:.2f} GiB new segment > {:.2f} GiB usable",
                                    r.out_of_memory->time * 1e3, gib(r.out_of_memory->in_use), gib(r.out_of_memory->requested),
                                    capacity)
                      : fmt::format("tensors' peak {:.2f} GiB at t = {:.2f} ms (reserved {:.2f} of {:.2f} GiB usable), iteration {:.2f} ms",
                                    gib(r.peak_bytes), r.peak_time * 1e3, gib(r.device.peak_reserved), capacity, r.iteration_seconds * 1e3);

  std::string s = data;
  // Two lines: single-quoted strings take no escapes, so the newline is a double-quoted piece.
  s += fmt::format("set title {}.\"\\n\".{} noenhanced\n", gnuplot_string(fmt::format("GPU memory over one iteration: {}", subject)),
                   gnuplot_string(outcome));
  s += "set xlabel 'simulated time (ms)'\n";
  s += "set ylabel 'GPU memory in use (GiB)'\n";
  s += fmt::format("set xrange [0:{}]\n", number(std::max(end * 1e3, 1e-9)));
  // Role names are short: beside the chart, top to bottom as the bands are stacked.
  s += "set key outside right top vertical Left reverse invert\n";
  s += "set style fill solid 0.85 border lc rgb '#ffffff'\n";
  // The capacity line only where it is informative: near a peak or at an out-of-memory stop. A
  // 40 GiB line over a 3 GiB run would flatten the whole chart into its bottom tenth.
  const double peak = r.out_of_memory ? gib(r.out_of_memory->in_use + r.out_of_memory->requested) : gib(r.peak_bytes);
  const bool show_capacity = peak >= 0.5 * capacity;
  s += fmt::format("set yrange [0:{}]\n", number(std::max(show_capacity ? std::max(capacity, peak) * 1.08 : peak * 1.12, 1e-9)));
  if (r.out_of_memory) {
    // Where it failed: the allocation that did not fit, drawn above what was in use.
    const OutOfMemory& o = *r.out_of_memory;
    s += fmt::format("set arrow 2 from first {0}, first {1} to first {0}, first {2} lc rgb '#C00000' lw 3 filled front\n",
                     number(o.time * 1e3), number(gib(o.in_use)), number(gib(o.in_use + o.requested)));
    // On a white box below the arrow's head, so the capacity line does not run through it.
    s += "set style textbox opaque noborder\n";
    s += fmt::format("set label 2 {} at first {}, first {} right offset -1,-1 textcolor rgb '#C00000' boxed front\n",
                     gnuplot_string(fmt::format("+{:.2f} GiB segment", gib(o.requested))), number(o.time * 1e3),
                     number(gib(o.in_use + o.requested)));
  } else if (r.peak_bytes > 0) {
    // Anchored on the side away from the nearer border so the text stays inside the plot.
    const bool right_half = r.peak_time > 0.5 * end;
    s += fmt::format("set label 1 {} at first {}, first {} {} point pt 7 ps 1 offset {},0.6 front\n",
                     gnuplot_string(fmt::format("peak {:.2f} GiB", gib(r.peak_bytes))), number(r.peak_time * 1e3),
                     number(gib(r.peak_bytes)), right_half ? "right" : "left", right_half ? "-1" : "1");
  }

  std::string plot = "plot ";
  for (std::size_t k = 0; k < roles.size(); ++k) {
    const auto role = static_cast<MemoryRole>(roles[k]);
    plot += fmt::format("{}$memory using 1:{}:{} title {} noenhanced with filledcurves lc rgb '{}'", k ? ", \\\n     " : "", k + 2, k + 3,
                        gnuplot_string(models::to_string(role)), role_colour(role));
  }
  if (roles.empty()) plot += "NaN notitle";
  if (show_capacity) {
    plot += fmt::format(", \\\n     {} title {} with lines lc rgb '#C00000' lw 2 dt 2", number(capacity),
                        gnuplot_string(fmt::format("GPU capacity ({:.2f} GiB)", capacity)));
  }
  s += plot + "\n";
  draw(svg, s);
}

std::vector<std::filesystem::path> write_plan_plots(const BatchSizePlan& plan, const std::filesystem::path& directory) {
  require_gnuplot();  // before creating the directory: a missing gnuplot leaves nothing behind
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) throw InputError(fmt::format("cannot create the plot directory {}: {}", directory.string(), error.message()));
  std::vector<std::filesystem::path> written{directory / "throughput.svg", directory / "peak_memory.svg"};
  write_throughput_plot(plan, written[0]);
  write_peak_memory_plot(plan, written[1]);
  return written;
}

}  // namespace comptrain::sim
