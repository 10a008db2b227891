#include "scheduler/engine.h"

#include <algorithm>
#include <exception>

namespace deltaserve::scheduler {
namespace {

Clock or_steady(Clock clock) {
  if (clock) return clock;
  return [] { return std::chrono::steady_clock::now(); };
}

}  // namespace

Engine::Engine(runtime::ModelRunner& runner, const SchedulerConfig& config, EngineObserver* observer,
               Clock clock)
    : runner_(runner),
      observer_(observer),
      clock_(or_steady(std::move(clock))),
      scheduler_(resolve_config(config, runner.limits()), runner.limits(), observer, clock_) {
  scheduler_.fill_stats(stats_);
  if (const PrefixCache* cache = scheduler_.prefix_cache()) prefix_directory_ = &cache->directory();
  free_places_ = scheduler_.config().max_num_seqs;
  const SchedulerConfig& c = scheduler_.config();
  if (c.prefix_cache) runner_.reserve_checkpoints(c.prefix_device_checkpoints, c.prefix_host_checkpoints);
}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard lock(mutex_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

// The step loop. Sleeps in take_inbox() while the last plan was empty (idle, or nothing
// schedulable until the inbox changes); otherwise runs one step per iteration.
void Engine::run() {
  bool wait = true;
  for (;;) {
    Inbox inbox = take_inbox(wait);
    apply(inbox);  // new requests, then cancels: freed before this step is planned
    if (inbox.stop) break;
    const TimePoint start = clock_();
    runtime::StepPlan plan = scheduler_.plan();
    if (!plan.empty()) {
      execute(plan);  // the forward pass; no lock held
      StepReport report = scheduler_.commit(plan, out_);
      report.step_ms = std::chrono::duration<double, std::milli>(clock_() - start).count();
      if (observer_ != nullptr) observer_->on_step(report);
    }
    wait = plan.empty();
    publish();
  }
  scheduler_.cancel_all();  // every sink still gets its final event
  publish();
}

Engine::Inbox Engine::take_inbox(bool wait) {
  std::unique_lock lock(mutex_);
  if (wait) {
    work_cv_.wait(lock, [this] {
      return stopping_ || inbox_.cancel_all || inbox_.reset_prefix_cache || !inbox_.submits.empty() || !inbox_.cancels.empty();
    });
  }
  Inbox taken = std::move(inbox_);
  inbox_ = Inbox{};
  // The taken submissions go to the free places first; the rest wait (until the next publish
  // says how the scheduler placed them).
  const auto num_taken = static_cast<int64_t>(taken.submits.size());
  const int64_t placed = std::min(num_taken, free_places_);
  free_places_ -= placed;
  num_waiting_ += static_cast<int32_t>(num_taken - placed);
  taken.stop = stopping_;
  if (!taken.submits.empty()) idle_ = false;  // until the next publish says otherwise
  return taken;
}

void Engine::apply(Inbox& inbox) {
  for (Submission& s : inbox.submits) {
    scheduler_.add(s.id, std::move(s.spec), hold(std::move(s.sink)), s.submit_time);
  }
  for (const RequestId id : inbox.cancels) scheduler_.cancel(id);
  if (inbox.cancel_all) scheduler_.cancel_all();
  if (inbox.reset_prefix_cache) {
    scheduler_.reset_prefix_cache();
    std::lock_guard lock(mutex_);
    cache_resets_done_ = cache_resets_asked_;  // published by this iteration's publish()
  }
}

void Engine::execute(const runtime::StepPlan& plan) {
  out_.sequences.resize(plan.sequences.size());
  for (runtime::SequenceOutput& o : out_.sequences) {
    o.tokens.clear();
    o.logprobs.clear();
    o.error.clear();
  }
  std::string failure;
  try {
    runner_.execute(plan, out_);
  } catch (const std::exception& e) {
    failure = std::string("model runner failed: ") + e.what();
  } catch (...) {
    failure = "model runner failed with an unknown exception";
  }
  if (failure.empty()) return;
  if (observer_ != nullptr) observer_->on_engine_error(failure);
  scheduler_.on_runner_failure();
  out_.sequences.resize(plan.sequences.size());
  for (runtime::SequenceOutput& o : out_.sequences) o.error = failure;
}

EventSink Engine::hold(EventSink sink) {
  auto shared = std::make_shared<const EventSink>(std::move(sink));
  return [this, shared](const RequestEvent& event) { held_.push_back({shared, event}); };
}

// A sink that throws is a client gone (as Scheduler::deliver treats it): its request is
// cancelled at the next iteration, unless this was its last event.
void Engine::deliver_held() {
  for (HeldEvent& h : held_) {
    if (!*h.sink) continue;
    try {
      (*h.sink)(h.event);
    } catch (...) {
      if (h.event.finish == FinishReason::None) cancel(h.event.id);
    }
  }
  held_.clear();
}

// Publishes stats, then hands out the iteration's events, then idleness; when idle, runs the
// full integrity check (cheap then).
void Engine::publish() {
  EngineStats stats;
  scheduler_.fill_stats(stats);
  const runtime::RunnerStats runner_stats = runner_.stats();
  stats.pinned_bytes = runner_stats.pinned_bytes;
  stats.pinned_registrations = runner_stats.pinned_registrations;
  stats.device_bytes_used = runner_stats.device_bytes_used;
  stats.device_bytes_total = runner_stats.device_bytes_total;
  stats.split_devices = runner_stats.split_devices;
  {
    std::lock_guard lock(mutex_);
    stats_ = stats;
    num_waiting_ = scheduler_.num_waiting();
    // Places freed in this step go to the first waiting requests in the next plan; the rest
    // are free for new submissions.
    const int64_t open_places = std::max<int64_t>(0, scheduler_.config().max_num_seqs - stats.num_running);
    waiting_placed_ = std::min<int64_t>(num_waiting_, open_places);
    free_places_ = open_places - waiting_placed_;
  }
  deliver_held();  // after the stats they depend on (header); before the idle check's cost
  const bool idle = scheduler_.idle();
  std::string why;
  const bool intact = !idle || scheduler_.check_integrity(&why);
  if (!intact && observer_ != nullptr) observer_->on_engine_error("idle integrity check: " + why);
  {
    std::lock_guard lock(mutex_);
    idle_ = idle;
    published_resets_ = cache_resets_done_;
    if (!intact && integrity_error_.empty()) integrity_error_ = why;
  }
  idle_cv_.notify_all();  // idleness and cache resets are waited for
}

int32_t Engine::cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const {
  return prefix_directory_ != nullptr ? prefix_directory_->longest_match(prefix_hashes) : 0;
}

bool Engine::reset_prefix_cache(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!started_ || stopping_) return false;
  const uint64_t ticket = ++cache_resets_asked_;
  inbox_.reset_prefix_cache = true;
  work_cv_.notify_one();
  // Done once the step loop applied it and published the stats after it.
  return idle_cv_.wait_for(lock, timeout, [&] { return cache_resets_done_ >= ticket && published_resets_ >= ticket; });
}

SubmitResult Engine::submit(RequestSpec spec, EventSink sink) {
  SubmitResult result = scheduler_.check_submit(spec);
  if (result.status != SubmitStatus::Accepted) return result;
  const TimePoint now = clock_();
  std::lock_guard lock(mutex_);
  if (!started_ || draining_ || stopping_) {
    result.status = SubmitStatus::NotReady;
    result.message = !started_ ? "the engine is starting" : "the server is shutting down";
    return result;
  }
  // Requests that will wait for a running place: the scheduler's waiting ones, and the inbox's
  // past the free places. (Counting the whole inbox refused simultaneous requests that free
  // places would take at once: 16 at once on a server of 16 streams and 8 waiting got 8 429s.)
  // Not counted: waiting requests that a freed place admits at the next step, and one place
  // per cancel the step loop has yet to apply (a client gone, a stop string matched), each of
  // which frees a running or waiting place. A client that sends its next request as soon as
  // its stream ends (or it hangs up) got a 429 from a queue about to shrink.
  const int64_t num_queued = inbox_past_free_places() + num_waiting_ - waiting_placed_ -
                             static_cast<int64_t>(inbox_.cancels.size());
  if (num_queued >= scheduler_.config().max_num_waiting) {
    result.status = SubmitStatus::QueueFull;
    result.message = "too many queued requests (" + std::to_string(num_queued) + ")";
    return result;
  }
  result.id = next_id_++;
  inbox_.submits.push_back(Submission{result.id, std::move(spec), std::move(sink), now});
  work_cv_.notify_one();
  return result;
}

void Engine::cancel(RequestId id) {
  std::lock_guard lock(mutex_);
  if (id == 0 || id >= next_id_ || stopping_) return;  // never issued, or stop cancels all
  inbox_.cancels.push_back(id);
  work_cv_.notify_one();
}

void Engine::begin_drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

void Engine::cancel_all() {
  std::lock_guard lock(mutex_);
  inbox_.cancel_all = true;
  work_cv_.notify_one();
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_cv_.wait_for(lock, timeout, [this] { return idle_ && inbox_.submits.empty(); });
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

bool Engine::ready() const {
  std::lock_guard lock(mutex_);
  return started_ && !draining_ && !stopping_;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats stats = stats_;
  stats.num_waiting = num_waiting_ + static_cast<int32_t>(inbox_past_free_places());
  return stats;
}

std::string Engine::integrity_error() const {
  std::lock_guard lock(mutex_);
  return integrity_error_;
}

}  // namespace deltaserve::scheduler
