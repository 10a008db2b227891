// The plan builder alone against the scripted fake runner: budget, decode-first, chunked
// prefill, admission by slots and blocks, limits, stop ids, submit checks, config.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <map>

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

TEST(Scheduler, ChunkedPrefillThenDecode) {
  Harness h(make_limits(4, 16, 64), make_config(64, 32));
  const RequestSpec spec = make_spec(100, 5, 1);
  const RequestId id = h.add(spec);
  std::vector<int32_t> chunks;
  std::vector<bool> samples;
  while (!h.scheduler.idle()) {
    for (const PlannedRow& r : h.step()) {
      chunks.push_back(r.num_rows);
      samples.push_back(r.sample);
    }
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{32, 32, 32, 4, 1, 1, 1, 1}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, false, true, true, true, true, true}));
  const auto& got = h.received[id];
  EXPECT_EQ(got.tokens, h.expected(spec).tokens);
  EXPECT_EQ(got.finish, FinishReason::Length);
  EXPECT_EQ(got.num_events, 5);
  EXPECT_EQ(got.num_prompt_tokens, 100);
  EXPECT_EQ(got.num_generated_tokens, 5);
  h.expect_all_free();
}

TEST(Scheduler, PromptCutsFollowTheBackendsAlignment) {
  runtime::RunnerLimits limits = make_limits(4, 16, 64);
  limits.prefill_chunk_align = 8;
  Harness h(limits, make_config(40, 20));
  const RequestSpec spec = make_spec(86, 2, 1);
  const RequestId id = h.add(spec);
  std::vector<int32_t> chunks;
  while (!h.scheduler.idle())
    for (const PlannedRow& r : h.step()) chunks.push_back(r.num_rows);
  // 20-row chunks cut back to multiples of 8; the cut at 80 would leave 6 (< 8) rows, so 72.
  EXPECT_EQ(chunks, (std::vector<int32_t>{16, 16, 16, 16, 8, 14, 1}));
  EXPECT_EQ(h.received[id].tokens, h.expected(spec).tokens);
  h.expect_all_free();
}

TEST(Scheduler, AlignedCutsHoldUnderMixedLoad) {
  runtime::RunnerLimits limits = make_limits(8, 16, 512);
  limits.prefill_chunk_align = 16;
  Harness h(limits, make_config(64, 48));
  std::map<RequestId, int32_t> prompt_length;
  for (uint32_t i = 0; i < 12; ++i) {
    const int32_t length = 1 + static_cast<int32_t>((i * 37 + 11) % 140);
    prompt_length[h.add(make_spec(length, 3 + static_cast<int32_t>(i % 5), 100 + i))] = length;
  }
  int num_cut = 0;
  while (!h.scheduler.idle()) {
    for (const PlannedRow& r : h.step()) {
      if (r.is_decode) continue;
      const int32_t end = r.num_cached_tokens + r.num_rows;
      if (end == prompt_length[r.id]) continue;  // the chunk that finishes the prompt
      ++num_cut;
      EXPECT_EQ(end % 16, 0) << "request " << r.id << " cut at " << end;
      EXPECT_GE(prompt_length[r.id] - end, 16) << "request " << r.id << " left a short tail";
    }
  }
  EXPECT_GT(num_cut, 5);
  h.expect_all_free();
}

TEST(Scheduler, DecodeRowsFirstPrefillFillsTheBudget) {
  Harness h(make_limits(8, 16, 256), make_config(16, 64));
  for (uint32_t i = 0; i < 4; ++i) h.add(make_spec(4, 60, 10 + i));
  h.step();  // four 4-token prompts in one step
  h.step();  // four decode rows
  const RequestId long_id = h.add(make_spec(200, 3, 99));
  int num_mixed_steps = 0;
  for (int i = 0; i < 10; ++i) {
    const std::vector<PlannedRow> rows = h.step();
    int32_t num_decode = 0;
    int32_t num_prefill = 0;
    for (const PlannedRow& r : rows) (r.is_decode ? num_decode : num_prefill) += r.num_rows;
    EXPECT_EQ(num_decode, 4) << "every decoding stream keeps its row";
    if (num_prefill > 0) {
      ++num_mixed_steps;
      EXPECT_EQ(num_decode + num_prefill, 16) << "prefill fills the rest of the budget";
    }
  }
  EXPECT_GE(num_mixed_steps, 10);
  h.run_until_idle();
  EXPECT_EQ(h.received[long_id].tokens.size(), 3u);
  h.expect_all_free();
}

TEST(Scheduler, OlderPrefillGetsBudgetBeforeNewerOnes) {
  Harness h(make_limits(4, 16, 256), make_config(40, 32));
  const RequestId a = h.add(make_spec(100, 2, 1));
  const RequestId b = h.add(make_spec(100, 2, 2));
  const std::vector<PlannedRow> rows = h.step();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, a);
  EXPECT_EQ(rows[0].num_rows, 32);
  EXPECT_EQ(rows[1].id, b);
  EXPECT_EQ(rows[1].num_rows, 8);
}

TEST(Scheduler, AdmissionLimitedBySlotsInArrivalOrder) {
  Harness h(make_limits(3, 16, 256), make_config(256, 64));
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 5; ++i) ids.push_back(h.add(make_spec(8, 4, i)));
  const std::vector<PlannedRow> rows = h.step();
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rows[i].id, ids[i]);
  EXPECT_EQ(h.scheduler.num_running(), 3);
  EXPECT_EQ(h.scheduler.num_waiting(), 2);
  h.run_until_idle();
  for (const RequestId id : ids) EXPECT_EQ(h.received[id].finish, FinishReason::Length);
  h.expect_all_free();
}

TEST(Scheduler, AdmissionLimitedByBlocksWithoutOvertaking) {
  // 10 blocks of 4 tokens; each 16-token prompt needs 4 blocks for its first chunk.
  Harness h(make_limits(8, 4, 10), make_config(256, 64));
  const RequestId a = h.add(make_spec(16, 1, 1));
  const RequestId b = h.add(make_spec(16, 1, 2));
  const RequestId c = h.add(make_spec(16, 1, 3));
  const RequestId d = h.add(make_spec(2, 1, 4));  // would fit, but must not overtake c
  const std::vector<PlannedRow> rows = h.step();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, a);
  EXPECT_EQ(rows[1].id, b);
  EXPECT_EQ(h.scheduler.num_waiting(), 2);
  EXPECT_TRUE(h.received[a].finished());  // max_tokens 1: done, blocks back
  const std::vector<PlannedRow> next = h.step();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].id, c);
  EXPECT_EQ(next[1].id, d);
  h.expect_all_free();
}

TEST(Scheduler, MaxTokensEndsWithLength) {
  Harness h(make_limits(2, 16, 64), make_config(64, 64));
  const RequestSpec spec = make_spec(10, 3, 5);
  const RequestId id = h.add(spec);
  h.run_until_idle();
  EXPECT_EQ(h.received[id].tokens.size(), 3u);
  EXPECT_EQ(h.received[id].finish, FinishReason::Length);
  EXPECT_EQ(h.received[id].tokens, h.expected(spec).tokens);
}

TEST(Scheduler, StopIdEndsWithStopAndIsNotEmitted) {
  Harness h(make_limits(2, 16, 64), make_config(64, 64));
  // The "model" counts: 100, 101, 102, ... after the prompt.
  h.runner.next_token = [](std::span<const int32_t> context) {
    return static_cast<int32_t>(100 + context.size() - 10);
  };
  RequestSpec spec = make_spec(10, 50, 5);
  spec.stop_token_ids = {7, 103};
  const RequestId id = h.add(spec);
  h.run_until_idle();
  EXPECT_EQ(h.received[id].tokens, (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(h.received[id].finish, FinishReason::Stop);
  EXPECT_EQ(h.received[id].num_generated_tokens, 3);
  h.expect_all_free();
}

TEST(Scheduler, ContextLimitEndsWithLength) {
  Harness h(make_limits(2, 4, 64), make_config(64, 64, 20));
  const RequestId id = h.add(make_spec(15, 100, 5));
  h.run_until_idle();
  EXPECT_EQ(h.received[id].tokens.size(), 5u);  // prompt + generated reaches 20
  EXPECT_EQ(h.received[id].finish, FinishReason::Length);
}

TEST(Scheduler, SubmitCheckRejectsPromptsWithoutRoom) {
  Harness h(make_limits(2, 4, 64), make_config(64, 64, 20));
  EXPECT_EQ(h.scheduler.check_submit(make_spec(19, 1, 1)).status, SubmitStatus::Accepted);
  const SubmitResult too_long = h.scheduler.check_submit(make_spec(20, 1, 1));
  EXPECT_EQ(too_long.status, SubmitStatus::TooLong);
  EXPECT_NE(too_long.message.find("20"), std::string::npos);
}

TEST(Scheduler, MalformedRequestsEndWithErrorAtOnce) {
  Harness h(make_limits(2, 4, 64), make_config(64, 64, 20));
  const RequestId empty = h.add(make_spec(0, 4, 1));
  RequestSpec zero = make_spec(4, 0, 1);
  const RequestId no_tokens = h.add(zero);
  RequestSpec bad = make_spec(4, 4, 1);
  bad.prompt_tokens[2] = 5000;  // vocabulary is 1000
  const RequestId bad_id = h.add(bad);
  const RequestId too_long = h.add(make_spec(25, 4, 1));
  for (const RequestId id : {empty, no_tokens, bad_id, too_long}) {
    EXPECT_EQ(h.received[id].finish, FinishReason::Error) << id;
    EXPECT_FALSE(h.received[id].error.empty());
    EXPECT_EQ(h.received[id].num_events, 1);
  }
  EXPECT_TRUE(h.scheduler.idle());
  h.expect_all_free();
}

TEST(Scheduler, DuplicateIdIsRejectedWithoutHarmingTheFirst) {
  Harness h(make_limits(2, 4, 64), make_config(64, 64));
  const RequestId id = h.add(make_spec(4, 3, 1));
  testing::Received second;
  h.scheduler.add(id, make_spec(4, 3, 2), [&](const RequestEvent& e) { testing::record(second, e); }, h.now);
  EXPECT_EQ(second.finish, FinishReason::Error);
  h.run_until_idle();
  EXPECT_EQ(h.received[id].finish, FinishReason::Length);
  EXPECT_EQ(h.received[id].tokens.size(), 3u);
}

TEST(Scheduler, RunnerErrorEndsOnlyThatSequence) {
  Harness h(make_limits(4, 4, 64), make_config(64, 64));
  const RequestId a = h.add(make_spec(6, 5, 1));
  const RequestId b = h.add(make_spec(6, 5, 2));
  h.step();
  h.runner.fail_ids.insert(a);
  h.run_until_idle();
  EXPECT_EQ(h.received[a].finish, FinishReason::Error);
  EXPECT_EQ(h.received[a].error, "scripted error");
  EXPECT_EQ(h.received[b].finish, FinishReason::Length);
  EXPECT_EQ(h.received[b].tokens.size(), 5u);
  h.expect_all_free();
}

TEST(Scheduler, LogprobsFollowTheTokensWhenAsked) {
  Harness h(make_limits(4, 4, 64), make_config(64, 64));
  RequestSpec spec = make_spec(6, 4, 1);
  spec.sampling.logprobs = true;
  const RequestId with = h.add(spec);
  const RequestId without = h.add(make_spec(6, 4, 1));
  h.run_until_idle();
  ASSERT_EQ(h.received[with].logprobs.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(h.received[with].logprobs[i].token, h.received[with].tokens[i]);
  EXPECT_TRUE(h.received[without].logprobs.empty());
}

TEST(Scheduler, ReportsTimesFromTheInjectedClock) {
  Harness h(make_limits(1, 4, 64), make_config(64, 8));
  const RequestId first = h.add(make_spec(4, 3, 1));
  const RequestId second = h.add(make_spec(20, 2, 2));  // waits for the only slot
  h.run_until_idle();
  ASSERT_EQ(h.observer.reports.size(), 2u);
  const RequestReport& r1 = h.observer.reports[0];
  EXPECT_EQ(r1.id, first);
  EXPECT_EQ(r1.num_prompt_tokens, 4);
  EXPECT_EQ(r1.num_generated_tokens, 3);
  EXPECT_DOUBLE_EQ(r1.queue_ms, 0.0);
  EXPECT_DOUBLE_EQ(r1.ttft_ms, 1.0);  // the clock advances 1 ms per step
  EXPECT_DOUBLE_EQ(r1.e2e_ms, 3.0);
  EXPECT_DOUBLE_EQ(r1.decode_tokens_per_s, 1000.0);
  const RequestReport& r2 = h.observer.reports[1];
  EXPECT_EQ(r2.id, second);
  EXPECT_DOUBLE_EQ(r2.queue_ms, 3.0);
  EXPECT_DOUBLE_EQ(r2.ttft_ms, 6.0);  // 3 ms queued, then 3 chunks of 8 tokens
  EXPECT_EQ(h.observer.gaps_ms.size(), 3u);  // generated - 1 per request
  EXPECT_EQ(h.last_report.num_generated_tokens, 1);
}

TEST(SchedulerConfig, ResolvesAutoAndRejectsInconsistentValues) {
  const runtime::RunnerLimits limits = make_limits(8, 16, 100, 4096);
  const SchedulerConfig c = resolve_config(SchedulerConfig{}, limits);
  EXPECT_EQ(c.max_num_seqs, 8);
  EXPECT_EQ(c.max_context_tokens, 1600);  // the KV pool caps the model's 4096
  SchedulerConfig bad;
  bad.max_num_seqs = 9;
  EXPECT_THROW(resolve_config(bad, limits), std::invalid_argument);
  bad = SchedulerConfig{};
  bad.max_num_batched_tokens = 4;
  EXPECT_THROW(resolve_config(bad, limits), std::invalid_argument);
  bad = SchedulerConfig{};
  bad.max_context_tokens = 2000;
  try {
    resolve_config(bad, limits);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool"), std::string::npos);
  }
  bad = SchedulerConfig{};
  bad.max_num_waiting = 0;
  EXPECT_THROW(resolve_config(bad, limits), std::invalid_argument);
  EXPECT_THROW(resolve_config(SchedulerConfig{}, make_limits(0, 16, 100)), std::invalid_argument);
}

TEST(runtime::StepPlan, ConvertsToTheBackendsBatchPlan) {
  Harness h(make_limits(4, 4, 64), make_config(64, 8));
  h.add(make_spec(10, 2, 1));
  const runtime::StepPlan plan = h.scheduler.plan();
  const runtime::BatchPlan batch = runtime::to_batch_plan(plan);
  ASSERT_EQ(batch.sequences.size(), 1u);
  EXPECT_EQ(batch.sequences[0].tokens.size(), 8u);
  EXPECT_EQ(batch.sequences[0].kv_blocks.size(), 2u);
  EXPECT_EQ(batch.sequences[0].num_logits, 0);  // chunk does not end the prompt
  EXPECT_EQ(batch.num_rows(), 8);
}

}  // namespace
}  // namespace deltaserve::scheduler
