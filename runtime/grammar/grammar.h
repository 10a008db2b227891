// A context-free grammar over bytes, the form every constraint (JSON schema, Qwen XML tool
// call) compiles to and the incremental matcher (grammar_matcher.h) runs.
//
// Rules are lists of alternatives; an alternative is a sequence of elements, each a byte set
// (matches one byte) or a call of another rule. All alternatives live in one flat element
// array, each ending with a kEnd element, so a matcher's stack frame is one uint32 position
// ("the next element to match"). Repetition is written as right recursion (R := X R | ε);
// the matcher treats a call in last position as a tail call, so a repetition never deepens
// the stack. Left recursion (a rule that can reach itself before consuming a byte) is not
// allowed: finish() rejects it.
//
// Built once (single thread), then immutable and shared const by any number of threads.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime::grammar {

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void merge(const ByteSet& o) {
    for (size_t i = 0; i < 4; ++i) bits[i] |= o.bits[i];
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  static ByteSet of(std::string_view bytes);
  static ByteSet range(uint8_t lo, uint8_t hi);
};

struct Element {
  enum Kind : uint8_t { kEnd, kBytes, kCall };
  Kind kind = kEnd;
  uint32_t index = 0;  // kBytes: byte set; kCall: rule
};

// Thrown by the builders for a grammar that cannot be run (left recursion, a rule without
// alternatives).
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Grammar {
 public:
  // A piece of an alternative under construction.
  using Sequence = std::vector<Element>;

  // A new rule without alternatives (add them with add_alternative; may be called before
  // the rule's own alternatives exist, for recursion).
  uint32_t add_rule(std::string name);
  void add_alternative(uint32_t rule, const Sequence& elements);
  void set_root(uint32_t rule) { root_ = rule; }

  Element bytes(const ByteSet& set);  // one byte of the set (sets are deduplicated)
  static Element call(uint32_t rule) { return {Element::kCall, rule}; }
  // The bytes of `text` one after another, appended to `seq`.
  void append_literal(Sequence& seq, std::string_view text);
  Sequence literal(std::string_view text) {
    Sequence s;
    append_literal(s, text);
    return s;
  }

  // Computes first sets and nullability and checks for left recursion and empty rules.
  // Throws GrammarError. Must be called once, after the last add_*.
  void finish();

  // Read side (after finish()).
  uint32_t root() const { return root_; }
  const Element& element(uint32_t pos) const { return elements_[pos]; }
  const ByteSet& byte_set(uint32_t index) const { return sets_[index]; }
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule].alternatives; }
  // Bytes that can come first when the sequence starting at `pos` is matched (excluding what
  // follows its alternative) and whether that sequence can match nothing.
  const ByteSet& first(uint32_t pos) const { return first_[pos]; }
  bool nullable(uint32_t pos) const { return nullable_[pos] != 0; }
  const std::string& rule_name(uint32_t rule) const { return rules_[rule].name; }
  size_t num_rules() const { return rules_.size(); }
  size_t num_elements() const { return elements_.size(); }

 private:
  struct Rule {
    std::string name;
    std::vector<uint32_t> alternatives;  // start positions in elements_
  };
  void check_left_recursion() const;

  std::vector<Rule> rules_;
  std::vector<Element> elements_;
  std::vector<ByteSet> sets_;
  std::vector<ByteSet> first_;      // per element position
  std::vector<uint8_t> nullable_;   // per element position
  std::vector<ByteSet> rule_first_;
  std::vector<uint8_t> rule_nullable_;
  uint32_t root_ = 0;
  bool finished_ = false;
};

}  // namespace deltaserve::runtime::grammar
