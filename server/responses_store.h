// The previous_response_id store of /v1/responses: each finished response's conversation
// (the chat messages it ran on, without its instructions, plus its own output as one
// assistant message), so a later request can continue it by id. Memory only (lost on
// restart), bounded three ways (ServerConfig): at most `max_entries` responses, at most
// `max_bytes` of conversation JSON in all, each usable for `ttl_s` after it finished. The
// oldest entries go first when a bound is hit; an entry larger than max_bytes is not kept.
// Thread-safe (one mutex; put and get copy the messages, outside any engine path).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/request_json.h"

namespace deltaserve::server {

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;

  ResponseStore(int32_t max_entries, int32_t ttl_s, int64_t max_bytes)
      : max_entries_(max_entries), ttl_(std::chrono::seconds(ttl_s)), max_bytes_(max_bytes) {}

  bool enabled() const { return max_entries_ > 0 && max_bytes_ > 0; }
  void put(const std::string& id, RequestJson messages, Clock::time_point now = Clock::now());
  // The stored conversation, or nothing (never stored, expired or evicted).
  std::optional<RequestJson> get(const std::string& id, Clock::time_point now = Clock::now());
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    RequestJson messages;
    int64_t num_bytes = 0;
    Clock::time_point expires;
  };
  void evict_locked(Clock::time_point now);

  const int32_t max_entries_;
  const Clock::duration ttl_;
  const int64_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t num_bytes_ = 0;
};

}  // namespace deltaserve::server
