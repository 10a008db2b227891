#include "server/replica_engine.h"

#include <stdexcept>

#include "scheduler/prefix_directory.h"

namespace deltaserve::server {

using scheduler::SubmitResult;
using scheduler::SubmitStatus;

ReplicaEngine::ReplicaEngine(std::vector<Replica> replicas, RoutePolicy policy, RouteObserver* observer)
    : replicas_(std::move(replicas)), policy_(policy), observer_(observer),
      in_flight_(new std::atomic<int32_t>[replicas_.size()]) {
  if (replicas_.empty()) throw std::invalid_argument("ReplicaEngine: no engine");
  for (size_t i = 0; i < replicas_.size(); ++i) in_flight_[i] = 0;
}

SubmitResult ReplicaEngine::submit(scheduler::RequestSpec spec, scheduler::EventSink sink) {
  const auto n = static_cast<int32_t>(replicas_.size());
  const std::vector<uint64_t> hashes = scheduler::prefix_hashes(spec.prompt_tokens);
  std::vector<ReplicaLoad> loads(replicas_.size());
  std::lock_guard lock(route_mutex_);
  for (int32_t i = 0; i < n; ++i) {
    const Replica& r = replicas_[static_cast<size_t>(i)];
    loads[static_cast<size_t>(i)] = {in_flight_[static_cast<size_t>(i)].load(), r.num_slots,
                                     r.engine->cached_prefix_tokens(hashes)};
  }
  const RouteChoice choice =
      choose_replica(loads, static_cast<int32_t>(spec.prompt_tokens.size()), policy_, next_tie_);
  if (choice.reason == RouteReason::kLoad) next_tie_ = (choice.engine + 1) % n;
  // A full queue there: the others in order of load (the request fits any engine or none).
  SubmitResult result = submit_to(choice.engine, spec, sink);
  for (int32_t k = 1; k < n && result.status == SubmitStatus::QueueFull; ++k) {
    const int32_t other = (choice.engine + k) % n;
    result = submit_to(other, spec, sink);
    if (result.status == SubmitStatus::Accepted && observer_) observer_->on_route(other, RouteReason::kLoad);
    if (result.status == SubmitStatus::Accepted) return result;
  }
  if (result.status == SubmitStatus::Accepted && observer_) observer_->on_route(choice.engine, choice.reason);
  return result;
}

SubmitResult ReplicaEngine::submit_to(int32_t engine, scheduler::RequestSpec spec, scheduler::EventSink sink) {
  const auto n = static_cast<uint64_t>(replicas_.size());
  std::atomic<int32_t>& in_flight = in_flight_[static_cast<size_t>(engine)];
  in_flight.fetch_add(1);  // before submit: the final event may come before submit returns
  auto forward = [counts = in_flight_, n, engine, sink = std::move(sink)](const scheduler::RequestEvent& event) {
    scheduler::RequestEvent routed = event;
    routed.id = event.id * n + static_cast<uint64_t>(engine);
    if (event.finish != scheduler::FinishReason::None) counts[static_cast<size_t>(engine)].fetch_sub(1);
    sink(routed);
  };
  SubmitResult result = replicas_[static_cast<size_t>(engine)].engine->submit(std::move(spec), std::move(forward));
  if (result.status != SubmitStatus::Accepted) {
    in_flight.fetch_sub(1);
    return result;
  }
  result.id = result.id * n + static_cast<uint64_t>(engine);
  return result;
}

void ReplicaEngine::cancel(scheduler::RequestId id) {
  const auto n = static_cast<uint64_t>(replicas_.size());
  replicas_[static_cast<size_t>(id % n)].engine->cancel(id / n);
}

scheduler::EngineStats ReplicaEngine::stats() const {
  scheduler::EngineStats sum;
  for (const Replica& r : replicas_) add_engine_stats(sum, r.engine->stats());
  return sum;
}

std::vector<scheduler::EngineStats> ReplicaEngine::replica_stats() const {
  std::vector<scheduler::EngineStats> each;
  for (const Replica& r : replicas_) each.push_back(r.engine->stats());
  return each;
}

bool ReplicaEngine::ready() const {
  for (const Replica& r : replicas_) {
    if (!r.engine->ready()) return false;
  }
  return true;
}

void ReplicaEngine::begin_drain() {
  for (const Replica& r : replicas_) r.engine->begin_drain();
}

void ReplicaEngine::cancel_all() {
  for (const Replica& r : replicas_) r.engine->cancel_all();
}

// One deadline for all: the engines drain at once, so waiting on each in turn costs no more
// than the slowest.
bool ReplicaEngine::wait_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool idle = true;
  for (const Replica& r : replicas_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    idle = r.engine->wait_idle(std::max(left, std::chrono::milliseconds(0))) && idle;
  }
  return idle;
}

bool ReplicaEngine::reset_prefix_cache(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool done = true;
  for (const Replica& r : replicas_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    done = r.engine->reset_prefix_cache(std::max(left, std::chrono::milliseconds(0))) && done;
  }
  return done;
}

int32_t ReplicaEngine::cached_prefix_tokens(std::span<const uint64_t> prefix_hashes) const {
  int32_t best = 0;
  for (const Replica& r : replicas_) best = std::max(best, r.engine->cached_prefix_tokens(prefix_hashes));
  return best;
}

void add_engine_stats(scheduler::EngineStats& sum, const scheduler::EngineStats& add) {
  sum.num_running += add.num_running;
  sum.num_waiting += add.num_waiting;
  sum.num_state_slots_used += add.num_state_slots_used;
  sum.num_state_slots_total += add.num_state_slots_total;
  sum.num_kv_blocks_used += add.num_kv_blocks_used;
  sum.num_kv_blocks_cached += add.num_kv_blocks_cached;
  sum.num_kv_blocks_total += add.num_kv_blocks_total;
  sum.num_steps += add.num_steps;
  sum.num_preemptions += add.num_preemptions;
  sum.num_cancellations += add.num_cancellations;
  sum.pinned_bytes += add.pinned_bytes;
  sum.pinned_registrations += add.pinned_registrations;
  sum.device_bytes_used += add.device_bytes_used;
  sum.device_bytes_total += add.device_bytes_total;
  sum.prefix_cache_enabled = sum.prefix_cache_enabled || add.prefix_cache_enabled;
  sum.prefix_cache_queries += add.prefix_cache_queries;
  sum.prefix_cache_hits += add.prefix_cache_hits;
  sum.prefix_cache_query_tokens += add.prefix_cache_query_tokens;
  sum.prefix_cache_hit_tokens += add.prefix_cache_hit_tokens;
  sum.prefix_cache_preempted_queries += add.prefix_cache_preempted_queries;
  sum.prefix_cache_preempted_hits += add.prefix_cache_preempted_hits;
  sum.prefix_cache_preempted_query_tokens += add.prefix_cache_preempted_query_tokens;
  sum.prefix_cache_preempted_hit_tokens += add.prefix_cache_preempted_hit_tokens;
  sum.prefix_cache_evictions += add.prefix_cache_evictions;
  sum.prefix_cache_spills += add.prefix_cache_spills;
  sum.prefix_cache_checkpoints += add.prefix_cache_checkpoints;
  sum.prefix_cache_blocks += add.prefix_cache_blocks;
  sum.prefix_cache_device_bytes += add.prefix_cache_device_bytes;
  sum.prefix_cache_host_bytes += add.prefix_cache_host_bytes;
}

}  // namespace deltaserve::server
