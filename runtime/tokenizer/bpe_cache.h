// Word -> token ids cache for BPE, shared by all threads that encode with one tokenizer.
// Sharded by hash, one mutex per shard (held for a map lookup, never across BPE work).
// Each shard keeps two generations: new entries go to `young`; when it is full, `young`
// becomes `old` and the previous `old` is dropped; a hit in `old` is promoted. That gives
// LRU-like retention with O(1) work and a hard bound of 2 * capacity entries per shard.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deltaserve::runtime {

class BpeCache {
 public:
  static constexpr size_t kNumShards = 16;
  explicit BpeCache(size_t capacity_words_per_shard = 4096)
      : capacity_per_shard_(capacity_words_per_shard) {}

  // Appends the cached ids of `word` to `out`; false (and `out` untouched) on a miss.
  bool find(std::string_view word, std::vector<int32_t>& out);
  void insert(std::string_view word, std::span<const int32_t> ids);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>>;
  struct Shard {
    std::mutex mutex;
    Map young, old;
  };
  Shard& shard_for(std::string_view word) {
    return shards_[std::hash<std::string_view>{}(word) % kNumShards];
  }

  size_t capacity_per_shard_;
  std::array<Shard, kNumShards> shards_;
};

}  // namespace deltaserve::runtime
