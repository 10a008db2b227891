#include "runtime/mtp_drafter.h"

#include <algorithm>
#include <unordered_set>

#include "runtime/greedy.h"

namespace deltaserve::runtime {
namespace {

// Drafts through the request's sampler (the picker): sampled requests, and constrained ones,
// whose drafts must pass the grammar's mask (a greedy head argmax could be a refused token).
bool samples(const SequencePlan& p) {
  return p.sampling != nullptr && (!p.sampling->greedy() || p.sampling->constraint != nullptr);
}

}  // namespace

std::vector<std::vector<int32_t>> MtpDrafter::draft(const StepPlan& plan, const DraftPicker& pick) {
  catch_up_waiting(plan);
  const int64_t h = backend_.config().num_embd;
  std::vector<std::vector<int32_t>> drafts(plan.sequences.size());
  std::vector<std::vector<float>> chain_input(plan.sequences.size());
  int32_t max_depth = 0;
  std::vector<std::pair<size_t, std::span<const float>>> first_picks;  // sampled sequences' first drafts
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequencePlan& p = plan.sequences[i];
    if (p.draft_depth <= 0 || !p.speculative) continue;
    auto it = states_.find(p.id);
    // The head must have caught up to the row before this step's first row.
    if (it == states_.end() || it->second.first_draft < 0 || it->second.num_rows != p.num_cached_tokens) continue;
    const bool drawn = draw_of(p, p.output_index).has_value();
    if (drawn) {
      if (it->second.first_draft_position != p.output_index) continue;  // drawn for another position
      drafts[i].push_back(it->second.first_draft);
    } else if (pick && samples(p)) {
      if (it->second.first_logits.empty()) continue;  // not kept: no draft rather than one without q
      first_picks.push_back({i, it->second.first_logits});
    } else {
      drafts[i].push_back(it->second.first_draft);
    }
    chain_input[i] = it->second.output;
    max_depth = std::max(max_depth, p.draft_depth);
  }
  for_each_pick(first_picks.size(), [&](size_t k) {
    const auto& [i, logits] = first_picks[k];
    drafts[i].push_back(pick(i, 0, logits));
  });
  // Draft j + 1 from (output of draft j, draft j) at position num_cached + j - 1: all
  // sequences that want it in one pass. These rows land in the head's cache past its valid
  // rows; the next catch-up overwrites them.
  for (int32_t j = 1; j < max_depth; ++j) {
    MtpPlan mtp;
    std::vector<size_t> members;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const SequencePlan& p = plan.sequences[i];
      if (static_cast<int32_t>(drafts[i].size()) != j || p.draft_depth <= j) continue;
      MtpSequenceStep& step = mtp.sequences.emplace_back();
      step.num_cached_rows = p.num_cached_tokens + j - 1;
      step.tokens = {drafts[i].back()};
      step.hidden = chain_input[i];
      step.kv_blocks.assign(p.kv_blocks.begin(), p.kv_blocks.end());
      step.num_logits = 1;
      const std::optional<kernels::DrawParams> draw = draw_of(p, p.output_index + j);
      if (draw) step.draws = {*draw};
      // Else the host picker's logits, or only the argmax id.
      step.logits_to_host = !draw && (!device_argmax_ || (pick && samples(p)));
      members.push_back(i);
    }
    if (members.empty()) break;
    backend_.forward_mtp(mtp, out_);
    for_each_pick(members.size(), [&](size_t m) {
      const size_t i = members[m];
      const bool drawn = !mtp.sequences[m].draws.empty();
      drafts[i].push_back(drawn ? out_.drawn_ids[static_cast<size_t>(out_.logit_begin[m])]
                          : pick && samples(plan.sequences[i])
                              ? pick(i, j, std::span<const float>(out_.sequence_logits(m), static_cast<size_t>(out_.num_vocab)))
                              : head_argmax(m));
      chain_input[i].assign(out_.hidden.begin() + static_cast<int64_t>(m) * h,
                            out_.hidden.begin() + static_cast<int64_t>(m + 1) * h);
    });
  }
  return drafts;
}

void MtpDrafter::for_each_pick(size_t n, const std::function<void(size_t)>& fn) const {
  if (pool_ == nullptr || n < 2) {
    for (size_t k = 0; k < n; ++k) fn(k);
    return;
  }
  // Each call touches one sequence's drafts and picker state.
  pool_->run(static_cast<int64_t>(n), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(static_cast<size_t>(k));
  });
}

void MtpDrafter::catch_up(const std::vector<CatchUp>& rows) {
  std::vector<HeadRows> passes;
  for (const CatchUp& c : rows) {
    // A resumed sequence's re-run of row P-1 (first_position) is never deferred: it restarts
    // the head's rows at the resume point.
    const bool resumes = c.first_position >= 0;
    if (c.may_wait && !resumes && defer(c)) continue;
    HeadRows& r = passes.emplace_back();
    r.seq = c.seq;
    r.num_cached_rows = resumes ? c.first_position : c.seq->num_cached_tokens;
    r.drafts_next = c.drafts_next;
    r.next_output_position = c.next_output_position;
    auto it = states_.find(c.seq->id);
    // Rows that waited for this stream go first when the state continues into this step.
    if (!resumes && it != states_.end() && !it->second.pending_tokens.empty() &&
        it->second.num_rows + static_cast<int32_t>(it->second.pending_tokens.size()) == c.seq->num_cached_tokens) {
      r.num_cached_rows = it->second.num_rows;
      r.tokens = std::move(it->second.pending_tokens);
      r.hidden = std::move(it->second.pending_hidden);
      num_lazy_rows_ += static_cast<int64_t>(r.tokens.size());
    }
    r.tokens.insert(r.tokens.end(), c.next_tokens.begin(), c.next_tokens.end());
    r.hidden.insert(r.hidden.end(), c.hidden.begin(), c.hidden.end());
  }
  run_head(passes);
}

bool MtpDrafter::defer(const CatchUp& c) {
  auto it = states_.find(c.seq->id);
  if (it == states_.end()) return false;
  State& state = it->second;
  const auto waiting = static_cast<int32_t>(state.pending_tokens.size());
  if (state.num_rows + waiting != c.seq->num_cached_tokens) return false;  // restarted: catch up now
  state.first_draft = -1;
  state.first_draft_position = -1;
  state.output.clear();
  state.first_logits.clear();
  state.pending_tokens.insert(state.pending_tokens.end(), c.next_tokens.begin(), c.next_tokens.end());
  state.pending_hidden.insert(state.pending_hidden.end(), c.hidden.begin(), c.hidden.end());
  const auto num_waiting = static_cast<int32_t>(state.pending_tokens.size());
  if (num_waiting > 2 * kPendingWindow) {
    // Drop the oldest, keeping kPendingWindow: their head rows stay stale (header comment).
    const int32_t drop = num_waiting - kPendingWindow;
    const int64_t h = backend_.config().num_embd;
    state.pending_tokens.erase(state.pending_tokens.begin(), state.pending_tokens.begin() + drop);
    state.pending_hidden.erase(state.pending_hidden.begin(), state.pending_hidden.begin() + drop * h);
    state.num_rows += drop;
    num_dropped_rows_ += drop;
  }
  return true;
}

void MtpDrafter::catch_up_waiting(const StepPlan& plan) {
  std::vector<HeadRows> passes;
  for (const SequencePlan& p : plan.sequences) {
    if (p.draft_depth <= 0 || !p.speculative) continue;
    auto it = states_.find(p.id);
    if (it == states_.end() || it->second.pending_tokens.empty()) continue;
    State& state = it->second;
    if (state.num_rows + static_cast<int32_t>(state.pending_tokens.size()) != p.num_cached_tokens) continue;
    HeadRows& r = passes.emplace_back();
    r.seq = &p;
    r.num_cached_rows = state.num_rows;
    r.tokens = std::move(state.pending_tokens);
    r.hidden = std::move(state.pending_hidden);
    r.drafts_next = true;
    r.next_output_position = p.output_index;
    num_lazy_rows_ += static_cast<int64_t>(r.tokens.size());
  }
  run_head(passes);
}

void MtpDrafter::run_head(std::vector<HeadRows>& rows) {
  if (rows.empty()) return;
  const int64_t h = backend_.config().num_embd;
  MtpPlan mtp;
  for (HeadRows& r : rows) {
    MtpSequenceStep& step = mtp.sequences.emplace_back();
    step.num_cached_rows = r.num_cached_rows;
    step.tokens = std::move(r.tokens);
    step.hidden = std::move(r.hidden);
    step.kv_blocks.assign(r.seq->kv_blocks.begin(), r.seq->kv_blocks.end());
    step.num_logits = r.drafts_next ? 1 : 0;
    const std::optional<kernels::DrawParams> draw =
        r.drafts_next ? draw_of(*r.seq, r.next_output_position) : std::nullopt;
    if (draw) step.draws = {*draw};
    step.logits_to_host = !draw && (!device_argmax_ || samples(*r.seq));
  }
  backend_.forward_mtp(mtp, out_);
  for (size_t i = 0; i < rows.size(); ++i) {
    const HeadRows& r = rows[i];
    State& state = states_[r.seq->id];
    // A sequence that restarts (preempted, recomputed) starts its head cache over too.
    state.num_rows = r.num_cached_rows + static_cast<int32_t>(mtp.sequences[i].tokens.size());
    state.first_draft = -1;
    state.first_draft_position = -1;
    state.output.clear();
    state.first_logits.clear();
    state.pending_tokens.clear();
    state.pending_hidden.clear();
    if (!r.drafts_next) continue;
    if (!mtp.sequences[i].draws.empty()) {
      state.first_draft = out_.drawn_ids[static_cast<size_t>(out_.logit_begin[i])];
      state.first_draft_position = r.next_output_position;
    } else {
      state.first_draft = head_argmax(i);
    }
    if (mtp.sequences[i].draws.empty() && samples(*r.seq)) state.first_logits.assign(out_.sequence_logits(i), out_.sequence_logits(i) + out_.num_vocab);
    const int64_t row = out_.hidden_begin[i];
    state.output.assign(out_.hidden.begin() + row * h, out_.hidden.begin() + (row + 1) * h);
  }
}

int32_t MtpDrafter::head_argmax(size_t i) const {
  if (device_argmax_) return out_.argmax_ids[static_cast<size_t>(out_.logit_begin[i])];
  return argmax_token(out_.sequence_logits(i), out_.num_vocab);
}

void MtpDrafter::retain(const std::vector<RequestId>& live) {
  const std::unordered_set<RequestId> keep(live.begin(), live.end());
  std::erase_if(states_, [&](const auto& entry) { return !keep.contains(entry.first); });
}

}  // namespace deltaserve::runtime
