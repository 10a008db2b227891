// The in-step timeline of a build configured with -DDELTASERVE_GPU_TIMELINE=ON (CUDA only; a
// measuring build, never a product one): block (0, 0, 0) of every launch stamps the device's
// global timer when it starts and when its grid dependency wait returns (gpu::begin_kernel),
// with the launch's grid, block and dynamic shared memory, into a device buffer in launch order;
// the staged matvec's blocks also stamp their ends (gpu::stamp_block_end), which the next
// launch's stamp carries (Stamp::previous_end_ns), so such a launch's cost splits into its run
// and the handoff to the next launch.
//
// Why: the tools that time kernels one at a time (Nsight Compute, the event trace) serialise
// them, and the decode step's time is not their sum: with dependent launches a kernel's blocks
// start while the previous kernel drains, and inside a graph a launch costs next to nothing.
// Here a launch's cost in the real step is the time from its wait's return to the next one's
// (the previous launch's last block done and its writes visible), measured inside the step
// graph itself. Block (0, 0, 0) is the first block scheduled, so its wait returns first.
//
// Every kernels/<op>/*.cu translation unit has its own copy of the device pointer (no relocatable
// device code): each registers a function that points its copy at the buffer (gpu_compat.h's
// device part), and enable() calls them all.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::gpu::timeline {

// Stamp and DeviceBuffer: gpu_compat.h (its device part writes them).

// Whether this build stamps (DS_GPU_TIMELINE in ds_kernels_gpu).
bool built();
// Allocates a buffer of `capacity` stamps on the current device and points every kernel unit
// at it; false when the build does not stamp or a call failed.
bool enable(unsigned capacity);
bool enabled();
// The count to zero, in stream order (before a step's first launch).
void reset(gpuStream_t stream);
// The stamps since the last reset (the caller has synchronised the stream); `launched`: how
// many launches stamped, which is more than the stamps returned when the buffer overflowed.
std::vector<Stamp> read(unsigned* launched);

}  // namespace deltaserve::kernels::gpu::timeline
