#include "runtime/upload_progress.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace deltaserve::runtime {

UploadProgress::UploadProgress(std::string what, uint64_t total_bytes, int num_steps, Sink sink)
    : what_(std::move(what)),
      total_(total_bytes),
      num_steps_(std::max(1, num_steps)),
      sink_(std::move(sink)),
      start_(std::chrono::steady_clock::now()) {}

void UploadProgress::add(uint64_t bytes) {
  if (total_ == 0) return;
  done_ = std::min(total_, done_ + bytes);
  if (!sink_) return;
  // Steps crossed so far: floor(done / total * num_steps), exact in integers.
  const int crossed = static_cast<int>(done_ * static_cast<uint64_t>(num_steps_) / total_);
  while (steps_reported_ < crossed) {
    ++steps_reported_;
    const uint64_t at = total_ * static_cast<uint64_t>(steps_reported_) / static_cast<uint64_t>(num_steps_);
    char line[160];
    if (steps_reported_ == num_steps_) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      std::snprintf(line, sizeof(line), "%s: 100%% (%.2f GB) in %.2f s (%.2f GB/s)", what_.c_str(),
                    static_cast<double>(total_) / 1e9, s, s > 0 ? static_cast<double>(total_) / 1e9 / s : 0.0);
    } else {
      std::snprintf(line, sizeof(line), "%s: %3d%% (%.2f of %.2f GB)", what_.c_str(), 100 * steps_reported_ / num_steps_,
                    static_cast<double>(at) / 1e9, static_cast<double>(total_) / 1e9);
    }
    sink_(line);
  }
}

}  // namespace deltaserve::runtime
