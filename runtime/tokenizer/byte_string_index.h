// Byte string -> id lookup for the vocabulary: open addressing over (hash, id) slots with the
// strings in one pool, so a lookup usually touches one slot and one string. Built once;
// immutable and thread-safe afterwards. (std::unordered_map's node chasing cost ~15% of
// encode time here.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime {

class ByteStringIndex {
 public:
  // strings[id]; empty strings are not indexed; on duplicates the lowest id wins.
  void build(const std::vector<std::string>& strings) {
    offsets_.assign(strings.size() + 1, 0);
    pool_.clear();
    size_t num_indexed = 0;
    for (size_t id = 0; id < strings.size(); ++id) {
      offsets_[id] = static_cast<uint32_t>(pool_.size());
      pool_.append(strings[id]);
      num_indexed += strings[id].empty() ? 0 : 1;
    }
    offsets_[strings.size()] = static_cast<uint32_t>(pool_.size());
    size_t capacity = 16;
    while (capacity < num_indexed * 2) capacity *= 2;
    slots_.assign(capacity, Slot{0, -1});
    mask_ = capacity - 1;
    for (size_t id = 0; id < strings.size(); ++id) {
      if (strings[id].empty() || find(strings[id]) >= 0) continue;
      const uint64_t h = hash(strings[id]);
      size_t i = h & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = {h, static_cast<int32_t>(id)};
    }
  }

  // The id of `bytes`, or -1.
  int32_t find(std::string_view bytes) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(bytes);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (slot.hash == h && string_of(slot.id) == bytes) return slot.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash;
    int32_t id;  // -1 = empty
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  std::string_view string_of(int32_t id) const {
    return std::string_view(pool_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }

  std::vector<Slot> slots_;
  std::string pool_;
  std::vector<uint32_t> offsets_;
  size_t mask_ = 0;
};

}  // namespace deltaserve::runtime
