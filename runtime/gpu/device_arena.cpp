#include "runtime/gpu/device_arena.h"

#include <stdexcept>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::runtime::gpu {

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) (void)gpuFree(base_);  // a failure at shutdown has no one to report to
}

size_t DeviceArena::reserve(size_t bytes) {
  if (allocated_) throw std::logic_error("device arena " + purpose_ + ": reserve after allocate");
  const size_t offset = capacity_;
  capacity_ += align_up(bytes == 0 ? 1 : bytes, kDeviceAlignBytes);
  return offset;
}

void DeviceArena::allocate() {
  if (allocated_) throw std::logic_error("device arena " + purpose_ + ": allocated twice");
  if (capacity_ == 0) capacity_ = kDeviceAlignBytes;
  void* p = nullptr;
  const gpuError_t err = gpuMalloc(&p, capacity_);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();  // clear the sticky allocation error
    throw std::runtime_error("GPU backend: cannot allocate " + std::to_string(capacity_ >> 20) + " MiB of device memory for " +
                             purpose_ + " (" + gpuGetErrorString(err) + ")");
  }
  base_ = static_cast<unsigned char*>(p);
  allocated_ = true;
  DS_GPU_CHECK(gpuMemset(base_, 0, capacity_), "zero-fill %s, %zu bytes", purpose_.c_str(), capacity_);
}

}  // namespace deltaserve::runtime::gpu
