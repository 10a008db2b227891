// Which tokens a grammar state allows: a bitset over the vocabulary computed by walking the
// vocabulary's byte strings in sorted order, so tokens sharing a prefix share its matcher
// steps (the walk of a byte trie without building one) and a dead prefix skips every token
// that starts with it.
//
// Vocabulary: built once per model from the tokenizer's pieces, then immutable and shared.
// compute_mask(): pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/grammar_matcher.h"

namespace deltaserve::runtime::grammar {

class TokenMask {
 public:
  TokenMask() = default;
  explicit TokenMask(int64_t num_tokens) : num_tokens_(num_tokens), words_(static_cast<size_t>((num_tokens + 63) / 64), 0) {}
  bool has(int64_t id) const {
    return id >= 0 && id < num_tokens_ && (words_[static_cast<size_t>(id >> 6)] >> (id & 63)) & 1;
  }
  void set(int64_t id) { words_[static_cast<size_t>(id >> 6)] |= uint64_t{1} << (id & 63); }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t count() const;
  size_t num_bytes() const { return words_.size() * sizeof(uint64_t); }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  int64_t num_tokens_ = 0;
  std::vector<uint64_t> words_;
};

class Vocabulary {
 public:
  // pieces[id]: the token's bytes; an empty piece (special/control tokens, unused ids) is
  // never allowed by a grammar.
  explicit Vocabulary(std::vector<std::string> pieces);
  int64_t num_tokens() const { return static_cast<int64_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }

  // Tokens whose whole byte string the grammar accepts from `state` (the state stays live
  // after it; a token may end anywhere, mid-structure or mid-character).
  TokenMask allowed(const Grammar& g, const MatcherState& state) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> sorted_;       // ids with non-empty pieces, by piece bytes
  std::vector<uint16_t> common_;      // common_[i]: shared prefix of sorted_[i - 1] and sorted_[i]
};

}  // namespace deltaserve::runtime::grammar
