#include "runtime/step_cost_probe.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <stdexcept>

namespace deltaserve::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The fastest of a cell's timed steps: interference (other processes, clocks) only adds time,
// and the policy compares cells with each other.
double fastest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

int32_t max_rows_grid(const StepCostProbeOptions& o) { return std::max(2, o.max_rows_per_stream); }

// Positions one slot reaches in a cell: an untimed step and the timed ones, each keeping one row
// (a verify step) or all of them (a plain multi-row step), plus the last step's rows.
int32_t blocks_per_slot(const Backend& backend, const StepCostProbeOptions& o) {
  const int64_t positions = int64_t{1 + o.repetitions + 1} * max_rows_grid(o) + 1;
  const int32_t block_tokens = backend.cache_config().kv_block_tokens;
  return static_cast<int32_t>((positions + block_tokens - 1) / block_tokens);
}

class Prober {
 public:
  Prober(Backend& backend, const StepCostProbeOptions& o)
      : backend_(backend), o_(o), blocks_per_slot_(blocks_per_slot(backend, o)) {}

  // Ms of a step of `streams` streams with `rows` rows each (a verify step with row states
  // and a rollback to one row, where the backend keeps that many verify rows).
  double trunk_cell(int32_t streams, int32_t rows) {
    const bool verify = rows > 1 && rows <= backend_.cache_config().max_verify_rows;
    std::vector<int32_t> position(static_cast<size_t>(streams), 0);
    std::vector<double> times;
    for (int32_t rep = 0; rep <= o_.repetitions; ++rep) {
      BatchPlan plan;
      for (int32_t s = 0; s < streams; ++s) {
        SequenceStep& step = plan.sequences.emplace_back(sequence(s, position[static_cast<size_t>(s)], rows));
        step.num_logits = rows;
        step.keep_row_states = verify;
        step.logits_to_host = false;
      }
      const auto t0 = Clock::now();
      backend_.forward(plan, out_);
      if (verify) {
        for (int32_t s = 0; s < streams; ++s) backend_.rollback(s, 1);
      }
      if (rep > 0) times.push_back(ms_since(t0));
      for (int32_t& p : position) p += verify ? 1 : rows;
    }
    return fastest(times);
  }

  // Ms of one MTP pass over `rows` sequences of one row each.
  double mtp_cell(int32_t rows) {
    const int64_t h = backend_.config().num_embd;
    std::vector<double> times;
    for (int32_t rep = 0; rep <= o_.repetitions; ++rep) {
      MtpPlan plan;
      for (int32_t s = 0; s < rows; ++s) {
        const SequenceStep trunk = sequence(s, rep, 1);
        MtpSequenceStep& step = plan.sequences.emplace_back();
        step.num_cached_rows = rep;
        step.tokens = trunk.tokens;
        step.hidden.assign(static_cast<size_t>(h), 0.0f);
        step.kv_blocks = trunk.kv_blocks;
        step.num_logits = 1;
        step.logits_to_host = false;
      }
      const auto t0 = Clock::now();
      backend_.forward_mtp(plan, out_);
      if (rep > 0) times.push_back(ms_since(t0));
    }
    return fastest(times);
  }

 private:
  SequenceStep sequence(int32_t slot, int32_t position, int32_t rows) const {
    SequenceStep step;
    step.slot = slot;
    step.num_cached_tokens = position;
    const int64_t vocab = std::max<int64_t>(1, backend_.config().num_vocab);
    for (int32_t i = 0; i < rows; ++i) step.tokens.push_back(static_cast<int32_t>((slot * 7919 + (position + i) * 104729) % vocab));
    step.kv_blocks.resize(static_cast<size_t>(blocks_per_slot_));
    std::iota(step.kv_blocks.begin(), step.kv_blocks.end(), slot * blocks_per_slot_);
    return step;
  }

  Backend& backend_;
  const StepCostProbeOptions& o_;
  int32_t blocks_per_slot_;
  ForwardOutput out_;
};

}  // namespace

std::vector<int32_t> step_cost_stream_grid(const Backend& backend, const StepCostProbeOptions& o) {
  const CacheConfig& cache = backend.cache_config();
  int64_t max_streams = std::min(o.max_streams, cache.num_state_slots);
  max_streams = std::min<int64_t>(max_streams, cache.num_kv_blocks / std::max(1, blocks_per_slot(backend, o)));
  int64_t max_rows = o.max_step_rows > 0 ? o.max_step_rows : INT32_MAX;
  if (cache.max_step_rows > 0) max_rows = std::min<int64_t>(max_rows, cache.max_step_rows);
  max_streams = std::min<int64_t>(max_streams, max_rows / max_rows_grid(o));
  std::vector<int32_t> grid;
  for (int64_t s = 1; s <= max_streams; s *= 2) grid.push_back(static_cast<int32_t>(s));
  if (max_streams >= 1 && grid.back() != max_streams) grid.push_back(static_cast<int32_t>(max_streams));
  return grid;
}

StepCostTable measure_step_costs(Backend& backend, const StepCostProbeOptions& o, StepCostKey key) {
  std::vector<int32_t> streams = step_cost_stream_grid(backend, o);
  if (streams.empty()) streams = {1};
  std::vector<int32_t> rows(static_cast<size_t>(max_rows_grid(o)));
  std::iota(rows.begin(), rows.end(), 1);
  Prober prober(backend, o);
  const auto t0 = Clock::now();
  std::vector<std::vector<double>> trunk;
  std::vector<int32_t> measured;
  std::vector<int32_t> mtp_rows;
  std::vector<double> mtp;
  // Grid rows in ascending streams; past the budget the rest is left to extrapolation.
  for (const int32_t s : streams) {
    if (!trunk.empty() && ms_since(t0) > o.budget_ms) break;
    std::vector<double>& row = trunk.emplace_back();
    for (const int32_t r : rows) row.push_back(prober.trunk_cell(s, r));
    measured.push_back(s);
    if (o.mtp) {
      mtp.push_back(prober.mtp_cell(s));
      mtp_rows.push_back(s);
    }
  }
  return StepCostTable(std::move(key), std::move(measured), std::move(rows), std::move(trunk), std::move(mtp_rows),
                       std::move(mtp));
}

StepCostTable load_or_measure_step_costs(Backend& backend, const StepCostProbeOptions& options, const StepCostKey& key,
                                         const std::string& cache_path, std::vector<std::string>& problems,
                                         bool* from_cache) {
  if (from_cache != nullptr) *from_cache = false;
  std::error_code error;
  if (!cache_path.empty() && std::filesystem::exists(cache_path, error)) {
    try {
      StepCostTable table = StepCostTable::load(cache_path, key);
      if (from_cache != nullptr) *from_cache = true;
      return table;
    } catch (const std::exception& e) {
      problems.push_back(std::string(e.what()) + "; measured again");
    }
  }
  StepCostTable table = measure_step_costs(backend, options, key);
  if (!cache_path.empty()) {
    try {
      table.save(cache_path);
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  return table;
}

StepCostKey step_cost_key(const Backend& backend, const std::string& model_path) {
  const ModelConfig& c = backend.config();
  const CacheConfig& cache = backend.cache_config();
  StepCostKey key;
  key.device = backend.device_name();
  if (const std::string settings = backend.speed_settings(); !settings.empty()) key.device += " (" + settings + ")";
  key.model = model_path + " (" + std::to_string(c.num_layers) + " layers, " + std::to_string(c.num_embd) + " wide, vocab " +
              std::to_string(c.num_vocab) + "; " + std::to_string(cache.num_state_slots) + " slots, " +
              std::to_string(cache.max_verify_rows) + " verify rows)";
  return key;
}

}  // namespace deltaserve::runtime
