// --split replicas without a model: the router's choice (prefix affinity and its guards, load,
// ties) as a pure function, and the ReplicaEngine over stub engines (ids, cancel, in-flight
// counts, a full queue, the fan-out calls, summed stats, the decision counter).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "scheduler/prefix_directory.h"
#include "server/replica_engine.h"
#include "server/replica_routing.h"

namespace deltaserve::server {
namespace {

using scheduler::FinishReason;
using scheduler::RequestEvent;
using scheduler::SubmitStatus;

RoutePolicy policy() {
  RoutePolicy p;
  p.min_prefix_tokens = 16;
  p.min_prefix_fraction = 0.5;
  p.max_load_gap = 2;
  return p;
}

TEST(ChooseReplica, LeastLoadedWins) {
  const std::vector<ReplicaLoad> loads{{3, 8, 0}, {1, 8, 0}, {2, 8, 0}};
  const RouteChoice c = choose_replica(loads, 100, policy(), 0);
  EXPECT_EQ(c.engine, 1);
  EXPECT_EQ(c.reason, RouteReason::kLoad);
}

TEST(ChooseReplica, EqualLoadGoesToMoreFreeSlots) {
  const std::vector<ReplicaLoad> loads{{2, 4, 0}, {2, 8, 0}};
  EXPECT_EQ(choose_replica(loads, 100, policy(), 0).engine, 1);
  EXPECT_EQ(choose_replica(loads, 100, policy(), 1).engine, 1);
}

TEST(ChooseReplica, FullTiesRotateFromTheGivenEngine) {
  const std::vector<ReplicaLoad> loads{{0, 8, 0}, {0, 8, 0}, {0, 8, 0}};
  EXPECT_EQ(choose_replica(loads, 100, policy(), 0).engine, 0);
  EXPECT_EQ(choose_replica(loads, 100, policy(), 1).engine, 1);
  EXPECT_EQ(choose_replica(loads, 100, policy(), 2).engine, 2);
}

TEST(ChooseReplica, LongestCachedPrefixWinsWhenWorthIt) {
  // Engine 1 is busier (within the gap) but holds 80 of the 100 prompt tokens.
  const std::vector<ReplicaLoad> loads{{0, 8, 20}, {2, 8, 80}};
  const RouteChoice c = choose_replica(loads, 100, policy(), 0);
  EXPECT_EQ(c.engine, 1);
  EXPECT_EQ(c.reason, RouteReason::kPrefix);
}

TEST(ChooseReplica, ShortOrSmallPrefixGoesByLoad) {
  // Fewer than min_prefix_tokens, though all of a short prompt.
  EXPECT_EQ(choose_replica(std::vector<ReplicaLoad>{{0, 8, 0}, {1, 8, 12}}, 12, policy(), 0).reason, RouteReason::kLoad);
  // Long enough, but under half of the prompt.
  const RouteChoice c = choose_replica(std::vector<ReplicaLoad>{{0, 8, 0}, {1, 8, 40}}, 100, policy(), 0);
  EXPECT_EQ(c.engine, 0);
  EXPECT_EQ(c.reason, RouteReason::kLoad);
  // Exactly at both thresholds: taken.
  EXPECT_EQ(choose_replica(std::vector<ReplicaLoad>{{0, 8, 0}, {1, 8, 16}}, 32, policy(), 0).reason, RouteReason::kPrefix);
}

TEST(ChooseReplica, PrefixNeverBuysAQueueOrAnImbalance) {
  // The prefix engine has no free slot: load decides.
  RouteChoice c = choose_replica(std::vector<ReplicaLoad>{{1, 4, 0}, {4, 4, 90}}, 100, policy(), 0);
  EXPECT_EQ(c.engine, 0);
  EXPECT_EQ(c.reason, RouteReason::kLoad);
  // A free slot, but 3 more requests in flight than the least loaded (gap 2).
  c = choose_replica(std::vector<ReplicaLoad>{{1, 16, 0}, {4, 16, 90}}, 100, policy(), 0);
  EXPECT_EQ(c.engine, 0);
  EXPECT_EQ(c.reason, RouteReason::kLoad);
  // Within the gap: affinity.
  c = choose_replica(std::vector<ReplicaLoad>{{1, 16, 0}, {3, 16, 90}}, 100, policy(), 0);
  EXPECT_EQ(c.engine, 1);
  EXPECT_EQ(c.reason, RouteReason::kPrefix);
}

TEST(ChooseReplica, EqualPrefixesGoToTheLessLoaded) {
  const std::vector<ReplicaLoad> loads{{2, 8, 60}, {1, 8, 60}};
  const RouteChoice c = choose_replica(loads, 100, policy(), 0);
  EXPECT_EQ(c.engine, 1);
  EXPECT_EQ(c.reason, RouteReason::kPrefix);
}

// An engine that keeps what it is given; the test ends requests with finish().
class StubEngine final : public ServingEngine {
 public:
  scheduler::SubmitResult submit(scheduler::RequestSpec spec, scheduler::EventSink sink) override {
    if (queue_full) return {SubmitStatus::QueueFull, 0, "full"};
    const scheduler::RequestId id = next_id++;
    sinks[id] = std::move(sink);
    prompts[id] = spec.prompt_tokens;
    return {SubmitStatus::Accepted, id, ""};
  }
  void cancel(scheduler::RequestId id) override { cancelled.insert(id); }
  scheduler::EngineStats stats() const override {
    scheduler::EngineStats s;
    s.num_running = static_cast<int32_t>(sinks.size());
    s.num_state_slots_total = 8;
    s.prefix_cache_hits = hits;
    return s;
  }
  bool ready() const override { return is_ready; }
  void begin_drain() override { ++drains; }
  void cancel_all() override { ++cancel_alls; }
  bool wait_idle(std::chrono::milliseconds) override { return sinks.empty(); }
  bool reset_prefix_cache(std::chrono::milliseconds) override {
    ++resets;
    cached.clear();
    return true;
  }
  int32_t cached_prefix_tokens(std::span<const uint64_t> hashes) const override {
    int32_t best = 0;
    for (const auto& prefix : cached) {
      if (prefix.size() <= hashes.size() && scheduler::prefix_hash(prefix) == hashes[prefix.size() - 1])
        best = std::max(best, static_cast<int32_t>(prefix.size()));
    }
    return best;
  }
  void finish(scheduler::RequestId id) {
    RequestEvent e;
    e.id = id;
    e.finish = FinishReason::Stop;
    auto sink = std::move(sinks.at(id));
    sinks.erase(id);
    sink(e);
  }

  std::map<scheduler::RequestId, scheduler::EventSink> sinks;
  std::map<scheduler::RequestId, std::vector<int32_t>> prompts;
  std::set<scheduler::RequestId> cancelled;
  std::vector<std::vector<int32_t>> cached;
  scheduler::RequestId next_id = 1;
  bool queue_full = false;
  bool is_ready = true;
  uint64_t hits = 0;
  int drains = 0, cancel_alls = 0, resets = 0;
};

struct Routes final : RouteObserver {
  void on_route(int32_t engine, RouteReason reason) override { decisions.emplace_back(engine, reason); }
  std::vector<std::pair<int32_t, RouteReason>> decisions;
};

scheduler::RequestSpec spec_of(std::vector<int32_t> prompt) {
  scheduler::RequestSpec s;
  s.prompt_tokens = std::move(prompt);
  return s;
}

std::vector<int32_t> tokens(int32_t first, int32_t count) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < count; ++i) t.push_back(first + i);
  return t;
}

TEST(ReplicaEngine, SpreadsByLoadAndMapsIds) {
  StubEngine a, b;
  Routes routes;
  ReplicaEngine router({{&a, 8}, {&b, 8}}, policy(), &routes);
  std::vector<RequestEvent> seen;
  auto sink = [&](const RequestEvent& e) { seen.push_back(e); };
  const auto r1 = router.submit(spec_of(tokens(0, 40)), sink);
  const auto r2 = router.submit(spec_of(tokens(100, 40)), sink);
  const auto r3 = router.submit(spec_of(tokens(200, 40)), sink);
  ASSERT_EQ(r1.status, SubmitStatus::Accepted);
  EXPECT_EQ(a.sinks.size() + b.sinks.size(), 3u);
  EXPECT_EQ(std::abs(static_cast<int>(a.sinks.size()) - static_cast<int>(b.sinks.size())), 1);
  EXPECT_EQ(router.num_in_flight(0) + router.num_in_flight(1), 3);
  // Distinct router ids; each names its engine (id % 2) and that engine's own id (id / 2).
  EXPECT_EQ(std::set<uint64_t>({r1.id, r2.id, r3.id}).size(), 3u);
  StubEngine& first = r1.id % 2 == 0 ? a : b;
  EXPECT_TRUE(first.sinks.contains(r1.id / 2));
  router.cancel(r1.id);
  EXPECT_TRUE(first.cancelled.contains(r1.id / 2));
  // The final event lowers the count and carries the router's id.
  first.finish(r1.id / 2);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].id, r1.id);
  EXPECT_EQ(router.num_in_flight(0) + router.num_in_flight(1), 2);
  EXPECT_EQ(routes.decisions.size(), 3u);
  for (const auto& [engine, reason] : routes.decisions) EXPECT_EQ(reason, RouteReason::kLoad);
}

TEST(ReplicaEngine, OneRequestAtATimeAlternates) {
  StubEngine a, b;
  ReplicaEngine router({{&a, 8}, {&b, 8}}, policy(), nullptr);
  for (int i = 0; i < 4; ++i) {
    const auto r = router.submit(spec_of(tokens(1000 * i, 40)), [](const RequestEvent&) {});
    (r.id % 2 == 0 ? a : b).finish(r.id / 2);
  }
  EXPECT_EQ(a.prompts.size(), 2u);
  EXPECT_EQ(b.prompts.size(), 2u);
}

TEST(ReplicaEngine, AConversationFollowsItsCache) {
  StubEngine a, b;
  Routes routes;
  ReplicaEngine router({{&a, 8}, {&b, 8}}, policy(), &routes);
  const std::vector<int32_t> turn1 = tokens(0, 60);
  b.cached.push_back(turn1);  // engine 1 served the first turn
  std::vector<int32_t> turn2 = turn1;
  for (int32_t t : tokens(500, 20)) turn2.push_back(t);
  // Engine 1 runs one request, engine 0 none: load alone would pick engine 0.
  const auto x = router.submit(spec_of(tokens(900, 30)), [](const RequestEvent&) {});
  router.submit(spec_of(tokens(950, 30)), [](const RequestEvent&) {});
  a.finish(x.id / 2);
  ASSERT_EQ(router.num_in_flight(0), 0);
  ASSERT_EQ(router.num_in_flight(1), 1);
  const auto r = router.submit(spec_of(turn2), [](const RequestEvent&) {});
  EXPECT_EQ(r.id % 2, 1u);
  EXPECT_EQ(routes.decisions.back(), std::make_pair(1, RouteReason::kPrefix));
  // After a reset of every engine the same prompt goes by load.
  EXPECT_TRUE(router.reset_prefix_cache(std::chrono::seconds(1)));
  EXPECT_EQ(a.resets + b.resets, 2);
  router.submit(spec_of(turn2), [](const RequestEvent&) {});
  EXPECT_EQ(routes.decisions.back().second, RouteReason::kLoad);
}

TEST(ReplicaEngine, AFullQueueOverflowsToAnother) {
  StubEngine a, b;
  ReplicaEngine router({{&a, 8}, {&b, 8}}, policy(), nullptr);
  a.queue_full = true;
  for (int i = 0; i < 3; ++i) {
    const auto r = router.submit(spec_of(tokens(10 * i, 20)), [](const RequestEvent&) {});
    ASSERT_EQ(r.status, SubmitStatus::Accepted);
    EXPECT_EQ(r.id % 2, 1u);
  }
  EXPECT_EQ(router.num_in_flight(0), 0);  // the refused submits were not counted
  b.queue_full = true;
  EXPECT_EQ(router.submit(spec_of(tokens(0, 20)), [](const RequestEvent&) {}).status, SubmitStatus::QueueFull);
}

TEST(ReplicaEngine, LifecycleCallsReachEveryEngine) {
  StubEngine a, b;
  ReplicaEngine router({{&a, 8}, {&b, 8}}, policy(), nullptr);
  a.hits = 3;
  b.hits = 4;
  router.submit(spec_of(tokens(0, 20)), [](const RequestEvent&) {});
  EXPECT_EQ(router.stats().prefix_cache_hits, 7u);
  EXPECT_EQ(router.stats().num_state_slots_total, 16);
  EXPECT_EQ(router.stats().num_running, 1);
  ASSERT_EQ(router.replica_stats().size(), 2u);
  EXPECT_TRUE(router.ready());
  b.is_ready = false;
  EXPECT_FALSE(router.ready());  // ready only when all are
  router.begin_drain();
  router.cancel_all();
  EXPECT_EQ(a.drains + b.drains, 2);
  EXPECT_EQ(a.cancel_alls + b.cancel_alls, 2);
  EXPECT_FALSE(router.wait_idle(std::chrono::milliseconds(1)));  // one request still running
}

}  // namespace
}  // namespace deltaserve::server
