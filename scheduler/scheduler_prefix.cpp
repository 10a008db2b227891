// Scheduler, prefix-cache part (docs/prefix-cache.md): admission from a cached prefix, block
// allocation that evicts cached prefixes before anyone is preempted, checkpoint cuts and saves.
#include <algorithm>

#include "scheduler/scheduler.h"

namespace deltaserve::scheduler {

bool Scheduler::alloc_blocks(int32_t num_blocks, std::vector<int32_t>& blocks) {
  while (!blocks_.block_alloc(num_blocks, blocks)) {
    if (!cache_ || !cache_->evict_for_blocks()) return false;
  }
  return true;
}

// The prompt's last kPromptTailTokens tokens are where a chat template renders the turn's
// ending (and, on the next turn, rewrites it: Qwen drops the answer's reasoning), so a
// checkpoint just before them is what the next turn can resume from.
constexpr int32_t kPromptTailTokens = 32;

int64_t Scheduler::next_checkpoint(const Sequence& s) const {
  const int32_t every = config_.prefix_checkpoint_tokens;
  int64_t next = every > 0 ? (int64_t{s.num_computed_tokens} / every + 1) * every : INT64_MAX;
  const int64_t tail = int64_t{s.num_prompt_tokens - kPromptTailTokens} / chunk_align_ * chunk_align_;
  if (tail > s.num_computed_tokens) next = std::min(next, tail);
  for (const int32_t cut : s.shared_cuts) {
    if (cut > s.num_computed_tokens) next = std::min<int64_t>(next, cut);
  }
  return next;
}

bool Scheduler::crossed_decode_checkpoint(const Sequence& s, int32_t num_computed_before) const {
  const int32_t every = config_.prefix_checkpoint_tokens;
  return every > 0 && s.num_computed_tokens / every > num_computed_before / every;
}

bool Scheduler::at_checkpoint(const Sequence& s) const {
  const int32_t every = config_.prefix_checkpoint_tokens;
  if (every > 0 && s.num_computed_tokens % every == 0) return true;
  const int64_t tail = int64_t{s.num_prompt_tokens - kPromptTailTokens} / chunk_align_ * chunk_align_;
  if (tail > 0 && s.num_computed_tokens == tail) return true;
  return std::find(s.shared_cuts.begin(), s.shared_cuts.end(), s.num_computed_tokens) != s.shared_cuts.end();
}

int32_t Scheduler::checkpoint_cut(const Sequence& s, int32_t rows) const {
  if (!cache_ || rows <= 0) return rows;
  const int64_t next = next_checkpoint(s);
  if (s.num_computed_tokens + int64_t{rows} <= next) return rows;
  if (s.num_tokens() - next < chunk_align_) return rows;  // a cut there would leave too short a last piece
  return static_cast<int32_t>(next - s.num_computed_tokens);
}

// In-flight sharing: requests that arrive together with one long system prompt would each
// prefill it (none has a checkpoint yet). The later ones wait, at the head of the queue, until
// the running sequence that prefills the shared stretch has checkpointed it; the wait ends when
// it passes that point or leaves the running set (finished, cancelled, preempted), so it never
// outlasts one prefill of the shared prefix. The point is where the prompts diverge (rounded
// down to the runner's chunk grid, so the cut changes no bit: docs/prefix-cache.md), not the
// last checkpoint interval before it: the saver's prefill is cut there (shared_cuts), so the
// shared prompt is prefilled once. (SGLang holds back requests that share a prefix with one in
// the batch the same way; its radix cache needs no cut, a recurrent state does.)
// A shared stretch shorter than this (a chat template's header) is not worth a wait (the
// waiter loses a step, the saver a chunk cut; SGLang's in-batch prefix threshold is the same
// 32 tokens).
constexpr int32_t kMinSharedTokens = 32;

int32_t Scheduler::shared_cut(const Sequence& r, int32_t num_common) const {
  if (num_common >= r.num_prompt_tokens) return r.num_prompt_tokens;  // its end-of-prompt checkpoint
  int32_t cut = num_common / chunk_align_ * chunk_align_;
  if (r.num_tokens() - cut < chunk_align_) cut -= chunk_align_;  // checkpoint_cut leaves no shorter last piece
  return cut;
}

Sequence* Scheduler::shared_prefill(const Sequence& s, int32_t cached, int32_t& cut) const {
  Sequence* best = nullptr;
  for (Sequence* r : running_) {
    if (r->num_computed_tokens >= r->num_prompt_tokens) continue;  // past its prompt: nothing more to share
    if (speculative(s) && !speculative(*r)) continue;  // its checkpoints lack the MTP rows s needs
    const int32_t limit = std::min(s.num_tokens() - 1, r->num_prompt_tokens);
    int32_t common = 0;
    while (common < limit && s.tokens[static_cast<size_t>(common)] == r->tokens[static_cast<size_t>(common)]) ++common;
    const int32_t at = shared_cut(*r, common);
    // A long enough shared stretch is waited for whatever the cache lacks of it: r's own
    // checkpoints on the way (intervals, the prompt's tail) do not end the wait short of it.
    if (at < kMinSharedTokens || at <= cached || r->num_computed_tokens >= at) continue;
    if (best == nullptr || at > cut) {
      best = r;
      cut = at;
    }
  }
  return best;
}

void Scheduler::plan_shared_cut(Sequence& r, int32_t cut, std::vector<int32_t>& want) {
  if (cut >= r.num_prompt_tokens) return;  // the end of its prompt is a checkpoint anyway
  if (std::find(r.shared_cuts.begin(), r.shared_cuts.end(), cut) == r.shared_cuts.end()) r.shared_cuts.push_back(cut);
  // This step's chunk of r was planned before (r may have been admitted in this very step).
  const auto i = static_cast<size_t>(std::find(running_.begin(), running_.end(), &r) - running_.begin());
  if (i < want.size() && int64_t{r.num_computed_tokens} + want[i] > cut) want[i] = cut - r.num_computed_tokens;
}

bool Scheduler::admit_head(int32_t budget, int32_t& num_rows, std::vector<int32_t>& want) {
  Sequence& s = *waiting_.front();
  const int32_t block_tokens = limits_.cache.kv_block_tokens;
  PrefixCache::Hit hit;
  if (cache_) hit = cache_->lookup(s.tokens, s.num_tokens() - 1, speculative(s));
  int32_t cut = 0;
  if (Sequence* saver = cache_ ? shared_prefill(s, hit.num_tokens, cut) : nullptr) {
    plan_shared_cut(*saver, cut, want);
    return false;  // lookup pins nothing
  }
  s.num_computed_tokens = hit.num_tokens;  // cached tokens are done: the chunk sees the tail only
  num_rows = checkpoint_cut(s, aligned_chunk(s, std::min({s.num_missing_tokens(), config_.max_prefill_chunk_tokens, budget})));
  if (num_rows == 0) {
    s.num_computed_tokens = 0;
    return false;
  }
  // A speculative request whose token at P differs from the saver's re-runs the MTP head's
  // row P-1 (runtime/mtp_resume_rows.h), which must lie in a block of its own: on a block edge
  // the last full block is copied (like a partial one) instead of shared.
  if (hit.checkpoint != nullptr && speculative(s) && hit.partial_block < 0 && !hit.blocks.empty() &&
      hit.next_token != s.tokens[static_cast<size_t>(hit.num_tokens)]) {
    hit.partial_block = hit.blocks.back();
    hit.blocks.pop_back();
  }
  std::vector<int32_t> blocks;
  if (hit.checkpoint != nullptr) cache_->share_blocks(hit, blocks);
  const int32_t num_new = blocks_for_tokens(int64_t{hit.num_tokens} + num_rows, block_tokens) - static_cast<int32_t>(blocks.size());
  std::vector<int32_t> fresh;
  if (!alloc_blocks(num_new, fresh)) {
    blocks_.block_free(blocks);
    if (cache_) cache_->unpin(hit);
    s.num_computed_tokens = 0;
    return false;
  }
  s.slot = *slots_.slot_alloc();
  if (hit.checkpoint != nullptr) cache_->use(hit, s.slot, hit.partial_block >= 0 ? fresh.front() : -1, pending_ops_);
  blocks.insert(blocks.end(), fresh.begin(), fresh.end());
  s.kv_blocks = std::move(blocks);
  // A sequence scheduled before was preempted: its lookup is counted apart (PrefixCacheStats).
  if (cache_) cache_->count_query(s.num_tokens(), hit.num_tokens, s.was_scheduled);
  if (s.num_cached_prompt_tokens < 0) s.num_cached_prompt_tokens = std::min(hit.num_tokens, s.num_prompt_tokens);
  return true;
}

void Scheduler::save_checkpoint(const Sequence& s) {
  if (!cache_ || s.slot < 0 || s.num_computed_tokens < 1) return;
  const int32_t at = s.num_computed_tokens;
  const int32_t next_token = at < s.num_tokens() ? s.tokens[static_cast<size_t>(at)] : -1;
  cache_->save(s.tokens, at, s.kv_blocks, next_token, speculative(s), s.slot, pending_ops_);
}

void Scheduler::reset_prefix_cache() {
  if (cache_) cache_->clear();
}

void Scheduler::on_runner_failure() {
  // The failed step's saves may not have run: a checkpoint could name a buffer never written.
  reset_prefix_cache();
}

}  // namespace deltaserve::scheduler
