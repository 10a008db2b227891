#include "runtime/backend_factory.h"

#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"
#if defined(DELTASERVE_WITH_GPU)
#include "runtime/gpu/gpu_backend.h"
#endif

namespace deltaserve::runtime {
namespace {

// "cuda:1" -> ("cuda", 1); "cuda" -> ("cuda", 0). Throws on a bad index.
std::pair<std::string, int> split_device(const std::string& device) {
  const size_t colon = device.find(':');
  if (colon == std::string::npos) return {device, 0};
  const std::string index = device.substr(colon + 1);
  if (index.empty() || index.size() > 4 || index.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error("--device " + device + ": expected <name>:<device index>");
  return {device.substr(0, colon), std::stoi(index)};
}

const char* gpu_runtime_name() {
#if defined(DELTASERVE_WITH_GPU) && defined(DS_GPU_HIP)
  return "hip";
#elif defined(DELTASERVE_WITH_GPU)
  return "cuda";
#else
  return "";
#endif
}

}  // namespace

bool gpu_backend_available() {
#if defined(DELTASERVE_WITH_GPU)
  int count = 0;
  if (gpuGetDeviceCount(&count) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
  return count > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device, const LoadedModel& model, const CacheConfig& cache,
                                      int num_cpu_threads) {
  const auto [name, index] = split_device(device);
  if (name == "cpu" && index == 0 && device.find(':') == std::string::npos)
    return std::make_unique<CpuBackend>(model, cache, num_cpu_threads);
  if (name == "auto" && device == "auto") {
    if (!gpu_backend_available()) return std::make_unique<CpuBackend>(model, cache, num_cpu_threads);
    return make_backend("gpu", model, cache, num_cpu_threads);
  }
  if (name != "cuda" && name != "hip" && name != "gpu")
    throw std::runtime_error("--device " + device + ": unknown device (cpu, cuda[:N], hip[:N], gpu[:N], auto)");
#if defined(DELTASERVE_WITH_GPU)
  if (name != "gpu" && name != gpu_runtime_name())
    throw std::runtime_error("--device " + device + ": this build's GPU backend is " + gpu_runtime_name() +
                             ", not " + name);
  return std::make_unique<GpuBackend>(model, cache, index);
#else
  (void)gpu_runtime_name;
  throw std::runtime_error("--device " + device +
                           ": this build has only the CPU backend (configure with -DDELTASERVE_CUDA=ON or "
                           "-DDELTASERVE_HIP=ON for a GPU)");
#endif
}

BackendCacheBytes backend_cache_bytes(const Backend& backend) {
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(&backend)) return {cpu->kv_cache_bytes(), cpu->state_bytes()};
#if defined(DELTASERVE_WITH_GPU)
  if (const auto* gpu = dynamic_cast<const GpuBackend*>(&backend)) return {gpu->kv_cache_bytes(), gpu->state_bytes()};
#endif
  return {};
}

bool set_kernel_trace(Backend& backend, bool on) {
#if defined(DELTASERVE_WITH_GPU)
  if (auto* gpu = dynamic_cast<GpuBackend*>(&backend)) {
    gpu->set_trace(on);
    return true;
  }
#endif
  (void)backend;
  (void)on;
  return false;
}

std::vector<gpu::KernelClassTime> take_kernel_trace(Backend& backend) {
#if defined(DELTASERVE_WITH_GPU)
  if (auto* gpu = dynamic_cast<GpuBackend*>(&backend)) return gpu->take_trace();
#endif
  (void)backend;
  return {};
}

}  // namespace deltaserve::runtime
