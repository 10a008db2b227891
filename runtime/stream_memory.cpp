#include "runtime/stream_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace deltaserve::runtime {

StreamBytes stream_bytes(const ModelConfig& c, bool has_mtp, const CacheConfig& cache, int32_t kv_blocks_per_stream,
                         bool gpu) {
  // Entries per slot: one live entry, or two banks of max_verify_rows under speculation.
  const int64_t entries = cache.max_verify_rows >= 2 ? 2 * static_cast<int64_t>(cache.max_verify_rows) : 1;
  const int64_t delta_elem = gpu && cache.state_precision == StatePrecision::kBf16 ? 2 : 4;
  const int64_t per_gdn_layer =
      entries * (c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim * delta_elem + (c.conv_kernel - 1) * c.conv_channels() * 4);
  const int64_t kv_layers = c.num_attention_layers() + (has_mtp ? 1 : 0);
  const int64_t kv_per_layer =
      2 * static_cast<int64_t>(kv_blocks_per_stream) * cache.kv_block_tokens * c.num_kv_heads * c.head_dim * 4;
  return {c.num_gdn_layers() * per_gdn_layer, kv_layers * kv_per_layer};
}

SlotSizing size_slots(int64_t available_bytes, int64_t reserved_bytes, int64_t stream_bytes, int32_t cap) {
  SlotSizing s{available_bytes, reserved_bytes + available_bytes / 10, stream_bytes, cap, 1};
  const int64_t room = s.available_bytes - s.reserved_bytes;
  if (room > 0 && stream_bytes > 0) s.slots = static_cast<int32_t>(std::clamp<int64_t>(room / stream_bytes, 1, cap));
  else if (stream_bytes <= 0) s.slots = cap;
  return s;
}

std::string SlotSizing::describe() const {
  char line[256];
  std::snprintf(line, sizeof(line), "%d streams (%.2f GiB free, %.2f GiB reserved, %.1f MiB a stream, at most %d)", slots,
                available_bytes / 1073741824.0, reserved_bytes / 1073741824.0, stream_bytes / 1048576.0, cap);
  return line;
}

int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace deltaserve::runtime
