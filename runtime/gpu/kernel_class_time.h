// Per-kernel-class totals of a traced GPU backend (GpuBackend::take_trace, KernelTrace): plain
// data without GPU headers, so the bench (cli/) reads them through runtime/backend_factory.h.
#pragma once

#include <cstdint>
#include <string>

namespace deltaserve::runtime::gpu {

struct KernelClassTime {
  std::string name;          // "matmul (matvec)", "gdn step", ... (kernel_trace.cpp's table)
  int64_t num_launches = 0;  // kernels launched (DS_GPU_LAUNCH's num_kernels, summed)
  int64_t num_calls = 0;     // DS_GPU_LAUNCH calls (a call may launch more than one kernel)
  double microseconds = 0;   // device time between each call's event pair, summed
};

}  // namespace deltaserve::runtime::gpu
