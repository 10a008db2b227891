// StepTimeline: the in-step launch timeline of a measuring build (kernels/gpu/gpu_timeline.h) as a
// table, for GpuTuning::timeline (`deltaserve bench --timeline`) on a build configured with
// -DDELTASERVE_GPU_TIMELINE=ON.
//
// Each forward resets the device's stamp count before its first launch and reads the stamps
// after its synchronisation. A launch's cost is the time from its grid dependency wait's return
// to the next launch's (what the step really spends on it, dependent launches and graphs
// included); its lead is how long its first block was resident before that wait returned.
// Forwards with the same launch count and grids average into one profile (a bench cell); the
// first forward of a profile is left out (a graph's capture runs it eagerly). The last profile
// prints to stderr when the backend goes.
//
// Owner: GpuBackend (engine thread); not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_timeline.h"

namespace deltaserve::runtime::gpu {

class StepTimeline {
 public:
  // Enables the device timeline when `asked` and the build stamps (a warning on stderr when it
  // is asked and the build does not). Call on the backend's device.
  explicit StepTimeline(bool asked);
  ~StepTimeline();
  StepTimeline(const StepTimeline&) = delete;
  StepTimeline& operator=(const StepTimeline&) = delete;

  bool on() const { return on_; }
  // Before a forward's first launch (stream order).
  void begin(gpuStream_t stream);
  // After the forward's synchronisation.
  void end();
  // The current profile as text (empty when none).
  void print() const;

 private:
  struct Profile {
    std::vector<kernels::gpu::timeline::Stamp> shape;  // grids of the launches (times unused)
    std::vector<double> cost_ns, lead_ns;              // summed over the counted forwards
    // Where the next launch stamps this one's block ends (Stamp::previous_end_ns, _first_end_ns):
    // from this launch's wait to its first block's end (first) and to its last block's end (run),
    // and from that to the next launch's wait (handoff); summed.
    std::vector<double> first_ns, run_ns, handoff_ns;
    double span_ns = 0;                                // first wait's return to the last one's
    int64_t seen = 0, counted = 0;
  };

  bool on_ = false;
  Profile profile_;
};

}  // namespace deltaserve::runtime::gpu
