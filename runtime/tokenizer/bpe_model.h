// Byte-level BPE: a vocabulary of byte strings and a ranked merge list. Token bytes here are
// raw bytes (the GPT-2 byte-to-unicode mapping of tokenizer.json is undone at load), so a
// word is BPE-encoded straight from its UTF-8 bytes. Immutable after construction except
// for the internal cache, which is thread-safe; encode_word() may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/tokenizer/bpe_cache.h"
#include "runtime/tokenizer/byte_string_index.h"

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
  size_t num_merges() const { return num_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // Open addressing, linear probing; kEmptyKey marks a free slot (no real pair has it).
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> merge_shift_);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & (merge_slots_.size() - 1)) {
      const MergeSlot& slot = merge_slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmptyKey) return nullptr;
    }
  }
  void build_merge_table(const std::vector<std::pair<uint64_t, Merge>>& merges);
  void bpe(std::string_view word, std::vector<int32_t>& symbols) const;
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  ByteStringIndex ids_by_bytes_;
  std::vector<MergeSlot> merge_slots_;
  int merge_shift_ = 64;
  size_t num_merges_ = 0;
  // whole_word_[id]: 0 = not yet known, 1 = BPE of the token's own bytes gives the token
  // itself (a word equal to it needs no merging: exact, unlike ignore_merges, which skips
  // the check), 2 = it does not. Filled lazily by whichever thread asks first; the value is
  // deterministic, so relaxed atomics suffice.
  mutable std::vector<std::atomic<uint8_t>> whole_word_;
  int32_t byte_ids_[256];
  bool ignore_merges_;
  mutable BpeCache cache_;
};

}  // namespace deltaserve::runtime
