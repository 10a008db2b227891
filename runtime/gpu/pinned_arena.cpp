#include "runtime/gpu/pinned_arena.h"

#include <stdexcept>
#include <string>

#include "kernels/gpu/gpu_compat.h"
#include "runtime/gpu/device_arena.h"

namespace deltaserve::runtime::gpu {

PinnedArena::PinnedArena(size_t input_bytes, size_t output_bytes)
    : input_bytes_(align_up(input_bytes == 0 ? 1 : input_bytes, kDeviceAlignBytes)),
      output_bytes_(align_up(output_bytes == 0 ? 1 : output_bytes, kDeviceAlignBytes)) {
  void* p = nullptr;
  const gpuError_t err = gpuMallocHost(&p, input_bytes_ + output_bytes_);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    throw std::runtime_error("GPU backend: cannot allocate " + std::to_string((input_bytes_ + output_bytes_) >> 20) +
                             " MiB of page-locked host memory (" + gpuGetErrorString(err) + ")");
  }
  base_ = static_cast<unsigned char*>(p);
}

PinnedArena::~PinnedArena() {
  if (base_ != nullptr) (void)gpuFreeHost(base_);
}

size_t StagingLayout::push_bytes(size_t bytes) {
  const size_t offset = used_;
  const size_t end = offset + align_up(bytes, 16);
  if (end > capacity_)
    throw std::logic_error("GPU backend: step staging overflow (" + std::to_string(end) + " > " + std::to_string(capacity_) +
                           " bytes): a plan bound is missing");
  used_ = end;
  return offset;
}

}  // namespace deltaserve::runtime::gpu
