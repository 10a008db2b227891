#include "runtime/tokenizer/bpe_cache.h"

namespace deltaserve::runtime {

bool BpeCache::find(std::string_view word, std::vector<int32_t>& out) {
  Shard& shard = shard_for(word);
  std::lock_guard lock(shard.mutex);
  if (auto it = shard.young.find(word); it != shard.young.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  auto it = shard.old.find(word);
  if (it == shard.old.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  if (shard.young.size() < capacity_per_shard_) shard.young.insert(shard.old.extract(it));
  return true;
}

void BpeCache::insert(std::string_view word, std::span<const int32_t> ids) {
  Shard& shard = shard_for(word);
  std::lock_guard lock(shard.mutex);
  if (shard.young.size() >= capacity_per_shard_) {
    shard.old = std::move(shard.young);
    shard.young = Map();
  }
  shard.young.try_emplace(std::string(word), ids.begin(), ids.end());
}

}  // namespace deltaserve::runtime
