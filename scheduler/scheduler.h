// The plan builder: request lifecycle, token budget, slot and KV-block accounting and
// preemption, without threads. The Engine drives it (add/cancel from its inbox, then
// plan -> runner -> commit); the tests drive it directly against a fake runner.
//
// Owner: one thread (the engine thread). Not thread-safe, except check_submit(), which
// reads only the const config. Never blocks. Sinks and observer callbacks are called from
// inside add(), cancel(), cancel_all() and commit(); they must not block.
//
// Lifecycle: waiting -> running (prefill chunks, then one decode row a step) -> finished
// (Stop, Length, Error) or cancelled; running -> waiting again on preemption.
//
// Each plan():
//  1. Token budget in admission order: every running sequence missing one token (decode)
//     gets its row first, then its draft rows (depths from the speculation policy,
//     scheduler/draft_policy.h: the most expected tokens per second of predicted step time,
//     within each stream's draft_limit and the budget); prefill chunks (at most
//     max_prefill_chunk_tokens each) fill the rest. Config guarantees budget >= max_num_seqs,
//     so decode rows always fit.
//  2. KV blocks in admission order. When the pool runs dry, a prefill chunk first shrinks
//     to the blocks at hand; otherwise the most recently admitted running sequence is
//     preempted (slot and blocks freed, back to the front of waiting with its generated
//     tokens kept; with the prefix cache its state is checkpointed first, so it resumes from
//     there, or from its last checkpoint that survived the eviction, instead of recomputing
//     from scratch). The newest sequence itself just skips the step. Since one
//     sequence alone always fits the pool (config), the oldest always progresses.
//  3. Admission, only in a step that preempted nobody: strictly FCFS from the front of
//     waiting while a slot, budget and the blocks of the head's first chunk are available;
//     nobody overtakes a head that does not fit (no starvation of long prompts). With the
//     prefix cache (docs/prefix-cache.md) the head first resumes from its longest cached
//     prefix: those tokens count as computed, so budget, chunk and blocks see only the tail;
//     or it waits while a running sequence prefills a longer stretch of its prompt, whose
//     prefill is cut where the two diverge so that it checkpoints there (in-flight sharing).
// Whenever blocks run short, cached prefixes are evicted (LRU, among those whose eviction
// returns a block) before anyone is preempted.
// plan() and commit() alternate: nothing may call add/cancel between them, because the
// plan's spans point into the sequences.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/block_pool.h"
#include "scheduler/draft_policy.h"
#include "scheduler/engine_stats.h"
#include "runtime/model_runner.h"
#include "scheduler/prefix_cache.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/sequence.h"
#include "scheduler/slot_pool.h"

namespace deltaserve::scheduler {

// Injected so tests control time; must be callable from any thread (Engine::submit
// stamps the submit time on the caller's thread).
using Clock = std::function<TimePoint()>;

class Scheduler {
 public:
  // `config` must come from resolve_config(.., limits). `observer` may be null.
  Scheduler(const SchedulerConfig& config, const runtime::RunnerLimits& limits,
            EngineObserver* observer = nullptr, Clock clock = {});
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  // Accepted, or TooLong when the prompt leaves no room for one generated token. Any
  // thread. The queue bound and readiness are the Engine's.
  SubmitResult check_submit(const RequestSpec& spec) const;

  // Appends the request to the waiting queue. A request check_submit() rejects or that is
  // malformed (empty prompt, max_tokens < 1, token id outside the vocabulary, duplicate
  // id: the server validates these first) ends at once with a FinishReason::Error event.
  void add(RequestId id, RequestSpec spec, EventSink sink, TimePoint submit_time);
  // Ends a waiting or running request now: its slot and blocks are free for the next
  // plan; its sink gets a final Cancelled event. Returns false for unknown/finished ids.
  bool cancel(RequestId id);
  void cancel_all();

  runtime::StepPlan plan();
  // Applies the runner's results to the sequences of `plan` (the last plan() result):
  // appends tokens, applies stop ids, max_tokens and the context limit, frees finished
  // sequences, delivers events. step_ms of the report is left to the caller.
  StepReport commit(const runtime::StepPlan& plan, const runtime::StepOutput& out);

  bool idle() const { return running_.empty() && waiting_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const SchedulerConfig& config() const { return config_; }
  const SlotPool& slots() const { return slots_; }
  const BlockPool& blocks() const { return blocks_; }
  // Fills the scheduler's fields of `stats` (everything but the runner's pinned memory).
  void fill_stats(EngineStats& stats) const;

  // Full check, O(blocks + sequences): pools consistent, every used slot and block owned
  // by exactly one running sequence, waiting sequences own nothing, block tables cover
  // the computed tokens. Returns false and says why on the first violation.
  bool check_integrity(std::string* why) const;

  // Drops every cached prefix (the admin reset): all the cache's references return to the
  // pool. Running sequences keep theirs.
  void reset_prefix_cache();
  // The runner failed: the cache ops of that step may not have run, so nothing cached can be
  // trusted; drops the cache.
  void on_runner_failure();
  const PrefixCache* prefix_cache() const { return cache_.get(); }

 private:
  std::string validate(const RequestSpec& spec) const;
  bool reserve_blocks(std::vector<int32_t>& want);
  void admit(int32_t budget, std::vector<int32_t>& want);
  // want[i] rows for running_[i]; for a decoding sequence the rows past the first are drafts.
  runtime::StepPlan build_plan(const std::vector<int32_t>& want) const;
  // Drafts this decoding sequence may carry at most: its request's and the config's limit and
  // its room to max_tokens and the context (the policy chooses within it).
  int32_t draft_limit(const Sequence& s) const;
  // Chooses the decoding sequences' draft rows (the policy) and adds them to want; returns the
  // rows added.
  int32_t plan_drafts(std::vector<int32_t>& want, int32_t budget);
  // Per-position acceptance bookkeeping and metrics after a verify step.
  void record_drafts(Sequence& s, const runtime::SequencePlan& p, const runtime::SequenceOutput& out);
  void preempt_newest();
  // Rows of a prompt chunk of at most `rows` for s, cut as runtime::RunnerLimits::prefill_chunk_align
  // asks (0 when no aligned cut fits); a chunk that finishes s is never cut.
  int32_t aligned_chunk(const Sequence& s, int32_t rows) const;
  int32_t append_tokens(Sequence& s, const runtime::SequenceOutput& out, TimePoint now);
  void report_tokens(Sequence& s, int32_t num_new, TimePoint now);
  void finish(Sequence& s, RequestEvent event, TimePoint now);
  bool deliver(Sequence& s, RequestEvent& event);
  void release(Sequence& s);
  // Allocates num_blocks ids, evicting cached prefixes while the pool is short.
  bool alloc_blocks(int32_t num_blocks, std::vector<int32_t>& blocks);
  // A prefill chunk of `rows` for s, cut at the next checkpoint position when it crosses one.
  int32_t checkpoint_cut(const Sequence& s, int32_t rows) const;
  // The next position past s.num_computed_tokens where a prefill checkpoint is due (every
  // prefix_checkpoint_tokens, and just before the prompt's last tokens), and whether s is at one.
  int64_t next_checkpoint(const Sequence& s) const;
  bool at_checkpoint(const Sequence& s) const;
  // Checkpoints s's slot at s.num_computed_tokens (the cache decides whether to keep it).
  void save_checkpoint(const Sequence& s);
  // A decode step took s past a multiple of --prefix-checkpoint-tokens (a decode checkpoint
  // is due: a long answer, or a preempted sequence, resumes within one interval).
  bool crossed_decode_checkpoint(const Sequence& s, int32_t num_computed_before) const;
  // Admits the waiting head from its cached prefix when there is one; false when it does not
  // fit now, or waits for a prefix another sequence is prefilling (nothing changed but that
  // sequence's cuts, and its chunk in `want`: plan_shared_cut).
  bool admit_head(int32_t budget, int32_t& num_rows, std::vector<int32_t>& want);
  // The running sequence whose prompt prefill s (with `cached` tokens of its prompt already
  // cached) should wait for: it prefills a stretch of s's prompt of at least kMinSharedTokens,
  // longer than what is cached, and has not passed it. Null when none; else `cut` is where its
  // checkpoint will let s resume (shared_cut of their common prefix).
  Sequence* shared_prefill(const Sequence& s, int32_t cached, int32_t& cut) const;
  // The last position at or before num_common (a prefix of r's prompt) where r's prefill can be
  // cut for a checkpoint: on the chunk grid, leaving an aligned last piece; r's prompt end as is.
  int32_t shared_cut(const Sequence& r, int32_t num_common) const;
  // Asks r for a checkpoint at `cut`: its prefill chunks are cut there from now on, and this
  // step's (want, indexed as running_) when it crosses it.
  void plan_shared_cut(Sequence& r, int32_t cut, std::vector<int32_t>& want);
  // The request drafts with the MTP head (its cached prefixes must carry exact MTP rows).
  bool speculative(const Sequence& s) const { return s.spec.draft_depth != 0 && config_.max_draft_depth > 0; }

  const SchedulerConfig config_;
  const runtime::RunnerLimits limits_;
  int32_t chunk_align_ = 1;  // limits_.prefill_chunk_align, or 1 when the chunk limits are below 2 of it
  EngineObserver* observer_;
  Clock clock_;
  SlotPool slots_;
  BlockPool blocks_;
  std::unique_ptr<PrefixCache> cache_;           // null while the prefix cache is off
  DraftPolicy policy_;
  AcceptanceEstimates acceptance_;
  double planned_ms_ = 0.0;  // the policy's prediction for the last plan (StepReport)
  std::vector<runtime::CacheOp> pending_ops_;    // for the next non-empty plan
  int64_t checkpoint_bytes_ = 0;

  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  std::deque<Sequence*> waiting_;   // FCFS; preempted sequences go back to the front
  std::vector<Sequence*> running_;  // admission order (oldest first)
  uint64_t next_admit_order_ = 1;

  uint64_t num_steps_ = 0;
  uint64_t num_preemptions_ = 0;
  uint64_t num_cancellations_ = 0;
};

}  // namespace deltaserve::scheduler
