// The engine: one thread per model instance running plan -> execute -> commit over a
// Scheduler and a runtime::ModelRunner (the runtime executes what the scheduler plans), fed through a thread-safe inbox.
//
// Threads: submit(), cancel(), begin_drain(), cancel_all(), wait_idle(), stats() and
// ready() may be called from any thread; start() and stop() from the owning thread.
// None of them waits for a forward pass (wait_idle waits by design). The inbox is a mutex
// and condition variable: the engine thread sleeps while there is nothing to do (no
// polling) and holds no lock while the runner executes or while sinks and observer
// callbacks run (all on the engine thread; they must not block).
//
// A cancel (client disconnect, stop string) frees the request's slot and KV blocks before
// the next step is planned; its sink gets a final Cancelled event.
//
// Events go out once the step's stats are published: the scheduler's events of an iteration
// (new requests, cancels, the step's commit) are held and handed to their sinks after the
// observer's on_step and publish(), so a client that reads /metrics (or stats()) after the
// last byte of its response finds the counters of the step that produced it (the sinks post
// to the session's strand, which may write at once). A sink that throws counts as a client
// gone: its request is cancelled at the next iteration.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/engine_stats.h"
#include "runtime/model_runner.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_config.h"

namespace deltaserve::scheduler {

class Engine : public RequestQueue {
 public:
  // Reads runner.limits() and resolves `config` against them; throws std::invalid_argument
  // on a bad config. `runner` and `observer` (may be null) must outlive the engine.
  // The thread starts with start(); until then submit() answers NotReady.
  Engine(runtime::ModelRunner& runner, const SchedulerConfig& config, EngineObserver* observer = nullptr,
         Clock clock = {});
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine() override;  // stop()

  void start();

  // Accepted (id set), TooLong (prompt leaves no room in the context: HTTP 400), QueueFull
  // (max_num_waiting requests already queued: 429) or NotReady (not started, draining or
  // stopped: 503). The sink receives every event of the request on the engine thread;
  // the last one has finish != None.
  SubmitResult submit(RequestSpec spec, EventSink sink) override;
  // Unknown and finished ids are ignored.
  void cancel(RequestId id) override;

  // Graceful shutdown: begin_drain() makes submit() answer NotReady while queued and
  // running requests go on; wait_idle() then waits for them; cancel_all() ends them
  // early (each gets Cancelled); stop() cancels whatever is left and joins the thread.
  void begin_drain();
  void cancel_all();
  // True once nothing is queued or running (at once if never started); false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  void stop();  // idempotent

  // Drops every cached prefix (docs/prefix-cache.md) on the engine thread and waits until that
  // is published (stats()); running requests keep their blocks. False on timeout or when the
  // engine is not running. A no-op (true) while the prefix cache is off.
  bool reset_prefix_cache(std::chrono::milliseconds timeout);

  // How many leading tokens of a prompt the prefix cache could resume from, given the prompt's
  // prefix_hashes(): approximate (scheduler/prefix_directory.h); 0 while the cache is off. Any
  // thread; never waits for a step.
  int32_t cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const;

  bool ready() const;  // started, not draining, not stopped: the server's /ready
  EngineStats stats() const;
  const SchedulerConfig& config() const { return scheduler_.config(); }
  // The first failed idle integrity check (slot/block accounting); empty when all passed.
  std::string integrity_error() const;

 private:
  struct Submission {
    RequestId id = 0;
    RequestSpec spec;
    EventSink sink;
    TimePoint submit_time{};
  };
  struct Inbox {
    std::vector<Submission> submits;
    std::vector<RequestId> cancels;
    bool cancel_all = false;
    bool reset_prefix_cache = false;
    bool stop = false;
  };

  void run();
  Inbox take_inbox(bool wait);
  void apply(Inbox& inbox);
  void execute(const runtime::StepPlan& plan);
  // Publishes the stats, then delivers the held events, then the idleness (wait_idle()
  // returns after the sinks ran, as before events were held).
  void publish();
  // The sink the scheduler gets for a request: it holds each event for deliver_held().
  EventSink hold(EventSink sink);
  void deliver_held();

  runtime::ModelRunner& runner_;
  EngineObserver* observer_;
  Clock clock_;
  Scheduler scheduler_;  // engine thread only (its check_submit() is const: any thread)
  const PrefixDirectory* prefix_directory_ = nullptr;  // the cache's (thread-safe); null while off
  runtime::StepOutput out_;       // engine thread only; reused every step
  struct HeldEvent {
    std::shared_ptr<const EventSink> sink;
    RequestEvent event;
  };
  std::vector<HeldEvent> held_;  // engine thread only: this iteration's events, in order

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable work_cv_;  // inbox changed or stop
  std::condition_variable idle_cv_;  // idle_ became true
  Inbox inbox_;
  bool started_ = false;
  bool draining_ = false;
  bool stopping_ = false;
  bool idle_ = true;  // the scheduler had nothing queued or running at the last publish
  int32_t num_waiting_ = 0;  // the scheduler's waiting queue at the last publish, plus taken
                             // submissions past the free places (take_inbox)
  // Running places (max_num_seqs) free at the last publish that the waiting requests (they go
  // first) leave, less the submissions the step loop has taken since. submit() counts only the
  // inbox past these as waiting.
  int64_t free_places_ = 0;
  int64_t waiting_placed_ = 0;  // of num_waiting_, those the places open at the last publish admit next
  // The inbox's submissions past free_places_ (they will wait); mutex_ held.
  int64_t inbox_past_free_places() const {
    return std::max<int64_t>(0, static_cast<int64_t>(inbox_.submits.size()) - free_places_);
  }
  EngineStats stats_;
  std::string integrity_error_;
  RequestId next_id_ = 1;
  uint64_t cache_resets_asked_ = 0;  // reset_prefix_cache() calls
  uint64_t cache_resets_done_ = 0;   // ... applied by the step loop
  uint64_t published_resets_ = 0;    // ... and published in stats_

  std::thread thread_;
};

}  // namespace deltaserve::scheduler
