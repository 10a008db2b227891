// Which replica engine takes a new request (--split replicas): a pure function of what the
// router knows at submit time, so the choice is unit-tested without engines.
//
// Prefix affinity first: the engine whose prefix cache holds the longest leading part of the
// prompt skips that much prefill (and the hybrid models' recurrent state is only resumable
// from a checkpoint, so a prefix is worth nothing on the other engine). It is taken when
//  - the match is at least min_prefix_tokens: a shorter one (a chat template's header, a
//    two-word system prompt) saves less than one KV block of prefill and would pull every
//    request onto one engine;
//  - the match covers at least min_prefix_fraction of the prompt: a conversation's next turn
//    matches nearly all of it; a long shared system prompt before a long question does not
//    pay for leaving the engine that would run it sooner;
//  - that engine can start the request now (a free slot) and runs at most max_load_gap more
//    requests than the least loaded one: the saved prefill never buys a wait in a queue, nor
//    a lasting imbalance (every engine that serves the shared prefix caches it too, so the
//    later ties go by load).
// Otherwise by load: fewest requests in flight (running + queued), then most free slots, then
// the first from `first_on_tie` on, round robin (a client sending one request at a time would
// otherwise keep one engine busy and the other idle).
#pragma once

#include <cstdint>
#include <span>

namespace deltaserve::server {

struct ReplicaLoad {
  int32_t num_in_flight = 0;         // requests submitted to it and not finished (running + queued)
  int32_t num_slots = 0;             // sequences it runs at once (its --max-streams)
  int32_t cached_prefix_tokens = 0;  // of this prompt (scheduler::PrefixDirectory)
};

struct RoutePolicy {
  int32_t min_prefix_tokens = 16;     // a KV block's worth at the default --kv-block-tokens
  double min_prefix_fraction = 0.5;
  int32_t max_load_gap = 2;
};

enum class RouteReason { kPrefix, kLoad };
const char* route_reason_name(RouteReason reason);  // "prefix", "load"

struct RouteChoice {
  int32_t engine = 0;
  RouteReason reason = RouteReason::kLoad;
};

// `loads` holds one entry per engine (at least one); first_on_tie in [0, loads.size()).
RouteChoice choose_replica(std::span<const ReplicaLoad> loads, int32_t num_prompt_tokens, const RoutePolicy& policy,
                           int32_t first_on_tie);

}  // namespace deltaserve::server
