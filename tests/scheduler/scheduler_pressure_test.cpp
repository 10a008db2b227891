// The plan builder under pressure: preemption by recompute, cancellation at every stage,
// starvation, batching invariance and a long random workload with cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "scheduler/scheduler.h"
#include "tests/scheduler/harness.h"

namespace deltaserve::scheduler {
namespace {

using testing::Harness;
using testing::make_limits;
using testing::make_spec;
using testing::PlannedRow;

SchedulerConfig make_config(int32_t budget, int32_t chunk, int32_t max_context = 0) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_prefill_chunk_tokens = chunk;
  c.max_context_tokens = max_context;
  return c;
}

std::vector<RequestId> ids_of(const std::vector<PlannedRow>& rows) {
  std::vector<RequestId> ids;
  for (const PlannedRow& r : rows) ids.push_back(r.id);
  return ids;
}

TEST(SchedulerPressure, NewestIsPreemptedWhenBlocksRunOut) {
  // 6 blocks of 2 tokens: three 3-token prompts take 2 blocks each; the 5th token of the
  // oldest needs a third block.
  Harness h(make_limits(3, 2, 6), make_config(16, 16, 12));
  std::vector<RequestSpec> specs;
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 3; ++i) {
    specs.push_back(make_spec(3, 8, 40 + i));
    ids.push_back(h.add(specs.back()));
  }
  EXPECT_EQ(ids_of(h.step()), ids);  // prompts
  EXPECT_EQ(ids_of(h.step()), ids);  // position 3: still in the second block
  const std::vector<PlannedRow> rows = h.step();
  EXPECT_EQ(ids_of(rows), (std::vector<RequestId>{ids[0], ids[1]}));
  EXPECT_EQ(h.scheduler.num_waiting(), 1);
  EngineStats stats;
  h.scheduler.fill_stats(stats);
  EXPECT_EQ(stats.num_preemptions, 1u);
  EXPECT_EQ(h.received[ids[2]].tokens.size(), 2u);  // kept: it continues from here
  h.run_until_idle();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(h.received[ids[i]].tokens, h.expected(specs[i]).tokens) << i;
    EXPECT_EQ(h.received[ids[i]].num_events_after_finish, 0);
  }
  h.expect_all_free();
}

TEST(SchedulerPressure, PreemptionGivesTheSameTokensAsNoPressure) {
  std::vector<RequestSpec> specs;
  for (uint32_t i = 0; i < 4; ++i) specs.push_back(make_spec(10 + static_cast<int32_t>(i), 30, 7 + i));
  auto run = [&](int32_t num_blocks) {
    Harness h(make_limits(4, 4, num_blocks), make_config(64, 64, 48));
    std::vector<RequestId> ids;
    for (const RequestSpec& s : specs) ids.push_back(h.add(s));
    h.run_until_idle();
    h.expect_all_free();
    EngineStats stats;
    h.scheduler.fill_stats(stats);
    std::vector<std::vector<int32_t>> out;
    for (const RequestId id : ids) {
      EXPECT_EQ(h.received[id].finish, FinishReason::Length);
      out.push_back(h.received[id].tokens);
    }
    return std::make_pair(out, stats.num_preemptions);
  };
  const auto [relaxed, relaxed_preemptions] = run(64);
  const auto [tight, tight_preemptions] = run(12);
  EXPECT_EQ(relaxed_preemptions, 0u);
  EXPECT_GT(tight_preemptions, 0u);
  EXPECT_EQ(tight, relaxed);
}

TEST(SchedulerPressure, CancelFreesWaitingPrefillingAndDecodingRequests) {
  Harness h(make_limits(2, 4, 64), make_config(16, 8));
  const RequestId prefilling = h.add(make_spec(40, 10, 1));
  const RequestId decoding = h.add(make_spec(4, 100, 2));
  const RequestId waiting = h.add(make_spec(4, 10, 3));
  h.step();
  h.step();
  ASSERT_EQ(h.scheduler.num_running(), 2);
  ASSERT_EQ(h.scheduler.num_waiting(), 1);
  ASSERT_FALSE(h.received[decoding].tokens.empty());

  EXPECT_TRUE(h.scheduler.cancel(waiting));
  EXPECT_EQ(h.received[waiting].finish, FinishReason::Cancelled);
  EXPECT_EQ(h.scheduler.num_waiting(), 0);

  const int32_t blocks_before = h.scheduler.blocks().num_used();
  EXPECT_TRUE(h.scheduler.cancel(prefilling));
  EXPECT_EQ(h.received[prefilling].finish, FinishReason::Cancelled);
  EXPECT_EQ(h.scheduler.slots().num_used(), 1);
  EXPECT_LT(h.scheduler.blocks().num_used(), blocks_before);
  EXPECT_EQ(ids_of(h.step()), (std::vector<RequestId>{decoding}));

  EXPECT_TRUE(h.scheduler.cancel(decoding));
  EXPECT_EQ(h.received[decoding].finish, FinishReason::Cancelled);
  EXPECT_FALSE(h.scheduler.cancel(decoding));  // already gone
  EXPECT_TRUE(h.scheduler.idle());
  h.expect_all_free();
  for (const RequestId id : {prefilling, decoding, waiting}) {
    EXPECT_EQ(h.received[id].num_events_after_finish, 0);
  }
  EngineStats stats;
  h.scheduler.fill_stats(stats);
  EXPECT_EQ(stats.num_cancellations, 3u);
}

TEST(SchedulerPressure, StreamOfShortRequestsDoesNotStarveALongOne) {
  // 40 blocks of 4 tokens; the long request ends at 150 tokens (38 blocks).
  Harness h(make_limits(4, 4, 40), make_config(32, 16, 160));
  uint32_t seed = 100;
  for (int i = 0; i < 4; ++i) h.add(make_spec(8, 8, seed++));
  const RequestSpec long_spec = make_spec(120, 30, 1);
  const RequestId long_id = h.add(long_spec);
  int num_steps = 0;
  while (!h.received[long_id].finished() && num_steps < 400) {
    h.add(make_spec(8, 8, seed++));  // constant load: a new short request every step
    h.step();
    ++num_steps;
  }
  EXPECT_LT(num_steps, 100);
  EXPECT_EQ(h.received[long_id].tokens, h.expected(long_spec).tokens);
  EXPECT_EQ(h.received[long_id].finish, FinishReason::Length);
  h.run_until_idle();
  h.expect_all_free();
}

TEST(SchedulerPressure, BatchingDoesNotChangeAnySequence) {
  const runtime::RunnerLimits limits = make_limits(16, 4, 256);
  const SchedulerConfig config = make_config(24, 8);
  std::vector<RequestSpec> specs;
  for (uint32_t i = 0; i < 16; ++i) {
    specs.push_back(make_spec(5 + static_cast<int32_t>(i * 5), 10 + static_cast<int32_t>(i * 2), 300 + i));
  }
  std::vector<std::vector<int32_t>> alone;
  for (const RequestSpec& spec : specs) {
    Harness h(limits, config);
    const RequestId id = h.add(spec);
    h.run_until_idle();
    alone.push_back(h.received[id].tokens);
    EXPECT_EQ(alone.back(), h.expected(spec).tokens);
  }
  Harness h(limits, config);
  std::vector<RequestId> ids;
  for (const RequestSpec& spec : specs) ids.push_back(h.add(spec));
  h.run_until_idle();
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(h.received[ids[i]].tokens, alone[i]) << i;
  h.expect_all_free();
}

TEST(SchedulerPressure, RandomWorkloadWithCancelsReturnsToIdle) {
  Harness h(make_limits(8, 4, 48), make_config(32, 16, 96));
  std::mt19937 rng(2024);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::map<RequestId, RequestSpec> specs;
  std::set<RequestId> cancelled;
  int num_added = 0;
  while (num_added < 300 || !h.scheduler.idle()) {
    for (int n = uniform(0, 3); n > 0 && num_added < 300; --n, ++num_added) {
      RequestSpec spec = make_spec(uniform(1, 60), uniform(1, 40), static_cast<uint32_t>(num_added));
      for (int s = uniform(0, 3); s > 0; --s) spec.stop_token_ids.push_back(uniform(0, 99));
      specs[h.add(spec)] = spec;
    }
    if (uniform(0, 9) == 0) {
      std::vector<RequestId> live;
      for (const auto& [id, r] : h.received) {
        if (!r.finished()) live.push_back(id);
      }
      for (const auto& [id, spec] : specs) {
        if (h.received.count(id) == 0) live.push_back(id);  // still waiting, no event yet
      }
      if (!live.empty()) {
        const RequestId victim = live[static_cast<size_t>(uniform(0, static_cast<int>(live.size()) - 1))];
        if (h.scheduler.cancel(victim)) cancelled.insert(victim);
      }
    }
    h.step();
  }
  h.expect_all_free();
  EngineStats stats;
  h.scheduler.fill_stats(stats);
  EXPECT_GT(stats.num_preemptions, 0u) << "the workload should exercise preemption";
  EXPECT_GT(cancelled.size(), 10u);
  for (const auto& [id, spec] : specs) {
    const testing::Received& got = h.received[id];
    ASSERT_TRUE(got.finished()) << id;
    EXPECT_EQ(got.num_events_after_finish, 0) << id;
    const testing::Expected want = h.expected(spec);
    if (cancelled.count(id) != 0) {
      EXPECT_EQ(got.finish, FinishReason::Cancelled);
      ASSERT_LE(got.tokens.size(), want.tokens.size());
      EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.tokens.begin())) << id;
    } else {
      EXPECT_EQ(got.tokens, want.tokens) << id;
      EXPECT_EQ(got.finish, want.finish) << id;
    }
  }
}

}  // namespace
}  // namespace deltaserve::scheduler
