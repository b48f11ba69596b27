// comptrain: predicts peak GPU memory and iteration time of DNN training under memory-saving
// strategies. This file only wires the subcommands; the work is in the libraries.
//
// Exit codes: 0 success, 1 internal failure (or a subcommand not implemented yet),
// 2 bad usage or bad input, or standard output that cannot be written (a report that never
// arrived is no success).
//
// Every error, CLI11's parse errors included, is printed as "comptrain: error: WHAT; expected
// WHAT": scripts grep for the prefix, and people need to be told what would have been right.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "calibrate_command.hpp"
#include "compress_command.hpp"
#include "import_command.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain_version.hpp"
#include "plan_command.hpp"
#include "simulate_command.hpp"
#include "trace_command.hpp"
#include "validate_command.hpp"

namespace {

constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

// "comptrain trace show": the words that select `command`.
std::string command_path(const CLI::App& command) {
  return command.get_parent() ? command_path(*command.get_parent()) + " " + command.get_name() : command.get_name();
}

// Subcommands proper: CLI11 keeps option groups ("transformer shape") among them too.
std::vector<const CLI::App*> subcommands_of(const CLI::App& command) {
  return command.get_subcommands([](const CLI::App* sub) { return dynamic_cast<const CLI::Option_group*>(sub) == nullptr; });
}

const CLI::App* find_subcommand(const CLI::App& command, const std::string& word) {
  for (const CLI::App* sub : subcommands_of(command)) {
    if (sub->check_name(word)) return sub;
  }
  return nullptr;
}

// trace, simulate, ..., plus "help" at the top, where `comptrain help CMD` is understood.
std::vector<std::string> subcommand_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands_of(command)) names.push_back(sub->get_name());
  if (!command.get_parent()) names.emplace_back("help");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

std::string subcommand_list(const CLI::App& command) { return joined(subcommand_names(command)); }

// " (did you mean 'simulate'?)" after an unknown word, or "": in parentheses, so that the
// message keeps its "WHAT; expected WHAT" form.
std::string guess_for(const std::string& word, const std::vector<std::string>& names) {
  const std::optional<std::string> guess = comptrain::did_you_mean(word, names);
  return guess ? " (did you mean '" + *guess + "'?)" : "";
}

std::string unknown_command(const CLI::App& command, const std::string& word) {
  const std::string words = command.get_parent() ? command_path(command).substr(command_path(command).find(' ') + 1) + " " : "";
  const std::vector<std::string> names = subcommand_names(command);
  return fmt::format("unknown command '{}{}'{}; expected one of: {}", words, word, guess_for(word, names), joined(names));
}

// Prints a usage error about `command` and answers the exit code of bad usage.
int usage_error(const CLI::App& command, const std::string& what) {
  fmt::print(stderr, "comptrain: error: {}\nRun '{} --help' for more.\n", what, command_path(command));
  return kExitBadInput;
}

// The subcommand given last on the command line (the top-level app when none): where a parse
// error belongs.
const CLI::App& deepest_parsed(const CLI::App& app) {
  const auto parsed = app.get_subcommands();
  return parsed.empty() ? app : deepest_parsed(*parsed.front());
}

// Of `command` and its parents, the one called `name` (CLI11 errors name the app they come from).
const CLI::App& named_or_deepest(const CLI::App& command, const std::string& name) {
  for (const CLI::App* a = &command; a; a = a->get_parent()) {
    if (a->get_name() == name) return *a;
  }
  return command;
}

const CLI::Option* find_option(const CLI::App& command, const std::string& name) {
  for (const CLI::App* a = &command; a; a = a->get_parent()) {
    for (const CLI::Option* opt : a->get_options()) {
      if (opt->get_name() == name || opt->get_name(true) == name || opt->check_name(name)) return opt;
    }
  }
  return nullptr;
}

// What a value of CLI11's type name looks like, in words.
std::string expected_value(const CLI::Option* opt) {
  const std::string type = opt ? opt->get_type_name() : "";
  if (type.starts_with("INT")) return "an integer";
  if (type.starts_with("UINT")) return "a non-negative integer";
  if (type.starts_with("FLOAT")) return "a number";
  return "a value";
}

// The options of `command`, those of its option groups ("transformer shape") included.
std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<const CLI::App*> holders{&command};
  for (const CLI::App* group : command.get_subcommands([](const CLI::App* sub) { return dynamic_cast<const CLI::Option_group*>(sub) != nullptr; })) {
    holders.push_back(group);
  }
  std::vector<std::string> names;
  for (const CLI::App* holder : holders) {
    for (const CLI::Option* opt : holder->get_options()) {
      // A group repeats its parent's --help.
      if (opt->nonpositional() && std::find(names.begin(), names.end(), opt->get_name()) == names.end()) {
        names.push_back(opt->get_name());
      }
    }
  }
  return names;
}

// "unknown option '--max-bach' (did you mean '--max-batch'?); expected one of: ..." (`option`
// without its "=VALUE"), then `more` ("; or a command: ...").
std::string unknown_option(const CLI::App& command, const std::string& option, const std::string& more = "") {
  const std::vector<std::string> names = option_names(command);
  return fmt::format("unknown option '{}'{}; expected one of: {}{}", option, guess_for(option, names), joined(names), more);
}

// CLI11's message for `e`, rewritten as "WHAT; expected WHAT".
std::string describe(const CLI::ParseError& e, const CLI::App& app) {
  const CLI::App& command = deepest_parsed(app);
  const std::string what = e.what();
  std::smatch m;
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    return what;  // our validators (options.hpp) already write "OPTION: found X; expected Y"
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    if (what.starts_with("A subcommand") || what.starts_with("Requires at least")) {
      return "no command given; expected one of: " + subcommand_list(command);
    }
    if (std::regex_match(what, m, std::regex("(.*) is required"))) {
      const CLI::Option* opt = find_option(command, m[1]);
      if (opt && opt->get_positional() && !opt->nonpositional()) {
        return fmt::format("missing argument '{}'; expected {}", opt->get_name(true), opt->get_description());
      }
      return fmt::format("missing option {}; expected {} {}{}", m[1].str(), m[1].str(), opt ? opt->get_type_name() : "VALUE",
                         opt ? " (" + opt->get_description() + ")" : "");
    }
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const CLI::App& owner = named_or_deepest(command, e.get_name());
    // CLI11 lists the extras last given first (detail::rjoin); an unknown option among them is
    // the likely cause of the others (its value), so it is the one reported.
    std::vector<std::string> extras;
    std::istringstream words(what.substr(what.find(": ") + 2));
    for (std::string w; words >> w;) extras.insert(extras.begin(), w);
    if (extras.empty()) extras.push_back("?");
    for (const std::string& word : extras) {
      if (word.starts_with("-") && word.size() > 1) {
        return unknown_option(owner, word.substr(0, word.find('=')));
      }
    }
    const std::string& first = extras.front();
    if (!subcommands_of(owner).empty()) return unknown_command(owner, first);
    std::string positionals;
    std::size_t count = 0;
    for (const CLI::Option* opt : owner.get_options([](const CLI::Option* o) { return !o->nonpositional(); })) {
      positionals += (count++ ? ", " : "") + opt->get_name(true);
    }
    return count == 0 ? fmt::format("unexpected argument '{}'; expected options only", first)
                      : fmt::format("unexpected argument '{}'; expected at most {} argument{} ({})", first, count, count == 1 ? "" : "s",
                                    positionals);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    if (std::regex_match(what, m, std::regex("Could not convert: (.*) = (.*)"))) {
      return fmt::format("{}: found '{}'; expected {}", m[1].str(), m[2].str(), expected_value(find_option(command, m[1])));
    }
    if (std::regex_match(what, m, std::regex("(.*): too many inputs for a flag"))) {
      return fmt::format("{} is a flag; expected {} without a value", m[1].str(), m[1].str());
    }
    if (std::regex_match(what, m, std::regex("(.*): Should be true/false or a number"))) {
      return fmt::format("{}: found a value that is not true or false; expected true, false or none", m[1].str());
    }
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    if (std::regex_match(what, m, std::regex("(.*): [0-9]+ required (.*) missing"))) {
      return fmt::format("{} needs a value; expected {} {}", m[1].str(), m[1].str(), m[2].str());
    }
  }
  // Anything else CLI11 reports (none of comptrain's options can produce it today).
  return what + "; expected what '" + command_path(command) + " --help' describes";
}

// A command's description is a one-line summary, then, after a newline, its details:
// `comptrain --help` (and `comptrain help trace`) lists each command on one line, its summary,
// and the details are printed only in the command's own help, wrapped to kHelpWidth columns
// (the man page carries them too: cli/CMakeLists.txt adds every command's own help to it).
constexpr std::size_t kHelpWidth = 100;

// `text`, each of its lines broken at spaces to at most `width` columns where a word allows.
std::string wrapped(const std::string& text, std::size_t width) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!out.empty()) out += '\n';
    std::size_t column = 0;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (column > 0 && column + 1 + word.size() > width) {
        out += '\n';
        column = 0;
      } else if (column > 0) {
        out += ' ';
        ++column;
      }
      out += word;
      column += word.size();
    }
  }
  return out;
}

class HelpFormatter : public CLI::Formatter {
 public:
  // A command's line in its parent's list of subcommands: the summary alone.
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string& description = sub->get_description();
    std::ostringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), description.substr(0, description.find('\n')), get_column_width());
    return out.str();
  }
  // A command's own help: its summary, then its details wrapped, set apart by blank lines.
  std::string make_description(const CLI::App* app) const override {
    std::string text = CLI::Formatter::make_description(app);
    const std::string& description = app->get_description();
    const std::size_t end = description.find('\n');
    std::string shown = wrapped(description, kHelpWidth);
    if (end != std::string::npos) shown = description.substr(0, end) + "\n\n" + wrapped(description.substr(end + 1), kHelpWidth) + "\n";
    if (text.starts_with(description)) text.replace(0, description.size(), shown);
    return text;
  }
};

// `--version` after any subcommand prints the same line as after `comptrain`.
void add_version_flags(CLI::App& command, const std::string& line) {
  for (CLI::App* sub : command.get_subcommands([](CLI::App* s) { return dynamic_cast<CLI::Option_group*>(s) == nullptr; })) {
    sub->set_version_flag("--version", line);
    add_version_flags(*sub, line);
  }
}

// Before CLI11 sees the arguments: a word where a subcommand must stand that names none
// (CLI11 would report "A subcommand is required" or "argument was not expected", neither of
// which says the command is unknown), and `comptrain help [CMD...]`. Answers an exit code, or
// -1 to go on parsing.
int preparse(const CLI::App& app, const std::vector<std::string>& args) {
  if (!args.empty() && args.front() == "help") {
    const CLI::App* target = &app;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "-h" || args[i] == "--help") continue;  // `help --help` is still help
      const CLI::App* sub = find_subcommand(*target, args[i]);
      if (!sub) return usage_error(*target, unknown_command(*target, args[i]));
      target = sub;
    }
    comptrain::write_output("-", target->help(target->get_parent() ? command_path(*target->get_parent()) : ""));
    return 0;
  }
  const CLI::App* current = &app;
  for (const std::string& word : args) {
    if (word == "--" || subcommands_of(*current).empty()) break;
    // Only safe while every option here is a flag: a word after an option taking a value
    // would be that value, not a command.
    for (const CLI::Option* opt : current->get_options()) {
      if (opt->get_items_expected_max() != 0) return -1;
    }
    if (word.starts_with("-")) {
      // Unknown here, CLI11 would only say that a command is required.
      const std::string name = word.substr(0, word.find('='));
      bool known = false;
      for (const CLI::Option* opt : current->get_options()) known = known || opt->check_name(name);
      if (!known) {
        return usage_error(*current, unknown_option(*current, name, "; or a command: " + subcommand_list(*current)));
      }
      continue;
    }
    const CLI::App* sub = find_subcommand(*current, word);
    if (!sub) return usage_error(*current, unknown_command(*current, word));
    current = sub;
  }
  return -1;
}

// CLI11's text for --help or --version, written through write_output like every report, so that
// a failure is seen with its reason (CLI11's own std::endl would flush, and lose it).
int print_help_or_version(const CLI::App& app, const CLI::Error& e) {
  std::ostringstream text;
  const int code = app.exit(e, text);
  try {
    comptrain::write_output("-", text.str());
  } catch (const comptrain::InputError& error) {
    fmt::print(stderr, "comptrain: error: {}\n", error.what());
    return kExitBadInput;
  }
  return code;
}

// The command line's work: parsing, then the command. Answers the exit code.
int run_command_line(int argc, char** argv) {
  const std::string version_line = std::string("comptrain ") + COMPTRAIN_VERSION;
  CLI::App app{
      "comptrain: trace-driven simulator of memory-saving DNN training (activation compression, offloading, "
      "recomputation) on GPU systems",
      "comptrain"};
  // Before the subcommands are added: they take their parent's formatter.
  app.formatter(std::make_shared<HelpFormatter>());
  app.set_version_flag("--version", version_line);
  app.require_subcommand(1);
  app.footer(
      "Run 'comptrain help CMD' or 'comptrain CMD --help' for a command's options.\n"
      "Exit codes: 0 success, 1 internal failure or not implemented, 2 bad usage or bad input (or standard output\n"
      "that cannot be written).");

  // Each returns its action, which answers -1 when its subcommand was not the one given.
  const std::function<int()> commands[] = {
      comptrain::cli::add_trace_command(app),
      comptrain::cli::add_simulate_command(app),
      comptrain::cli::add_compress_command(app),
      comptrain::cli::add_decompress_command(app),
      comptrain::cli::add_plan_command(app),
      comptrain::cli::add_merge_command(app),
      comptrain::cli::add_calibrate_command(app),
      comptrain::cli::add_validate_command(app),
      comptrain::cli::add_import_command(app),
  };
  add_version_flags(app, version_line);

  try {
    if (const int code = preparse(app, std::vector<std::string>(argv + 1, argv + argc)); code >= 0) return code;
  } catch (const comptrain::InputError& e) {  // `comptrain help` to a standard output that fails
    fmt::print(stderr, "comptrain: error: {}\n", e.what());
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return print_help_or_version(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return print_help_or_version(app, e);
  } catch (const CLI::CallForVersion& e) {
    return print_help_or_version(app, e);
  } catch (const CLI::ParseError& e) {
    return usage_error(deepest_parsed(app), describe(e, app));
  }

  try {
    for (const auto& command : commands) {
      if (int code = command(); code >= 0) return code;
    }
    return kExitInternal;
  } catch (const comptrain::InputError& e) {
    fmt::print(stderr, "comptrain: error: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "comptrain: internal error: {}\n", e.what());
    return kExitInternal;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int code = run_command_line(argc, argv);
  if (code != 0) return code;
  // Reports go through write_output, which flushes and checks at once; short lines printed with
  // fmt::print (trace list, compress's figures) wait in C stdio's buffer: a full disk or a
  // closed file shows only now, and a success would be a lie.
  try {
    comptrain::check_standard_output();
  } catch (const comptrain::InputError& e) {
    fmt::print(stderr, "comptrain: error: {}\n", e.what());
    return kExitBadInput;
  }
  return code;
}
