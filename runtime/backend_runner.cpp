#include "runtime/backend_runner.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "runtime/draft_verifier.h"
#include "runtime/greedy.h"
#include "runtime/model_config.h"

namespace deltaserve::runtime {

BackendRunner::BackendRunner(Backend& backend, int32_t max_context_tokens, int32_t max_draft_depth,
                             std::unique_ptr<DFlashDrafter> dflash)
    : backend_(backend), max_context_tokens_(max_context_tokens), max_draft_depth_(max_draft_depth),
      dflash_(std::move(dflash)), seed_salt_(std::random_device{}()) {
  seed_salt_ = (seed_salt_ << 32) ^ std::random_device{}();
  if (max_draft_depth_ < 0 || max_draft_depth_ > kMaxDraftDepth)
    throw std::invalid_argument("draft depth must be in [0, " + std::to_string(kMaxDraftDepth) + "]");
  if (dflash_ != nullptr) {
    if (max_draft_depth_ > dflash_->max_drafts())
      throw std::invalid_argument("draft depth " + std::to_string(max_draft_depth_) + " exceeds the DFlash block's " +
                                  std::to_string(dflash_->max_drafts()) + " drafts");
    if (backend_.cache_config().max_verify_rows < 1 + max_draft_depth_)
      throw std::invalid_argument("backend keeps " + std::to_string(backend_.cache_config().max_verify_rows) +
                                  " verify rows, draft depth " + std::to_string(max_draft_depth_) + " needs " +
                                  std::to_string(1 + max_draft_depth_));
    if (max_draft_depth_ == 0) dflash_.reset();
  } else if (max_draft_depth_ > 0) {
    if (backend_.config().num_mtp_layers == 0)
      throw std::invalid_argument("speculative decoding needs an MTP head; this model has none (use draft depth 0)");
    if (backend_.cache_config().max_verify_rows < 1 + max_draft_depth_)
      throw std::invalid_argument("backend keeps " + std::to_string(backend_.cache_config().max_verify_rows) +
                                  " verify rows, draft depth " + std::to_string(max_draft_depth_) + " needs " +
                                  std::to_string(1 + max_draft_depth_));
    drafter_ = std::make_unique<MtpDrafter>(backend_);
    drafter_->set_parallel(&sampling_pool_);
    drafter_->set_draw_source([this](const SequencePlan& p, int64_t position) -> std::optional<kernels::DrawParams> {
      if (!backend_draws(p)) return std::nullopt;
      return draw_params_of(*p.sampling, seed_of(p), static_cast<uint64_t>(position));
    });
  }
}

RunnerLimits BackendRunner::limits() const {
  RunnerLimits limits;
  limits.cache = backend_.cache_config();
  const int64_t trained = backend_.config().context_length;
  limits.max_context_tokens = max_context_tokens_ > 0 ? max_context_tokens_ : static_cast<int32_t>(std::min<int64_t>(trained, INT32_MAX));
  limits.num_vocab = static_cast<int32_t>(backend_.config().num_vocab);
  limits.max_draft_depth = max_draft_depth_;
  limits.prefill_chunk_align = backend_.prefill_chunk_align();
  limits.checkpoint_bytes = backend_.checkpoint_bytes();
  return limits;
}

RunnerStats BackendRunner::stats() const {
  const BackendMemoryStats memory = backend_.memory_stats();
  RunnerStats stats;
  stats.device_bytes_used = memory.device_bytes_used;
  stats.device_bytes_total = memory.device_bytes_total;
  stats.pinned_bytes = memory.pinned_bytes;
  stats.pinned_registrations = memory.pinned_registrations;
  stats.split_devices = backend_.split_stats();
  return stats;
}

Sampler& BackendRunner::sampler_for(const SequencePlan& seq) {
  auto it = samplers_.find(seq.id);
  if (it != samplers_.end() && it->second->num_output_tokens() == seq.output_index) return *it->second;
  const SamplingParams& params = *seq.sampling;
  auto sampler = std::make_unique<Sampler>(params, seed_of(seq));
  sampler->set_parallel(&sampling_pool_);
  const size_t num_prompt = static_cast<size_t>(seq.num_prompt_tokens);
  sampler->set_prompt(seq.history.subspan(0, std::min(num_prompt, seq.history.size())));
  for (size_t i = num_prompt; i < seq.history.size(); ++i) sampler->accept(seq.history[i]);
  if (sampler->num_output_tokens() != seq.output_index)
    throw std::logic_error("runner: history holds " + std::to_string(sampler->num_output_tokens()) +
                           " output tokens but the plan asks for output " + std::to_string(seq.output_index));
  Sampler& ref = *sampler;
  samplers_[seq.id] = std::move(sampler);
  return ref;
}

int32_t BackendRunner::pick_draft(const SequencePlan& seq, size_t i, int32_t j, std::span<const float> head_logits) {
  DraftRows& rows = draft_rows_[i];
  if (j == 0) {
    rows.sampler.emplace(sampler_for(seq));  // a copy: the target's sampler sees only emitted tokens
    rows.q.clear();
    rows.num_drafts = 0;
  }
  if (!rows.sampler || j != rows.num_drafts)
    throw std::logic_error("runner: draft " + std::to_string(j) + " of request " + std::to_string(seq.id) +
                           " picked out of order");
  const uint64_t position = static_cast<uint64_t>(seq.output_index) + static_cast<uint64_t>(j);
  const int32_t id = seq.sampling->seed.has_value() || backend_draws(seq)
                         ? draw_coupled_draft(*rows.sampler, head_logits, position)
                         : draw_draft(*rows.sampler, head_logits, position, rows.q.emplace_back());
  rows.sampler->accept(id);
  ++rows.num_drafts;
  return id;
}

std::vector<int32_t> BackendRunner::sample_and_verify(const SequencePlan& seq, size_t i, int64_t first_row,
                                                      const std::vector<int32_t>& drafts, SequenceOutput& result) {
  Sampler& sampler = sampler_for(seq);
  result.num_drafted = static_cast<int32_t>(drafts.size());
  if (argmax_only(seq) || backend_draws(seq)) {
    // verify_drafts' exact rule on the backend's ids: accept drafts while they equal the
    // target's argmax (or draw), then emit the first target id that differs (or the bonus row's).
    const int32_t* target = (argmax_only(seq) ? forward_.argmax_ids.data() : forward_.drawn_ids.data()) + first_row;
    size_t j = 0;
    while (j < drafts.size() && drafts[j] == target[j]) ++j;
    result.tokens.assign(target, target + j + 1);
    for (const int32_t id : result.tokens) sampler.accept(id);
    return result.tokens;
  }
  const size_t num_vocab = static_cast<size_t>(forward_.num_vocab);
  const std::span<const float> logits(forward_.sequence_logits(i), (drafts.size() + 1) * num_vocab);
  // q exists for a sampled request's drafts; greedy ones (and none) verify exactly.
  std::span<const TokenDistribution> q;
  if (!drafts.empty() && draft_rows_[i].q.size() == drafts.size()) q = draft_rows_[i].q;
  const std::vector<SampledToken> picked =
      verify_drafts(sampler, logits, forward_.num_vocab, drafts, q);
  std::vector<int32_t> emitted;
  for (const SampledToken& t : picked) {
    emitted.push_back(t.id);
    if (seq.sampling->logprobs || seq.sampling->top_logprobs > 0) {
      OutputLogprob lp;
      lp.token = t.id;
      lp.logprob = t.logprob;
      for (const TokenLogprob& alt : t.top_logprobs) lp.top.emplace_back(alt.id, alt.logprob);
      result.logprobs.push_back(std::move(lp));
    }
  }
  result.tokens = emitted;
  return emitted;
}

std::vector<std::vector<int32_t>> BackendRunner::sample_all(const StepPlan& plan,
                                                             const std::vector<std::vector<int32_t>>& drafts, StepOutput& out) {
  const size_t n = plan.sequences.size();
  std::vector<std::vector<int32_t>> emitted(n);
  std::vector<size_t> on_host;  // sequences whose rows the host samples
  for (size_t i = 0; i < n; ++i) {
    const SequencePlan& p = plan.sequences[i];
    if (!p.sample) continue;
    if (argmax_only(p) || backend_draws(p))
      emitted[i] = sample_and_verify(p, i, forward_.logit_begin[i], drafts[i], out.sequences[i]);
    else on_host.push_back(i);
  }
  // A row costs a pass over the vocabulary (~250k tokens for Qwen3.5/3.6): the sequences draw
  // side by side, each with its own sampler (execute created them) and output.
  sampling_pool_.run(static_cast<int64_t>(on_host.size()), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const size_t i = on_host[static_cast<size_t>(k)];
      emitted[i] = sample_and_verify(plan.sequences[i], i, forward_.logit_begin[i], drafts[i], out.sequences[i]);
    }
  });
  return emitted;
}

bool BackendRunner::argmax_only(const SequencePlan& seq) const {
  return device_greedy_ && seq.sampling != nullptr && only_argmax_needed(*seq.sampling);
}

bool BackendRunner::backend_draws(const SequencePlan& seq) const {
  return backend_draws_ && seq.sampling != nullptr && only_draw_needed(*seq.sampling);
}

uint64_t BackendRunner::seed_of(const SequencePlan& seq) const {
  return seq.sampling->seed.value_or(seed_salt_ ^ seq.id);
}

void BackendRunner::set_device_greedy(bool on) {
  device_greedy_ = on;
  if (drafter_) drafter_->set_device_argmax(on);
}

void BackendRunner::set_backend_draws(bool on) { backend_draws_ = on; }

void BackendRunner::reserve_checkpoints(int32_t num_device, int32_t num_host) {
  backend_.reserve_checkpoints(num_device, num_host);
}

void BackendRunner::execute(const StepPlan& plan, StepOutput& out) {
  // Prefix-cache saves, copies and restores first: drafting reads the restored prefix's MTP rows.
  if (drafter_) resume_rows_.on_cache_ops(plan.cache_ops);
  if (!plan.cache_ops.empty()) backend_.apply_cache_ops(plan.cache_ops);
  const size_t n = plan.sequences.size();
  draft_rows_.assign(n, DraftRows{});
  // Every sampled sequence's sampler exists before the drafts: the MTP drafter's pickers and
  // sample_all then only look them up, from several threads.
  for (const SequencePlan& p : plan.sequences) {
    if ((p.sample || p.draft_depth > 0) && p.sampling != nullptr) sampler_for(p);
  }
  const MtpDrafter::DraftPicker pick = [&](size_t i, int32_t j, std::span<const float> head_logits) {
    return pick_draft(plan.sequences[i], i, j, head_logits);
  };
  std::vector<std::vector<int32_t>> drafts = drafter_  ? drafter_->draft(plan, pick)
                                             : dflash_ ? dflash_->draft(plan, pick)
                                                       : std::vector<std::vector<int32_t>>(n);
  const bool drafting = drafter_ != nullptr || dflash_ != nullptr;

  BatchPlan batch;
  // DFlash's context: the target layers' outputs of every speculative row.
  if (dflash_ && std::any_of(plan.sequences.begin(), plan.sequences.end(), [](const SequencePlan& p) { return p.speculative; }))
    batch.capture_layers = dflash_->capture_layers();
  batch.sequences.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const SequencePlan& p = plan.sequences[i];
    SequenceStep& step = batch.sequences.emplace_back();
    step.slot = p.slot;
    step.num_cached_tokens = p.num_cached_tokens;
    step.tokens.assign(p.tokens.begin(), p.tokens.end());
    step.tokens.insert(step.tokens.end(), drafts[i].begin(), drafts[i].end());
    step.kv_blocks.assign(p.kv_blocks.begin(), p.kv_blocks.end());
    step.num_logits = p.sample ? 1 + static_cast<int32_t>(drafts[i].size()) : 0;
    step.num_hidden = drafting && p.speculative ? static_cast<int32_t>(step.tokens.size()) : 0;
    step.keep_row_states = !drafts[i].empty();
    step.logits_to_host = !(p.sample && (argmax_only(p) || backend_draws(p)));  // only the ids leave the device
    if (p.sample && backend_draws(p)) {
      for (int32_t j = 0; j < step.num_logits; ++j)
        step.draws.push_back(draw_params_of(*p.sampling, seed_of(p), static_cast<uint64_t>(p.output_index + j)));
    }
  }
  backend_.forward(batch, forward_);

  const std::vector<std::vector<int32_t>> emitted_of = sample_all(plan, drafts, out);

  const int64_t h = backend_.config().num_embd;
  std::vector<RequestId> live;
  std::vector<MtpDrafter::CatchUp> catch_up;
  std::vector<DFlashDrafter::CatchUp> dflash_rows;
  const int64_t feature_width = dflash_ ? static_cast<int64_t>(dflash_->capture_layers().size()) * h : 0;
  for (size_t i = 0; i < n; ++i) {
    const SequencePlan& p = plan.sequences[i];
    live.push_back(p.id);
    std::vector<int32_t> emitted;
    int64_t num_kept = static_cast<int64_t>(p.tokens.size());
    if (p.sample) {
      emitted = emitted_of[i];
      // Rows kept: the step's tokens and the accepted drafts (all emitted tokens but the last).
      num_kept = static_cast<int64_t>(p.tokens.size()) + static_cast<int64_t>(emitted.size()) - 1;
      if (!drafts[i].empty()) backend_.rollback(p.slot, static_cast<int32_t>(num_kept));
    }
    if (!drafting) continue;
    if (dflash_) {
      if (p.speculative)
        dflash_rows.push_back({&p, forward_.layer_hidden.data() + forward_.hidden_begin[i] * feature_width, num_kept});
      continue;
    }
    const int32_t row_block_index = (p.num_cached_tokens - 1) / backend_.cache_config().kv_block_tokens;
    const int32_t row_block = p.num_cached_tokens > 0 && row_block_index < static_cast<int32_t>(p.kv_blocks.size())
                                  ? p.kv_blocks[static_cast<size_t>(row_block_index)]
                                  : -1;
    std::optional<MtpResumeRows::Row> resume = resume_rows_.take_resume(p.slot, p.num_cached_tokens, row_block);
    if (!p.speculative) {
      resume_rows_.forget(p.slot);
      continue;
    }
    MtpDrafter::CatchUp& c = catch_up.emplace_back();
    c.seq = &p;
    const int64_t history_size = static_cast<int64_t>(p.history.size());
    // Resumed from a checkpoint at P = num_cached_tokens: the head's row P-1 was computed with
    // the saver's token P; re-run it with ours, in the block the admission copied for it
    // (take_resume checks; a shared block keeps the saver's row: drafts weaker, tokens exact).
    const bool rerun = resume && p.num_cached_tokens < history_size;
    if (rerun) {
      c.first_position = p.num_cached_tokens - 1;
      c.hidden = std::move(resume->hidden);
      c.next_tokens.push_back(p.history[static_cast<size_t>(p.num_cached_tokens)]);
    }
    const int64_t first_hidden = forward_.hidden_begin[i];
    c.hidden.insert(c.hidden.end(), forward_.hidden.begin() + first_hidden * h,
                    forward_.hidden.begin() + (first_hidden + num_kept) * h);
    for (int64_t r = 0; r < num_kept; ++r) {
      const int64_t next = p.num_cached_tokens + r + 1;  // position of the token after row r
      c.next_tokens.push_back(next < history_size ? p.history[static_cast<size_t>(next)]
                                                  : emitted[static_cast<size_t>(next - history_size)]);
    }
    c.drafts_next = p.sample;
    c.next_output_position = p.output_index + static_cast<int64_t>(emitted.size());
    // A decode step the policy left at depth 0: its rows wait until the stream drafts again
    // (a resume's re-run of row P-1 never waits: mtp_drafter.h).
    c.may_wait = p.is_decode && p.draft_depth == 0 && !rerun;
    const int64_t last = first_hidden + num_kept - 1;
    resume_rows_.on_caught_up(p.slot, p.num_cached_tokens + static_cast<int32_t>(num_kept) - 1,
                              std::span<const float>(forward_.hidden.data() + last * h, static_cast<size_t>(h)));
  }
  if (drafter_) {
    drafter_->catch_up(catch_up);
    drafter_->retain(live);
  }
  if (dflash_) {
    dflash_->catch_up(dflash_rows);
    dflash_->retain(live);
  }
  draft_rows_.clear();  // q lives for one step only
  const std::unordered_set<RequestId> live_set(live.begin(), live.end());
  std::erase_if(samplers_, [&](const auto& entry) { return !live_set.contains(entry.first); });
}

}  // namespace deltaserve::runtime
