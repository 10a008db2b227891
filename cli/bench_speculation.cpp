#include "cli/bench_speculation.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <numeric>
#include <random>

#include "runtime/mtp_drafter.h"
#include "runtime/step_cost_probe.h"
#include "scheduler/draft_policy.h"

namespace deltaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::Backend;
using runtime::BatchPlan;
using runtime::ForwardOutput;
using runtime::MtpPlan;
using runtime::MtpSequenceStep;
using runtime::SequenceStep;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

bool is_policy(const std::string& mode) { return mode == "policy"; }
bool is_off(const std::string& mode) { return mode == "off"; }

// One cell: num_streams streams decoding with simulated acceptance, depths fixed or chosen.
class SpeculationCell {
 public:
  SpeculationCell(Backend& backend, const BenchOptions& o, int32_t num_streams, const std::string& mode,
                  const scheduler::DraftPolicy& policy)
      : backend_(backend),
        o_(o),
        num_streams_(num_streams),
        policy_(is_policy(mode) ? &policy : nullptr),
        fixed_depth_(is_policy(mode) || is_off(mode) ? 0 : std::stoi(mode)),
        // Off: no MTP work at all (a server without speculation); any depth, 0 included, keeps
        // the head in step with the catch-up pass as a speculating server does.
        has_mtp_(backend.config().num_mtp_layers > 0 && !is_off(mode)),
        position_(static_cast<size_t>(num_streams), o.context_tokens),
        evidence_(static_cast<size_t>(num_streams)),
        acceptance_(static_cast<size_t>(num_streams)),
        last_depths_(static_cast<size_t>(num_streams), -1),
        rng_(o.seed) {
    row_.num_streams = num_streams;
    row_.mode = mode;
  }

  SpeculationRow run() {
    bench_fill_context(backend_, o_, num_streams_, out_);
    double predicted_sum = 0;
    for (int32_t step = 0; step < o_.num_warmup + o_.num_steps; ++step) {
      const bool timed = step >= o_.num_warmup;
      const auto t0 = Clock::now();
      const double predicted = choose_depths();
      draft_passes();
      verify();
      const std::vector<int32_t> accepted = simulate_acceptance();
      catch_up(accepted);
      const double ms = ms_since(t0);
      for (int32_t s = 0; s < num_streams_; ++s) {
        const int32_t d = depths_[static_cast<size_t>(s)], a = accepted[static_cast<size_t>(s)];
        if (policy_ != nullptr) estimates_.record(scheduler::DraftKind::kGreedy, evidence_[static_cast<size_t>(s)], d, a);
        position_[static_cast<size_t>(s)] += 1 + a;
        if (!timed) continue;
        row_.num_tokens += 1 + a;
        row_.num_drafted += d;
        row_.num_accepted += a;
      }
      if (timed) {
        row_.times.ms.push_back(ms);
        predicted_sum += predicted;
      }
    }
    row_.predicted_ms = o_.num_steps > 0 ? predicted_sum / o_.num_steps : 0;
    return row_;
  }

 private:
  // Returns the policy's predicted ms (0 for a fixed depth).
  double choose_depths() {
    if (policy_ == nullptr) {
      depths_.assign(static_cast<size_t>(num_streams_), fixed_depth_);
      return 0;
    }
    std::vector<scheduler::DraftStream> streams;
    const auto limit = static_cast<int32_t>(o_.acceptance.size());
    for (size_t s = 0; s < acceptance_.size(); ++s) {
      acceptance_[s] = estimates_.estimate(scheduler::DraftKind::kGreedy, evidence_[s]);
      streams.push_back({limit, &acceptance_[s], last_depths_[s]});
    }
    const double ms = policy_->choose(streams, INT32_MAX, depths_);
    last_depths_ = depths_;
    return ms;
  }

  MtpSequenceStep mtp_rows(int32_t s, int64_t first_row, int32_t num_rows) const {
    const SequenceStep trunk = bench_stream_step(backend_, o_, s, first_row + 1, num_rows);
    MtpSequenceStep step;
    step.num_cached_rows = static_cast<int32_t>(first_row);
    step.tokens = trunk.tokens;
    step.hidden.assign(static_cast<size_t>(num_rows * backend_.config().num_embd), 0.0f);
    step.kv_blocks = trunk.kv_blocks;
    step.num_logits = 1;
    step.logits_to_host = false;
    return step;
  }

  // Drafts 2..d of every stream: chain pass j over the streams drafting deeper than j (draft 1
  // came out of the previous step's catch-up pass).
  void draft_passes() {
    if (!has_mtp_) return;
    // Streams drafting again after depth 0 first catch up their waiting rows (lazy catch-up,
    // runtime/mtp_drafter.h), all in one pass.
    MtpPlan waiting;
    for (int32_t s = 0; s < num_streams_; ++s) {
      int32_t& rows = waiting_[static_cast<size_t>(s)];
      if (depths_[static_cast<size_t>(s)] == 0 || rows == 0) continue;
      waiting.sequences.push_back(mtp_rows(s, position_[static_cast<size_t>(s)] - rows, rows));
      rows = 0;
    }
    if (!waiting.sequences.empty()) backend_.forward_mtp(waiting, mtp_out_);
    const int32_t max_depth = depths_.empty() ? 0 : *std::max_element(depths_.begin(), depths_.end());
    for (int32_t j = 1; j < max_depth; ++j) {
      MtpPlan plan;
      for (int32_t s = 0; s < num_streams_; ++s) {
        if (depths_[static_cast<size_t>(s)] > j) plan.sequences.push_back(mtp_rows(s, position_[static_cast<size_t>(s)] + j - 1, 1));
      }
      backend_.forward_mtp(plan, mtp_out_);
    }
  }

  void verify() {
    BatchPlan plan;
    for (int32_t s = 0; s < num_streams_; ++s) {
      const int32_t rows = 1 + depths_[static_cast<size_t>(s)];
      SequenceStep step = bench_stream_step(backend_, o_, s, position_[static_cast<size_t>(s)], rows);
      step.num_logits = rows;
      step.keep_row_states = rows > 1;
      step.logits_to_host = false;
      step.num_hidden = has_mtp_ ? rows : 0;  // the catch-up's input, as the runner asks
      plan.sequences.push_back(std::move(step));
    }
    backend_.forward(plan, out_);
  }

  // Accepted drafts per stream (each draft j kept with probability A_j while all before it
  // were), then the rollbacks to the kept rows. Every position's uniform is drawn whatever the
  // depth, so all modes of a stream count see the same outcomes (common random numbers): their
  // rates differ by their depths, not by luck.
  std::vector<int32_t> simulate_acceptance() {
    std::vector<int32_t> accepted(static_cast<size_t>(num_streams_), 0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<double> draws(o_.acceptance.size());
    for (int32_t s = 0; s < num_streams_; ++s) {
      for (double& u : draws) u = uniform(rng_);
      const int32_t d = depths_[static_cast<size_t>(s)];
      int32_t& a = accepted[static_cast<size_t>(s)];
      while (a < d && a < static_cast<int32_t>(draws.size()) && draws[static_cast<size_t>(a)] < o_.acceptance[static_cast<size_t>(a)]) ++a;
      if (d > 0) backend_.rollback(s, 1 + a);
    }
    return accepted;
  }

  // The catch-up pass over the kept rows of the streams that drafted; a stream at depth 0
  // leaves its row waiting (at most the drafter's window of them).
  void catch_up(const std::vector<int32_t>& accepted) {
    if (!has_mtp_) return;
    MtpPlan plan;
    for (int32_t s = 0; s < num_streams_; ++s) {
      if (depths_[static_cast<size_t>(s)] == 0) {
        int32_t& rows = waiting_[static_cast<size_t>(s)];
        ++rows;
        if (rows > 2 * runtime::MtpDrafter::kPendingWindow) rows = runtime::MtpDrafter::kPendingWindow;
        continue;
      }
      plan.sequences.push_back(mtp_rows(s, position_[static_cast<size_t>(s)], 1 + accepted[static_cast<size_t>(s)]));
    }
    if (!plan.sequences.empty()) backend_.forward_mtp(plan, mtp_out_);
  }

  Backend& backend_;
  const BenchOptions& o_;
  int32_t num_streams_;
  const scheduler::DraftPolicy* policy_;
  int32_t fixed_depth_;
  bool has_mtp_;
  std::vector<int64_t> position_;
  std::vector<int32_t> waiting_ = std::vector<int32_t>(static_cast<size_t>(num_streams_), 0);  // rows per stream
  scheduler::AcceptanceEstimates estimates_;
  std::vector<scheduler::DraftEvidence> evidence_;     // per stream, as a Sequence keeps it
  std::vector<scheduler::DraftAcceptance> acceptance_;  // this step's estimates
  std::vector<int32_t> last_depths_;
  std::mt19937_64 rng_;
  std::vector<int32_t> depths_;
  ForwardOutput out_, mtp_out_;
  SpeculationRow row_;
};

std::shared_ptr<const runtime::StepCostTable> measure_costs(Backend& backend, const BenchOptions& o) {
  runtime::StepCostProbeOptions probe;
  probe.max_streams = *std::max_element(o.batch_sizes.begin(), o.batch_sizes.end());
  probe.max_rows_per_stream = 1 + static_cast<int32_t>(o.acceptance.size());
  probe.budget_ms = backend.name() == "cpu" ? 1000.0 : 4000.0;
  probe.mtp = backend.config().num_mtp_layers > 0;
  const auto t0 = Clock::now();
  auto table = std::make_shared<const runtime::StepCostTable>(
      runtime::measure_step_costs(backend, probe, runtime::step_cost_key(backend, "bench")));
  const auto& s = table->streams();
  const auto& ms = table->trunk_grid_ms();
  std::printf("step costs measured in %.2f s: %zu stream counts (%d-%d) x %zu rows each; 1 stream: %.3f ms at 1 row, "
              "%.3f ms at %d; %d streams: %.3f ms at 1 row, %.3f ms at %d%s\n",
              ms_since(t0) / 1e3, s.size(), s.front(), s.back(), table->rows_per_stream().size(), ms.front().front(),
              ms.front().back(), table->rows_per_stream().back(), s.back(), ms.back().front(), ms.back().back(),
              table->rows_per_stream().back(), probe.mtp ? "; MTP passes too" : "; no MTP head: no draft passes");
  return table;
}

}  // namespace

double SpeculationRow::tokens_per_s() const {
  const double total_ms = std::accumulate(times.ms.begin(), times.ms.end(), 0.0);
  return total_ms > 0 ? static_cast<double>(num_tokens) / (total_ms / 1e3) : 0;
}

int32_t speculation_max_depth(const BenchOptions& o) {
  int32_t depth = static_cast<int32_t>(o.acceptance.size());
  for (const std::string& mode : o.depth_modes) {
    if (!is_policy(mode) && !is_off(mode)) depth = std::max(depth, std::stoi(mode));
  }
  return depth;
}

std::vector<SpeculationRow> run_speculation(Backend& backend, const BenchOptions& o,
                                            std::shared_ptr<const runtime::StepCostTable>& costs) {
  costs = measure_costs(backend, o);
  const scheduler::DraftPolicy policy(costs, 0.0);
  std::printf("\n");
  std::vector<SpeculationRow> rows;
  for (const int32_t streams : o.batch_sizes) {
    for (const std::string& mode : o.depth_modes) rows.push_back(SpeculationCell(backend, o, streams, mode, policy).run());
  }
  return rows;
}

void print_speculation_table(const std::vector<SpeculationRow>& rows) {
  std::printf("%8s %8s %11s %11s %12s %13s %12s %10s %13s\n", "streams", "depth", "mean depth", "accepted", "ms/step p50",
              "ms/step mean", "tok/s total", "x off", "predicted ms");
  for (const SpeculationRow& r : rows) {
    const auto num_stream_steps = static_cast<double>(r.times.ms.size()) * r.num_streams;
    const double mean_depth = num_stream_steps > 0 ? static_cast<double>(r.num_drafted) / num_stream_steps : 0;
    char accepted[32] = "-";
    if (r.num_drafted > 0) std::snprintf(accepted, sizeof(accepted), "%.2f", static_cast<double>(r.num_accepted) / r.num_drafted);
    // The baseline: speculation off where it ran, else depth 0.
    const SpeculationRow* base = nullptr;
    for (const char* mode : {"0", "off"}) {
      for (const SpeculationRow& b : rows) {
        if (b.num_streams == r.num_streams && b.mode == mode && b.tokens_per_s() > 0) base = &b;
      }
    }
    char ratio[32] = "-";
    if (base != nullptr) std::snprintf(ratio, sizeof(ratio), "%.2f", r.tokens_per_s() / base->tokens_per_s());
    char predicted[32] = "-";
    if (r.predicted_ms > 0) std::snprintf(predicted, sizeof(predicted), "%.3f", r.predicted_ms);
    std::printf("%8d %8s %11.2f %11s %12.3f %13.3f %12.1f %10s %13s\n", r.num_streams, r.mode.c_str(), mean_depth, accepted,
                r.times.median(), r.times.mean(), r.tokens_per_s(), ratio, predicted);
  }
}

nlohmann::json speculation_to_json(const std::vector<SpeculationRow>& rows) {
  nlohmann::json list = nlohmann::json::array();
  for (const SpeculationRow& r : rows) {
    list.push_back({{"streams", r.num_streams},
                    {"depth", r.mode},
                    {"tokens", r.num_tokens},
                    {"drafted", r.num_drafted},
                    {"accepted", r.num_accepted},
                    {"tokens_per_s", r.tokens_per_s()},
                    {"ms_p50", r.times.median()},
                    {"ms_mean", r.times.mean()},
                    {"predicted_ms_mean", r.predicted_ms},
                    {"ms", r.times.ms}});
  }
  return list;
}

}  // namespace deltaserve::cli
