// Finds added tokens (special and normal, e.g. "<|im_end|>", "<think>") in text before
// pre-tokenization, leftmost-longest like Hugging Face's AddedVocabulary, and honours the
// lstrip / rstrip / single_word flags. Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // hidden by decode(skip_special); skipped when !parse_special
  bool lstrip = false;       // swallow whitespace before the match
  bool rstrip = false;       // swallow whitespace after the match
  bool single_word = false;  // only match when not inside a word
  bool normalized = false;   // matched after normalisation instead of on the raw text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // One piece of a split: either an added token (id >= 0) or plain text (id == -1).
  struct Segment {
    int32_t id;
    std::string_view text;
  };
  // Splits `text` into plain-text and added-token segments, in order. With
  // parse_special == false, special tokens are not matched (they stay plain text, as with
  // Hugging Face's split_special_tokens); normal added tokens still are. Whitespace taken
  // by lstrip/rstrip appears in no segment.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  // Longest token at text[pos], or nullptr.
  const AddedToken* match_at(std::string_view text, size_t pos, bool parse_special) const;

  std::vector<AddedToken> tokens_;
  // Token indices by first byte, longest first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace deltaserve::runtime
