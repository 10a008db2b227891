#include "runtime/gpu/step_timeline.h"

#include <cstdio>
#include <map>
#include <string>
#include <tuple>

namespace deltaserve::runtime::gpu {
namespace timeline = kernels::gpu::timeline;

namespace {

constexpr unsigned kCapacity = 16384;  // stamps a forward (the 27B's 64-stream step: ~700)

bool same_shape(const std::vector<timeline::Stamp>& a, const std::vector<timeline::Stamp>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].grid_x != b[i].grid_x || a[i].grid_y != b[i].grid_y || a[i].block_x != b[i].block_x ||
        a[i].smem_bytes != b[i].smem_bytes)
      return false;
  }
  return true;
}

}  // namespace

StepTimeline::StepTimeline(bool asked) {
  if (!asked) return;
  if (!timeline::built()) {
    std::fprintf(stderr, "timeline   --timeline needs a build configured with -DDELTASERVE_GPU_TIMELINE=ON: none\n");
    return;
  }
  on_ = timeline::enable(kCapacity);
  if (!on_) std::fprintf(stderr, "timeline   could not allocate the device timeline: none\n");
}

StepTimeline::~StepTimeline() { print(); }

void StepTimeline::begin(gpuStream_t stream) {
  if (on_) timeline::reset(stream);
}

void StepTimeline::end() {
  if (!on_) return;
  unsigned launched = 0;
  const std::vector<timeline::Stamp> stamps = timeline::read(&launched);
  if (stamps.empty() || launched != stamps.size()) return;  // overflowed: not a step this table keeps
  if (!same_shape(stamps, profile_.shape)) {
    if (profile_.counted > 0) print();
    profile_ = Profile{};
    profile_.shape = stamps;
    profile_.cost_ns.assign(stamps.size(), 0.0);
    profile_.lead_ns.assign(stamps.size(), 0.0);
    profile_.first_ns.assign(stamps.size(), 0.0);
    profile_.run_ns.assign(stamps.size(), 0.0);
    profile_.handoff_ns.assign(stamps.size(), 0.0);
  }
  if (profile_.seen++ == 0) return;
  for (size_t i = 0; i < stamps.size(); ++i) {
    if (i + 1 < stamps.size()) {
      profile_.cost_ns[i] += static_cast<double>(stamps[i + 1].released_ns - stamps[i].released_ns);
      const uint64_t end = stamps[i + 1].previous_end_ns;
      const uint64_t first = stamps[i + 1].previous_first_end_ns;
      if (end >= stamps[i].released_ns && end <= stamps[i + 1].released_ns && first >= stamps[i].released_ns && first <= end) {
        profile_.first_ns[i] += static_cast<double>(first - stamps[i].released_ns);
        profile_.run_ns[i] += static_cast<double>(end - stamps[i].released_ns);
        profile_.handoff_ns[i] += static_cast<double>(stamps[i + 1].released_ns - end);
      }
    }
    profile_.lead_ns[i] += static_cast<double>(stamps[i].released_ns - stamps[i].started_ns);
  }
  profile_.span_ns += static_cast<double>(stamps.back().released_ns - stamps.front().released_ns);
  ++profile_.counted;
}

void StepTimeline::print() const {
  const Profile& p = profile_;
  if (p.counted == 0) return;
  const double n = static_cast<double>(p.counted);
  std::fprintf(stderr, "timeline   %zu launches a forward, %lld forwards averaged; first wait to last: %.1f us\n", p.shape.size(),
               static_cast<long long>(p.counted), p.span_ns / n / 1000.0);
  std::fprintf(stderr, "timeline   launch     grid.x grid.y block  smem_B  cost_us  lead_us first_us   run_us handoff_us\n");
  for (size_t i = 0; i < p.shape.size(); ++i) {
    const timeline::Stamp& s = p.shape[i];
    std::fprintf(stderr, "timeline   %6zu %10u %6u %5u %7u %8.2f %8.2f %8.2f %8.2f %8.2f\n", i, s.grid_x, s.grid_y, s.block_x, s.smem_bytes,
                 p.cost_ns[i] / n / 1000.0, p.lead_ns[i] / n / 1000.0, p.first_ns[i] / n / 1000.0, p.run_ns[i] / n / 1000.0,
                 p.handoff_ns[i] / n / 1000.0);
  }
  // By launch shape: the step's time per kind of launch (the last launch's cost is not measured
  // and stays zero: end() adds none for it).
  struct ShapeSums {
    int64_t count = 0;
    double cost = 0, lead = 0, first = 0, run = 0, handoff = 0;
  };
  std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, ShapeSums> by_shape;
  for (size_t i = 0; i < p.shape.size(); ++i) {
    const timeline::Stamp& s = p.shape[i];
    ShapeSums& sums = by_shape[{s.grid_x, s.grid_y, s.block_x, s.smem_bytes}];
    ++sums.count;
    sums.cost += p.cost_ns[i] / n;
    sums.lead += p.lead_ns[i] / n;
    sums.first += p.first_ns[i] / n;
    sums.run += p.run_ns[i] / n;
    sums.handoff += p.handoff_ns[i] / n;
  }
  std::fprintf(stderr,
               "timeline   by shape:  grid.x grid.y block  smem_B launches  cost_us  us_each  lead_us_each  first_us_each  run_us_each  "
               "handoff_us_each\n");
  for (const auto& [shape, v] : by_shape) {
    const auto& [gx, gy, bx, smem] = shape;
    const double each = 1000.0 * static_cast<double>(v.count);
    std::fprintf(stderr, "timeline   shape %12u %6u %5u %7u %8lld %8.1f %8.2f %8.2f %8.2f %8.2f %8.2f\n", gx, gy, bx, smem,
                 static_cast<long long>(v.count), v.cost / 1000.0, v.cost / each, v.lead / each, v.first / each, v.run / each,
                 v.handoff / each);
  }
}

}  // namespace deltaserve::runtime::gpu
