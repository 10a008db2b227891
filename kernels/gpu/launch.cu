// gpu::dependent_launch_enabled (gpu_compat.h): the one-time decision on how kernels launch; and
// the host side of the measuring build's in-step timeline (gpu_timeline.h).
#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_timeline.h"

namespace deltaserve::kernels::gpu {
namespace {

#if defined(DS_GPU_CUDA)
// Compiled like every kernel of the library: its PTX version tells which code the device runs.
__global__ void launch_probe_kernel() {}
#endif

bool decide() {
#if defined(DS_GPU_CUDA)
  int device = 0, major = 0;
  cudaFuncAttributes attr{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaFuncGetAttributes(&attr, launch_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // no device yet: ordinary launches (their own calls report it)
    return false;
  }
  return major >= 9 && attr.ptxVersion >= 90;
#else
  return false;
#endif
}

}  // namespace

// Decided once (the first caller's device) and never written again.
bool dependent_launch_enabled() {
  static const bool enabled = decide();
  return enabled;
}

namespace timeline {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<PointUnit> units;
  DeviceBuffer buffer;
};

// Function-local: units register during static initialisation, in any order. The one mutable
// global of kernels/, kept as a registry on purpose: it holds only the measuring build's
// instrument (units register only under DS_GPU_TIMELINE; enable() sets the buffer once), no
// launch of a product build reads it, and no kernel's result depends on it. Passing the buffer
// through every kernel's arguments instead would touch every launch for a measuring tool.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool register_unit(PointUnit point) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.units.push_back(point);
  return true;
}

bool built() {
#if defined(DS_GPU_TIMELINE) && defined(DS_GPU_CUDA)
  return true;
#else
  return false;
#endif
}

// The buffer is held for the process (a measuring build's; the product never allocates it).
bool enable(unsigned capacity) {
  if (!built() || capacity == 0) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.buffer.stamps != nullptr) return true;
  DeviceBuffer b;
  b.capacity = capacity;
  if (gpuMalloc(reinterpret_cast<void**>(&b.stamps), sizeof(Stamp) * capacity) != gpuSuccess ||
      gpuMalloc(reinterpret_cast<void**>(&b.count), sizeof(unsigned)) != gpuSuccess ||
      gpuMemset(b.count, 0, sizeof(unsigned)) != gpuSuccess ||
      gpuMalloc(reinterpret_cast<void**>(&b.last_end), sizeof(unsigned long long)) != gpuSuccess ||
      gpuMemset(b.last_end, 0, sizeof(unsigned long long)) != gpuSuccess ||
      gpuMalloc(reinterpret_cast<void**>(&b.first_end), sizeof(unsigned long long)) != gpuSuccess ||
      gpuMemset(b.first_end, 0xff, sizeof(unsigned long long)) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
  for (PointUnit point : r.units) {
    if (point(b) != gpuSuccess) {
      (void)gpuGetLastError();
      return false;
    }
  }
  r.buffer = b;
  return true;
}

bool enabled() { return registry().buffer.stamps != nullptr; }

void reset(gpuStream_t stream) {
  const DeviceBuffer& b = registry().buffer;
  if (b.count != nullptr) (void)gpuMemsetAsync(b.count, 0, sizeof(unsigned), stream);
}

std::vector<Stamp> read(unsigned* launched) {
  const DeviceBuffer& b = registry().buffer;
  *launched = 0;
  if (b.count == nullptr || gpuMemcpy(launched, b.count, sizeof(unsigned), gpuMemcpyDeviceToHost) != gpuSuccess) return {};
  std::vector<Stamp> stamps(std::min(*launched, b.capacity));
  if (!stamps.empty() && gpuMemcpy(stamps.data(), b.stamps, sizeof(Stamp) * stamps.size(), gpuMemcpyDeviceToHost) != gpuSuccess)
    return {};
  return stamps;
}

}  // namespace timeline

}  // namespace deltaserve::kernels::gpu
