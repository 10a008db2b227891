// The store of /v1/responses: each finished response (unless the request said store: false)
// with its conversation (the chat messages it ran on, without its instructions, plus its own
// output as one assistant message), so a later request can continue it by
// previous_response_id, and with what GET /v1/responses/{id} and .../input_items return.
// Memory only (lost on restart), bounded three ways (ServerConfig): at most `max_entries`
// responses, at most `max_bytes` of JSON in all (the three parts of an entry), each usable
// for `ttl_s` after it finished. The oldest entries go first when a bound is hit; an entry
// larger than max_bytes is not kept. Thread-safe (one mutex; put and get copy, outside any
// engine path).
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

  struct Stored {
    RequestJson messages;        // the conversation, for previous_response_id
    std::string response_json;   // the response object as the create call returned it
    nlohmann::json input_items;  // the items it ran on (with ids, the previous_response_id chain's first), in order
  };

  bool enabled() const { return max_entries_ > 0 && max_bytes_ > 0; }
  void put(const std::string& id, Stored stored, Clock::time_point now = Clock::now());
  // The stored conversation, or nothing (never stored, expired, evicted or deleted).
  std::optional<RequestJson> get(const std::string& id, Clock::time_point now = Clock::now());
  // The whole entry, or nothing.
  std::optional<Stored> find(const std::string& id, Clock::time_point now = Clock::now());
  // Drops the entry; false when there was none.
  bool erase(const std::string& id, Clock::time_point now = Clock::now());
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    Stored stored;
    int64_t num_bytes = 0;
    Clock::time_point expires;
  };
  void erase_locked(std::unordered_map<std::string, std::list<Entry>::iterator>::iterator it);
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
