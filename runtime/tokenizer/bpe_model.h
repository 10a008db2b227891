// Byte-level BPE: a vocabulary of byte strings and a ranked merge list. Token bytes here are
// raw bytes (the GPT-2 byte-to-unicode mapping of tokenizer.json is undone at load), so a
// word is BPE-encoded straight from its UTF-8 bytes. Immutable after construction except
// for the internal cache, which is thread-safe; encode_word() may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/tokenizer/bpe_cache.h"

namespace deltaserve::runtime {

class BpeModel {
 public:
  // token_bytes[id] holds each model token's bytes (ids with an empty entry are not model
  // tokens). merges are byte-string pairs in rank order. Throws TokenizerError when a byte
  // has no single-byte token or a merge names or produces an unknown token.
  BpeModel(const std::vector<std::string>& token_bytes,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

  // Appends the ids of one pre-tokenized word (any bytes, non-empty).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> find(std::string_view bytes) const;
  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_by_bytes_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  bool ignore_merges_;
  mutable BpeCache cache_;
};

}  // namespace deltaserve::runtime
