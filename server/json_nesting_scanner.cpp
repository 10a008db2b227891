#include "server/json_nesting_scanner.h"

#include <string>

namespace deltaserve::server {

bool JsonNestingScanner::feed(std::string_view body) {
  for (; scanned_ < body.size(); ++scanned_) {
    const char c = body[scanned_];
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '[' || c == '{') {
      if (++depth_ > max_depth_) return false;
    } else if ((c == ']' || c == '}') && depth_ > 0) {
      --depth_;
    }
  }
  return true;
}

ApiError JsonNestingScanner::too_deep() const {
  ApiError e = invalid_value("body", "the JSON body nests deeper than " + std::to_string(max_depth_) +
                                         " levels (limit --max-json-depth).");
  e.code = "json_too_deep";
  return e;
}

}  // namespace deltaserve::server
