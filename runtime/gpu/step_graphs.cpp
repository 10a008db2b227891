// StepGraphs: capture on first use of a shape, replay after; LRU bound on the graphs kept.
#include "runtime/gpu/step_graphs.h"

#include <algorithm>

namespace deltaserve::runtime::gpu {

bool StepGraphs::enabled_by_default(StepGraphMode mode) {
  if (mode != StepGraphMode::kAuto) return mode == StepGraphMode::kOn;
#if defined(DS_GPU_HIP)
  return false;  // not yet validated on a HIP device
#else
  return true;
#endif
}

StepGraphs::StepGraphs(StepGraphMode mode) : enabled_(enabled_by_default(mode)) {}

StepGraphs::~StepGraphs() { clear(); }

void StepGraphs::clear() {
  for (Entry& e : entries_) (void)gpuGraphExecDestroy(e.exec);
  entries_.clear();
}

void StepGraphs::set_enabled(bool on) {
  enabled_ = on;
  if (!on) clear();
}

int64_t StepGraphs::run(const StepGraphKey& key, gpuStream_t stream, const std::function<void()>& enqueue) {
  ++clock_;
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxGraphs) {
      auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                     [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
      (void)gpuGraphExecDestroy(oldest->exec);
      entries_.erase(oldest);
    }
    Entry e;
    e.key = key;
    gpuGraph_t graph = nullptr;
    DS_GPU_CHECK(gpuStreamBeginCaptureThreadLocal(stream), "begin capture of a %lld-sequence step",
                 static_cast<long long>(key.num_seqs));
    try {
      enqueue();
    } catch (...) {  // close the capture so the stream stays usable, then report
      (void)gpuStreamEndCapture(stream, &graph);
      if (graph != nullptr) (void)gpuGraphDestroy(graph);
      throw;
    }
    DS_GPU_CHECK(gpuStreamEndCapture(stream, &graph), "end capture of a %lld-sequence step",
                 static_cast<long long>(key.num_seqs));
    size_t nodes = 0;
    DS_GPU_CHECK(gpuGraphGetNodes(graph, nullptr, &nodes), "graph nodes");
    DS_GPU_CHECK(gpuGraphInstantiate(&e.exec, graph), "instantiate a %zu-node step graph", nodes);
    DS_GPU_CHECK(gpuGraphDestroy(graph), "graph destroy");
    e.num_nodes = static_cast<int64_t>(nodes);
    ++num_captures_;
    entries_.push_back(e);
    it = entries_.end() - 1;
  }
  it->last_use = clock_;
  DS_GPU_CHECK(gpuGraphLaunch(it->exec, stream), "replay of a %lld-node step graph", static_cast<long long>(it->num_nodes));
  ++num_replays_;
  return it->num_nodes;
}

}  // namespace deltaserve::runtime::gpu
