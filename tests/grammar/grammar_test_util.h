// Helpers of the grammar tests: compile a schema, match whole texts or token sequences.
#pragma once

#include <memory>
#include <optional>
#include <random>
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

// A random sentence of the grammar: each step picks uniformly among the bytes the matcher
// allows, and ends (with probability stop_chance while the text is complete, or always when
// nothing may follow). nullopt when it reaches max_bytes first or the matcher gets stuck.
inline std::optional<std::string> random_walk(const Grammar& g, std::mt19937& rng, size_t max_bytes,
                                              double stop_chance = 0.2) {
  MatcherState s = initial_state(g), next;
  std::string text;
  std::bernoulli_distribution stop(stop_chance);
  while (text.size() < max_bytes) {
    const bool complete = accepting(g, s);
    if (complete && (!can_continue(g, s) || stop(rng))) return text;
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      if (advance(g, s, static_cast<uint8_t>(b), next)) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return complete ? std::optional<std::string>(text) : std::nullopt;
    const uint8_t b = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    advance(g, s, b, next);
    std::swap(s, next);
    text.push_back(static_cast<char>(b));
  }
  return std::nullopt;
}

}  // namespace deltaserve::runtime::grammar::test
