#include "server/responses_store.h"

namespace deltaserve::server {

void ResponseStore::evict_locked(Clock::time_point now) {
  // Every entry lives for the same ttl, so the oldest expires first.
  while (!entries_.empty() &&
         (entries_.front().expires <= now || static_cast<int32_t>(entries_.size()) > max_entries_ ||
          num_bytes_ > max_bytes_)) {
    num_bytes_ -= entries_.front().num_bytes;
    index_.erase(entries_.front().id);
    entries_.pop_front();
  }
}

void ResponseStore::put(const std::string& id, RequestJson messages, Clock::time_point now) {
  if (!enabled()) return;
  const auto num_bytes = static_cast<int64_t>(messages.dump().size());
  if (num_bytes > max_bytes_) return;
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(id); it != index_.end()) {
    num_bytes_ -= it->second->num_bytes;
    entries_.erase(it->second);
    index_.erase(it);
  }
  entries_.push_back(Entry{id, std::move(messages), num_bytes, now + ttl_});
  index_[id] = std::prev(entries_.end());
  num_bytes_ += num_bytes;
  evict_locked(now);
}

std::optional<RequestJson> ResponseStore::get(const std::string& id, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  evict_locked(now);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second->messages;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace deltaserve::server
