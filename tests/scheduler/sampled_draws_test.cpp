// Sampled requests on the real CPU stack (the embedded trained model with its MTP head), as a
// client would send them: edge values of the draw rule's parameters, unseeded requests drawn
// by the backend (coupled drafts: their tokens never depend on speculation), max_tokens and
// stop ids at draft boundaries, preemption, the prefix cache and batches that mix backend-drawn
// requests with host-sampled ones (logprobs, penalties, bias).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "runtime/backend_runner.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/dflash_drafter.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

using testing::Outcome;
using Tokens = std::vector<int32_t>;

struct StackOptions {
  int32_t depth = 0;
  bool backend_draws = true;
  int32_t slots = 8;
  int32_t kv_blocks = 0;  // 0: room for every stream's whole context (else fewer: preemption)
  bool prefix_cache = false;
};

class SampledDrawsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = runtime::load_model("models/deltaserve-tiny-moe.gguf").release();
    tokenizer_ = runtime::Tokenizer::from_gguf(*model_->gguf).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static RequestSpec request(const std::string& text, int32_t max_tokens, float temperature,
                             std::optional<uint64_t> seed = std::nullopt) {
    RequestSpec spec;
    spec.prompt_tokens = tokenizer_->encode(text);
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = temperature;
    spec.sampling.seed = seed;
    return spec;
  }

  // Runs the requests concurrently on a fresh stack; every one must end by Length (or Stop
  // where a stop id is set).
  static std::vector<Outcome> run(const std::vector<RequestSpec>& specs, const StackOptions& o,
                                  uint64_t* num_preemptions = nullptr) {
    const int32_t blocks = o.kv_blocks > 0 ? o.kv_blocks : o.slots * 16;
    runtime::CacheConfig cache{o.slots, 16, blocks, 1 + o.depth};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 256, o.depth);
    runner.set_backend_draws(o.backend_draws);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;  // flat costs: every stream drafts to its limit
    config.prefix_cache = o.prefix_cache;
    config.prefix_checkpoint_tokens = 16;  // checkpoints inside the answers too
    Engine engine(runner, config);
    engine.start();
    std::vector<Outcome> result = testing::run_to_completion(engine, specs);
    if (num_preemptions != nullptr) *num_preemptions = engine.stats().num_preemptions;
    engine.stop();
    for (size_t i = 0; i < result.size(); ++i) {
      EXPECT_TRUE(result[i].finish == FinishReason::Length || result[i].finish == FinishReason::Stop)
          << "request " << i << ": " << result[i].error;
    }
    return result;
  }
  static std::vector<Tokens> tokens_of(const std::vector<Outcome>& outcomes) { return testing::tokens_of(outcomes); }

  static inline runtime::LoadedModel* model_ = nullptr;
  static inline runtime::Tokenizer* tokenizer_ = nullptr;
};

const char* kTexts[] = {"def fibonacci(n):\n", "The quick brown fox", "import os\nimport sys\n\ndef main():\n",
                        "It was a dark and stormy night;"};

// Parameters that leave one token (top_k 1, min_p 1, a tiny top_p) or a temperature so small
// that only the most likely token has weight: the draw is the argmax, on the backend's path
// and the host's, with and without drafts. A temperature whose reciprocal overflows a float
// (1e-39: the API takes any value in [0, 2]) is one of them.
TEST_F(SampledDrawsTest, ParametersThatKeepOneTokenDrawTheArgmax) {
  std::vector<RequestSpec> greedy;
  for (const char* text : kTexts) greedy.push_back(request(text, 16, 0.0f));
  const std::vector<Tokens> expected = tokens_of(run(greedy, {}));
  using Edit = std::function<void(runtime::SamplingParams&)>;
  const std::vector<std::pair<const char*, Edit>> edits = {
      {"top_k 1", [](runtime::SamplingParams& s) { s.top_k = 1; }},
      {"min_p 1", [](runtime::SamplingParams& s) { s.min_p = 1.0f; }},
      {"top_p 1e-9", [](runtime::SamplingParams& s) { s.top_p = 1e-9f; }},
      {"temperature 1e-6", [](runtime::SamplingParams& s) { s.temperature = 1e-6f; }},
      {"temperature 1e-39", [](runtime::SamplingParams& s) { s.temperature = 1e-39f; }},
  };
  for (const auto& [name, edit] : edits) {
    std::vector<RequestSpec> specs;
    for (size_t i = 0; i < greedy.size(); ++i) {
      RequestSpec spec = greedy[i];
      spec.sampling.temperature = 1.5f;
      if (i % 2 == 0) spec.sampling.seed = 11 + i;
      edit(spec.sampling);
      specs.push_back(spec);
    }
    for (const bool backend_draws : {true, false}) {
      for (const int32_t depth : {0, 3}) {
        EXPECT_EQ(tokens_of(run(specs, {depth, backend_draws})), expected)
            << name << ", depth " << depth << ", backend draws " << backend_draws;
      }
    }
  }
}

// A temperature so large that every finite logit weighs the same: the draws spread over the
// vocabulary (no crash, no single token), identically on both paths and at both depths.
TEST_F(SampledDrawsTest, HugeTemperatureDrawsEveryTokenAlike) {
  std::vector<RequestSpec> specs;
  for (uint64_t i = 0; i < 4; ++i) {
    RequestSpec spec = request(kTexts[i], 24, 1e30f, 500 + i);
    specs.push_back(spec);
  }
  const std::vector<Tokens> reference = tokens_of(run(specs, {0, false}));
  EXPECT_EQ(tokens_of(run(specs, {3, true})), reference);
  std::set<int32_t> distinct;
  for (const Tokens& t : reference) distinct.insert(t.begin(), t.end());
  EXPECT_GT(distinct.size(), 80u) << "96 draws from a near-uniform distribution over the vocabulary";
}

// Unseeded requests drawn by the backend draft coupled draws too, so for a given request (its
// seed drawn per request) the tokens do not depend on the draft depths; two requests still
// differ. Driven step by step through one runner (one salt), the same request id decoded at
// depth 0, at depth 3 and with depths that stop and resume.
TEST_F(SampledDrawsTest, UnseededDrawnOutputIsIndependentOfDrafts) {
  const Tokens prompt = tokenizer_->encode("It was a dark and stormy night;");
  runtime::CacheConfig cache{2, 16, 48, 4};
  runtime::CpuBackend backend(*model_, cache, 2);
  runtime::BackendRunner runner(backend, 384, 3);
  runtime::SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.top_p = 0.95f;
  int64_t accepted = 0;  // drafts accepted over the decodes
  auto decode = [&](RequestId id, const std::function<int32_t(int32_t)>& depth_at) {
    Tokens history = prompt, blocks;
    for (int32_t b = 0; b < 24; ++b) blocks.push_back(static_cast<int32_t>(id % 2) * 24 + b);
    int32_t cached = 0;
    for (int32_t step = 0; history.size() < prompt.size() + 60; ++step) {
      runtime::StepPlan plan;
      runtime::SequencePlan& p = plan.sequences.emplace_back();
      p.id = id;
      p.slot = static_cast<int32_t>(id % 2);
      p.num_cached_tokens = cached;
      p.tokens = std::span<const int32_t>(history).subspan(static_cast<size_t>(cached));
      p.kv_blocks = blocks;
      p.sample = true;
      p.is_decode = step > 0;
      p.draft_depth = step > 0 ? depth_at(step) : 0;
      p.speculative = true;
      p.sampling = &sampled;
      p.history = history;
      p.num_prompt_tokens = static_cast<int32_t>(prompt.size());
      p.output_index = static_cast<int32_t>(history.size() - prompt.size());
      runtime::StepOutput out;
      out.sequences.resize(1);
      runner.execute(plan, out);
      EXPECT_EQ(out.sequences[0].error, "");
      accepted += static_cast<int64_t>(out.sequences[0].tokens.size()) - 1;
      history.insert(history.end(), out.sequences[0].tokens.begin(), out.sequences[0].tokens.end());
      cached = static_cast<int32_t>(history.size()) - 1;
    }
    return Tokens(history.begin() + static_cast<int64_t>(prompt.size()), history.begin() + static_cast<int64_t>(prompt.size()) + 60);
  };
  const Tokens plain = decode(1, [](int32_t) { return 0; });
  EXPECT_EQ(decode(1, [](int32_t) { return 3; }), plain);
  EXPECT_EQ(decode(1, [](int32_t step) { return step % 7 < 3 ? 0 : step % 3 + 1; }), plain);
  EXPECT_GT(accepted, 0) << "coupled drafts are accepted";
  EXPECT_NE(decode(2, [](int32_t) { return 3; }), plain) << "another request draws other tokens";
}

// Seeded sampled tokens at output position n depend only on the seed and the tokens before,
// so a shorter max_tokens gives a prefix of the longer output, at every draft depth (the
// scheduler caps drafts at the room left), and a stop id ends the output just before its
// first occurrence.
TEST_F(SampledDrawsTest, MaxTokensAndStopIdsCutTheSameOutput) {
  RequestSpec base = request("The quick brown fox", 40, 0.9f, 4242);
  base.sampling.top_k = 50;
  const Tokens full = tokens_of(run({base}, {0}))[0];
  ASSERT_EQ(full.size(), 40u);
  std::vector<RequestSpec> specs;
  for (int32_t max_tokens : {1, 2, 3, 4, 5, 7}) {
    RequestSpec spec = base;
    spec.max_tokens = max_tokens;
    specs.push_back(spec);
  }
  RequestSpec stopped = base;
  stopped.stop_token_ids = {full[9]};
  specs.push_back(stopped);
  const size_t stop_at = static_cast<size_t>(std::find(full.begin(), full.end(), full[9]) - full.begin());
  for (const int32_t depth : {0, 3}) {
    const std::vector<Outcome> out = run(specs, {depth});
    for (size_t i = 0; i + 1 < specs.size(); ++i) {
      EXPECT_EQ(out[i].tokens, Tokens(full.begin(), full.begin() + specs[i].max_tokens)) << "depth " << depth;
      EXPECT_EQ(out[i].finish, FinishReason::Length);
    }
    EXPECT_EQ(out.back().tokens, Tokens(full.begin(), full.begin() + static_cast<int64_t>(stop_at))) << "depth " << depth;
    EXPECT_EQ(out.back().finish, FinishReason::Stop);
  }
}

// Backend-drawn requests (plain sampling) in the same steps as host-sampled ones (logprobs,
// penalties, bias; seeded: coupled drafts, exact verification): each equals itself alone
// without drafts, tokens and logprobs; unseeded host-sampled ones beside them just finish.
TEST_F(SampledDrawsTest, MixedBatchEqualsEachRequestAlone) {
  std::vector<RequestSpec> specs;
  for (uint64_t i = 0; i < 8; ++i) {
    RequestSpec spec = request(kTexts[i % 4], 20 + static_cast<int32_t>(i % 3), 0.8f, 900 + i);
    specs.push_back(spec);
  }
  specs[1].sampling.logprobs = true;
  specs[1].sampling.top_logprobs = 3;
  specs[2].sampling.repetition_penalty = 1.2f;
  specs[3].sampling.frequency_penalty = 0.5f;
  specs[3].sampling.presence_penalty = 0.3f;
  specs[4].sampling.logit_bias = {{tokenizer_->encode(" the")[0], 3.0f}};
  specs[5].sampling.min_p = 0.1f;
  specs[6].sampling.top_p = 0.5f;
  specs[6].sampling.logprobs = true;
  specs[7].sampling.top_k = 3;
  std::vector<RequestSpec> with_unseeded = specs;
  for (uint64_t i = 0; i < 3; ++i) {
    RequestSpec spec = request(kTexts[i], 20, 1.0f);
    if (i == 1) spec.sampling.logprobs = true;
    if (i == 2) spec.sampling.presence_penalty = 1.0f;
    with_unseeded.push_back(spec);
  }
  const std::vector<Outcome> together = run(with_unseeded, {3});
  for (size_t i = 0; i < specs.size(); ++i) {
    const Outcome alone = run({specs[i]}, {0, false, 1})[0];
    EXPECT_EQ(together[i].tokens, alone.tokens) << "request " << i;
    ASSERT_EQ(together[i].logprobs.size(), alone.logprobs.size()) << "request " << i;
    for (size_t k = 0; k < alone.logprobs.size(); ++k) {
      EXPECT_EQ(together[i].logprobs[k].token, alone.logprobs[k].token);
      EXPECT_EQ(together[i].logprobs[k].logprob, alone.logprobs[k].logprob) << "request " << i << " token " << k;
      EXPECT_EQ(together[i].logprobs[k].top, alone.logprobs[k].top);
    }
  }
  for (size_t i = specs.size(); i < with_unseeded.size(); ++i) {
    EXPECT_EQ(together[i].tokens.size(), 20u) << "unseeded request " << i;
    if (with_unseeded[i].sampling.logprobs) {
      EXPECT_EQ(together[i].logprobs.size(), 20u);
    }
  }
}

// Too few KV blocks for the streams: sampled sequences are preempted mid-stream and recomputed
// or resumed from prefix-cache checkpoints (their drafter state starts over); seeded ones keep
// their tokens, whichever path draws them.
TEST_F(SampledDrawsTest, PreemptedSampledStreamsKeepTheirTokens) {
  std::vector<RequestSpec> specs;
  for (uint64_t i = 0; i < 8; ++i) {
    RequestSpec spec = request(kTexts[i % 4], 64, 0.9f, 70 + i);
    if (i % 4 == 1) spec.sampling.logprobs = true;  // host-sampled
    if (i % 4 == 2) spec.sampling.top_p = 0.9f;
    specs.push_back(spec);
  }
  const std::vector<Tokens> plain = tokens_of(run(specs, {0, true, 8}));
  for (const bool cache : {false, true}) {  // with the cache, re-admissions resume from checkpoints
    for (const int32_t depth : {0, 3}) {
      uint64_t preemptions = 0;
      EXPECT_EQ(tokens_of(run(specs, {depth, true, 8, 24, cache}, &preemptions)), plain)
          << "depth " << depth << ", prefix cache " << cache;
      EXPECT_GT(preemptions, 0u) << "depth " << depth;
    }
  }
}

// The prefix cache: a seeded sampled request whose prompt is a cached prefix (a second turn
// that continues the first one's output, and the same request again) draws the same tokens
// as on a stack without the cache.
TEST_F(SampledDrawsTest, PrefixCacheResumesSampledRequests) {
  const std::string system =
      "You are a careful assistant. Answer in plain words, cite the file you read, and never invent a function "
      "that the code does not define.\n";
  RequestSpec first = request(system + "Q: what is a stack?\nA:", 30, 0.8f, 31337);
  for (const int32_t depth : {0, 3}) {
    const Outcome cold = run({first}, {depth})[0];
    RequestSpec second = first;
    second.prompt_tokens.insert(second.prompt_tokens.end(), cold.tokens.begin(), cold.tokens.end());
    const Tokens more = tokenizer_->encode("\nQ: and a queue?\nA:");
    second.prompt_tokens.insert(second.prompt_tokens.end(), more.begin(), more.end());
    second.sampling.seed = 99;
    const Outcome second_cold = run({second}, {depth})[0];

    runtime::CacheConfig cache{4, 16, 4 * 24, 1 + depth};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 0, depth);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;
    config.prefix_cache = true;
    config.prefix_checkpoint_tokens = 16;
    Engine engine(runner, config);
    engine.start();
    EXPECT_EQ(testing::run_alone(engine, first).tokens, cold.tokens) << "depth " << depth;
    const Outcome again = testing::run_alone(engine, first);
    EXPECT_EQ(again.tokens, cold.tokens) << "depth " << depth;
    EXPECT_GT(again.num_cached_prompt_tokens, 0) << "depth " << depth;
    const Outcome second_warm = testing::run_alone(engine, second);
    EXPECT_EQ(second_warm.tokens, second_cold.tokens) << "depth " << depth;
    EXPECT_GT(second_warm.num_cached_prompt_tokens, 0) << "depth " << depth;
    engine.stop();
  }
}

// One depth-3 engine: a seeded sampled A, an unseeded B cancelled in the middle of its drafts,
// a host-sampled C (logprobs), then A again: A's tokens never change (no drafter or sampler
// state kept across requests), and they equal A on a depth-0 engine.
TEST_F(SampledDrawsTest, NoPoisoningAcrossSampledRequests) {
  RequestSpec a = request("def fibonacci(n):\n", 40, 0.9f, 8080);
  a.sampling.top_k = 30;
  const RequestSpec b = request("It was a dark and stormy night;", 40, 1.0f);
  RequestSpec c = request("The quick brown fox", 30, 0.7f, 8080);
  c.sampling.logprobs = true;
  const Tokens reference = tokens_of(run({a}, {0}))[0];
  runtime::CacheConfig cache{4, 16, 4 * 16, 4};
  runtime::CpuBackend backend(*model_, cache, 2);
  runtime::BackendRunner runner(backend, 256, 3);
  SchedulerConfig config;
  config.draft_min_expected = 0.0;
  Engine engine(runner, config);
  engine.start();
  EXPECT_EQ(testing::run_alone(engine, a).tokens, reference);
  const Outcome cut = testing::run_alone(engine, b, 5);
  EXPECT_EQ(cut.finish, FinishReason::Cancelled);
  EXPECT_EQ(testing::run_alone(engine, a).tokens, reference);
  EXPECT_EQ(testing::run_alone(engine, c).logprobs.size(), 30u);
  EXPECT_EQ(testing::run_alone(engine, a).tokens, reference);
  engine.stop();
}

// Requests that run into the context's end (the runner's 256 tokens) and requests that set
// their own draft depth (0: none; 1) share a depth-3 engine with prefill in small chunks: the
// seeded ones equal themselves on a depth-0 engine, the long ones stop at the context.
TEST_F(SampledDrawsTest, ContextEndChunkedPrefillAndPerRequestDepths) {
  std::vector<RequestSpec> specs;
  for (uint64_t i = 0; i < 6; ++i) specs.push_back(request(kTexts[i % 4], 30, 0.9f, 60 + i));
  specs[0].max_tokens = 1000;  // to the context's end
  specs[1].max_tokens = 1000;
  specs[1].sampling.top_p = 0.8f;
  specs[2].draft_depth = 0;
  specs[3].draft_depth = 1;
  specs[4].sampling.logprobs = true;
  specs[4].draft_depth = 2;
  auto run_chunked = [&](int32_t depth) {
    runtime::CacheConfig cache{8, 16, 8 * 16, 1 + depth};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 256, depth);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;
    config.max_prefill_chunk_tokens = 4;
    Engine engine(runner, config);
    engine.start();
    std::vector<Outcome> result = testing::run_to_completion(engine, specs);
    engine.stop();
    return result;
  };
  const std::vector<Outcome> plain = run_chunked(0);
  const std::vector<Outcome> drafted = run_chunked(3);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(drafted[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(drafted[i].finish, FinishReason::Length) << "request " << i << ": " << drafted[i].error;
  }
  EXPECT_EQ(plain[0].tokens.size() + specs[0].prompt_tokens.size(), 256u);
  EXPECT_EQ(plain[1].tokens.size() + specs[1].prompt_tokens.size(), 256u);
}

// DFlash blocks (runtime/dflash_drafter.h) draft sampled requests through the runner's picker:
// backend-drawn and host-sampled seeded requests draw coupled drafts there, so blocks of 7
// drafts give the tokens of no speculation, with and without the backend's draws.
TEST_F(SampledDrawsTest, DFlashSampledOutputEqualsNoDrafts) {
  std::vector<RequestSpec> specs;
  for (uint64_t i = 0; i < 6; ++i) specs.push_back(request(kTexts[i % 4], 40, 0.8f, 40 + i));
  specs[1].sampling.top_p = 0.9f;
  specs[2].sampling.logprobs = true;
  specs[3].sampling.min_p = 0.05f;
  specs[4].sampling.repetition_penalty = 1.1f;
  const std::vector<Tokens> plain = tokens_of(run(specs, {0}));
  for (const bool backend_draws : {true, false}) {
    runtime::CacheConfig cache{8, 16, 8 * 16, 8};
    runtime::CpuBackend backend(*model_, cache, 2);
    auto dflash = std::make_unique<runtime::DFlashDrafter>(
        runtime::load_dflash_model("models/deltaserve-tiny-moe-dflash", model_->config), model_->weights.token_embd,
        model_->weights.output, 2);
    runtime::BackendRunner runner(backend, 256, 7, std::move(dflash));
    runner.set_backend_draws(backend_draws);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;
    testing::DraftCounter counter;
    Engine engine(runner, config, &counter);
    engine.start();
    EXPECT_EQ(tokens_of(testing::run_to_completion(engine, specs)), plain) << "backend draws " << backend_draws;
    engine.stop();
    int64_t accepted = 0;
    for (const auto& [position, n] : counter.accepted_) accepted += n;
    EXPECT_GT(accepted, 0) << "backend draws " << backend_draws;
  }
}

// Randomised seeded requests (temperature, top-k, top-p, min-p, logprobs, penalties, bias,
// max_tokens, the request's draft depth) on a depth-3 engine with a tight KV pool and the
// prefix cache, against the same requests one by one on a depth-0 engine: token for token.
TEST_F(SampledDrawsTest, RandomSeededRequestsUnderLoadEqualThemselvesAlone) {
  std::mt19937 rng(20261207);
  auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 16; ++i) {
    RequestSpec spec = request(kTexts[pick(4)], 8 + pick(56), uniform(0.05f, 2.0f), rng());
    runtime::SamplingParams& s = spec.sampling;
    if (pick(2) == 0) s.top_k = 1 + pick(100);
    if (pick(2) == 0) s.top_p = uniform(0.05f, 1.0f);
    if (pick(3) == 0) s.min_p = uniform(0.0f, 0.5f);
    if (pick(4) == 0) s.logprobs = true, s.top_logprobs = pick(4);
    if (pick(5) == 0) s.frequency_penalty = uniform(-1.0f, 1.0f);
    if (pick(6) == 0) s.logit_bias = {{pick(1000), uniform(-5.0f, 5.0f)}};
    if (pick(4) == 0) spec.draft_depth = pick(4);
    specs.push_back(spec);
  }
  std::vector<Tokens> alone;
  {
    runtime::CacheConfig cache{1, 16, 16, 1};
    runtime::CpuBackend backend(*model_, cache, 2);
    runtime::BackendRunner runner(backend, 256, 0);
    Engine engine(runner, SchedulerConfig{});
    engine.start();
    for (const RequestSpec& spec : specs) alone.push_back(testing::run_alone(engine, spec).tokens);
    engine.stop();
  }
  uint64_t preemptions = 0;
  const std::vector<Outcome> together = run(specs, {3, true, 16, 24, true}, &preemptions);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(specs[i].max_tokens)) << "request " << i;
  }
  EXPECT_GT(preemptions, 0u);
}

}  // namespace
}  // namespace deltaserve::scheduler
