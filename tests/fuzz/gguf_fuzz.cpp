// libFuzzer target: the GGUF reader on arbitrary bytes. The reader's contract is to reject
// anything malformed with GgufError (or MappedFile's std::runtime_error) and never to read
// outside the mapping; any other exception, a crash or a sanitizer report is a finding.
// The bytes go into a memfd so the real open() path (MappedFile, mmap) is exercised
// without touching the disk.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/gguf_file.h"

namespace {

volatile size_t g_sink = 0;  // keeps the reads from being optimised away

// Reads every value once, so lazily wrong lengths or types would show up here.
void touch(const deltaserve::runtime::GgufFile& file) {
  using deltaserve::runtime::GgufError;
  size_t sum = 0;
  for (const auto& [key, value] : file.metadata()) {
    sum += key.size() + static_cast<size_t>(value.type);
    try {
      sum += file.get_string(key).size();
    } catch (const GgufError&) {
    }
    try {
      sum += file.get_int_array(key).size();
    } catch (const GgufError&) {
    }
    try {
      sum += static_cast<size_t>(file.get_uint(key));
    } catch (const GgufError&) {
    }
  }
  for (const auto& t : file.tensors()) {
    const auto* name = file.find_tensor(t.name);
    if (name == nullptr) __builtin_trap();  // every listed tensor must be findable
    sum += t.num_bytes;
  }
  g_sink = sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("gguf_fuzz", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const auto file = deltaserve::runtime::GgufFile::open(path);
    touch(*file);
  } catch (const std::runtime_error&) {  // GgufError, or MappedFile's open/mmap failure
  }
  return 0;
}
