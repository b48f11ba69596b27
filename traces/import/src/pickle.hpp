#pragma once
// A minimal unpickler for PyTorch memory snapshots (`_dump_snapshot`'s .pickle): protocols 2 to
// 5, the opcodes of plain dicts, lists, tuples, ints, floats, strings, booleans and None
// (shared/reference/formats.md, section 2). Anything else -- classes, bytes, persistent ids -- is
// an InputError naming the byte offset; so is a truncated stream.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace comptrain::trace_import::detail {

// Whether `data` starts like a pickle of protocol 2 or later (the PROTO opcode).
bool looks_like_pickle(std::string_view data);

// The unpickled value as JSON: dicts with string keys -> objects, lists and tuples -> arrays.
nlohmann::json unpickle(std::string_view data, const std::string& source);

}  // namespace comptrain::trace_import::detail
