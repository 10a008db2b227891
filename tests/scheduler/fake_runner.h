// A scripted stand-in for the model (vLLM's tests/v1/core/utils.py idea): the next token is
// a pure function of the sequence's context, so a sequence's output cannot depend on how
// it was batched, chunked or preempted, unless the scheduler feeds it wrong inputs.
//
// The fake also models the two memories of a hybrid model and checks every plan against
// them: each state slot remembers the tokens it consumed (the Gated DeltaNet state), and
// the KV pool stores the token written at every position of every block (attention).
// The context it hashes is read back from the KV blocks, and must equal both the slot's
// tokens and the sequence's history; any mismatch (a block or slot shared, not reset,
// lost) is recorded in violations().
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "scheduler/block_pool.h"
#include "runtime/model_runner.h"

namespace deltaserve::scheduler::testing {

using NextTokenFn = std::function<int32_t(std::span<const int32_t> context)>;

inline NextTokenFn hash_next_token(int32_t num_vocab) {
  return [num_vocab](std::span<const int32_t> context) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (const int32_t t : context) {
      h ^= static_cast<uint64_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h *= 0xbf58476d1ce4e5b9ull;
    }
    h ^= h >> 31;
    return static_cast<int32_t>(h % static_cast<uint64_t>(num_vocab));
  };
}

// What a request must produce when run alone: the same limits as the scheduler's commit.
struct Expected {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::None;
};

inline Expected expected_output(const RequestSpec& spec, int32_t max_context_tokens,
                                const NextTokenFn& next_token) {
  Expected e;
  std::vector<int32_t> context = spec.prompt_tokens;
  for (;;) {
    const int32_t t = next_token(context);
    for (const int32_t stop : spec.stop_token_ids) {
      if (t == stop) {
        e.finish = FinishReason::Stop;
        return e;
      }
    }
    context.push_back(t);
    e.tokens.push_back(t);
    if (static_cast<int32_t>(e.tokens.size()) >= spec.max_tokens ||
        static_cast<int32_t>(context.size()) >= max_context_tokens) {
      e.finish = FinishReason::Length;
      return e;
    }
  }
}

struct PlannedRow {
  RequestId id = 0;
  int32_t slot = 0;
  int32_t num_cached_tokens = 0;
  int32_t num_rows = 0;
  bool sample = false;
  bool is_decode = false;
};

class FakeRunner : public runtime::ModelRunner {
 public:
  explicit FakeRunner(runtime::RunnerLimits limits, int32_t num_vocab = 1000) : limits_(limits) {
    limits_.num_vocab = num_vocab;
    next_token = hash_next_token(num_vocab);
    slot_tokens_.resize(static_cast<size_t>(limits.cache.num_state_slots));
    kv_.assign(static_cast<size_t>(limits.cache.num_kv_blocks) * limits.cache.kv_block_tokens, -1);
  }

  runtime::RunnerLimits limits() const override { return limits_; }

  void execute(const runtime::StepPlan& plan, runtime::StepOutput& out) override {
    if (on_execute) on_execute(plan);
    if (throw_next) {
      throw_next = false;
      throw std::runtime_error("scripted failure");
    }
    if (out.sequences.size() != plan.sequences.size()) violation("output not sized to the plan");
    out.sequences.resize(plan.sequences.size());
    std::set<int32_t> slots_seen;
    std::set<int32_t> blocks_seen;
    std::vector<PlannedRow>& rows = steps.emplace_back();
    for (size_t k = 0; k < plan.sequences.size(); ++k) {
      const runtime::SequencePlan& p = plan.sequences[k];
      rows.push_back({p.id, p.slot, p.num_cached_tokens, static_cast<int32_t>(p.tokens.size()),
                      p.sample, p.is_decode});
      if (!slots_seen.insert(p.slot).second) violation("slot shared within a step");
      for (const int32_t b : p.kv_blocks) {
        if (!blocks_seen.insert(b).second) violation("KV block shared within a step");
      }
      run_sequence(p, out.sequences[k]);
    }
  }

  const std::vector<std::string>& violations() const { return violations_; }

  NextTokenFn next_token;                            // the "model"
  std::function<void(const runtime::StepPlan&)> on_execute;  // runs first (engine tests gate here)
  std::set<RequestId> fail_ids;                      // these sequences get an error
  bool throw_next = false;                           // the next execute() throws
  std::vector<std::vector<PlannedRow>> steps;        // every plan seen, in order

 private:
  void violation(const std::string& what) { violations_.push_back(what); }

  void run_sequence(const runtime::SequencePlan& p, runtime::SequenceOutput& out) {
    const int32_t bt = limits_.cache.kv_block_tokens;
    const auto n = static_cast<int32_t>(p.tokens.size());
    const int32_t end = p.num_cached_tokens + n;
    const std::string who = "request " + std::to_string(p.id) + ": ";
    if (n < 1) violation(who + "no rows");
    if (p.slot < 0 || p.slot >= limits_.cache.num_state_slots) return violation(who + "bad slot");
    if (end > static_cast<int32_t>(p.history.size())) return violation(who + "rows past history");
    if (!std::equal(p.tokens.begin(), p.tokens.end(), p.history.begin() + p.num_cached_tokens)) {
      violation(who + "rows are not the history's next tokens");
    }
    if (p.sample != (end == static_cast<int32_t>(p.history.size()))) violation(who + "bad sample flag");
    if (p.output_index != static_cast<int32_t>(p.history.size()) - p.num_prompt_tokens) {
      violation(who + "bad output index");
    }
    if (static_cast<int32_t>(p.kv_blocks.size()) != blocks_for_tokens(end, bt)) {
      violation(who + "block table does not cover the rows");
      return;
    }
    // The recurrent state: reset at num_cached == 0, otherwise it must hold exactly the
    // cached tokens.
    std::vector<int32_t>& state = slot_tokens_[static_cast<size_t>(p.slot)];
    if (p.num_cached_tokens == 0) state.clear();
    if (state.size() != static_cast<size_t>(p.num_cached_tokens)) violation(who + "slot state length");
    state.insert(state.end(), p.tokens.begin(), p.tokens.end());
    // Attention: write this step's rows, read the whole context back from the blocks.
    std::vector<int32_t> context(static_cast<size_t>(end));
    for (int32_t pos = 0; pos < end; ++pos) {
      const int32_t block = p.kv_blocks[static_cast<size_t>(pos / bt)];
      if (block < 0 || block >= limits_.cache.num_kv_blocks) return violation(who + "bad block id");
      int32_t& cell = kv_[static_cast<size_t>(block) * bt + pos % bt];
      if (pos >= p.num_cached_tokens) cell = p.tokens[static_cast<size_t>(pos - p.num_cached_tokens)];
      context[static_cast<size_t>(pos)] = cell;
    }
    if (!std::equal(context.begin(), context.end(), p.history.begin())) {
      violation(who + "KV blocks do not hold the history");
    }
    if (state != context) violation(who + "slot state does not match the KV context");
    if (fail_ids.count(p.id) != 0) {
      out.error = "scripted error";
      return;
    }
    if (!p.sample) return;
    const int32_t token = next_token(context);
    out.tokens.push_back(token);
    if (p.sampling != nullptr && p.sampling->logprobs) out.logprobs.push_back({token, -0.25f, {}});
  }

  runtime::RunnerLimits limits_;
  std::vector<std::vector<int32_t>> slot_tokens_;
  std::vector<int32_t> kv_;  // token stored at each (block, offset)
  std::vector<std::string> violations_;
};

}  // namespace deltaserve::scheduler::testing
