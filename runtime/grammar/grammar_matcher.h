// Incremental matching of bytes against a Grammar (grammar.h): a nondeterministic pushdown
// automaton whose state is the set of live parse stacks.
//
// A stack is a list of element positions, bottom first; the top is the next element to
// match in the innermost rule, the frames below are where each caller resumes. Stacks are
// kept lazily expanded: advance() expands calls only along alternatives whose first set
// holds the incoming byte (or that can match nothing), so alternatives that share no prefix
// never fork, and ones that do (anyOf of two objects) fork until their bytes differ.
// Identical stacks are merged. A stack deeper than kMaxStackDepth frames dies (bounds the
// nesting of free-form JSON).
//
// Pure functions over values; any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.h"

namespace deltaserve::runtime::grammar {

inline constexpr size_t kMaxStackDepth = 256;
inline constexpr size_t kMaxStacks = 256;  // live parses at once; more kills the extras

// The live stacks, flattened: [depth, frame...] per stack. Empty = dead (no parse left).
struct MatcherState {
  std::vector<uint32_t> data;
  bool dead() const { return data.empty(); }
  bool operator==(const MatcherState&) const = default;
};

// The state before any byte: the root rule's alternatives.
MatcherState initial_state(const Grammar& g);
// The state after one more byte `b` (out is overwritten; it must not alias in). Returns
// !out.dead().
bool advance(const Grammar& g, const MatcherState& in, uint8_t b, MatcherState& out);
// Advances over every byte of `bytes` in place; false (state dead) as soon as one is refused.
bool advance_bytes(const Grammar& g, MatcherState& state, std::string_view bytes);
// The bytes seen so far form a complete sentence of the grammar.
bool accepting(const Grammar& g, const MatcherState& state);
// Some byte can still follow (false once the sentence can only end).
bool can_continue(const Grammar& g, const MatcherState& state);

}  // namespace deltaserve::runtime::grammar
