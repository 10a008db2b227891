#include "runtime/backend_factory.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/layer_split_backend.h"
#include "runtime/stream_memory.h"
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

// Best of 5 std::memcpy of `bytes` after a warm-up (which also faults the destination in).
double measure_host_copy_gb_per_s(size_t bytes) {
  std::unique_ptr<char[]> src(new (std::nothrow) char[bytes]);
  std::unique_ptr<char[]> dst(new (std::nothrow) char[bytes]);
  if (!src || !dst) return 0;
  std::memset(src.get(), 1, bytes);
  double best_s = 0;
  volatile char sink = 0;  // reads dst so no copy is a dead store
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + dst[(static_cast<size_t>(i) * 4099) % bytes];
    if (i > 0 && s > 0 && (best_s == 0 || s < best_s)) best_s = s;
  }
  return best_s > 0 ? 2.0 * static_cast<double>(bytes) / best_s / 1e9 : 0;
}

#if defined(DELTASERVE_WITH_GPU)
// 1 warm-up + 5 timed device-to-device copies of `bytes` on the current device, between two
// events on the default stream. 0 on any error (the error state is cleared).
double measure_device_copy_gb_per_s(size_t bytes) {
  void* src = nullptr;
  void* dst = nullptr;
  gpuEvent_t start = nullptr, stop = nullptr;
  bool ok = gpuMalloc(&src, bytes) == gpuSuccess && gpuMalloc(&dst, bytes) == gpuSuccess &&
            gpuMemset(src, 1, bytes) == gpuSuccess && gpuEventCreate(&start) == gpuSuccess &&
            gpuEventCreate(&stop) == gpuSuccess &&
            gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToDevice) == gpuSuccess &&
            gpuEventRecord(start, 0) == gpuSuccess;
  constexpr int kTimedCopies = 5;
  for (int i = 0; ok && i < kTimedCopies; ++i)
    ok = gpuMemcpy(dst, src, bytes, gpuMemcpyDeviceToDevice) == gpuSuccess;
  float ms = 0;
  ok = ok && gpuEventRecord(stop, 0) == gpuSuccess && gpuEventSynchronize(stop) == gpuSuccess &&
       gpuEventElapsedTime(&ms, start, stop) == gpuSuccess && ms > 0;
  if (start != nullptr) (void)gpuEventDestroy(start);
  if (stop != nullptr) (void)gpuEventDestroy(stop);
  if (src != nullptr) (void)gpuFree(src);
  if (dst != nullptr) (void)gpuFree(dst);
  (void)gpuGetLastError();
  return ok ? 2.0 * static_cast<double>(bytes) * kTimedCopies / (static_cast<double>(ms) / 1e3) / 1e9 : 0;
}
#endif

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

DeviceMemory device_memory(const std::string& device) {
  const auto [name, index] = split_device(device);
  if (name == "cpu" || (name == "auto" && !gpu_backend_available())) return {false, host_available_bytes()};
  if (name != "cuda" && name != "hip" && name != "gpu" && name != "auto")
    throw std::runtime_error("--device " + device + ": unknown device (cpu, cuda[:N], hip[:N], gpu[:N], auto)");
#if defined(DELTASERVE_WITH_GPU)
  size_t free_bytes = 0, total_bytes = 0;
  if (gpuSetDevice(index) != gpuSuccess || gpuMemGetInfo(&free_bytes, &total_bytes) != gpuSuccess) {
    (void)gpuGetLastError();
    throw std::runtime_error("--device " + device + ": cannot read the device's free memory");
  }
  return {true, static_cast<int64_t>(free_bytes)};
#else
  (void)index;
  throw std::runtime_error("--device " + device + ": this build has only the CPU backend");
#endif
}

std::unique_ptr<Backend> make_device_backend(const std::vector<DeviceId>& devices, SplitMode mode,
                                             const LayerSplitOverride& layers, const LoadedModel& model,
                                             const CacheConfig& cache, int num_cpu_threads) {
  if (devices.empty()) throw std::runtime_error("--devices: no device given");
  if (devices.size() == 1) {
    const DeviceId& only = devices.front();
    if (!layers.counts.empty() && layers.counts.front() != model.config.num_layers)
      throw std::runtime_error("--split-layers gives one device " + std::to_string(layers.counts.front()) +
                               " layers but the model has " + std::to_string(model.config.num_layers));
    // The CPU is one device whatever its index: cpu:N alone is the plain CPU backend.
    return make_backend(only.kind == DeviceKind::kCpu ? "cpu" : device_name(only), model, cache, num_cpu_threads);
  }
  if (mode != SplitMode::kLayers)
    throw std::runtime_error(std::string("--split ") + split_mode_name(mode) + " is not built by the backend factory");
  if (devices.front().kind != DeviceKind::kCpu)
    throw std::runtime_error("--devices " + device_name(devices.front()) + ",... --split layers: a layer split over GPUs "
                             "is not implemented yet (the GPU backend cannot run a layer range yet; it waits for a "
                             "host with two GPUs); CPU devices (cpu:0,cpu:1) split today");
  try {
    std::vector<LayerRange> ranges;
    if (!layers.counts.empty()) ranges = resolve_layer_ranges(layers, static_cast<int32_t>(model.config.num_layers));
    return make_cpu_layer_split(devices, std::move(ranges), model, cache, num_cpu_threads);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

BackendCacheBytes backend_cache_bytes(const Backend& backend) {
  if (const auto* split = dynamic_cast<const LayerSplitBackend*>(&backend)) {
    BackendCacheBytes total;
    for (const auto& stage : split->stages()) {
      const BackendCacheBytes b = backend_cache_bytes(*stage);
      total.kv_cache_bytes += b.kv_cache_bytes;
      total.state_bytes += b.state_bytes;
    }
    return total;
  }
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

double measure_copy_gb_per_s(Backend& backend) {
  try {
#if defined(DELTASERVE_WITH_GPU)
    if (dynamic_cast<GpuBackend*>(&backend) != nullptr) return measure_device_copy_gb_per_s(size_t{512} << 20);
#endif
    (void)backend;
    return measure_host_copy_gb_per_s(size_t{256} << 20);
  } catch (...) {
    return 0;
  }
}

}  // namespace deltaserve::runtime
