#include "server/replica_routing.h"

namespace deltaserve::server {

const char* route_reason_name(RouteReason reason) { return reason == RouteReason::kPrefix ? "prefix" : "load"; }

RouteChoice choose_replica(std::span<const ReplicaLoad> loads, int32_t num_prompt_tokens, const RoutePolicy& policy,
                           int32_t first_on_tie) {
  const auto n = static_cast<int32_t>(loads.size());
  // Visits the engines from first_on_tie on, so every "first wins" below is a round robin.
  auto at = [&](int32_t k) { return (first_on_tie + k) % n; };
  int32_t least = at(0);
  int32_t best_prefix = at(0);
  for (int32_t k = 1; k < n; ++k) {
    const int32_t i = at(k);
    const ReplicaLoad& l = loads[static_cast<size_t>(i)];
    const ReplicaLoad& m = loads[static_cast<size_t>(least)];
    const int32_t free = l.num_slots - l.num_in_flight;
    const int32_t least_free = m.num_slots - m.num_in_flight;
    if (l.num_in_flight < m.num_in_flight || (l.num_in_flight == m.num_in_flight && free > least_free)) least = i;
    const ReplicaLoad& p = loads[static_cast<size_t>(best_prefix)];
    if (l.cached_prefix_tokens > p.cached_prefix_tokens ||
        (l.cached_prefix_tokens == p.cached_prefix_tokens && l.num_in_flight < p.num_in_flight))
      best_prefix = i;
  }
  const ReplicaLoad& p = loads[static_cast<size_t>(best_prefix)];
  const ReplicaLoad& m = loads[static_cast<size_t>(least)];
  const int32_t match = p.cached_prefix_tokens;
  const bool worth_it = match >= policy.min_prefix_tokens && match >= policy.min_prefix_fraction * num_prompt_tokens;
  const bool can_start = p.num_in_flight < p.num_slots && p.num_in_flight <= m.num_in_flight + policy.max_load_gap;
  if (match > 0 && worth_it && can_start) return {best_prefix, RouteReason::kPrefix};
  return {least, RouteReason::kLoad};
}

}  // namespace deltaserve::server
