#include "pickle.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <variant>
#include <vector>

#include "comptrain/support/input_error.hpp"

namespace comptrain::trace_import::detail {

namespace {

// Containers are filled after they are memoized (EMPTY_DICT, MEMOIZE, MARK, ..., SETITEMS), so
// values are shared nodes and become JSON only at the end.
struct Node;
using NodePtr = std::shared_ptr<Node>;
struct Mark {};
struct Node {
  enum class Kind { none, boolean, integer, unsigned_integer, real, string, list, dict } kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;
  double real = 0.0;
  std::size_t offset = 0;  // byte offset of the opcode that built it, for errors
  std::string text;
  std::vector<NodePtr> items;                         // list, tuple
  std::vector<std::pair<NodePtr, NodePtr>> entries;  // dict, in insertion order
};
using Item = std::variant<NodePtr, Mark>;

// What to_json allocates per value, roughly: the json value itself plus its slot in the
// parent's vector or map node. Only an estimate; it makes the budget scale with the output.
constexpr std::uint64_t kValueCost = 64;

class Unpickler {
 public:
  Unpickler(std::string_view data, const std::string& source, std::uint64_t max_expanded_bytes)
      : data_(data), source_(source), max_expanded_bytes_(max_expanded_bytes) {}

  nlohmann::json run() {
    while (true) {
      const std::size_t at = pos_;
      op_at_ = at;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;                  // PROTO
        case 0x95: take(8); break;                  // FRAME: framing only
        case '.': {  // STOP
          const NodePtr root = pop(at);
          // The stack machine shares memoized values, so reading is linear in the file; copying
          // them out into a JSON tree is not (each BINGET copies the whole value again: 60
          // nested pairs of references are 2^60 leaves). Price the tree before building it.
          std::unordered_map<const Node*, std::uint64_t> cost;
          expanded_cost(*root, cost, 0);
          return to_json(root, 0, at);
        }
        case 0x94: memo_.push_back(top(at)); break;  // MEMOIZE
        case 'q': put(le(1), at); break;             // BINPUT
        case 'r': put(le(4), at); break;             // LONG_BINPUT
        case 'h': get(le(1), at); break;             // BINGET
        case 'j': get(le(4), at); break;             // LONG_BINGET
        case '(': stack_.emplace_back(Mark{}); break;
        case '}': push(make(Node::Kind::dict)); break;
        case ']': push(make(Node::Kind::list)); break;
        case ')': push(make(Node::Kind::list)); break;  // tuples read as lists
        case 'd': {
          auto items = pop_to_mark(at);
          auto dict = make(Node::Kind::dict);
          set_items(*dict, items, at);
          push(dict);
          break;
        }
        case 'l':
        case 't': {
          auto list = make(Node::Kind::list);
          list->items = pop_to_mark(at);
          push(list);
          break;
        }
        case 0x85: tuple(1, at); break;
        case 0x86: tuple(2, at); break;
        case 0x87: tuple(3, at); break;
        case 's': {
          NodePtr value = pop(at), key = pop(at);
          std::vector<NodePtr> pair{key, value};
          set_items(dict_on_top(at), pair, at);
          break;
        }
        case 'u': {
          auto items = pop_to_mark(at);
          set_items(dict_on_top(at), items, at);
          break;
        }
        case 'a': {
          NodePtr value = pop(at);
          list_on_top(at).items.push_back(value);
          break;
        }
        case 'e': {
          auto items = pop_to_mark(at);
          auto& list = list_on_top(at).items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 'J': push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4))))); break;  // BININT
        case 'K': push(integer(static_cast<std::int64_t>(le(1)))); break;                              // BININT1
        case 'M': push(integer(static_cast<std::int64_t>(le(2)))); break;                              // BININT2
        case 0x8a: push(long1(at)); break;                                                              // LONG1
        case 'G': {  // BINFLOAT: big-endian IEEE double
          std::uint64_t bits = 0;
          for (const char c : take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
          auto node = make(Node::Kind::real);
          node->real = std::bit_cast<double>(bits);
          push(node);
          break;
        }
        case 0x8c: push(string(le(1))); break;  // SHORT_BINUNICODE
        case 'X': push(string(le(4))); break;   // BINUNICODE
        case 0x8d: push(string(le(8))); break;  // BINUNICODE8
        case 'N': push(make(Node::Kind::none)); break;
        case 0x88:
        case 0x89: {
          auto node = make(Node::Kind::boolean);
          node->boolean = op == 0x88;
          push(node);
          break;
        }
        default: fail(at, "unsupported pickle opcode 0x" + hex(op), "a plain-data pickle (dicts, lists, numbers, strings)");
      }
    }
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what, const std::string& expected) const {
    throw InputError(source_ + ": byte " + std::to_string(at) + ": " + what + "; expected " + expected);
  }
  static std::string hex(unsigned value) {
    static const char digits[] = "0123456789abcdef";
    return {digits[(value >> 4) & 15], digits[value & 15]};
  }
  std::string_view take(std::size_t n) {
    if (n > data_.size() - pos_) fail(data_.size(), "the pickle ends early (is the file truncated?)", "the STOP opcode");
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint64_t le(std::size_t n) {
    std::uint64_t value = 0;
    const std::string_view bytes = take(n);
    for (std::size_t i = n; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
    return value;
  }
  NodePtr make(Node::Kind kind) const {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->offset = op_at_;
    return node;
  }
  NodePtr integer(std::int64_t value) {
    auto node = make(Node::Kind::integer);
    node->integer = value;
    return node;
  }
  NodePtr long1(std::size_t at) {
    const std::size_t n = static_cast<std::size_t>(le(1));
    const std::string_view bytes = take(n);
    // Little-endian two's complement; addresses above 2^63 take 9 bytes with a zero sign byte.
    if (n == 9 && bytes[8] == 0) {
      auto node = make(Node::Kind::unsigned_integer);
      for (std::size_t i = 8; i-- > 0;) node->unsigned_integer = (node->unsigned_integer << 8) | static_cast<unsigned char>(bytes[i]);
      return node;
    }
    if (n > 8) fail(at, "integer of " + std::to_string(n) + " bytes", "an integer that fits in 64 bits");
    std::uint64_t value = 0;
    for (std::size_t i = n; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80) != 0) value |= ~std::uint64_t{0} << (8 * n);
    return integer(static_cast<std::int64_t>(value));
  }
  NodePtr string(std::uint64_t n) {
    auto node = make(Node::Kind::string);
    if (n > data_.size() - pos_) fail(data_.size(), "the pickle ends early (is the file truncated?)", "the STOP opcode");
    node->text = std::string(take(static_cast<std::size_t>(n)));
    return node;
  }
  void push(NodePtr node) { stack_.emplace_back(std::move(node)); }
  NodePtr pop(std::size_t at) {
    if (stack_.empty() || std::holds_alternative<Mark>(stack_.back())) fail(at, "stack underflow", "a well-formed pickle");
    NodePtr node = std::get<NodePtr>(std::move(stack_.back()));
    stack_.pop_back();
    return node;
  }
  const NodePtr& top(std::size_t at) const {
    if (stack_.empty() || std::holds_alternative<Mark>(stack_.back())) fail(at, "nothing to memoize", "a well-formed pickle");
    return std::get<NodePtr>(stack_.back());
  }
  std::vector<NodePtr> pop_to_mark(std::size_t at) {
    std::vector<NodePtr> items;
    while (true) {
      if (stack_.empty()) fail(at, "no MARK on the stack", "a well-formed pickle");
      if (std::holds_alternative<Mark>(stack_.back())) {
        stack_.pop_back();
        break;
      }
      items.push_back(std::get<NodePtr>(std::move(stack_.back())));
      stack_.pop_back();
    }
    return {items.rbegin(), items.rend()};
  }
  void tuple(std::size_t n, std::size_t at) {
    auto list = make(Node::Kind::list);
    list->items.resize(n);
    for (std::size_t i = n; i-- > 0;) list->items[i] = pop(at);
    push(list);
  }
  Node& dict_on_top(std::size_t at) {
    const NodePtr& node = top(at);
    if (node->kind != Node::Kind::dict) fail(at, "SETITEM on a value that is not a dict", "a dict");
    return *node;
  }
  Node& list_on_top(std::size_t at) {
    const NodePtr& node = top(at);
    if (node->kind != Node::Kind::list) fail(at, "APPEND on a value that is not a list", "a list");
    return *node;
  }
  void set_items(Node& dict, const std::vector<NodePtr>& items, std::size_t at) {
    if (items.size() % 2 != 0) fail(at, "odd number of items for a dict", "key/value pairs");
    for (std::size_t i = 0; i < items.size(); i += 2) dict.entries.emplace_back(items[i], items[i + 1]);
  }
  void put(std::uint64_t index, std::size_t at) {
    // Python's pickler numbers memo entries 0, 1, 2, ... (len(memo)); a gap would let five bytes
    // of BINPUT allocate an arbitrarily large memo.
    if (index > memo_.size()) {
      fail(at, "memo index " + std::to_string(index) + " skips entries (the memo holds " + std::to_string(memo_.size()) + ")",
           "memo indices stored in order (at most " + std::to_string(memo_.size()) + ")");
    }
    if (index >= memo_.size()) memo_.resize(static_cast<std::size_t>(index) + 1);
    memo_[static_cast<std::size_t>(index)] = top(at);
  }
  void get(std::uint64_t index, std::size_t at) {
    if (index >= memo_.size() || !memo_[static_cast<std::size_t>(index)]) fail(at, "memo index " + std::to_string(index) + " was never stored", "a stored memo entry");
    push(memo_[static_cast<std::size_t>(index)]);
  }
  // The bytes to_json would allocate for `node`, every memo reference counted at its full size;
  // an InputError as soon as one value exceeds the budget (the innermost such value is named,
  // so the sums stay below twice the budget and cannot wrap). Memoized per node, so this pass
  // is linear in the (shared) graph however large the tree it stands for.
  std::uint64_t expanded_cost(const Node& node, std::unordered_map<const Node*, std::uint64_t>& cost, int depth) const {
    constexpr std::uint64_t kInProgress = ~std::uint64_t{0};
    if (depth > 200) fail(node.offset, "values nested more than 200 deep", "a plain-data tree");
    const auto [it, inserted] = cost.try_emplace(&node, kInProgress);
    if (!inserted) {
      if (it->second == kInProgress) fail(node.offset, "a value that contains itself (a cycle through the memo)", "a plain-data tree");
      return it->second;
    }
    std::uint64_t total = kValueCost + node.text.size();
    const auto add = [&](std::uint64_t part) {
      total += part;  // both terms <= the budget (checked below), far from 2^64
      if (total > max_expanded_bytes_) {
        fail(node.offset,
             "the value built here expands to more than " + std::to_string(max_expanded_bytes_) +
                 " bytes when its memo references are copied out (a pickle bomb?)",
             "a pickle whose values, copied out, fit in " + std::to_string(max_expanded_bytes_) + " bytes");
      }
    };
    add(0);
    for (const auto& item : node.items) add(expanded_cost(*item, cost, depth + 1));
    for (const auto& [key, value] : node.entries) {
      add(expanded_cost(*key, cost, depth + 1));
      add(expanded_cost(*value, cost, depth + 1));
    }
    cost[&node] = total;  // not `it`: the recursion may have rehashed the map
    return total;
  }

  nlohmann::json to_json(const NodePtr& node, int depth, std::size_t at) const {
    if (depth > 200) fail(at, "values nested more than 200 deep (or a cycle)", "a plain-data tree");
    switch (node->kind) {
      case Node::Kind::none: return nullptr;
      case Node::Kind::boolean: return node->boolean;
      case Node::Kind::integer: return node->integer;
      case Node::Kind::unsigned_integer: return node->unsigned_integer;
      case Node::Kind::real: return node->real;
      case Node::Kind::string: return node->text;
      case Node::Kind::list: {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& item : node->items) out.push_back(to_json(item, depth + 1, at));
        return out;
      }
      case Node::Kind::dict: {
        nlohmann::json out = nlohmann::json::object();
        for (const auto& [key, value] : node->entries) {
          if (key->kind != Node::Kind::string) fail(key->offset, "a dict key that is not a string", "string keys (a memory snapshot)");
          out[key->text] = to_json(value, depth + 1, at);
        }
        return out;
      }
    }
    return nullptr;
  }

  std::string_view data_;
  std::string source_;
  std::uint64_t max_expanded_bytes_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;  // offset of the opcode being read
  std::vector<Item> stack_;
  std::vector<NodePtr> memo_;
};

}  // namespace

bool looks_like_pickle(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x80 && static_cast<unsigned char>(data[1]) >= 2 &&
         static_cast<unsigned char>(data[1]) <= 5;
}

std::uint64_t default_expansion_budget(std::size_t pickle_bytes) {
  constexpr std::uint64_t kFloor = std::uint64_t{1} << 30;
  constexpr std::uint64_t kPerByte = 64;
  return std::max(kFloor, static_cast<std::uint64_t>(pickle_bytes) * kPerByte);
}

nlohmann::json unpickle(std::string_view data, const std::string& source, std::optional<std::uint64_t> max_expanded_bytes) {
  return Unpickler(data, source, max_expanded_bytes.value_or(default_expansion_budget(data.size()))).run();
}

}  // namespace comptrain::trace_import::detail
