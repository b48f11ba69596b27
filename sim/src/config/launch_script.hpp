// A launch script's words, as `comptrain import` reads a Megatron-LM job (job_import.cpp): the
// shell's quoting, escapes and line continuations, and the script's own variables expanded where
// an argument's value uses them (`--num-layers $NUM_LAYERS` after `NUM_LAYERS=32`, `${TP:-1}`,
// `$((GPUS_PER_NODE * NUM_NODES))`), as Megatron-LM's example scripts write their jobs
// (examples/llama/train_llama3_8b_h100_fp8.sh, examples/mixtral/train_mixtral_8x7b_distributed.sh).
//
// Not a shell: nothing runs, and every assignment counts in the order it is written, whatever
// `if` it lies in (a variable assigned more than once takes the last value before its use; the
// assumptions say so). What no assignment before a word sets and no default gives (the
// environment, the script's positional parameters, a command's output) stays unexpanded, named.
// Single quotes and `\$` do not keep a `$` literal here, as they would in a shell.

#ifndef COMPTRAIN_SIM_CONFIG_LAUNCH_SCRIPT_HPP
#define COMPTRAIN_SIM_CONFIG_LAUNCH_SCRIPT_HPP

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace comptrain::sim::detail {

struct ScriptWord {
  std::string text;  // quotes and escapes removed, nothing expanded
  int line = 0;      // where the word starts (1-based)
  // Shell punctuation, a reserved word, an assignment (NAME=...) or an array's expansion
  // ("${ARGS[@]}"): never an argument's value.
  bool syntax = false;
  bool line_start = false;  // the first word after the script's start or an unescaped newline
};

// Text after expansion.
struct ExpandedText {
  std::string text;
  // Why it could not be expanded in full ("NUM_LAYERS is not set before it"); empty when it was.
  std::string unexpanded;
  // What the expansion took on trust, for the scenario's notes: a `${NAME:-default}` that took
  // its default (the environment may set NAME), a variable assigned more than once before.
  std::vector<std::string> assumptions;
};

class LaunchScript {
 public:
  explicit LaunchScript(std::string_view text);

  const std::vector<ScriptWord>& words() const { return words_; }
  // `text` (word `word`'s, or a part of it) with the script's variables as they stand before
  // that word.
  ExpandedText expand(std::string_view text, std::size_t word) const;

  struct Assignment {
    std::string name;
    std::size_t word = 0;  // the assignment's word
    std::string value;     // unexpanded; empty for an array
    bool array = false;
    bool unset = false;  // `unset NAME`
  };

 private:
  std::vector<ScriptWord> words_;
  std::vector<Assignment> assignments_;  // in the script's order
};

}  // namespace comptrain::sim::detail

#endif
