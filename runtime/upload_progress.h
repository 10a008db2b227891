// Progress lines for a long copy (the GPU backend's weight upload): one line each time the
// copied bytes cross the next of num_steps equal steps, the last one with the rate, so a
// 20 GB upload says where it is without flooding a log. Owner: the thread that copies; not
// thread-safe. The sink receives whole lines without a newline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace deltaserve::runtime {

class UploadProgress {
 public:
  using Sink = std::function<void(const std::string& line)>;
  // what: the thing copied ("weights"). total_bytes 0 reports nothing.
  UploadProgress(std::string what, uint64_t total_bytes, int num_steps, Sink sink);

  // Adds bytes copied since the last call; emits the lines of the steps crossed.
  void add(uint64_t bytes);
  uint64_t done_bytes() const { return done_; }

 private:
  std::string what_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  int num_steps_ = 1;
  int steps_reported_ = 0;
  Sink sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace deltaserve::runtime
