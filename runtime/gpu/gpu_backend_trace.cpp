// GpuBackend's kernel trace switch and read-out (see gpu_backend.h and kernel_trace.h).
#include "runtime/gpu/gpu_backend.h"

namespace deltaserve::runtime {

void GpuBackend::set_trace(bool on) {
  if (on == trace_.enabled()) return;
  DS_GPU_CHECK(gpuSetDevice(device_), "device %d", device_);
  if (on) {
    // Events bracket eager launches only: a captured graph would record them as graph nodes.
    graphs_after_trace_ = graphs_.enabled();
    graphs_.set_enabled(false);
    trace_.enable();
  } else {
    DS_GPU_CHECK(gpuStreamSynchronize(stream_), "trace off");
    trace_.disable();
    graphs_.set_enabled(graphs_after_trace_);
  }
}

std::vector<gpu::KernelClassTime> GpuBackend::take_trace() {
  if (!trace_.enabled()) return {};
  DS_GPU_CHECK(gpuSetDevice(device_), "device %d", device_);
  return trace_.take(stream_);
}

}  // namespace deltaserve::runtime
