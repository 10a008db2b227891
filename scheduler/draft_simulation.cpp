#include "scheduler/draft_simulation.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <stdexcept>

#include "scheduler/draft_policy.h"

namespace deltaserve::scheduler {

DraftSimulationResult simulate_drafts(const DraftSimulationOptions& o) {
  if (o.costs == nullptr || o.costs->empty()) throw std::invalid_argument("simulate_drafts: a step-cost table is required");
  size_t max_positions = 0;
  for (const std::vector<double>& p : o.profiles) max_positions = std::max(max_positions, p.size());
  if (o.profiles.empty() || max_positions > static_cast<size_t>(runtime::kMaxDraftDepth) || o.num_streams < 1) {
    throw std::invalid_argument("simulate_drafts: 1.. streams, 1.. profiles of at most kMaxDraftDepth positions");
  }
  const auto num_streams = static_cast<size_t>(o.num_streams);
  const auto limit = static_cast<int32_t>(max_positions);
  const DraftPolicy policy(o.costs, 0.0);
  AcceptanceEstimates estimates(o.prior);
  std::vector<DraftEvidence> evidence(num_streams);
  std::vector<DraftAcceptance> own(num_streams);
  std::vector<int32_t> depths(num_streams, 0), last(num_streams, -1);
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::array<double, runtime::kMaxDraftDepth> draws{};
  DraftSimulationResult r;
  for (int32_t step = 0; step < o.num_warmup_steps + o.num_steps; ++step) {
    const bool counted = step >= o.num_warmup_steps;
    if (o.depth >= 0) {
      depths.assign(num_streams, std::min(o.depth, limit));
    } else {
      std::vector<DraftStream> streams;
      for (size_t s = 0; s < num_streams; ++s) {
        own[s] = estimates.estimate(DraftKind::kGreedy, evidence[s]);
        streams.push_back({limit, &own[s], last[s]});
      }
      policy.choose(streams, INT32_MAX, depths);
    }
    const double ms = policy.predict_ms(depths, 0, 0);
    for (size_t s = 0; s < num_streams; ++s) {
      // Every position's uniform is drawn whether or not it is used (common random numbers).
      for (double& u : draws) u = uniform(rng);
      const std::vector<double>& rates = o.profiles[s % o.profiles.size()];
      const int32_t d = depths[s];
      int32_t a = 0;
      while (a < d && static_cast<size_t>(a) < rates.size() && draws[static_cast<size_t>(a)] < rates[static_cast<size_t>(a)]) ++a;
      if (o.depth < 0) estimates.record(DraftKind::kGreedy, evidence[s], d, a);
      if (counted) {
        r.num_tokens += 1 + a;
        r.num_drafted += d;
        r.num_accepted += a;
        if (last[s] >= 0 && last[s] != d) ++r.num_depth_changes;
      }
      last[s] = d;
    }
    if (counted) r.predicted_ms += ms;
  }
  return r;
}

}  // namespace deltaserve::scheduler
