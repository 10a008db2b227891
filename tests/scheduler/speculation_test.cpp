// Speculative decoding with the MTP head on the real CPU stack (the embedded trained model):
// greedy output with drafts must equal output without them, token for token, alone and under
// load; so must seeded sampled output (coupled drafts, exact verification); no state leaks
// between requests; the draft counters obey their invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/grammar/constraint_grammars.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/backend_runner.h"
#include "runtime/dflash_drafter.h"
#include "runtime/step_cost_probe.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

// Drafts by position (testing::DraftCounter), and what the steps report.
class DraftCounter final : public testing::DraftCounter {
 public:
  void on_step(const StepReport& r) override {
    std::lock_guard<std::mutex> lock(mutex_);
    decode_steps_ += r.num_decode_sequences;
    emitted_ += r.num_generated_tokens;
    int64_t draft_rows = 0;
    for (size_t d = 0; d < r.draft_depths.size(); ++d) draft_rows += static_cast<int64_t>(d) * r.draft_depths[d];
    max_draft_rows_ = std::max(max_draft_rows_, draft_rows);
    if (r.predicted_step_ms > 0) ++predicted_steps_;
  }
  int64_t decode_steps_ = 0, emitted_ = 0;
  int64_t max_draft_rows_ = 0;   // draft rows of the step that carried the most
  int64_t predicted_steps_ = 0;  // steps the cost model predicted
};

// The embedded model's DFlash drafter (tools/dflash; models/README.md).
constexpr const char* kDFlashModel = "models/deltaserve-tiny-moe-dflash";

// How the policy prices rows: flat (no table: every stream drafts to its limit), a given
// table, or one measured on the test's backend at start (as the daemon does).
struct Costs {
  std::shared_ptr<const runtime::StepCostTable> table;
  bool measure = false;
};

using testing::Outcome;

class SpeculationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = runtime::load_model("models/deltaserve-tiny-moe.gguf").release();
    tokenizer_ = runtime::Tokenizer::from_gguf(*model_->gguf).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static RequestSpec request(const std::string& text, int32_t max_tokens, float temperature = 0.0f, uint64_t seed = 0) {
    RequestSpec spec;
    spec.prompt_tokens = tokenizer_->encode(text);
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = temperature;
    if (temperature > 0.0f) spec.sampling.seed = seed;
    return spec;
  }

  static std::vector<RequestSpec> prompts(int n, int32_t max_tokens) {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) specs.push_back(request(testing::kSpeculationPrompts[i % 8], max_tokens + i % 5));
    return specs;
  }

  // Runs the requests concurrently on a fresh stack with the given maximum draft depth.
  // dflash: drafts from the embedded model's DFlash drafter instead of the MTP head.
  // kv_blocks 0: room for every stream's whole context (else fewer: preemption).
  std::vector<Outcome> run(const std::vector<RequestSpec>& specs, int32_t depth, int32_t slots = 16,
                           EngineObserver* observer = nullptr, const Costs& costs = {}, bool dflash = false,
                           int32_t kv_blocks = 0, uint64_t* num_preemptions = nullptr) {
    runtime::CacheConfig cache{slots, 16, kv_blocks > 0 ? kv_blocks : slots * 16, 1 + depth};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 256, depth, dflash && depth > 0 ? dflash_drafter() : nullptr);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;  // flat costs draft at full depth: exercise every path
    config.step_costs = costs.table;
    if (costs.measure && depth > 0) {
      runtime::StepCostProbeOptions probe;
      probe.max_streams = slots;
      probe.max_rows_per_stream = 1 + depth;
      probe.mtp = true;
      probe.budget_ms = 1000;
      config.step_costs = std::make_shared<const runtime::StepCostTable>(
          runtime::measure_step_costs(backend, probe, runtime::step_cost_key(backend, "tiny-moe")));
    }
    Engine engine(runner, config, observer);
    engine.start();
    std::vector<Outcome> result = testing::run_to_completion(engine, specs);
    if (num_preemptions != nullptr) *num_preemptions = engine.stats().num_preemptions;
    return result;
  }

  static std::unique_ptr<runtime::DFlashDrafter> dflash_drafter() {
    return std::make_unique<runtime::DFlashDrafter>(runtime::load_dflash_model(kDFlashModel, model_->config),
                                                    model_->weights.token_embd, model_->weights.output, 2);
  }

  static std::vector<std::vector<int32_t>> tokens_of(const std::vector<Outcome>& outcomes) { return testing::tokens_of(outcomes); }

  // A, B, A, then B cancelled after 5 tokens (in the middle of a verify step), then A again,
  // on one engine: every A equals the first. Returns the first A.
  static Outcome check_a_b_a(Engine& engine, const RequestSpec& a, const RequestSpec& b) {
    const Outcome first = testing::run_alone(engine, a);
    testing::run_alone(engine, b);
    EXPECT_EQ(testing::run_alone(engine, a).tokens, first.tokens);
    const Outcome cut = testing::run_alone(engine, b, 5);
    EXPECT_EQ(cut.finish, FinishReason::Cancelled);
    EXPECT_EQ(testing::run_alone(engine, a).tokens, first.tokens);
    return first;
  }

  static inline runtime::LoadedModel* model_ = nullptr;
  static inline runtime::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(SpeculationTest, GreedyOneStreamIsIdenticalAtEveryDepth) {
  const std::vector<RequestSpec> specs = prompts(1, 48);
  const auto plain = tokens_of(run(specs, 0, 1));
  ASSERT_EQ(plain[0].size(), 48u);
  for (int32_t depth : {1, 2, 3}) EXPECT_EQ(tokens_of(run(specs, depth, 1)), plain) << "depth " << depth;
}

// The policy with a cost table where rows are free drafts every stream to the limit: 8 and 32
// streams carry 24 and 96 draft rows a step (no fixed row cap), and the output is unchanged.
TEST_F(SpeculationTest, GreedyIsIdenticalWhenThePolicyDraftsManyRows) {
  const auto flat = std::make_shared<const runtime::StepCostTable>(
      runtime::StepCostKey{"test", "flat"}, std::vector<int32_t>{1, 32}, std::vector<int32_t>{1, 2, 3, 4},
      std::vector<std::vector<double>>{{1, 1, 1, 1}, {1, 1, 1, 1}}, std::vector<int32_t>{}, std::vector<double>{});
  for (const int32_t streams : {8, 32}) {
    const std::vector<RequestSpec> specs = prompts(streams, 24);
    const auto plain = tokens_of(run(specs, 0, streams));
    DraftCounter counter;
    EXPECT_EQ(tokens_of(run(specs, 3, streams, &counter, Costs{flat})), plain) << streams << " streams";
    EXPECT_GT(counter.max_draft_rows_, 4) << streams << " streams";
    EXPECT_GE(counter.max_draft_rows_, 3 * streams / 2) << streams << " streams";
    EXPECT_GT(counter.predicted_steps_, 0);
  }
}

// Costs measured on the CPU backend, as the daemon measures them: whatever depths the policy
// picks (the CPU makes drafting pay for few streams only), 8 streams' output is unchanged.
TEST_F(SpeculationTest, GreedyIsIdenticalUnderMeasuredCosts) {
  const std::vector<RequestSpec> specs = prompts(8, 32);
  const auto plain = tokens_of(run(specs, 0, 8));
  DraftCounter counter;
  EXPECT_EQ(tokens_of(run(specs, 3, 8, &counter, Costs{nullptr, true})), plain);
  EXPECT_GT(counter.predicted_steps_, 0);
}

TEST_F(SpeculationTest, GreedySixteenStreamsAreIdenticalAtEveryDepth) {
  const std::vector<RequestSpec> specs = prompts(16, 24);
  const auto plain = tokens_of(run(specs, 0));
  for (int32_t depth : {1, 2, 3}) EXPECT_EQ(tokens_of(run(specs, depth)), plain) << "depth " << depth;
}

// Requests with an explicit seed draw coupled drafts and verify them exactly, so their
// output with drafts is token for token the output without, at any depth the load allows, and
// does not depend on what else shares the steps. (Unseeded sampled requests use standard
// speculative sampling: same distribution, not the same tokens; tested in
// tests/runtime/draft_verifier_test.cpp and speculative_sampling_test.cpp.)
TEST_F(SpeculationTest, SeededSamplingWithDraftsEqualsWithoutAndIsBatchIndependent) {
  std::vector<RequestSpec> specs;
  const char* texts[] = {"def parse(self, text):\n", "The quick brown fox", "for i in range(10):\n    "};
  for (int i = 0; i < 4; ++i) {
    RequestSpec spec = request(texts[i % 3], 24, 0.8f, 77 + static_cast<uint64_t>(i));
    spec.sampling.top_p = 0.95f;
    spec.sampling.top_k = 40;
    specs.push_back(spec);
  }
  const auto plain = tokens_of(run(specs, 0));
  for (int32_t depth : {1, 2}) EXPECT_EQ(tokens_of(run(specs, depth)), plain) << "depth " << depth;
  DraftCounter counter;
  const auto together = tokens_of(run(specs, 3, 16, &counter));
  EXPECT_EQ(together, plain) << "depth 3";
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(tokens_of(run({specs[i]}, 3, 1))[0], together[i]) << "request " << i << " alone";
    EXPECT_EQ(together[i].size(), 24u);
  }
  // A different seed gives a different output (the draws do follow the seed).
  RequestSpec reseeded = specs[0];
  reseeded.sampling.seed = 1234567;
  EXPECT_NE(tokens_of(run({reseeded}, 3, 1))[0], together[0]);
  int64_t total_accepted = 0, total_rejected = 0;
  for (const auto& [position, drafted] : counter.drafted_) {
    EXPECT_LE(counter.accepted_[position], drafted) << "position " << position;
    total_accepted += counter.accepted_[position];
    total_rejected += drafted - counter.accepted_[position];
    std::printf("sampled, draft position %d: accepted %lld of %lld\n", position + 1,
                static_cast<long long>(counter.accepted_[position]), static_cast<long long>(drafted));
  }
  EXPECT_GT(total_accepted, 0);
  EXPECT_GT(total_rejected, 0);
  int64_t total_tokens = 0;
  for (const auto& t : together) total_tokens += static_cast<int64_t>(t.size());
  EXPECT_EQ(total_tokens, static_cast<int64_t>(specs.size()) + counter.decode_steps_ + total_accepted);
  EXPECT_EQ(total_tokens, counter.emitted_);
}

// Greedy requests with logprobs: tokens and logprobs with drafts equal those without.
TEST_F(SpeculationTest, GreedyLogprobsAreUnchangedByDrafts) {
  std::vector<RequestSpec> specs = prompts(4, 20);
  for (RequestSpec& spec : specs) {
    spec.sampling.logprobs = true;
    spec.sampling.top_logprobs = 2;
  }
  const auto plain = run(specs, 0);
  const auto drafted = run(specs, 3);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(drafted[i].tokens, plain[i].tokens) << i;
    ASSERT_EQ(drafted[i].logprobs.size(), plain[i].logprobs.size()) << i;
    for (size_t k = 0; k < plain[i].logprobs.size(); ++k) {
      EXPECT_EQ(drafted[i].logprobs[k].token, plain[i].logprobs[k].token);
      EXPECT_EQ(drafted[i].logprobs[k].logprob, plain[i].logprobs[k].logprob) << i << " token " << k;
      EXPECT_EQ(drafted[i].logprobs[k].top, plain[i].logprobs[k].top);
    }
  }
}

// A, then B, then A again in one engine lifetime: A's output must not change (no state
// poisoning through slots, rings, KV or the draft head's cache).
TEST_F(SpeculationTest, NoPoisoningAcrossRequests) {
  const RequestSpec a = request("def fibonacci(n):\n", 40), b = request("It was a dark and stormy night;", 40);
  runtime::CacheConfig cache{2, 16, 32, 4};
  runtime::CpuBackend backend(*model_, cache, 2);
  runtime::BackendRunner runner(backend, 256, 3);
  SchedulerConfig config;
  config.draft_min_expected = 0.0;
  Engine engine(runner, config);
  engine.start();
  check_a_b_a(engine, a, b);
  EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.stats().num_state_slots_used, 0);
  EXPECT_EQ(engine.stats().num_kv_blocks_used, 0);
}

TEST_F(SpeculationTest, DraftCountersObeyTheirInvariants) {
  DraftCounter counter;
  const std::vector<RequestSpec> specs = prompts(8, 40);
  const std::vector<Outcome> outcomes = run(specs, 3, 16, &counter);
  int64_t total_accepted = 0, total_tokens = 0;
  for (const auto& [position, drafted] : counter.drafted_) {
    EXPECT_LE(counter.accepted_[position], drafted) << "position " << position;
    total_accepted += counter.accepted_[position];
    std::printf("draft position %d: accepted %lld of %lld (%.2f)\n", position + 1,
                static_cast<long long>(counter.accepted_[position]), static_cast<long long>(drafted),
                drafted > 0 ? static_cast<double>(counter.accepted_[position]) / static_cast<double>(drafted) : 0.0);
  }
  for (const Outcome& o : outcomes) total_tokens += static_cast<int64_t>(o.tokens.size());
  EXPECT_GT(counter.drafted_[0], 0);
  EXPECT_GT(total_accepted, 0) << "the trained head should get some drafts accepted";
  // Every emitted token is the first token of a request (from its prefill), a decode step's
  // own token, or an accepted draft.
  EXPECT_EQ(total_tokens, static_cast<int64_t>(specs.size()) + counter.decode_steps_ + total_accepted);
  EXPECT_EQ(total_tokens, counter.emitted_);
}

// Constrained requests (runtime/grammar): greedy and seeded outputs with drafts equal the
// outputs without them (a draft the grammar refuses is rejected; the grammar advances only
// over emitted tokens), and the output is the schema's.
TEST_F(SpeculationTest, ConstrainedOutputIsIdenticalAtEveryDepth) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer_->num_vocab()));
  for (int32_t id = 0; id < tokenizer_->num_vocab(); ++id) {
    if (!tokenizer_->is_special(id)) pieces[static_cast<size_t>(id)] = std::string(tokenizer_->token_to_piece(id));
  }
  const auto vocab = std::make_shared<runtime::grammar::Vocabulary>(std::move(pieces));
  const auto grammar = runtime::grammar::json_schema_grammar(runtime::grammar::SchemaJson::parse(
      R"({"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"},
          "tags":{"type":"array","items":{"enum":["x","y"]}}},"required":["n","ok","tags"],"additionalProperties":false})"));
  const int32_t eos = *tokenizer_->eos_id();
  auto constraint = std::make_shared<runtime::grammar::Constraint>(grammar, vocab, std::vector<int32_t>{eos});
  std::vector<RequestSpec> specs = prompts(6, 64);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i % 2 == 1) {  // half of them seeded sampling (coupled drafts, exact verification)
      specs[i].sampling.temperature = 1.0f;
      specs[i].sampling.seed = 7 + i;
    }
    specs[i].sampling.constraint = constraint;
    specs[i].stop_token_ids = {eos};
  }
  const std::vector<Outcome> outcomes = run(specs, 0);
  int num_finished = 0;
  for (const Outcome& o : outcomes) {
    const std::string text = tokenizer_->decode(o.tokens);
    if (o.finish != FinishReason::Stop) continue;  // else the object was cut by max_tokens
    ++num_finished;
    const auto json = runtime::grammar::SchemaJson::parse(text);
    EXPECT_TRUE(json["n"].is_number_integer()) << text;
    EXPECT_TRUE(json["ok"].is_boolean()) << text;
  }
  EXPECT_GT(num_finished, 0);
  const auto plain = tokens_of(outcomes);
  for (int32_t depth : {1, 3}) EXPECT_EQ(tokens_of(run(specs, depth)), plain) << "depth " << depth;
}

// A thinking budget (runtime/grammar/constraint.h): the reasoning is free for `budget` tokens,
// then its close is forced, then free again. The trained model never closes a <think> block on
// its own, so each output has exactly `budget` free tokens and then "\n</think>\n\n"; greedy
// and seeded outputs with drafts equal those without (drafts are checked against the same
// constraint state, the forced close included).
TEST_F(SpeculationTest, ThinkingBudgetClosesTheReasoningAtEveryDepth) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer_->num_vocab()));
  for (int32_t id = 0; id < tokenizer_->num_vocab(); ++id) {
    if (!tokenizer_->is_special(id)) pieces[static_cast<size_t>(id)] = std::string(tokenizer_->token_to_piece(id));
  }
  const auto vocab = std::make_shared<runtime::grammar::Vocabulary>(std::move(pieces));
  const int32_t eos = *tokenizer_->eos_id();
  auto constraint = std::make_shared<runtime::grammar::Constraint>(nullptr, vocab, std::vector<int32_t>{eos}, "</think>",
                                                                   "\n</think>\n\n");
  constexpr int32_t kBudget = 7;
  std::vector<RequestSpec> specs = prompts(6, 40);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i % 2 == 1) {
      specs[i].sampling.temperature = 1.0f;
      specs[i].sampling.seed = 11 + i;
    }
    specs[i].sampling.constraint = constraint;
    specs[i].sampling.thinking_budget = kBudget;
  }
  const std::vector<Outcome> outcomes = run(specs, 0);
  for (const Outcome& o : outcomes) {
    ASSERT_GT(o.tokens.size(), static_cast<size_t>(kBudget));
    const std::vector<int32_t> free(o.tokens.begin(), o.tokens.begin() + kBudget);
    const std::string reasoning = tokenizer_->decode(free);
    const std::string text = tokenizer_->decode(o.tokens);
    EXPECT_EQ(reasoning.find("</think>"), std::string::npos) << text;
    // The close follows the budget's tokens (its leading newline may end the free text).
    const size_t close = text.find("</think>\n\n");
    ASSERT_NE(close, std::string::npos) << text;
    EXPECT_LE(close, reasoning.size() + 1) << text;
    EXPECT_GE(close + 1, reasoning.size()) << text;
    EXPECT_EQ(text[close - 1], '\n') << text;
  }
  const auto plain = tokens_of(outcomes);
  for (int32_t depth : {1, 3}) EXPECT_EQ(tokens_of(run(specs, depth)), plain) << "depth " << depth;
}

// Lazy catch-up (runtime/mtp_drafter.h): decode steps at depth 0 leave their rows waiting;
// when the stream drafts again, one pass catches them up first. Driven step by step through
// the runner with a depth schedule that stops and resumes drafting (including stretches past
// the waiting window, whose oldest rows are dropped): the tokens equal those of no drafts, and
// drafts right after a stretch at depth 0 are accepted (the head saw those rows).
TEST_F(SpeculationTest, LazyCatchUpAfterDepthZeroKeepsOutputAndDrafts) {
  const std::vector<int32_t> prompt = tokenizer_->encode("def fibonacci(n):\n");
  const int32_t num_steps = 200;
  auto decode = [&](const std::function<int32_t(int32_t)>& depth_at, int64_t* accepted_after_pause) {
    runtime::CacheConfig cache{1, 16, 24, 4};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 384, 3);
    runtime::SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<int32_t> history = prompt, blocks;
    for (int32_t b = 0; b < 24; ++b) blocks.push_back(b);
    int32_t cached = 0;
    for (int32_t step = 0; step < num_steps; ++step) {
      runtime::StepPlan plan;
      runtime::SequencePlan& p = plan.sequences.emplace_back();
      p.id = 1;
      p.num_cached_tokens = cached;
      p.tokens = std::span<const int32_t>(history).subspan(static_cast<size_t>(cached));
      p.kv_blocks = blocks;
      p.sample = true;
      p.is_decode = step > 0;
      p.draft_depth = step > 0 ? depth_at(step) : 0;
      p.speculative = true;
      p.sampling = &greedy;
      p.history = history;
      p.num_prompt_tokens = static_cast<int32_t>(prompt.size());
      p.output_index = static_cast<int32_t>(history.size() - prompt.size());
      runtime::StepOutput out;
      out.sequences.resize(1);
      runner.execute(plan, out);
      const std::vector<int32_t>& emitted = out.sequences[0].tokens;
      if (accepted_after_pause != nullptr && step > 1 && depth_at(step - 1) == 0 && p.draft_depth > 0)
        *accepted_after_pause += static_cast<int64_t>(emitted.size()) - 1;
      history.insert(history.end(), emitted.begin(), emitted.end());
      cached = static_cast<int32_t>(history.size()) - 1;
      if (history.size() > 300) break;
    }
    history.resize(std::min<size_t>(history.size(), 300));
    return history;
  };
  const auto plain = decode([](int32_t) { return 0; }, nullptr);
  // Drafting in bursts, pauses of 1 to 150 steps (past 2 x the 64-row window).
  int64_t accepted_after_pause = 0;
  const auto bursts = decode(
      [](int32_t step) {
        const int32_t phase = step % 40;
        if (step >= 40 && step < 190) return step >= 185 ? 3 : 0;  // a pause of 145 steps
        return phase < 5 ? 2 : phase == 10 || phase == 20 ? 3 : 0;
      },
      &accepted_after_pause);
  const size_t n = std::min(plain.size(), bursts.size());
  ASSERT_GT(n, prompt.size() + 100);
  EXPECT_EQ(std::vector<int32_t>(bursts.begin(), bursts.begin() + static_cast<int64_t>(n)),
            std::vector<int32_t>(plain.begin(), plain.begin() + static_cast<int64_t>(n)));
  EXPECT_GT(accepted_after_pause, 0);
}

// DFlash blocks (runtime/dflash_drafter.h): blocks of 4, 8 and 16 rows (3, 7 and 15 drafts)
// give the output of no speculation, token for token, at 1 and 8 streams; flat costs make
// every stream draft its whole block every step.
TEST_F(SpeculationTest, DFlashGreedyIsIdenticalForBlocksOf4_8_16) {
  const auto flat = std::make_shared<const runtime::StepCostTable>(
      runtime::StepCostKey{"test", "flat"}, std::vector<int32_t>{1, 32}, std::vector<int32_t>{1, 16},
      std::vector<std::vector<double>>{{1, 1}, {1, 1}}, std::vector<int32_t>{}, std::vector<double>{});
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  for (const int32_t streams : {1, 8}) {
    const std::vector<RequestSpec> specs = prompts(streams, 40);
    auto t0 = Clock::now();
    const auto plain = tokens_of(run(specs, 0, streams));
    std::printf("dflash, %d streams, no speculation: %.2f s\n", streams, seconds_since(t0));
    for (const int32_t depth : {3, 7, 15}) {
      DraftCounter counter;
      t0 = Clock::now();
      EXPECT_EQ(tokens_of(run(specs, depth, streams, &counter, Costs{flat}, true)), plain)
          << streams << " streams, block of " << depth + 1;
      std::printf("dflash, %d streams, block of %d: %.2f s, %.2f tokens per decode step\n", streams, depth + 1,
                  seconds_since(t0), static_cast<double>(counter.emitted_) / std::max<int64_t>(1, counter.decode_steps_));
      int64_t drafted = 0, accepted = 0;
      for (const auto& [position, n] : counter.drafted_) {
        drafted += n;
        accepted += counter.accepted_[position];
        EXPECT_LE(counter.accepted_[position], n);
      }
      EXPECT_GT(drafted, 0) << "block of " << depth + 1 << " never drafted";
      EXPECT_GE(counter.max_draft_rows_, depth) << "block of " << depth + 1;
      std::printf("dflash, %d streams, block of %d: %lld of %lld drafts accepted\n", streams, depth + 1,
                  static_cast<long long>(accepted), static_cast<long long>(drafted));
    }
  }
}

// The trained drafter's acceptance by draft position (8 streams, blocks of 16; printed for
// bench/RESULTS.md), and the counters' invariants with DFlash drafts.
TEST_F(SpeculationTest, DFlashDraftsAreAcceptedAndCounted) {
  DraftCounter counter;
  const std::vector<RequestSpec> specs = prompts(8, 48);
  const std::vector<Outcome> outcomes = run(specs, 15, 8, &counter, {}, true);
  int64_t total_accepted = 0, total_tokens = 0;
  for (const auto& [position, drafted] : counter.drafted_) {
    total_accepted += counter.accepted_[position];
    std::printf("dflash draft position %d: accepted %lld of %lld (%.2f)\n", position + 1,
                static_cast<long long>(counter.accepted_[position]), static_cast<long long>(drafted),
                drafted > 0 ? static_cast<double>(counter.accepted_[position]) / static_cast<double>(drafted) : 0.0);
  }
  for (const Outcome& o : outcomes) total_tokens += static_cast<int64_t>(o.tokens.size());
  EXPECT_GT(total_accepted, 0) << "the trained drafter should get some drafts accepted";
  EXPECT_EQ(total_tokens, static_cast<int64_t>(specs.size()) + counter.decode_steps_ + total_accepted);
  EXPECT_EQ(total_tokens, counter.emitted_);
}

// Too few KV blocks for 8 streams: sequences are preempted between (and so in the middle of)
// their DFlash blocks and recomputed; the drafter's context starts over with them, and the
// output is unchanged.
TEST_F(SpeculationTest, DFlashPreemptionMidDraftKeepsTheOutput) {
  const std::vector<RequestSpec> specs = prompts(8, 64);
  const auto plain = tokens_of(run(specs, 0, 8));
  uint64_t preemptions = 0;
  EXPECT_EQ(tokens_of(run(specs, 7, 8, nullptr, {}, true, 24, &preemptions)), plain);
  EXPECT_GT(preemptions, 0u);
}

// A, then B, then A again on one DFlash engine, with a cancellation in the middle of B's
// drafting: A's output never changes (no state kept across requests in the drafter's context).
TEST_F(SpeculationTest, DFlashNoPoisoningAcrossRequests) {
  const RequestSpec a = request("def fibonacci(n):\n", 40), b = request("It was a dark and stormy night;", 40);
  runtime::CacheConfig cache{2, 16, 32, 16};
  runtime::CpuBackend backend(*model_, cache, 2);
  runtime::BackendRunner runner(backend, 256, 15, dflash_drafter());
  SchedulerConfig config;
  config.draft_min_expected = 0.0;
  Engine engine(runner, config);
  engine.start();
  const Outcome first = check_a_b_a(engine, a, b);
  const auto plain = tokens_of(run({a}, 0, 1));
  EXPECT_EQ(first.tokens, plain[0]);
  EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.stats().num_state_slots_used, 0);
}

}  // namespace
}  // namespace deltaserve::scheduler
