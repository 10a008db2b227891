// Helpers of the grammar tests: compile a schema, match whole texts or token sequences.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/constraint_grammars.h"
#include "runtime/grammar/grammar_matcher.h"

namespace deltaserve::runtime::grammar::test {

inline std::shared_ptr<const Grammar> schema_grammar(std::string_view schema_json) {
  return json_schema_grammar(SchemaJson::parse(schema_json));
}

// The whole text is a sentence of the grammar.
inline bool accepts(const Grammar& g, std::string_view text) {
  MatcherState s = initial_state(g);
  return advance_bytes(g, s, text) && accepting(g, s);
}

// The text can still be continued to a sentence (a live prefix).
inline bool live_prefix(const Grammar& g, std::string_view text) {
  MatcherState s = initial_state(g);
  return advance_bytes(g, s, text);
}

// Feeds the pieces one by one; the index of the first refused piece, or -1 when all pass.
inline int first_refused(const Grammar& g, const std::vector<std::string>& pieces) {
  MatcherState s = initial_state(g);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!advance_bytes(g, s, pieces[i])) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace deltaserve::runtime::grammar::test
