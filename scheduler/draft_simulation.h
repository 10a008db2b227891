// A deterministic simulation of the speculation policy (scheduler/draft_policy.h) on a step-cost
// table, without a model or a device: S streams decode for many steps; each step the depths
// are chosen (by the policy from its learned estimates, or fixed), each draft position j is
// accepted with a fixed probability given the ones before (Bernoulli, seeded), the estimates
// learn as the scheduler's do, and the step is charged the table's predicted time.
//
// Common random numbers: stream s at step t draws the same uniforms whatever the depths, so
// the policy and every fixed depth see the same acceptance outcomes and their rates differ by
// their choices, not by luck. Used by tests/scheduler/draft_simulation_test.cpp and
// `deltaserve bench policy` (a table measured on a GPU replayed on any host).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/step_cost_table.h"

namespace deltaserve::scheduler {

struct DraftSimulationOptions {
  std::shared_ptr<const runtime::StepCostTable> costs;  // required
  // Per draft position, given the ones before; stream s follows profiles[s % size]. The
  // longest profile bounds the depth (a shorter one's missing positions are never accepted).
  std::vector<std::vector<double>> profiles;
  int32_t num_streams = 1;
  int32_t num_warmup_steps = 40;   // not counted (the estimates settle)
  int32_t num_steps = 2000;        // counted
  int32_t depth = -1;              // a fixed depth for every stream; -1: the policy chooses
  double prior = 1.0;              // the kinds' starting acceptance (SchedulerConfig::draft_acceptance_prior)
  uint64_t seed = 1;
};

struct DraftSimulationResult {
  double num_tokens = 0;         // emitted in the counted steps (1 + accepted drafts per stream)
  double predicted_ms = 0;       // the table's time for the counted steps
  int64_t num_drafted = 0;
  int64_t num_accepted = 0;
  int64_t num_depth_changes = 0;  // counted steps where a stream's depth differs from its last step's

  double tokens_per_s() const { return predicted_ms > 0 ? num_tokens / (predicted_ms / 1e3) : 0; }
  double mean_depth(int32_t num_streams, int32_t num_steps) const {
    return num_steps > 0 ? static_cast<double>(num_drafted) / (static_cast<double>(num_streams) * num_steps) : 0;
  }
};

DraftSimulationResult simulate_drafts(const DraftSimulationOptions& o);

}  // namespace deltaserve::scheduler
