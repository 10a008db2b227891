#include "server/fake_engine.h"

#include <algorithm>
#include <string_view>

namespace deltaserve::server {
namespace {

using scheduler::FinishReason;
using scheduler::RequestEvent;

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool has_fail_marker(const std::vector<int32_t>& prompt) {
  constexpr std::string_view kMarker = "[[fail]]";
  return std::search(prompt.begin(), prompt.end(), kMarker.begin(), kMarker.end(),
                     [](int32_t t, char c) { return t == static_cast<unsigned char>(c); }) !=
         prompt.end();
}

}  // namespace

FakeEngine::FakeEngine(FakeEngineConfig config, scheduler::EngineObserver* observer)
    : config_(std::move(config)), observer_(observer) {
  stats_.num_state_slots_total = config_.num_slots;
  stats_.num_kv_blocks_total = config_.num_kv_blocks;
  stats_.pinned_bytes = 64 << 20;  // one arena, registered once (as the real runtime does)
  stats_.pinned_registrations = 1;
  thread_ = std::thread([this] { run(); });
}

FakeEngine::~FakeEngine() { stop(); }

EngineLimits FakeEngine::limits() const {
  EngineLimits l;
  l.max_streams = config_.num_slots;
  l.max_waiting = config_.max_waiting;
  l.context_tokens = config_.context_tokens;
  l.kv_block_tokens = config_.kv_block_tokens;
  l.num_kv_blocks = config_.num_kv_blocks;
  l.kv_bytes = int64_t{config_.num_kv_blocks} * config_.kv_block_tokens * 1024;
  l.state_bytes = int64_t{config_.num_slots} * (1 << 20);
  l.max_draft_depth = 1;
  l.device = "fake";
  return l;
}

std::vector<int32_t> FakeEngine::echo_of(const std::vector<int32_t>& prompt) const {
  auto begin = prompt.begin();
  if (config_.marker_user >= 0) {
    const auto last = std::find(prompt.rbegin(), prompt.rend(), config_.marker_user);
    if (last != prompt.rend()) begin = last.base();  // just after the marker
  }
  auto end = std::find(begin, prompt.end(), config_.marker_end);
  return {begin, end};
}

scheduler::SubmitResult FakeEngine::submit(scheduler::RequestSpec spec, scheduler::EventSink sink) {
  scheduler::SubmitResult result;
  std::lock_guard lock(mutex_);
  if (draining_ || stopping_) {
    result.status = scheduler::SubmitStatus::NotReady;
    result.message = "the engine is draining";
    return result;
  }
  if (static_cast<int64_t>(spec.prompt_tokens.size()) >= config_.context_tokens) {
    result.status = scheduler::SubmitStatus::TooLong;
    result.message = "the prompt leaves no room in the context of " +
                     std::to_string(config_.context_tokens) + " tokens";
    return result;
  }
  if (static_cast<int32_t>(waiting_.size()) >= config_.max_waiting) {
    result.status = scheduler::SubmitStatus::QueueFull;
    result.message = "the waiting queue is full (" + std::to_string(config_.max_waiting) +
                     " requests)";
    return result;
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->echo = echo_of(spec.prompt_tokens);
  seq->fail = has_fail_marker(spec.prompt_tokens);
  seq->spec = std::move(spec);
  seq->sink = std::move(sink);
  seq->submit_time = Clock::now();
  result.id = seq->id;
  waiting_.push_back(std::move(seq));
  stats_.num_waiting = static_cast<int32_t>(waiting_.size());
  work_cv_.notify_one();
  return result;
}

void FakeEngine::cancel(scheduler::RequestId id) {
  std::lock_guard lock(mutex_);
  cancels_.push_back(id);
  work_cv_.notify_one();
}

scheduler::EngineStats FakeEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool FakeEngine::ready() const {
  std::lock_guard lock(mutex_);
  return !draining_ && !stopping_;
}

void FakeEngine::begin_drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

void FakeEngine::cancel_all() {
  std::lock_guard lock(mutex_);
  cancel_all_ = true;
  work_cv_.notify_one();
}

bool FakeEngine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_cv_.wait_for(lock, timeout, [this] {
    return waiting_.empty() && running_.empty() && cancels_.empty();
  });
}

void FakeEngine::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cancel_all_ = true;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void FakeEngine::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [this] {
        return stopping_ || cancel_all_ || !cancels_.empty() || !waiting_.empty() ||
               !running_.empty();
      });
    }
    apply_cancels();
    std::vector<Sequence*> admitted;
    bool stop_now = false;
    {
      std::lock_guard lock(mutex_);
      admit_locked(admitted);
      stop_now = stopping_ && waiting_.empty() && running_.empty();
    }
    if (stop_now) return;
    if (!running_.empty()) {
      std::this_thread::sleep_for(config_.step_time);  // the forward pass
      step();
    }
    std::lock_guard lock(mutex_);
    refresh_stats_locked();
    if (waiting_.empty() && running_.empty() && cancels_.empty()) idle_cv_.notify_all();
  }
}

// Moves waiting sequences into free slots while their whole KV reservation (prompt plus
// max_tokens, capped by the context) fits; admission order is arrival order.
void FakeEngine::admit_locked(std::vector<Sequence*>& admitted) {
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.num_slots) {
    Sequence& seq = *waiting_.front();
    const int64_t tokens = std::min<int64_t>(
        static_cast<int64_t>(seq.spec.prompt_tokens.size()) + seq.spec.max_tokens,
        config_.context_tokens);
    const int32_t blocks =
        static_cast<int32_t>((tokens + config_.kv_block_tokens - 1) / config_.kv_block_tokens);
    if (num_blocks_used_ + blocks > config_.num_kv_blocks) break;
    num_blocks_used_ += blocks;
    seq.num_blocks = blocks;
    seq.scheduled_time = Clock::now();
    admitted.push_back(&seq);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  refresh_stats_locked();
}

// Counts change under the lock together with the queues they count, so a reader never sees
// a request that has left one queue missing from the other or finished but still running.
void FakeEngine::refresh_stats_locked() {
  stats_.num_running = static_cast<int32_t>(running_.size());
  stats_.num_waiting = static_cast<int32_t>(waiting_.size());
  stats_.num_state_slots_used = stats_.num_running;
  stats_.num_kv_blocks_used = num_blocks_used_;
  stats_.num_steps = num_steps_;
}

void FakeEngine::apply_cancels() {
  std::vector<std::unique_ptr<Sequence>> cancelled;
  {
    std::lock_guard lock(mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (cancel_all_ || std::find(cancels_.begin(), cancels_.end(), (*it)->id) != cancels_.end()) {
        cancelled.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if (cancel_all_ || std::find(cancels_.begin(), cancels_.end(), (*it)->id) != cancels_.end()) {
        num_blocks_used_ -= (*it)->num_blocks;
        cancelled.push_back(std::move(*it));
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    cancels_.clear();
    cancel_all_ = false;
    stats_.num_cancellations += cancelled.size();
    refresh_stats_locked();  // before the events: whoever wakes on them sees the freed slots
  }
  for (auto& seq : cancelled) {
    RequestEvent event;
    event.id = seq->id;
    event.finish = FinishReason::Cancelled;
    event.num_prompt_tokens = static_cast<int32_t>(seq->spec.prompt_tokens.size());
    event.num_generated_tokens = seq->num_generated;
    seq->sink(event);
    if (observer_) {
      scheduler::RequestReport report;
      report.id = seq->id;
      report.finish = FinishReason::Cancelled;
      report.num_prompt_tokens = event.num_prompt_tokens;
      report.num_generated_tokens = seq->num_generated;
      report.e2e_ms = ms_between(seq->submit_time, Clock::now());
      observer_->on_request_finished(report);
    }
  }
}

// One step: every running sequence emits one token, two on odd steps (an accepted draft).
void FakeEngine::step() {
  ++num_steps_;
  const Clock::time_point now = Clock::now();
  const int32_t per_step = num_steps_ % 2 == 1 ? 2 : 1;
  scheduler::StepReport report;
  std::vector<size_t> finished;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = *running_[i];
    const scheduler::RequestSpec& spec = seq.spec;
    RequestEvent event;
    event.id = seq.id;
    event.num_prompt_tokens = static_cast<int32_t>(spec.prompt_tokens.size());
    const bool first = seq.num_generated == 0;
    if (first) {
      report.num_prefill_tokens += event.num_prompt_tokens;
      report.num_rows += event.num_prompt_tokens;
    } else {
      report.num_rows += 2;  // the decode row and one draft row
      ++report.num_decode_sequences;
      if (observer_) observer_->on_drafts(0, 1, per_step == 2 ? 1 : 0);
    }
    const int32_t eos = config_.eos_token_ids.empty() ? -1 : config_.eos_token_ids.front();
    const bool stops_at_eos = eos >= 0 && contains(spec.stop_token_ids, eos);
    FinishReason reason = FinishReason::None;
    for (int32_t k = 0; k < (first ? 1 : per_step); ++k) {
      if (seq.fail && seq.num_generated >= 2) {
        reason = FinishReason::Error;
        event.error = "fake engine failure (the prompt asked for it)";
        break;
      }
      const size_t idx = static_cast<size_t>(seq.num_generated);
      int32_t token = '.';
      if (idx < seq.echo.size()) {
        token = seq.echo[idx];
      } else if (stops_at_eos) {
        token = eos;
      } else if (!seq.echo.empty()) {
        token = seq.echo[idx % seq.echo.size()];
      }
      if (contains(spec.stop_token_ids, token)) {  // a stop id is neither sent nor counted
        reason = FinishReason::Stop;
        break;
      }
      event.tokens.push_back(token);
      if (spec.sampling.logprobs) {
        scheduler::TokenLogprob lp{token, -0.25f * static_cast<float>(idx % 4), {}};
        for (int32_t t = 0; t < spec.sampling.top_logprobs; ++t) {
          lp.top.emplace_back(t == 0 ? token : ('a' + t) % 256, -0.25f * static_cast<float>(t));
        }
        event.logprobs.push_back(std::move(lp));
      }
      ++seq.num_generated;
      ++report.num_generated_tokens;
      if (seq.num_generated >= spec.max_tokens ||
          event.num_prompt_tokens + seq.num_generated >= config_.context_tokens) {
        reason = FinishReason::Length;
        break;
      }
    }
    const int32_t emitted = static_cast<int32_t>(event.tokens.size());
    if (emitted > 0) {
      if (first) {
        seq.first_token_time = now;
      } else if (observer_) {
        // Tokens accepted together share the step: the gap is spread evenly over them.
        const double gap_ms = ms_between(seq.last_token_time, now) / emitted;
        for (int32_t k = 0; k < emitted; ++k) observer_->on_inter_token(seq.id, gap_ms);
      }
      seq.last_token_time = now;
    }
    event.num_generated_tokens = seq.num_generated;
    if (reason != FinishReason::None) {
      finish(seq, event, reason);
      finished.push_back(i);
    } else {
      seq.sink(event);
    }
  }
  std::vector<std::unique_ptr<Sequence>> done;  // destroyed (sinks included) after the lock
  {
    std::lock_guard lock(mutex_);
    for (auto it = finished.rbegin(); it != finished.rend(); ++it) {
      const auto at = running_.begin() + static_cast<std::ptrdiff_t>(*it);
      done.push_back(std::move(*at));
      running_.erase(at);
    }
    refresh_stats_locked();
  }
  report.step_ms = ms_between(now - config_.step_time, now);
  if (observer_) observer_->on_step(report);
}

void FakeEngine::finish(Sequence& seq, RequestEvent& event, FinishReason reason) {
  {
    std::lock_guard lock(mutex_);
    num_blocks_used_ -= seq.num_blocks;
  }
  event.finish = reason;
  seq.sink(event);
  if (!observer_) return;
  const Clock::time_point now = Clock::now();
  scheduler::RequestReport report;
  report.id = seq.id;
  report.finish = reason;
  report.num_prompt_tokens = static_cast<int32_t>(seq.spec.prompt_tokens.size());
  report.num_generated_tokens = seq.num_generated;
  report.queue_ms = ms_between(seq.submit_time, seq.scheduled_time);
  report.ttft_ms = ms_between(seq.submit_time, seq.first_token_time);
  report.e2e_ms = ms_between(seq.submit_time, now);
  const double decode_s = std::chrono::duration<double>(seq.last_token_time - seq.first_token_time).count();
  if (seq.num_generated > 1 && decode_s > 0.0) {
    report.decode_tokens_per_s = (seq.num_generated - 1) / decode_s;
  }
  observer_->on_request_finished(report);
}

}  // namespace deltaserve::server
