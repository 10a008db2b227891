// Scheduler, second half: applying a step's results (commit), ending requests and
// delivering their events, and the integrity check.
#include <algorithm>
#include <unordered_set>

#include "scheduler/scheduler.h"

namespace deltaserve::scheduler {
namespace {

double ms_between(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Why a sampling step's output cannot be used, or empty.
std::string check_emitted(const runtime::SequencePlan& p, const runtime::SequenceOutput& out) {
  if (out.tokens.empty()) return "runner emitted no token";
  if (static_cast<int64_t>(out.tokens.size()) > 1 + int64_t{p.draft_depth}) {
    return "runner emitted " + std::to_string(out.tokens.size()) + " tokens for draft depth " +
           std::to_string(p.draft_depth);
  }
  return {};
}

}  // namespace

// Draft j (0-based) was reached when drafts 0..j-1 were accepted; the estimate of a position
// learns only from steps that reached it. Every decode step of a stream that may draft is
// recorded, drafts or none: it ages the stream's evidence (AcceptanceEstimates).
void Scheduler::record_drafts(Sequence& s, const runtime::SequencePlan& p, const runtime::SequenceOutput& out) {
  if (!p.is_decode || !p.speculative) return;
  const int32_t num_drafted = std::max(0, std::min(out.num_drafted, p.draft_depth));
  const int32_t num_accepted = static_cast<int32_t>(out.tokens.size()) - 1;
  acceptance_.record(s.draft_kind, s.draft_evidence, num_drafted, num_accepted);
  if (observer_ == nullptr) return;
  for (int32_t j = 0; j < num_drafted; ++j) observer_->on_drafts(j, 1, j < num_accepted ? 1 : 0);
}

StepReport Scheduler::commit(const runtime::StepPlan& plan, const runtime::StepOutput& out) {
  StepReport report;
  report.predicted_step_ms = planned_ms_;
  const TimePoint now = clock_();
  ++num_steps_;
  for (size_t k = 0; k < plan.sequences.size(); ++k) {
    const runtime::SequencePlan& p = plan.sequences[k];
    const auto num_rows = static_cast<int32_t>(p.tokens.size());
    report.num_rows += num_rows + p.draft_depth;
    if (p.is_decode) {
      ++report.num_decode_sequences;
      if (p.speculative) ++report.draft_depths[static_cast<size_t>(std::clamp(p.draft_depth, 0, runtime::kMaxDraftDepth))];
    } else {
      report.num_prefill_tokens += num_rows;
    }
    auto it = sequences_.find(p.id);
    if (it == sequences_.end()) continue;  // not expected: nothing cancels between plan and commit
    Sequence& s = *it->second;
    RequestEvent failure;
    failure.finish = FinishReason::Error;
    if (k >= out.sequences.size()) {
      failure.error = "runner returned no result for the sequence";
    } else if (!out.sequences[k].error.empty()) {
      failure.error = out.sequences[k].error;
    } else if (p.sample) {
      failure.error = check_emitted(p, out.sequences[k]);
    }
    if (!failure.error.empty()) {
      finish(s, std::move(failure), now);
      continue;
    }
    const int32_t num_computed_before = s.num_computed_tokens;
    s.num_computed_tokens += num_rows;
    if (p.sample) {
      record_drafts(s, p, out.sequences[k]);
      report.num_generated_tokens += append_tokens(s, out.sequences[k], now);
      // The end of a prompt (or of a recompute) is a checkpoint, if s goes on (finish saves):
      // also when the prompt's last token was the step's one decode row (a prompt resumed from
      // a checkpoint one token short of its end, or of one token). So is every
      // --prefix-checkpoint-tokens interval of an answer.
      const bool goes_on = sequences_.count(p.id) != 0;
      const bool ends_prompt = !p.is_decode || p.num_cached_tokens < p.num_prompt_tokens;  // s may be gone
      if (goes_on && (ends_prompt || (cache_ && crossed_decode_checkpoint(s, num_computed_before)))) save_checkpoint(s);
    } else if (cache_ && at_checkpoint(s)) {
      save_checkpoint(s);  // a prefill checkpoint (chunks are cut there: next_checkpoint)
    }
    if (!p.sample && !s.shared_cuts.empty())
      std::erase_if(s.shared_cuts, [&s](int32_t cut) { return cut <= s.num_computed_tokens; });
  }
  return report;
}

// Appends the emitted tokens up to the first stop id or limit, sends them, and ends the
// sequence when one was hit. A stop id is not part of the output (OpenAI and vLLM leave
// EOS out of the text): it ends the request with Stop and is neither sent nor counted.
// Returns the number of tokens sent.
int32_t Scheduler::append_tokens(Sequence& s, const runtime::SequenceOutput& out, TimePoint now) {
  RequestEvent event;
  const std::vector<int32_t>& stop_ids = s.spec.stop_token_ids;
  for (size_t j = 0; j < out.tokens.size(); ++j) {
    const int32_t token = out.tokens[j];
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      event.finish = FinishReason::Stop;
      break;
    }
    s.tokens.push_back(token);
    event.tokens.push_back(token);
    if (s.spec.sampling.logprobs && j < out.logprobs.size()) event.logprobs.push_back(out.logprobs[j]);
    if (s.num_generated() >= s.spec.max_tokens || s.num_tokens() >= config_.max_context_tokens) {
      event.finish = FinishReason::Length;
      break;
    }
  }
  // Everything but the newest token is now cached (with drafts: the accepted ones too).
  s.num_computed_tokens = s.num_tokens() - 1;
  const auto num_sent = static_cast<int32_t>(event.tokens.size());
  report_tokens(s, num_sent, now);
  if (event.finish != FinishReason::None) {
    finish(s, std::move(event), now);
  } else if (!deliver(s, event)) {
    ++num_cancellations_;  // a throwing sink is treated as a disconnected client
    RequestEvent cancelled;
    cancelled.finish = FinishReason::Cancelled;
    finish(s, std::move(cancelled), now);
  }
  return num_sent;
}

// Inter-token gaps: tokens that arrive together share the time since the previous token.
void Scheduler::report_tokens(Sequence& s, int32_t num_new, TimePoint now) {
  if (num_new == 0) return;
  int32_t num_gaps = num_new;
  double gap_ms = 0.0;
  if (!s.has_first_token) {
    s.has_first_token = true;
    s.first_token_time = now;
    num_gaps = num_new - 1;  // the first token's latency is the TTFT, not a gap
  } else {
    gap_ms = ms_between(s.last_token_time, now) / num_new;
  }
  s.last_token_time = now;
  if (observer_ == nullptr) return;
  for (int32_t i = 0; i < num_gaps; ++i) observer_->on_inter_token(s.id, gap_ms);
}

// Frees the sequence's slot and blocks, sends its final event, reports it and destroys it.
void Scheduler::finish(Sequence& s, RequestEvent event, TimePoint now) {
  // The slot holds exactly tokens[0, num_computed) between steps: the next turn starts there.
  // An error leaves nothing trusted behind.
  if (event.finish != FinishReason::Error) save_checkpoint(s);
  release(s);
  deliver(s, event);
  if (observer_ != nullptr) {
    RequestReport r;
    r.id = s.id;
    r.finish = event.finish;
    r.num_prompt_tokens = s.num_prompt_tokens;
    r.num_generated_tokens = s.num_generated();
    r.queue_ms = ms_between(s.submit_time, s.was_scheduled ? s.first_scheduled_time : now);
    r.ttft_ms = s.has_first_token ? ms_between(s.submit_time, s.first_token_time) : 0.0;
    r.e2e_ms = ms_between(s.submit_time, now);
    const double decode_ms = ms_between(s.first_token_time, s.last_token_time);
    if (s.num_generated() > 1 && decode_ms > 0.0) {
      r.decode_tokens_per_s = (s.num_generated() - 1) * 1000.0 / decode_ms;
    }
    observer_->on_request_finished(r);
  }
  sequences_.erase(s.id);  // destroys s
}

// Stamps the event with the request's id and counts, then calls the sink.
bool Scheduler::deliver(Sequence& s, RequestEvent& event) {
  event.id = s.id;
  event.num_prompt_tokens = s.num_prompt_tokens;
  event.num_generated_tokens = s.num_generated();
  event.num_cached_prompt_tokens = std::max(0, s.num_cached_prompt_tokens);
  if (!s.sink) return true;
  try {
    s.sink(event);
    return true;
  } catch (...) {
    return false;  // a sink must not throw; nothing throws across the engine thread
  }
}

void Scheduler::release(Sequence& s) {
  if (s.slot >= 0) {
    running_.erase(std::find(running_.begin(), running_.end(), &s));
    blocks_.block_free(s.kv_blocks);
    slots_.slot_free(s.slot);
    s.slot = -1;
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), &s);
    if (it != waiting_.end()) waiting_.erase(it);
  }
}

bool Scheduler::check_integrity(std::string* why) const {
  if (!slots_.check_integrity(why) || !blocks_.check_integrity(why)) return false;
  auto fail = [why](std::string message) {
    if (why != nullptr) *why = "Scheduler: " + std::move(message);
    return false;
  };
  if (running_.size() + waiting_.size() != sequences_.size()) return fail("sequences not all queued");
  if (static_cast<int32_t>(running_.size()) > config_.max_num_seqs) return fail("too many running");
  std::unordered_set<int32_t> slots_seen;
  // References per block: running sequences (each block at most once per sequence) and the
  // prefix cache must account for the pool's counts exactly.
  std::vector<int32_t> refs(static_cast<size_t>(blocks_.num_total()), 0);
  for (const Sequence* s : running_) {
    if (s->slot < 0 || !slots_seen.insert(s->slot).second) return fail("slot owned twice or missing");
    std::unordered_set<int32_t> own;
    for (const int32_t b : s->kv_blocks) {
      if (b < 0 || b >= blocks_.num_total() || !own.insert(b).second) return fail("block " + std::to_string(b) + " bad or twice in a table");
      ++refs[static_cast<size_t>(b)];
    }
    const int32_t num_cover = blocks_for_tokens(s->num_computed_tokens, limits_.cache.kv_block_tokens);
    if (static_cast<int32_t>(s->kv_blocks.size()) < num_cover) return fail("block table too short");
    if (s->num_missing_tokens() < 1) return fail("running sequence with nothing to compute");
  }
  for (const Sequence* s : waiting_) {
    if (s->slot >= 0 || !s->kv_blocks.empty() || s->num_computed_tokens != 0) {
      return fail("waiting sequence holds resources");
    }
  }
  if (static_cast<int32_t>(slots_seen.size()) != slots_.num_used()) return fail("slot leaked");
  if (cache_) cache_->count_block_refs(refs);
  for (int32_t b = 0; b < blocks_.num_total(); ++b) {
    if (refs[static_cast<size_t>(b)] != blocks_.block_refs(b))
      return fail("block " + std::to_string(b) + " has " + std::to_string(blocks_.block_refs(b)) + " references, " +
                  std::to_string(refs[static_cast<size_t>(b)]) + " holders");
  }
  return true;
}

}  // namespace deltaserve::scheduler
