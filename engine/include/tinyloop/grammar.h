// TinyLoop public API, grammar-constrained decoding (the Grammar object).
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "tinyloop/model.h"

namespace tinyloop {

// Grammar-constrained decoding: a GBNF-style grammar (named rules `name ::= ...`, "literals",
// [classes] with ranges and negation, ( groups ), |, ?, *, +, # comments; start rule `root`).
// A token is allowed when its bytes keep the output inside the grammar; EOS only when the output
// is a whole sentence. When nothing is allowed, decoding stops with GRAMMAR_DEAD_END.
struct Grammar;
// Throws Error(InvalidArgument) "grammar:LINE:COL: message" for a malformed grammar.
Grammar* parse_grammar(const std::string& text);
// Error(Io) naming the path when unreadable; Error(InvalidArgument) past 64 MiB (a stream
// without an end such as /dev/zero is refused, not read on); "PATH:LINE:COL: message" when malformed.
Grammar* load_grammar_file(const std::string& path);
// nullptr is a no-op. A Grammar is immutable: any number of calls may share it.
void free_grammar(Grammar* g);
template <>
struct Deleter<Grammar> {
    void operator()(Grammar* g) const noexcept { free_grammar(g); }
};

}  // namespace tinyloop
