// JSON Schema `pattern` -> grammar: an ECMA-262 regex subset, compiled through a byte DFA
// into right-linear rules (one rule per DFA state, so the matcher never forks on it).
//
// Supported: literals and escapes (\n \r \t \f \v \0 \xHH \uHHHH, escaped syntax
// characters), `.` (any character but line terminators), classes [...] with ranges and
// negation, \d \w \s and their negations, groups (...) and (?:...), alternation,
// quantifiers * + ? {m} {m,} {m,n} (lazy forms act as greedy), and ^ / $ as the first / last
// character of the whole pattern. Per JSON Schema the regex may match anywhere in the
// string: an unanchored side gets "any characters". Anything else (backreferences,
// lookaround, named groups, \b, \p{...}) is a RegexError naming the feature.
//
// The regex runs over the decoded characters; the rule emits them as JSON string content
// (", \ and control characters written as escapes) or, `raw`, as Qwen XML parameter text
// (no '<'). Only characters that can still lead to a match are offered, so a sampled string
// always matches and can always end.
//
// Single thread while building.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/grammar/grammar.h"

namespace deltaserve::runtime::grammar {

// A pattern the compiler refuses; what() says which feature or limit.
class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits that keep the automaton (and so the grammar) small.
inline constexpr int kMaxRegexRepeat = 1000;      // m and n of {m,n}
inline constexpr size_t kMaxRegexNfaStates = 100'000;
inline constexpr size_t kMaxRegexDfaStates = 4'000;
// (DFA state, characters so far) pairs of a pattern with minLength / maxLength.
inline constexpr size_t kMaxRegexLengthStates = 20'000;
// NFA states visited while determinizing: bounds the compile time of a request's pattern.
inline constexpr size_t kMaxRegexWork = 20'000'000;

// A parsed regex over code points.
struct RegexNode {
  enum Kind : uint8_t { kChars, kConcat, kAlternation, kRepeat };
  Kind kind = kConcat;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: sorted, disjoint, no surrogates
  std::vector<RegexNode> children;                    // kConcat / kAlternation; kRepeat: one
  int min = 0, max = 0;                               // kRepeat; max -1: unbounded
};

// Parses `pattern` (json_regex.cpp), with unanchored sides already widened.
RegexNode parse_regex(const std::string& pattern);
// The content rule of strings matching `regex` (json_regex_dfa.cpp), of min_length to
// max_length (-1: any) code points. Throws RegexError when the automaton outgrows its limits
// or no string can be written.
uint32_t regex_rule(Grammar& g, const RegexNode& regex, bool raw, int min_length = 0, int max_length = -1);

}  // namespace deltaserve::runtime::grammar
