#include "server/responses_store.h"

namespace deltaserve::server {

void ResponseStore::erase_locked(std::unordered_map<std::string, std::list<Entry>::iterator>::iterator it) {
  num_bytes_ -= it->second->num_bytes;
  entries_.erase(it->second);
  index_.erase(it);
}

void ResponseStore::evict_locked(Clock::time_point now) {
  // Every entry lives for the same ttl, so the oldest expires first.
  while (!entries_.empty() &&
         (entries_.front().expires <= now || static_cast<int32_t>(entries_.size()) > max_entries_ ||
          num_bytes_ > max_bytes_)) {
    erase_locked(index_.find(entries_.front().id));
  }
}

void ResponseStore::put(const std::string& id, Stored stored, Clock::time_point now) {
  if (!enabled()) return;
  const auto num_bytes = static_cast<int64_t>(stored.messages.dump().size() + stored.response_json.size() +
                                              stored.input_items.dump().size());
  if (num_bytes > max_bytes_) return;
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(id); it != index_.end()) erase_locked(it);
  entries_.push_back(Entry{id, std::move(stored), num_bytes, now + ttl_});
  index_[id] = std::prev(entries_.end());
  num_bytes_ += num_bytes;
  evict_locked(now);
}

std::optional<RequestJson> ResponseStore::get(const std::string& id, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  evict_locked(now);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second->stored.messages;
}

std::optional<ResponseStore::Stored> ResponseStore::find(const std::string& id, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  evict_locked(now);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second->stored;
}

bool ResponseStore::erase(const std::string& id, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  evict_locked(now);
  const auto it = index_.find(id);
  if (it == index_.end()) return false;
  erase_locked(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace deltaserve::server
