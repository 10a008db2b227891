// Incremental Server-Sent Events parser for the body of a streaming response. Bytes arrive
// split anywhere (inside a line, between "\r" and "\n"); each complete event's data lines
// are joined with "\n" and handed out. Comment lines (": ping") and fields other than
// `data` are skipped. A line longer than the bound is an error (a broken server must not
// make the tool buffer without limit). Plain value; one thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::loadtest {

class SseParser {
 public:
  explicit SseParser(size_t max_line_bytes = 4 << 20) : max_line_bytes_(max_line_bytes) {}

  // Appends the data of every event completed by `bytes` to `events`. Returns false when a
  // line exceeds the bound (the parser is then unusable).
  bool feed(std::string_view bytes, std::vector<std::string>& events);

  // Bytes of an unfinished line or event (non-zero at the end of a body = truncated event).
  size_t num_pending_bytes() const { return line_.size() + data_.size(); }

 private:
  void on_line(std::string_view line, std::vector<std::string>& events);

  size_t max_line_bytes_;
  std::string line_;      // the line being assembled, without its terminator
  std::string data_;      // data of the event being assembled
  bool has_data_ = false;
  bool after_cr_ = false; // the previous byte was '\r' (a following '\n' ends nothing new)
};

}  // namespace deltaserve::loadtest
