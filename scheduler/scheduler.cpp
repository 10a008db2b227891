// Scheduler: request intake, cancellation and the per-step plan. commit() and the
// delivery of events live in scheduler_commit.cpp.
#include "scheduler/scheduler.h"

#include <algorithm>

namespace deltaserve::scheduler {

Scheduler::Scheduler(const SchedulerConfig& config, const runtime::RunnerLimits& limits,
                     EngineObserver* observer, Clock clock)
    : config_(config),
      limits_(limits),
      observer_(observer),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      slots_(limits.cache.num_state_slots),
      blocks_(limits.cache.num_kv_blocks),
      policy_(config.step_costs, config.draft_min_expected),
      acceptance_(config.draft_acceptance_prior) {
  // Aligned cuts need room for two aligned pieces per chunk, or a prompt could stall.
  const int32_t align = limits.prefill_chunk_align;
  if (align > 1 && config.max_prefill_chunk_tokens >= 2 * align && config.max_num_batched_tokens >= 2 * align)
    chunk_align_ = align;
  if (config.prefix_cache) {
    cache_ = std::make_unique<PrefixCache>(limits.cache.kv_block_tokens, config.prefix_device_checkpoints,
                                           config.prefix_host_checkpoints, blocks_);
    checkpoint_bytes_ = limits.checkpoint_bytes;
  }
}

Scheduler::~Scheduler() {
  if (cache_) cache_->clear();  // its references go back before the pool goes
}

SubmitResult Scheduler::check_submit(const RequestSpec& spec) const {
  SubmitResult result;
  // The whole sequence (prompt + generated) stays within the window, and at least one
  // token must be generated.
  if (spec.prompt_tokens.size() >= static_cast<size_t>(config_.max_context_tokens)) {
    result.status = SubmitStatus::TooLong;
    result.message = "This model's maximum context length is " +
                     std::to_string(config_.max_context_tokens) + " tokens. However, the prompt has " +
                     std::to_string(spec.prompt_tokens.size()) +
                     " tokens, which leaves no room for the completion.";
  }
  return result;
}

std::string Scheduler::validate(const RequestSpec& spec) const {
  if (spec.prompt_tokens.empty()) return "the prompt is empty";
  if (spec.max_tokens < 1) return "max_tokens must be at least 1";
  const SubmitResult fits = check_submit(spec);
  if (fits.status != SubmitStatus::Accepted) return fits.message;
  for (const int32_t token : spec.prompt_tokens) {
    if (token < 0 || (limits_.num_vocab > 0 && token >= limits_.num_vocab)) {
      return "prompt token id " + std::to_string(token) + " is outside the vocabulary";
    }
  }
  return {};
}

void Scheduler::add(RequestId id, RequestSpec spec, EventSink sink, TimePoint submit_time) {
  auto owned = std::make_unique<Sequence>();
  Sequence& s = *owned;
  s.id = id;
  s.submit_time = submit_time;
  s.sink = std::move(sink);
  std::string invalid = validate(spec);
  s.num_prompt_tokens = static_cast<int32_t>(std::min(spec.prompt_tokens.size(), size_t{INT32_MAX}));
  s.tokens = std::move(spec.prompt_tokens);
  s.spec = std::move(spec);
  s.draft_kind = draft_kind(s.spec.sampling);
  if (sequences_.count(id) != 0) {
    // Not registered: the live request with this id is left alone.
    RequestEvent event;
    event.id = id;
    event.finish = FinishReason::Error;
    event.error = "duplicate request id " + std::to_string(id);
    deliver(s, event);
    return;
  }
  sequences_.emplace(id, std::move(owned));
  if (!invalid.empty()) {
    RequestEvent event;
    event.finish = FinishReason::Error;
    event.error = std::move(invalid);
    finish(s, std::move(event), clock_());
    return;
  }
  waiting_.push_back(&s);
}

bool Scheduler::cancel(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  ++num_cancellations_;
  RequestEvent event;
  event.finish = FinishReason::Cancelled;
  finish(*it->second, std::move(event), clock_());
  return true;
}

void Scheduler::cancel_all() {
  std::vector<RequestId> ids;
  for (const Sequence* s : running_) ids.push_back(s->id);
  for (const Sequence* s : waiting_) ids.push_back(s->id);
  for (const RequestId id : ids) cancel(id);
}

runtime::StepPlan Scheduler::plan() {
  // want[i]: rows planned for running_[i] this step.
  std::vector<int32_t> want(running_.size(), 0);
  int32_t budget = config_.max_num_batched_tokens;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->num_missing_tokens() == 1) {
      want[i] = 1;
      --budget;
    }
  }
  budget -= plan_drafts(want, budget);
  for (size_t i = 0; i < running_.size(); ++i) {
    if (want[i] != 0) continue;
    want[i] = checkpoint_cut(*running_[i], aligned_chunk(*running_[i], std::min({running_[i]->num_missing_tokens(), config_.max_prefill_chunk_tokens, budget})));
    budget -= want[i];
  }
  if (!reserve_blocks(want)) {
    int32_t num_planned = 0;
    for (const int32_t n : want) num_planned += n;
    admit(config_.max_num_batched_tokens - num_planned, want);
  }
  runtime::StepPlan plan = build_plan(want);
  // The prediction of what was finally planned (preemption may have dropped streams), for
  // decode-only steps: a prefill chunk's cost is an extrapolation past the measured grid.
  std::vector<int32_t> depths;
  bool has_prefill = false;
  for (const runtime::SequencePlan& p : plan.sequences) {
    if (p.is_decode) depths.push_back(p.draft_depth);
    has_prefill = has_prefill || !p.is_decode;
  }
  planned_ms_ = has_prefill ? 0.0 : policy_.predict_ms(depths, 0, 0);
  // Ops wait for a plan the runner executes (an empty plan is not executed).
  if (!plan.empty()) {
    plan.cache_ops = std::move(pending_ops_);
    pending_ops_.clear();
  }
  return plan;
}

// Returns true when it had to preempt (the step then admits nobody).
bool Scheduler::reserve_blocks(std::vector<int32_t>& want) {
  const int32_t block_tokens = limits_.cache.kv_block_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    while (want[i] > 0) {
      const int32_t num_needed =
          blocks_for_tokens(int64_t{s.num_computed_tokens} + want[i], block_tokens) -
          static_cast<int32_t>(s.kv_blocks.size());
      if (num_needed <= 0 || alloc_blocks(num_needed, s.kv_blocks)) break;
      // A prefill chunk first shrinks to the blocks at hand.
      const int64_t num_fit =
          (static_cast<int64_t>(s.kv_blocks.size()) + blocks_.num_free()) * block_tokens -
          s.num_computed_tokens;
      if (want[i] > 1 && num_fit >= 1) {
        // Cut where an aligned cut fits, else wait for blocks (never preempt for alignment).
        want[i] = aligned_chunk(s, static_cast<int32_t>(std::min<int64_t>(want[i], num_fit)));
        continue;
      }
      if (i + 1 == running_.size()) {
        want[i] = 0;  // the newest waits for blocks rather than evict older work
        break;
      }
      preempt_newest();
      want.pop_back();
      preempted = true;
    }
  }
  return preempted;
}

int32_t Scheduler::aligned_chunk(const Sequence& s, int32_t rows) const {
  const int32_t missing = s.num_missing_tokens();
  // A sequence whose computed rows are off the grid (not cut by this rule) keeps any cut.
  if (rows >= missing || chunk_align_ <= 1 || s.num_computed_tokens % chunk_align_ != 0) return rows;
  const int32_t end = s.num_computed_tokens + missing;
  int32_t cut = (s.num_computed_tokens + rows) / chunk_align_ * chunk_align_;
  while (cut > s.num_computed_tokens && end - cut < chunk_align_) cut -= chunk_align_;
  return std::max(0, cut - s.num_computed_tokens);
}

// The victim's state is checkpointed first (its slot holds exactly tokens[0, num_computed)
// between steps) and its blocks stay referenced by the prefix index, so its resumption
// recomputes nothing. The allocation that made room may still evict that checkpoint (it frees
// the victim's blocks); the victim's earlier checkpoints (every --prefix-checkpoint-tokens,
// prompt end) share its blocks, free nothing and stay, so it then resumes from the last one.
void Scheduler::preempt_newest() {
  Sequence& s = *running_.back();
  running_.pop_back();
  save_checkpoint(s);
  s.shared_cuts.clear();  // its waiters stop waiting (it left the running set)
  blocks_.block_free(s.kv_blocks);
  slots_.slot_free(s.slot);
  s.slot = -1;
  s.num_computed_tokens = 0;  // admission resumes it from the longest cached prefix (else from scratch)
  waiting_.push_front(&s);
  ++num_preemptions_;
}

void Scheduler::admit(int32_t budget, std::vector<int32_t>& want) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs && slots_.num_free() > 0) {
    Sequence& s = *waiting_.front();
    int32_t num_rows = 0;
    if (!admit_head(budget, num_rows, want)) break;  // FCFS: no overtaking
    s.admit_order = next_admit_order_++;
    if (!s.was_scheduled) {
      s.was_scheduled = true;
      s.first_scheduled_time = clock_();
    }
    waiting_.pop_front();
    running_.push_back(&s);
    want.push_back(num_rows);
    budget -= num_rows;
  }
}

runtime::StepPlan Scheduler::build_plan(const std::vector<int32_t>& want) const {
  const int32_t block_tokens = limits_.cache.kv_block_tokens;
  runtime::StepPlan plan;
  plan.sequences.reserve(running_.size());
  for (const bool decode_pass : {true, false}) {
    for (size_t i = 0; i < running_.size(); ++i) {
      const Sequence& s = *running_[i];
      if (want[i] == 0 || (s.num_missing_tokens() == 1) != decode_pass) continue;
      const std::span<const int32_t> history(s.tokens);
      runtime::SequencePlan& p = plan.sequences.emplace_back();
      p.id = s.id;
      p.slot = s.slot;
      p.num_cached_tokens = s.num_computed_tokens;
      // A decoding sequence's rows past its one missing token are draft rows.
      const int32_t num_token_rows = decode_pass ? 1 : want[i];
      p.draft_depth = want[i] - num_token_rows;
      p.speculative = s.spec.draft_depth != 0 && config_.max_draft_depth > 0;
      p.tokens = history.subspan(static_cast<size_t>(s.num_computed_tokens), static_cast<size_t>(num_token_rows));
      p.kv_blocks = std::span<const int32_t>(s.kv_blocks)
                        .first(static_cast<size_t>(blocks_for_tokens(int64_t{s.num_computed_tokens} + want[i], block_tokens)));
      p.sample = s.num_computed_tokens + num_token_rows == s.num_tokens();
      p.is_decode = decode_pass;
      p.sampling = &s.spec.sampling;
      p.history = history;
      p.num_prompt_tokens = s.num_prompt_tokens;
      p.output_index = s.num_generated();
    }
  }
  return plan;
}

int32_t Scheduler::draft_limit(const Sequence& s) const {
  int64_t limit = s.spec.draft_depth < 0 ? config_.max_draft_depth : std::min(s.spec.draft_depth, config_.max_draft_depth);
  // Drafts past max_tokens or the context would be computed and thrown away.
  limit = std::min<int64_t>(limit, int64_t{s.spec.max_tokens} - s.num_generated() - 1);
  limit = std::min<int64_t>(limit, int64_t{config_.max_context_tokens} - s.num_tokens() - 1);
  return static_cast<int32_t>(std::clamp<int64_t>(limit, 0, runtime::kMaxDraftDepth));
}

int32_t Scheduler::plan_drafts(std::vector<int32_t>& want, int32_t budget) {
  std::vector<size_t> decoding;
  std::vector<DraftStream> streams;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (want[i] != 1 || running_[i]->num_missing_tokens() != 1) continue;
    Sequence& s = *running_[i];
    decoding.push_back(i);
    s.draft_acceptance = acceptance_.estimate(s.draft_kind, s.draft_evidence);
    streams.push_back({draft_limit(s), &s.draft_acceptance, s.draft_depth_last});
  }
  std::vector<int32_t> depths;
  policy_.choose(streams, budget, depths);
  int32_t num_rows = 0;
  for (size_t k = 0; k < decoding.size(); ++k) {
    want[decoding[k]] += depths[k];
    num_rows += depths[k];
    running_[decoding[k]]->draft_depth_last = depths[k];
  }
  return num_rows;
}

void Scheduler::fill_stats(EngineStats& stats) const {
  stats.num_running = num_running();
  stats.num_waiting = num_waiting();
  stats.num_state_slots_used = slots_.num_used();
  stats.num_state_slots_total = slots_.num_total();
  stats.num_kv_blocks_used = blocks_.num_used();
  stats.num_kv_blocks_total = blocks_.num_total();
  stats.num_steps = num_steps_;
  stats.num_preemptions = num_preemptions_;
  stats.num_cancellations = num_cancellations_;
  if (!cache_) return;
  // Blocks only the cache references are free capacity (evicted on demand), not usage.
  std::vector<int32_t> cache_refs(static_cast<size_t>(blocks_.num_total()), 0);
  cache_->count_block_refs(cache_refs);
  int32_t cached_only = 0;
  for (int32_t b = 0; b < blocks_.num_total(); ++b) {
    const int32_t refs = cache_refs[static_cast<size_t>(b)];
    if (refs > 0 && refs == blocks_.block_refs(b)) ++cached_only;
  }
  stats.num_kv_blocks_cached = cached_only;
  stats.num_kv_blocks_used -= cached_only;
  const PrefixCacheStats& c = cache_->stats();
  stats.prefix_cache_enabled = true;
  stats.prefix_cache_queries = c.num_queries;
  stats.prefix_cache_hits = c.num_hits;
  stats.prefix_cache_query_tokens = c.num_query_tokens;
  stats.prefix_cache_hit_tokens = c.num_hit_tokens;
  stats.prefix_cache_evictions = c.num_evictions;
  stats.prefix_cache_preempted_queries = c.num_preempted_queries;
  stats.prefix_cache_preempted_hits = c.num_preempted_hits;
  stats.prefix_cache_preempted_query_tokens = c.num_preempted_query_tokens;
  stats.prefix_cache_preempted_hit_tokens = c.num_preempted_hit_tokens;
  stats.prefix_cache_spills = c.num_spills;
  stats.prefix_cache_checkpoints = cache_->num_checkpoints();
  stats.prefix_cache_blocks = c.num_nodes;
  stats.prefix_cache_device_bytes = int64_t{c.num_device_checkpoints} * checkpoint_bytes_;
  stats.prefix_cache_host_bytes = int64_t{c.num_host_checkpoints} * checkpoint_bytes_;
}

}  // namespace deltaserve::scheduler
