// gpu::dependent_launch_enabled, gpu::prefetch_enabled and gpu::apply_carveout (gpu_compat.h):
// one-time decisions on how kernels launch and whether they prefetch.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "kernels/gpu_compat.h"

namespace deltaserve::kernels::gpu {
namespace {

#if defined(DS_GPU_CUDA)
// Compiled like every kernel of the library: its PTX version tells which code the device runs.
__global__ void launch_probe_kernel() {}
#endif

bool decide() {
  const char* env = std::getenv("DELTASERVE_GPU_PDL");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
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

bool dependent_launch_enabled() {
  static const bool enabled = decide();
  return enabled;
}

bool prefetch_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("DELTASERVE_GPU_PREFETCH");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

// DELTASERVE_GPU_SMEM_CARVEOUT=N (0-100, percent of the L1 / shared memory array given to
// shared memory) sets every launched kernel's preferred carveout once per device, so that
// neighbouring launches of a step ask for the same split (probe: does a split changing between
// launches cost the 27B's step its mixed-shared-memory forms? bench/RESULTS.md).
void apply_carveout(const void* kernel) {
#if defined(DS_GPU_CUDA)
  static const int percent = [] {
    const char* env = std::getenv("DELTASERVE_GPU_SMEM_CARVEOUT");
    return env != nullptr && *env != '\0' ? std::atoi(env) : -1;
  }();
  if (percent < 0) return;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;
  static std::mutex mutex;
  static std::set<std::pair<int, const void*>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert({device, kernel}).second) return;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent) != cudaSuccess) (void)cudaGetLastError();
#else
  (void)kernel;
#endif
}

}  // namespace deltaserve::kernels::gpu
