// One device allocation per purpose (weights, KV cache, recurrent states, workspaces, staging),
// carved into 256-byte aligned pieces. Sized at start in two phases: reserve() every piece
// (host arithmetic only), then allocate() once; nothing grows or is freed until destruction,
// so device memory stays flat across requests.
// Owner: GpuBackend; used on the engine thread only; nothing here blocks except allocate()
// and the destructor (gpuMalloc / gpuFree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deltaserve::runtime::gpu {

inline constexpr size_t kDeviceAlignBytes = 256;

inline size_t align_up(size_t bytes, size_t align) { return (bytes + align - 1) / align * align; }

class DeviceArena {
 public:
  explicit DeviceArena(std::string purpose) : purpose_(std::move(purpose)) {}
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Phase 1: reserves `bytes` (rounded up to the alignment); returns the piece's offset.
  // Throws std::logic_error after allocate().
  size_t reserve(size_t bytes);
  // Phase 2: one gpuMalloc of everything reserved, zero-filled. Throws std::runtime_error
  // naming the purpose and the size when the device cannot hold it.
  void allocate();

  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  size_t bytes() const { return allocated_ ? capacity_ : 0; }
  const std::string& purpose() const { return purpose_; }

 private:
  std::string purpose_;
  size_t capacity_ = 0;
  bool allocated_ = false;
  unsigned char* base_ = nullptr;
};

}  // namespace deltaserve::runtime::gpu
