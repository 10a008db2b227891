#include "runtime/activation_link.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace deltaserve::runtime {

void HostStagedLink::copy(const ActivationBuffer& src, const ActivationBuffer& dst) {
  if (src.bytes != dst.bytes || src.bytes < 0)
    throw std::invalid_argument("activation hop " + device_name(src.device) + " -> " + device_name(dst.device) + ": " +
                                std::to_string(src.bytes) + " bytes into a buffer of " + std::to_string(dst.bytes));
  if (src.device.kind != DeviceKind::kCpu || dst.device.kind != DeviceKind::kCpu)
    throw std::logic_error("HostStagedLink copies between CPU devices only");
  const auto start = std::chrono::steady_clock::now();
  const size_t bytes = static_cast<size_t>(src.bytes);
  if (staging_.size() < bytes) staging_.resize(bytes);
  if (bytes > 0) {
    std::memcpy(staging_.data(), src.data, bytes);  // device -> staging (a GPU: D2H into pinned memory)
    std::memcpy(dst.data, staging_.data(), bytes);  // staging -> device (a GPU: H2D)
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.bytes += bytes;
  stats_.copies += 1;
  stats_.staging_bytes = static_cast<int64_t>(staging_.size());
}

LinkStats HostStagedLink::stats() const { return stats_; }

}  // namespace deltaserve::runtime
