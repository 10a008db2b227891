// Picks and builds the backend for a --device string, so callers (the server's engine loader,
// bench commands) never include a GPU header: "cpu", "cuda", "hip", "gpu" (whichever GPU
// runtime this build has), each GPU name optionally with ":N" for device N, or "auto" (the GPU
// when this build has one and a device is present, else the CPU).
// Built into ds_backends (not ds_runtime); with DELTASERVE_CUDA / DELTASERVE_HIP it links the
// GPU backend (DELTASERVE_WITH_GPU). Called at start on any thread; blocks while the weights
// upload.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/device_split.h"
#include "runtime/gpu/kernel_class_time.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

// Throws std::runtime_error with a clear line for an unknown device name, a GPU asked of a
// CPU-only build (or of the other vendor's build), or a GPU that cannot serve the model.
std::unique_ptr<Backend> make_backend(const std::string& device, const LoadedModel& model, const CacheConfig& cache,
                                      int num_cpu_threads);

// The backend of a --devices list (runtime/device_split.h). One device: make_backend of its
// name. Several with SplitMode::kLayers: a LayerSplitBackend (runtime/layer_split_backend.h),
// ranges from `layers` (checked against the model) or balanced by memory; on CPU devices only
// for now: GPU devices get a std::runtime_error saying the GPU backend's stages wait for a
// multi-GPU host. kReplicas is not built here (one engine per device, in the server). Throws
// std::runtime_error with one clear line.
std::unique_ptr<Backend> make_device_backend(const std::vector<DeviceId>& devices, SplitMode mode,
                                             const LayerSplitOverride& layers, const LoadedModel& model,
                                             const CacheConfig& cache, int num_cpu_threads);

// The memory a --device string's device has free for a backend's pools (a GPU's free device
// memory, before the backend uploads its weights; the CPU's MemAvailable), for sizing the slots
// from memory (runtime/stream_memory.h). Throws like make_backend for a bad device name.
struct DeviceMemory {
  bool gpu = false;
  int64_t free_bytes = 0;
};
DeviceMemory device_memory(const std::string& device);

// True when this build has a GPU backend and at least one device is visible.
bool gpu_backend_available();

// Bytes of the KV cache and of the recurrent-state slots (rings included) a backend holds,
// for logs and the server's limits; 0 for a backend that does not say.
struct BackendCacheBytes {
  int64_t kv_cache_bytes = 0;
  int64_t state_bytes = 0;
};
BackendCacheBytes backend_cache_bytes(const Backend& backend);

// The kernel trace of a GPU backend (GpuBackend::set_trace / take_trace: per kernel class,
// launches and eager device time; graphs off while on). set_kernel_trace returns false, and
// take_kernel_trace nothing, for a backend that cannot trace (the CPU backend).
bool set_kernel_trace(Backend& backend, bool on);
std::vector<gpu::KernelClassTime> take_kernel_trace(Backend& backend);

// The copy bandwidth the backend's memory reaches, in GB/s (1e9 bytes) counting read + write
// (2 x size per copy), for bench's "% copy": a GPU backend times 5 device-to-device memcpys of a
// 512 MiB buffer on the current device (the backend's, set by its constructor) with events,
// after a warm-up, and returns the mean; the CPU backend takes the best of 5 single-thread
// std::memcpy of 256 MiB after a warm-up. Blocks for about a second; allocates and frees the two
// buffers. Returns 0 on any allocation or device error (never throws).
double measure_copy_gb_per_s(Backend& backend);

}  // namespace deltaserve::runtime
