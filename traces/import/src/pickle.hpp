#pragma once
// A minimal unpickler for PyTorch memory snapshots (`_dump_snapshot`'s .pickle): protocols 2 to
// 5, the opcodes of plain dicts, lists, tuples, ints, floats, strings, booleans and None
// (shared/reference/formats.md, section 2). Anything else -- classes, bytes, persistent ids -- is
// an InputError naming the byte offset; so is a truncated stream.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace comptrain::trace_import::detail {

// Whether `data` starts like a pickle of protocol 2 or later (the PROTO opcode).
bool looks_like_pickle(std::string_view data);

// How many bytes (estimated) the JSON tree of a pickle of `pickle_bytes` bytes may take: 64 per
// byte of pickle, at least 1 GiB. A real snapshot's memo sharing (frame dicts that reference the
// same file names) expands it some tens of times; a memo bomb expands it exponentially.
std::uint64_t default_expansion_budget(std::size_t pickle_bytes);

// The unpickled value as JSON: dicts with string keys -> objects, lists and tuples -> arrays.
// Values referenced through the memo are copied once per reference; when that tree would exceed
// `max_expanded_bytes` (default_expansion_budget when not given) it is an InputError naming the
// byte offset of the innermost value over the budget, raised before anything is copied.
nlohmann::json unpickle(std::string_view data, const std::string& source,
                        std::optional<std::uint64_t> max_expanded_bytes = std::nullopt);

}  // namespace comptrain::trace_import::detail
