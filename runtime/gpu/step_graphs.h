// Captured device graphs of the GPU backend's decode steps, one per step shape, replayed when
// the shape recurs (a decode step is ~500-1000 small launches; a replay issues them with one
// host call and device-side launch gaps).
//
// A step's shape (StepGraphKey) fixes everything the enqueued launches capture by value: the
// staging offsets of the per-step arrays (they follow from the row, sequence, block-table and
// output-row counts), the grids and the kernel arguments. All per-step values (tokens,
// positions, block tables, state entries, output row maps) live in the staging mirror that the
// one host-to-device copy before the replay fills, so a replay computes exactly what an eager
// run of the same plan computes (bitwise; the backend test asserts it).
//
// Owner: GpuBackend (engine thread). Graphs are created and destroyed on the backend's device.
// On or off by GpuTuning::step_graphs (runtime/gpu_tuning.h); kAuto: on with CUDA, off with HIP
// (not yet validated on a device).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/gpu/gpu_compat.h"
#include "runtime/gpu_tuning.h"

namespace deltaserve::runtime::gpu {

struct StepGraphKey {
  int64_t num_seqs = 0;
  int64_t rows_per_seq = 0;   // every sequence of the step has this many rows
  int64_t table_stride = 0;   // block-table entries per sequence (bucketed by the backend)
  int64_t num_hidden = 0;     // hidden rows returned
  int64_t num_logits = 0;     // logit rows returned
  std::vector<int32_t> capture_layers{};  // trunk layers captured (BatchPlan::capture_layers)
  bool operator==(const StepGraphKey&) const = default;
};

class StepGraphs {
 public:
  // Graphs kept at once; the least recently used one is dropped beyond that.
  static constexpr size_t kMaxGraphs = 48;

  // enabled: from the mode (see above).
  explicit StepGraphs(StepGraphMode mode);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  static bool enabled_by_default(StepGraphMode mode);
  bool enabled() const { return enabled_; }
  // Turning graphs off drops every captured graph.
  void set_enabled(bool on);

  // Replays the graph of `key` on `stream`, capturing `enqueue` (which must only enqueue work
  // on `stream`) into it first when the shape is new. Returns the graph's node count (the
  // kernels it launches).
  int64_t run(const StepGraphKey& key, gpuStream_t stream, const std::function<void()>& enqueue);

  int64_t num_captures() const { return num_captures_; }
  int64_t num_replays() const { return num_replays_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    StepGraphKey key;
    gpuGraphExec_t exec = nullptr;
    int64_t num_nodes = 0;
    int64_t last_use = 0;
  };
  void clear();

  bool enabled_ = false;
  std::vector<Entry> entries_;
  int64_t clock_ = 0;
  int64_t num_captures_ = 0;
  int64_t num_replays_ = 0;
};

}  // namespace deltaserve::runtime::gpu
