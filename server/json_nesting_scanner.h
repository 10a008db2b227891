// A first look at a JSON body while it is still arriving: tracks the nesting depth of the
// bytes seen so far (brackets and braces outside strings) so that a nesting bomb is
// answered after its first few KB instead of after all of its megabytes have been read.
// The parse itself (request_json.h) enforces the same limit exactly; this only rejects
// earlier. Feed it the body as it grows (each call scans what was appended since the last).
// One per request body; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_error.h"

namespace deltaserve::server {

class JsonNestingScanner {
 public:
  explicit JsonNestingScanner(int32_t max_depth) : max_depth_(max_depth) {}
  // False once the nesting passed max_depth somewhere in `body` (the body so far).
  bool feed(std::string_view body);
  // The 400 for a body past the limit: json_too_deep, the same the parse throws.
  ApiError too_deep() const;

 private:
  int32_t max_depth_;
  int64_t depth_ = 0;
  size_t scanned_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace deltaserve::server
