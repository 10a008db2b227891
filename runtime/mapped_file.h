// A regular file mapped read-only (MAP_PRIVATE), unmapped on destruction. Used by the GGUF
// and safetensors readers. An empty file maps to {nullptr, 0}, so parsers report it as
// truncated. Immutable; safe to share across threads.
#pragma once

#include <cstddef>
#include <string>

namespace deltaserve::runtime {

class MappedFile {
 public:
  // Throws std::runtime_error "<path>: <why>" (cannot open, not a regular file, mmap failed).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t num_bytes() const { return num_bytes_; }

 private:
  const std::byte* data_ = nullptr;
  size_t num_bytes_ = 0;
};

}  // namespace deltaserve::runtime
