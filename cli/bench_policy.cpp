#include "cli/bench_policy.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "scheduler/draft_simulation.h"

namespace deltaserve::cli {
namespace {

// A step-cost file, or a `bench decode --json` result that carries one under "step_costs".
runtime::StepCostTable load_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_object() && j.contains("step_costs")) return runtime::StepCostTable::from_json(j["step_costs"].dump(), path);
  return runtime::StepCostTable::from_json(text.str(), path);
}

}  // namespace

int run_policy_bench(const PolicyBenchOptions& o) {
  scheduler::DraftSimulationOptions sim;
  sim.costs = std::make_shared<const runtime::StepCostTable>(load_table(o.step_costs_path));
  sim.profiles = {o.acceptance};
  sim.num_warmup_steps = o.num_warmup;
  sim.num_steps = o.num_steps;
  sim.seed = o.seed;
  std::printf("step costs %s (device '%s'); %d warm-up + %d counted steps; tokens per predicted second, x off\n\n",
              o.step_costs_path.c_str(), sim.costs->key().device.c_str(), o.num_warmup, o.num_steps);
  std::printf("%8s %12s", "streams", "off tok/s");
  for (size_t d = 1; d <= o.acceptance.size(); ++d) std::printf(" %7s%zu", "depth ", d);
  std::printf(" %8s %12s %11s %16s\n", "policy", "x best fixed", "mean depth", "changes/stream");
  for (const int32_t streams : o.batch_sizes) {
    sim.num_streams = streams;
    sim.depth = 0;
    const double off = scheduler::simulate_drafts(sim).tokens_per_s();
    if (off <= 0) throw std::runtime_error(o.step_costs_path + ": the table predicts no time for a decode step");
    std::printf("%8d %12.1f", streams, off);
    double best = 0;
    for (int32_t d = 1; d <= static_cast<int32_t>(o.acceptance.size()); ++d) {
      sim.depth = d;
      const double rate = scheduler::simulate_drafts(sim).tokens_per_s();
      best = std::max(best, rate);
      std::printf(" %8.3f", rate / off);
    }
    sim.depth = -1;
    const scheduler::DraftSimulationResult r = scheduler::simulate_drafts(sim);
    std::printf(" %8.3f %12.3f %11.2f %16.1f\n", r.tokens_per_s() / off, best > 0 ? r.tokens_per_s() / best : 0,
                r.mean_depth(streams, o.num_steps), static_cast<double>(r.num_depth_changes) / streams);
  }
  return 0;
}

}  // namespace deltaserve::cli
