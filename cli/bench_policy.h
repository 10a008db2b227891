// `deltaserve bench policy --step-costs FILE --acceptance A1,A2,..`: the speculation policy
// replayed on a step-cost table (a daemon's --step-costs-file, or the table `bench decode
// --acceptance --json` records) without a model or a device: per stream count, the simulated
// tokens per predicted second of no speculation, each fixed depth and the policy, the policy's
// mean depth and how often a stream's depth changed (scheduler/draft_simulation.h). Separates
// what the policy's choices cost from what the table mispredicts: on the device the same cells
// are timed by `bench decode`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::cli {

struct PolicyBenchOptions {
  std::string step_costs_path;
  std::vector<double> acceptance;
  std::vector<int32_t> batch_sizes = {1, 4, 16, 64};
  int32_t num_warmup = 200;
  int32_t num_steps = 2000;
  uint64_t seed = 1;
};

// Prints the table; returns the process exit status (throws std::runtime_error on a bad file).
int run_policy_bench(const PolicyBenchOptions& o);

}  // namespace deltaserve::cli
