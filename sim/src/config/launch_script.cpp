// A launch script's words and variables (launch_script.hpp).

#include "launch_script.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <optional>
#include <set>
#include <utility>

namespace comptrain::sim::detail {
namespace {

// Variables whose values name variables, and so on: deeper than this is refused rather than
// followed (each step goes back to an earlier word, so it ends, but not before the stack might).
constexpr int kMaxDepth = 64;

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

std::size_t name_length(std::string_view text) {
  if (text.empty() || !name_start(text[0])) return 0;
  std::size_t n = 1;
  while (n < text.size() && name_char(text[n])) ++n;
  return n;
}

// NAME=... or NAME+=...: the name's length, 0 when the word is no assignment.
std::size_t assignment_name(std::string_view word) {
  const std::size_t n = name_length(word);
  if (n == 0 || n == word.size()) return 0;
  if (word[n] == '=' || (word[n] == '+' && n + 1 < word.size() && word[n + 1] == '=')) return n;
  return 0;
}

// The shell's punctuation: never a value.
bool punctuation(std::string_view word) {
  static constexpr std::array<std::string_view, 15> kWords = {"(", ")", ";", ";;", "&", "&&", "||", "|", "{", "}", "[", "]", "[[", "]]", "!"};
  return std::find(kWords.begin(), kWords.end(), word) != kWords.end();
}

// The shell's reserved words and declarations, which are such only where a command starts
// (`--transformer-impl local` is a value).
bool keyword(std::string_view word) {
  static constexpr std::array<std::string_view, 17> kWords = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do",
                                                              "done", "case", "esac", "export", "declare", "local", "readonly", "set"};
  return std::find(kWords.begin(), kWords.end(), word) != kWords.end();
}

// After these a command starts.
bool command_separator(std::string_view word) {
  static constexpr std::array<std::string_view, 12> kWords = {";", ";;", "&", "&&", "||", "|", "!", "then", "else", "elif", "do", "{"};
  return std::find(kWords.begin(), kWords.end(), word) != kWords.end();
}

// "${NAME[@]}" or "${NAME[*]}": the name, else empty.
std::string_view array_expansion(std::string_view word) {
  if (word.size() < 7 || word.substr(0, 2) != "${" || word.back() != '}') return {};
  const std::size_t n = name_length(word.substr(2));
  const std::string_view rest = word.substr(2 + n);
  return n > 0 && (rest == "[@]}" || rest == "[*]}") ? word.substr(2, n) : std::string_view{};
}

// The index of the `close` that ends what opened at `start` (one `open` already counted), or npos.
std::size_t matching(std::string_view text, std::size_t start, char open, char close) {
  int depth = 1;
  for (std::size_t i = start; i < text.size(); ++i) {
    if (text[i] == open) ++depth;
    if (text[i] == close && --depth == 0) return i;
  }
  return std::string_view::npos;
}

class Expander {
 public:
  Expander(const std::vector<LaunchScript::Assignment>& assignments, const std::vector<ScriptWord>& words, ExpandedText& out)
      : assignments_(assignments), words_(words), out_(out) {}

  std::string expand(std::string_view text, std::size_t before, int depth) {
    if (depth > kMaxDepth) {
      fail(fmt::format("its variables name variables more than {} deep", kMaxDepth));
      return std::string(text);
    }
    std::string result;
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] != '$' || i + 1 == text.size()) {
        result += text[i++];
        continue;
      }
      const char next = text[i + 1];
      if (next == '(' && i + 2 < text.size() && text[i + 2] == '(') {  // $((arithmetic))
        const std::size_t close = matching(text, i + 3, '(', ')');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ')') {
          fail("its $((...)) does not end");
          result += text.substr(i);
          break;
        }
        if (const auto value = arithmetic(text.substr(i + 3, close - i - 3), before, depth)) {
          result += std::to_string(*value);
        } else {
          result += text.substr(i, close + 2 - i);
        }
        i = close + 2;
      } else if (next == '(') {  // $(command)
        const std::size_t close = matching(text, i + 2, '(', ')');
        const std::size_t end = close == std::string_view::npos ? text.size() : close + 1;
        fail(fmt::format("{} is a command's output, which import does not run", text.substr(i, end - i)));
        result += text.substr(i, end - i);
        i = end;
      } else if (next == '{') {
        const std::size_t close = matching(text, i + 2, '{', '}');
        if (close == std::string_view::npos) {
          fail("its ${ does not end");
          result += text.substr(i);
          break;
        }
        result += braced(text.substr(i, close + 1 - i), text.substr(i + 2, close - i - 2), before, depth);
        i = close + 1;
      } else if (name_start(next) || std::isdigit(static_cast<unsigned char>(next)) != 0) {
        // $NAME, or $1: one digit, as the shell reads it.
        const std::size_t n = name_start(next) ? name_length(text.substr(i + 1)) : 1;
        const std::string name(text.substr(i + 1, n));
        if (const auto value = variable(name, before, depth)) {
          result += *value;
        } else {
          fail(unset_reason(name));
          result += text.substr(i, n + 1);
        }
        i += n + 1;
      } else {
        result += text[i++];
      }
    }
    return result;
  }

 private:
  // ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:=default}, ${NAME=default},
  // ${NAME:+alternative}, ${NAME+alternative}.
  std::string braced(std::string_view whole, std::string_view inner, std::size_t before, int depth) {
    std::size_t n = name_length(inner);
    if (n == 0 && !inner.empty() && std::isdigit(static_cast<unsigned char>(inner[0])) != 0) {
      while (n < inner.size() && std::isdigit(static_cast<unsigned char>(inner[n])) != 0) ++n;
    }
    if (n == 0) {
      fail(fmt::format("{} is a form import does not expand", whole));
      return std::string(whole);
    }
    const std::string name(inner.substr(0, n));
    std::string_view rest = inner.substr(n);
    const bool colon = !rest.empty() && rest[0] == ':';
    if (colon) rest.remove_prefix(1);
    const char op = rest.empty() ? '\0' : rest[0];
    if ((colon && rest.empty()) || (!rest.empty() && op != '-' && op != '=' && op != '+')) {
      fail(fmt::format("{} is a form import does not expand (it takes $NAME, ${{NAME}}, ${{NAME:-default}} and ${{NAME:+alternative}})", whole));
      return std::string(whole);
    }
    const std::optional<std::string> value = variable(name, before, depth);
    if (op == '\0') {
      if (value) return *value;
      fail(unset_reason(name));
      return std::string(whole);
    }
    const bool set = value && !(colon && value->empty());
    const std::string_view word = rest.substr(1);
    if (op == '+') return set ? expand(word, before, depth + 1) : std::string();
    if (set) return *value;
    const std::string fallback = expand(word, before, depth + 1);
    out_.assumptions.push_back(fmt::format("{} at line {}: {} is not set in the script before it, so its default '{}' was taken (the "
                                           "environment may set it)",
                                           whole, line(before), name, fallback));
    return fallback;
  }

  // NAME's value before word `before`, from the last assignment before it; nullopt when unset.
  std::optional<std::string> variable(const std::string& name, std::size_t before, int depth) {
    const LaunchScript::Assignment* last = nullptr;
    int count = 0;
    for (const auto& a : assignments_) {
      if (a.word >= before) break;
      if (a.name == name) {
        last = &a;
        ++count;
      }
    }
    if (last == nullptr || last->unset) return std::nullopt;
    if (last->array) {
      fail(fmt::format("{} is an array (line {})", name, line(last->word)));
      return std::nullopt;
    }
    if (count > 1) {
      out_.assumptions.push_back(fmt::format("{} is assigned {} times before line {}; the last, line {}, was taken", name, count, line(before),
                                             line(last->word)));
    }
    return expand(last->value, last->word, depth + 1);
  }

  // $((...)): integers, variables (with or without $), + - * / % and parentheses.
  std::optional<long long> arithmetic(std::string_view expression, std::size_t before, int depth) {
    const std::string text = expand(expression, before, depth + 1);  // $NAME and ${...} first
    Parser parser{*this, text, 0, before, depth, true};
    const std::optional<long long> value = parser.sum();
    parser.skip_space();
    if (!parser.ok || !value || parser.at != text.size()) {
      if (parser.ok) fail(fmt::format("$(({})) is not arithmetic import evaluates (integers, + - * / % and parentheses)", expression));
      return std::nullopt;
    }
    return value;
  }

  struct Parser {
    Expander& expander;
    const std::string& text;
    std::size_t at;
    std::size_t before;
    int depth;
    bool ok;

    void skip_space() {
      while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at])) != 0) ++at;
    }
    bool take(char c) {
      skip_space();
      if (at < text.size() && text[at] == c) {
        ++at;
        return true;
      }
      return false;
    }
    std::optional<long long> failed(const std::string& why) {
      if (ok) expander.fail(why);
      ok = false;
      return std::nullopt;
    }
    std::optional<long long> sum() {
      std::optional<long long> left = product();
      while (left) {
        long long right = 0;
        if (take('+')) {
          const auto r = product();
          if (!r) return std::nullopt;
          if (__builtin_add_overflow(*left, *r, &right)) return failed("its $((...)) overflows");
        } else if (take('-')) {
          const auto r = product();
          if (!r) return std::nullopt;
          if (__builtin_sub_overflow(*left, *r, &right)) return failed("its $((...)) overflows");
        } else {
          break;
        }
        left = right;
      }
      return left;
    }
    std::optional<long long> product() {
      std::optional<long long> left = factor();
      while (left) {
        skip_space();
        if (at >= text.size() || (text[at] != '*' && text[at] != '/' && text[at] != '%')) break;
        const char op = text[at++];
        const auto right = factor();
        if (!right) return std::nullopt;
        long long result = 0;
        if (op == '*') {
          if (__builtin_mul_overflow(*left, *right, &result)) return failed("its $((...)) overflows");
        } else {
          if (*right == 0) return failed("its $((...)) divides by zero");
          if (*left == std::numeric_limits<long long>::min() && *right == -1) return failed("its $((...)) overflows");
          result = op == '/' ? *left / *right : *left % *right;
        }
        left = result;
      }
      return left;
    }
    std::optional<long long> factor() {
      if (++depth > kMaxDepth) return failed(fmt::format("its $((...)) nests more than {} deep", kMaxDepth));
      skip_space();
      std::optional<long long> value;
      if (take('(')) {
        value = sum();
        if (value && !take(')')) value = failed("its $((...)) has a ( without its )");
      } else if (take('-')) {
        value = factor();
        if (value && *value == std::numeric_limits<long long>::min()) value = failed("its $((...)) overflows");
        if (value) value = -*value;
      } else if (take('+')) {
        value = factor();
      } else if (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) != 0) {
        long long v = 0;
        while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) != 0) {
          if (__builtin_mul_overflow(v, 10LL, &v) || __builtin_add_overflow(v, static_cast<long long>(text[at] - '0'), &v)) {
            return failed("its $((...)) overflows");
          }
          ++at;
        }
        value = v;
      } else if (const std::size_t n = name_length(std::string_view(text).substr(at)); n > 0) {
        // A bare name inside $((...)) is the variable's value (unset: 0 in a shell; refused here).
        const std::string name = text.substr(at, n);
        at += n;
        const std::optional<std::string> v = expander.variable(name, before, depth);
        if (!v) return failed(expander.unset_reason(name));
        std::size_t used = 0;
        long long number = 0;
        try {
          number = std::stoll(*v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v->size()) return failed(fmt::format("{} is '{}', not an integer, in a $((...))", name, *v));
        value = number;
      } else {
        value = failed(fmt::format("'{}' is not arithmetic import evaluates (integers, + - * / % and parentheses)", text));
      }
      --depth;
      return value;
    }
  };

  std::string unset_reason(const std::string& name) const {
    if (std::isdigit(static_cast<unsigned char>(name[0])) != 0) return fmt::format("${} is the script's argument, which import does not have", name);
    return fmt::format("{} is not set in the script before it", name);
  }
  int line(std::size_t word) const { return word < words_.size() ? words_[word].line : (words_.empty() ? 1 : words_.back().line); }
  void fail(const std::string& why) {
    if (out_.unexpanded.empty()) out_.unexpanded = why;
  }

  const std::vector<LaunchScript::Assignment>& assignments_;
  const std::vector<ScriptWord>& words_;
  ExpandedText& out_;
};

}  // namespace

LaunchScript::LaunchScript(std::string_view text) {
  std::string word;
  bool in_word = false;
  int line = 1, word_line = 1;
  char quote = 0;
  int nesting = 0;  // inside $(...) or ${...}: spaces and parentheses are the word's
  bool line_start = true;  // no word yet since the script's start or an unescaped newline
  const auto end_word = [&] {
    if (in_word) words_.push_back({std::move(word), word_line, false, std::exchange(line_start, false)});
    word.clear();
    in_word = false;
  };
  const auto start = [&] {
    if (!in_word) word_line = line;
    in_word = true;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] == '\n') {  // a line continuation
        ++line;
        ++i;
        continue;
      }
      start();
      word += text[++i];
      continue;
    }
    if (c == '"' || c == '\'') {
      start();
      quote = c;
      continue;
    }
    if (nesting > 0) {
      if (c == '(' || c == '{') ++nesting;
      if (c == ')' || c == '}') --nesting;
      word += c;
      continue;
    }
    if (c == '$' && i + 1 < text.size() && (text[i + 1] == '(' || text[i + 1] == '{')) {
      start();
      word += c;
      word += text[++i];
      nesting = 1;
      continue;
    }
    if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      end_word();
      if (c == '\n') line_start = true;
      continue;
    }
    if (c == '(' || c == ')' || c == ';') {  // words of their own (`ARGS=(`, `];`)
      end_word();
      words_.push_back({std::string(1, c), line, true, std::exchange(line_start, false)});
      continue;
    }
    start();
    word += c;
  }
  end_word();

  // "--fp8-format hybrid", quoted as one array element and expanded unquoted (${ARGS[@]}), reaches
  // the program as two words: an argument quoted with its value is split at its spaces.
  std::vector<ScriptWord> split;
  split.reserve(words_.size());
  for (ScriptWord& w : words_) {
    if (w.text.rfind("--", 0) != 0 || w.text.find_first_of(" \t\n") == std::string::npos) {
      split.push_back(std::move(w));
      continue;
    }
    std::size_t at = 0;
    while (at < w.text.size()) {
      const std::size_t begin = w.text.find_first_not_of(" \t\n", at);
      if (begin == std::string::npos) break;
      const std::size_t end = std::min(w.text.find_first_of(" \t\n", begin), w.text.size());
      split.push_back({w.text.substr(begin, end - begin), w.line, false, w.line_start && begin == w.text.find_first_not_of(" \t\n")});
      at = end;
    }
  }
  words_ = std::move(split);

  std::set<std::string> arrays;  // the names assigned an array so far
  for (std::size_t i = 0; i < words_.size(); ++i) {
    ScriptWord& w = words_[i];
    const bool command_start = w.line_start || (i > 0 && command_separator(words_[i - 1].text) && words_[i - 1].syntax);
    if (punctuation(w.text) || (command_start && keyword(w.text))) w.syntax = true;
    if (command_start && w.text == "unset") {  // `unset NAME...`: unset from here on
      w.syntax = true;
      for (std::size_t j = i + 1; j < words_.size() && !words_[j].line_start && name_length(words_[j].text) == words_[j].text.size(); ++j) {
        words_[j].syntax = true;
        assignments_.push_back({words_[j].text, j, std::string(), false, true});
      }
    }
    if (const std::size_t n = assignment_name(w.text); n > 0) {
      w.syntax = true;
      const bool append = w.text[n] == '+';
      const std::string value = w.text.substr(n + (append ? 2 : 1));
      const bool array = value.empty() && i + 1 < words_.size() && words_[i + 1].text == "(" && words_[i + 1].line == w.line;
      assignments_.push_back({w.text.substr(0, n), i, array ? std::string() : value, array, false});
      if (array) arrays.insert(assignments_.back().name);
    }
    const std::string_view array = array_expansion(w.text);
    if (!array.empty()) w.syntax = true;
    // $NAME or ${NAME} of an array assigned before: its elements, not a value.
    if (array.empty() && !w.text.empty() && w.text[0] == '$') {
      const std::string_view inner = w.text.size() > 2 && w.text[1] == '{' && w.text.back() == '}'
                                         ? std::string_view(w.text).substr(2, w.text.size() - 3)
                                         : std::string_view(w.text).substr(1);
      if (name_length(inner) == inner.size() && arrays.count(std::string(inner)) > 0) w.syntax = true;
    }
  }
}

ExpandedText LaunchScript::expand(std::string_view text, std::size_t word) const {
  ExpandedText out;
  Expander expander(assignments_, words_, out);
  out.text = expander.expand(text, word, 0);
  return out;
}

}  // namespace comptrain::sim::detail
