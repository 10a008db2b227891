#include "runtime/tokenizer/added_token_matcher.h"

#include <algorithm>
#include <cctype>

namespace deltaserve::runtime {
namespace {

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// A word character for single_word: ASCII alphanumerics, '_', and (an approximation of
// Unicode letters) any non-ASCII byte.
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const AddedToken* AddedTokenMatcher::match_at(std::string_view text, size_t pos,
                                              bool parse_special) const {
  for (uint32_t index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const AddedToken& token = tokens_[index];
    if (token.special && !parse_special) continue;
    if (text.compare(pos, token.content.size(), token.content) != 0) continue;
    if (token.single_word) {
      const size_t end = pos + token.content.size();
      if ((pos > 0 && is_word_byte(text[pos - 1])) ||
          (end < text.size() && is_word_byte(text[end]))) {
        continue;
      }
    }
    return &token;
  }
  return nullptr;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<Segment>& out) const {
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (by_first_byte_[static_cast<uint8_t>(text[pos])].empty()) continue;
    const AddedToken* token = match_at(text, pos, parse_special);
    if (token == nullptr) continue;
    size_t plain_end = pos;
    if (token->lstrip) {
      while (plain_end > plain_start && is_space(text[plain_end - 1])) --plain_end;
    }
    if (plain_end > plain_start) out.push_back({-1, text.substr(plain_start, plain_end - plain_start)});
    out.push_back({token->id, text.substr(pos, token->content.size())});
    size_t next = pos + token->content.size();
    if (token->rstrip) {
      while (next < text.size() && is_space(text[next])) ++next;
    }
    plain_start = next;
    pos = next - 1;  // the loop's ++pos lands on `next`
  }
  if (plain_start < text.size()) out.push_back({-1, text.substr(plain_start)});
}

}  // namespace deltaserve::runtime
