// The prefix cache on the real CPU stack (the embedded trained tiny MoE with its MTP head;
// docs/prefix-cache.md): greedy output with the cache equals output without it, token for
// token, across second turns, divergence inside a block and inside a checkpoint interval, a
// stripped earlier answer, concurrent requests sharing a system prompt, preemption, eviction,
// MTP depth 0 and 3; no poisoning (A, B, A); reset returns every reference; a soak stays
// within the checkpoint budget.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/backend_runner.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

using Tokens = std::vector<int32_t>;

using testing::Outcome;

using testing::DraftCounter;

struct StackOptions {
  bool cache = true;
  int32_t depth = 0;
  int32_t slots = 8;
  int32_t blocks = 8 * 24;  // of 16 tokens
  int32_t checkpoint_tokens = 32;
  int64_t device_bytes = int64_t{64} << 20;
  int64_t host_bytes = int64_t{64} << 20;
  int32_t chunk = 48;
};

// One engine on a fresh CPU backend; requests run to the end.
class Stack {
 public:
  Stack(const runtime::LoadedModel& model, const StackOptions& o, EngineObserver* observer = nullptr)
      : backend_(model, runtime::CacheConfig{o.slots, 16, o.blocks, 1 + o.depth}, 2), runner_(backend_, 0, o.depth), held_(runner_) {
    SchedulerConfig config;
    config.draft_min_expected = 0.0;  // always draft at full depth: every path
    config.max_prefill_chunk_tokens = o.chunk;
    config.max_num_batched_tokens = 256;
    config.prefix_cache = o.cache;
    config.prefix_cache_device_bytes = o.device_bytes;
    config.prefix_cache_host_bytes = o.host_bytes;
    config.prefix_checkpoint_tokens = o.checkpoint_tokens;
    engine_ = std::make_unique<Engine>(held_, config, observer);
    engine_->start();
  }
  ~Stack() { engine_->stop(); }

  std::vector<Outcome> run(const std::vector<Tokens>& prompts, int32_t max_tokens, const std::vector<int32_t>& each = {}) {
    std::vector<RequestSpec> specs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestSpec& spec = specs.emplace_back();
      spec.prompt_tokens = prompts[i];
      spec.max_tokens = each.empty() ? max_tokens : each[i];
      spec.sampling.temperature = 0.0f;  // greedy: outputs compare token for token
    }
    return testing::run_to_completion(*engine_, specs);
  }
  // All prompts reach the scheduler in one step (submitted while a one-token request holds the
  // engine inside its step), as a burst whose requests arrive within one step.
  std::vector<Outcome> run_burst(const std::vector<Tokens>& prompts, int32_t max_tokens, const Tokens& opener) {
    held_.hold();
    RequestSpec first;
    first.prompt_tokens = opener;
    first.max_tokens = 1;
    EXPECT_EQ(engine_->submit(first, [](const RequestEvent&) {}).status, SubmitStatus::Accepted);
    EXPECT_TRUE(held_.wait_inside());
    std::vector<RequestSpec> specs;
    for (const Tokens& p : prompts) {
      RequestSpec& spec = specs.emplace_back();
      spec.prompt_tokens = p;
      spec.max_tokens = max_tokens;
      spec.sampling.temperature = 0.0f;
    }
    return testing::run_to_completion(*engine_, specs, [this] { held_.release(); });
  }
  Outcome run_one(const Tokens& prompt, int32_t max_tokens) { return run({prompt}, max_tokens)[0]; }
  // Each prompt with its own max_tokens.
  std::vector<Outcome> run_each(const std::vector<Tokens>& prompts, const std::vector<int32_t>& max_tokens) {
    return run(prompts, 0, max_tokens);
  }

  Engine& engine() { return *engine_; }

 private:
  runtime::CpuBackend backend_;
  runtime::BackendRunner runner_;
  testing::HeldRunner held_;
  std::unique_ptr<Engine> engine_;
};

class PrefixCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = runtime::load_model("models/deltaserve-tiny-moe.gguf").release();
    tokenizer_ = runtime::Tokenizer::from_gguf(*model_->gguf).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }
  static Tokens encode(const std::string& text) { return tokenizer_->encode(text); }
  static Tokens concat(Tokens a, const Tokens& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  static Tokens outputs_only(const std::vector<Outcome>& outcomes, size_t i) { return outcomes[i].tokens; }
  static std::unique_ptr<Stack> stack(StackOptions o, EngineObserver* observer = nullptr) {
    return std::make_unique<Stack>(*model_, o, observer);
  }
  static std::vector<Tokens> tokens_of(const std::vector<Outcome>& outcomes) { return testing::tokens_of(outcomes); }

  static inline runtime::LoadedModel* model_ = nullptr;
  static inline runtime::Tokenizer* tokenizer_ = nullptr;
};

const char* kSystem =
    "You are a careful assistant. Answer in plain words, cite the file you read, and never invent a function "
    "that the code does not define. When unsure, say so and ask for the missing piece.\n";

TEST_F(PrefixCacheTest, SecondTurnResumesAndMatchesAtDepthZeroAndThree) {
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    const Tokens turn1 = concat(encode(kSystem), encode("User: what does fibonacci(n) return?\nAssistant:"));
    const Outcome first = cached->run_one(turn1, 20);
    ASSERT_EQ(first.tokens.size(), 20u);
    EXPECT_EQ(first.num_cached_prompt_tokens, 0);
    const Tokens turn2 = concat(concat(turn1, first.tokens), encode("\nUser: and for n = 0?\nAssistant:"));
    const Outcome second = cached->run_one(turn2, 20);
    // The finished request's checkpoint: everything but its last token.
    EXPECT_GE(second.num_cached_prompt_tokens, static_cast<int32_t>(turn1.size() + first.tokens.size()) - 1) << "depth " << depth;
    auto plain = stack(off);
    EXPECT_EQ(plain->run_one(turn2, 20).tokens, second.tokens) << "depth " << depth;
    EXPECT_GT(cached->engine().stats().prefix_cache_hits, 0u);
  }
}

TEST_F(PrefixCacheTest, DivergenceMidBlockAndMidIntervalResumesFromTheLastCheckpointBefore) {
  const Tokens base = concat(encode(kSystem), encode(kSystem));
  ASSERT_GT(base.size(), 90u);
  // 77 is inside a block (16) and inside a checkpoint interval (32): the last checkpoint at or
  // before the divergence is at 64 (or the one before base's prompt tail, when that is later).
  Tokens diverged(base.begin(), base.begin() + 77);
  diverged = concat(diverged, encode(" Completely different continuation here."));
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    cached->run_one(base, 4);
    const Outcome hit = cached->run_one(diverged, 16);
    // Checkpoints of `base`: every 32 tokens, and 32 tokens before its prompt's end.
    const int32_t before_tail = static_cast<int32_t>(base.size()) - 32;
    EXPECT_EQ(hit.num_cached_prompt_tokens, before_tail > 64 && before_tail <= 76 ? before_tail : 64) << "depth " << depth;
    EXPECT_EQ(stack(off)->run_one(diverged, 16).tokens, hit.tokens) << "depth " << depth;
  }
}

TEST_F(PrefixCacheTest, StrippedEarlierAnswerResumesFromThePromptEnd) {
  // The template drops turn 1's reasoning: turn 2 carries a different text where the answer was.
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    on.checkpoint_tokens = 0;  // only prompt and request ends
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    const Tokens turn1 = concat(encode(kSystem), encode("User: name a prime.\nAssistant:"));
    const Outcome first = cached->run_one(turn1, 12);
    const Tokens turn2 = concat(concat(turn1, encode(" Seven.")), encode("\nUser: and another?\nAssistant:"));
    const Outcome second = cached->run_one(turn2, 16);
    if (depth == 0) {
      EXPECT_EQ(second.num_cached_prompt_tokens, static_cast<int32_t>(turn1.size()));
    }
    EXPECT_EQ(stack(off)->run_one(turn2, 16).tokens, second.tokens) << "depth " << depth;
  }
}

TEST_F(PrefixCacheTest, ConcurrentRequestsSharingASystemPromptMatch) {
  const char* questions[] = {"What is a stack?", "Define a queue.", "Explain recursion.", "What is a heap?",
                             "Name a sorting algorithm.", "What is a hash map?", "Define a tree.", "What is a graph?",
                             "Explain binary search.", "What is memoisation?", "Define a linked list.", "What is big O?"};
  std::vector<Tokens> prompts;
  for (const char* q : questions) prompts.push_back(concat(encode(kSystem), encode(std::string("User: ") + q + "\nAssistant:")));
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    on.slots = 12;
    on.blocks = 12 * 24;
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    cached->run_one(encode(kSystem), 2);  // the system prompt alone, cached
    const std::vector<Outcome> hits = cached->run(prompts, 12);
    for (const Outcome& o : hits) EXPECT_GE(o.num_cached_prompt_tokens, 32) << "depth " << depth;
    EXPECT_EQ(tokens_of(stack(off)->run(prompts, 12)), tokens_of(hits)) << "depth " << depth;
  }
}

// The longest common prefix of a and b.
int32_t common_prefix(const Tokens& a, const Tokens& b) {
  int32_t n = 0;
  while (n < static_cast<int32_t>(std::min(a.size(), b.size())) && a[static_cast<size_t>(n)] == b[static_cast<size_t>(n)]) ++n;
  return n;
}

// A burst of requests with one long system prompt and nothing cached, arriving within one step
// (run_burst): the first prefills the prompt and the others wait for it, its prefill cut where
// their prompts diverge from its own so that a checkpoint lands there: every later one resumes
// at exactly the end of what it shares with the first (not at the checkpoint interval before
// it: 32 here, and none at all with --prefix-checkpoint-tokens 0), so the shared prefix is
// prefilled once; outputs equal the cache-off outputs. The short family diverges inside the
// first request's first chunk (48 tokens), which the waiting head must cut in the step that
// admitted it.
TEST_F(PrefixCacheTest, BurstSharingAnUncachedSystemPromptPrefillsItOnce) {
  std::string system;
  for (int i = 0; i < 4; ++i) system += kSystem;  // ~200 tokens: several 32-token intervals
  const Tokens shared = encode(system);
  std::vector<Tokens> long_family;
  for (int i = 0; i < 6; ++i) long_family.push_back(concat(shared, encode("Question " + std::to_string(i) + ": why?")));
  std::vector<Tokens> short_family;
  const Tokens head(shared.begin(), shared.begin() + 38);
  for (int i = 0; i < 4; ++i)
    short_family.push_back(concat(head, encode(" Question " + std::to_string(i) + ": explain, in two short sentences, why the sky "
                                               "looks blue at noon and red at dusk, and what a prism has to do with it.")));
  for (const std::vector<Tokens>* prompts : {&long_family, &short_family}) {
    const int32_t common = common_prefix((*prompts)[0], (*prompts)[1]);
    ASSERT_GT(common, 32);
    ASSERT_NE(common % 32, 0) << "the divergence must fall inside a checkpoint interval";
    if (prompts == &short_family) {
      ASSERT_LT(common, 48);  // inside the first chunk
      ASSERT_GE(static_cast<int32_t>((*prompts)[0].size()) - 32, 48);  // which the prompt-tail checkpoint does not cut
    }
    for (const int32_t every : {32, 0}) {
      for (const int32_t depth : {0, 3}) {
        StackOptions on;
        on.depth = depth;
        on.checkpoint_tokens = every;
        StackOptions off = on;
        off.cache = false;
        const std::vector<Outcome> burst = stack(on)->run_burst(*prompts, 8, encode("Go."));
        EXPECT_EQ(burst[0].num_cached_prompt_tokens, 0);
        for (size_t i = 1; i < prompts->size(); ++i) {
          ASSERT_EQ(common_prefix((*prompts)[0], (*prompts)[i]), common);
          EXPECT_EQ(burst[i].num_cached_prompt_tokens, common)
              << "request " << i << " of " << (*prompts)[i].size() << " tokens, every " << every << ", depth " << depth;
        }
        EXPECT_EQ(tokens_of(stack(off)->run(*prompts, 8)), tokens_of(burst)) << "every " << every << ", depth " << depth;
      }
    }
  }
}

// Identical prompts in a burst (n samples of one prompt): the later ones resume one token short
// of the end (a request must compute a token to sample), from a checkpoint the first one's
// prefill was cut for.
TEST_F(PrefixCacheTest, BurstOfOnePromptResumesOneTokenShortOfItsEnd) {
  const Tokens prompt = concat(encode(kSystem), encode("User: name a colour.\nAssistant:"));
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    StackOptions off = on;
    off.cache = false;
    const std::vector<Tokens> prompts(4, prompt);
    const std::vector<Outcome> burst = stack(on)->run_burst(prompts, 8, encode("Go."));
    for (size_t i = 1; i < prompts.size(); ++i)
      EXPECT_EQ(burst[i].num_cached_prompt_tokens, static_cast<int32_t>(prompt.size()) - 1) << "request " << i << ", depth " << depth;
    EXPECT_EQ(tokens_of(stack(off)->run(prompts, 8)), tokens_of(burst)) << "depth " << depth;
  }
}

// A prompt resumed one token short of its end (its first step is a single decode row) still
// leaves its end-of-prompt checkpoint: turn 1's answer resent whole (as a continuation), then a
// request whose answer diverges right after that prompt resumes at its end, not one token before.
TEST_F(PrefixCacheTest, PromptWhoseFirstStepIsOneDecodeRowSavesItsEndCheckpoint) {
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    const Tokens turn1 = concat(encode(kSystem), encode("User: name a colour and a fruit.\nAssistant:"));
    const Outcome first = cached->run_one(turn1, 12);
    const Tokens resent = concat(turn1, first.tokens);  // the end-of-request checkpoint: all but its last token
    const Outcome second = cached->run_one(resent, 8);
    ASSERT_EQ(second.num_cached_prompt_tokens, static_cast<int32_t>(resent.size()) - 1) << "depth " << depth;
    Tokens third = concat(resent, encode(" Purple"));
    ASSERT_NE(third[resent.size()], second.tokens[0]) << "the third request must diverge from the second's answer";
    third = concat(third, encode(" and a pear.\nUser: why?\nAssistant:"));
    const Outcome hit = cached->run_one(third, 8);
    EXPECT_EQ(hit.num_cached_prompt_tokens, static_cast<int32_t>(resent.size())) << "depth " << depth;
    EXPECT_EQ(hit.tokens, stack(off)->run_one(third, 8).tokens) << "depth " << depth;
  }
}

// Multi-turn conversations interleaved; every second turn resends the history.
std::vector<Tokens> second_turns(const std::vector<Tokens>& firsts, const std::vector<Outcome>& outs, const Tokens& more) {
  std::vector<Tokens> turns;
  for (size_t i = 0; i < firsts.size(); ++i) {
    Tokens t = firsts[i];
    t.insert(t.end(), outs[i].tokens.begin(), outs[i].tokens.end());
    t.insert(t.end(), more.begin(), more.end());
    turns.push_back(t);
  }
  return turns;
}

TEST_F(PrefixCacheTest, PreemptionInTheMiddleKeepsOutputsExact) {
  std::vector<Tokens> firsts;
  for (int i = 0; i < 8; ++i) firsts.push_back(concat(encode(kSystem), encode("Conversation " + std::to_string(i) + ":")));
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    on.blocks = 24;  // 384 positions for 8 streams of ~70-120: preemption is certain
    StackOptions off = on;
    off.cache = false;
    auto cached = stack(on);
    auto plain = stack(off);
    const std::vector<Outcome> out1 = cached->run(firsts, 24);
    EXPECT_EQ(tokens_of(plain->run(firsts, 24)), tokens_of(out1)) << "depth " << depth;
    const std::vector<Tokens> turns = second_turns(firsts, out1, encode("\nUser: go on.\nAssistant:"));
    EXPECT_EQ(tokens_of(plain->run(turns, 24)), tokens_of(cached->run(turns, 24))) << "depth " << depth;
    EXPECT_GT(cached->engine().stats().num_preemptions, 0u);
  }
}

// Preemption checkpoints the victim (and keeps its blocks in the index), answers keep a
// checkpoint every --prefix-checkpoint-tokens, and KV-pressure eviction takes the deepest
// first and keeps checkpoints that free nothing: a preempted request resumes from its own
// state or from the last checkpoint that survived what the older request needed, never from
// scratch nor from its prompt's end, and its greedy output equals a run never preempted.
TEST_F(PrefixCacheTest, PreemptedRequestResumesFromItsCheckpointAtDepthZeroAndThree) {
  // A: 48 + 90 tokens (9 blocks); B: 30 + 120. With 15 blocks, B (newer) holds about 7 when
  // A runs short near its last blocks: B is preempted some 80 tokens into its answer.
  Tokens a = concat(encode(kSystem), encode(kSystem));
  a.resize(48);
  Tokens b = encode(std::string("Beta! ") + kSystem);
  b.resize(30);
  const std::vector<Tokens> prompts = {a, b};
  for (const int32_t depth : {0, 3}) {
    StackOptions tight;
    tight.depth = depth;
    tight.slots = 2;
    tight.blocks = 15;
    StackOptions roomy = tight;
    roomy.cache = false;
    roomy.blocks = 64;
    auto cached = stack(tight);
    auto plain = stack(roomy);
    const std::vector<Outcome> out = cached->run_each(prompts, {90, 120});
    EXPECT_EQ(tokens_of(plain->run_each(prompts, {90, 120})), tokens_of(out)) << "depth " << depth;
    EXPECT_EQ(plain->engine().stats().num_preemptions, 0u);
    const EngineStats stats = cached->engine().stats();
    ASSERT_GT(stats.num_preemptions, 0u) << "depth " << depth;
    // The requests' hit counters see the two requests only (they share nothing: two misses);
    // the resumptions count apart, so a preemption is no prefix-cache hit. Every resumption
    // hit, past B's prompt by at least one checkpoint interval (its answer's checkpoints; the
    // prompt's end or scratch would mean recomputing the answer, or everything).
    EXPECT_EQ(stats.prefix_cache_queries, 2u);
    EXPECT_EQ(stats.prefix_cache_hits, 0u);
    EXPECT_EQ(stats.prefix_cache_query_tokens, uint64_t{48 + 30});
    EXPECT_EQ(stats.prefix_cache_hit_tokens, 0u);
    EXPECT_EQ(stats.prefix_cache_preempted_queries, stats.num_preemptions);
    EXPECT_EQ(stats.prefix_cache_preempted_hits, stats.num_preemptions);
    EXPECT_GE(stats.prefix_cache_preempted_hit_tokens, stats.num_preemptions * uint64_t{30 + 32}) << "depth " << depth;
    // Recomputed on resumption: what A took of B's blocks after the preemption (the checkpoint
    // taken there goes first, then B's answer checkpoints, deepest first: A needs at most two
    // more blocks here, its drafts reaching ahead), the stretch back to the checkpoint before,
    // and the drafts.
    const uint64_t recomputed = stats.prefix_cache_preempted_query_tokens - stats.prefix_cache_preempted_hit_tokens;
    EXPECT_LE(recomputed, stats.num_preemptions * uint64_t{2 * 32 + 16 + 4})
        << "depth " << depth << ", " << stats.num_preemptions << " preemptions";
  }
}

TEST_F(PrefixCacheTest, EvictionInTheMiddleKeepsOutputsExact) {
  std::vector<Tokens> firsts;
  for (int i = 0; i < 6; ++i) firsts.push_back(concat(encode(kSystem), encode("Thread " + std::to_string(i) + ":")));
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    StackOptions off = on;
    off.cache = false;
    auto probe = stack(on);
    const int64_t bytes = probe->engine().config().prefix_device_checkpoints > 0
                              ? on.device_bytes / probe->engine().config().prefix_device_checkpoints
                              : 0;
    ASSERT_GT(bytes, 0);
    on.device_bytes = 3 * bytes;  // three checkpoints on the "device", two on the host
    on.host_bytes = 2 * bytes;
    auto cached = stack(on);
    auto plain = stack(off);
    const std::vector<Outcome> out1 = cached->run(firsts, 16);
    const std::vector<Tokens> turns = second_turns(firsts, out1, encode("\nUser: more.\nAssistant:"));
    EXPECT_EQ(tokens_of(plain->run(turns, 16)), tokens_of(cached->run(turns, 16))) << "depth " << depth;
    const EngineStats stats = cached->engine().stats();
    EXPECT_GT(stats.prefix_cache_evictions, 0u);
    EXPECT_GT(stats.prefix_cache_spills, 0u);
    EXPECT_LE(stats.prefix_cache_device_bytes, 3 * bytes);
    EXPECT_LE(stats.prefix_cache_host_bytes, 2 * bytes);
  }
}

TEST_F(PrefixCacheTest, NoPoisoningAThenBThenA) {
  for (const int32_t depth : {0, 3}) {
    StackOptions on;
    on.depth = depth;
    auto cached = stack(on);
    const Tokens a = concat(encode(kSystem), encode("User: list three colours.\nAssistant:"));
    const Outcome a1 = cached->run_one(a, 24);
    // B resumes from A's end-of-prompt checkpoint, inside a block A's answer filled: it must
    // write its own copy of that block, never A's.
    Tokens b = concat(a, Tokens(a1.tokens.begin(), a1.tokens.begin() + 3));
    b = concat(b, encode(" but now something else entirely"));
    const Outcome b1 = cached->run_one(b, 24);
    EXPECT_GE(b1.num_cached_prompt_tokens, static_cast<int32_t>(a.size()));
    const Outcome a2 = cached->run_one(a, 24);
    EXPECT_GT(a2.num_cached_prompt_tokens, 0);
    EXPECT_EQ(a2.tokens, a1.tokens) << "depth " << depth;
  }
}

TEST_F(PrefixCacheTest, ResetReturnsEveryReferenceAndByte) {
  StackOptions on;
  auto cached = stack(on);
  cached->run({concat(encode(kSystem), encode("one")), concat(encode(kSystem), encode("two"))}, 8);
  EngineStats stats = cached->engine().stats();
  EXPECT_GT(stats.prefix_cache_checkpoints, 0);
  EXPECT_GT(stats.num_kv_blocks_cached, 0);  // the cache holds its prefixes' blocks
  EXPECT_EQ(stats.num_kv_blocks_used, 0);    // ... which are not usage
  EXPECT_GT(stats.prefix_cache_device_bytes, 0);
  ASSERT_TRUE(cached->engine().reset_prefix_cache(std::chrono::seconds(10)));
  stats = cached->engine().stats();
  EXPECT_EQ(stats.prefix_cache_checkpoints, 0);
  EXPECT_EQ(stats.prefix_cache_blocks, 0);
  EXPECT_EQ(stats.num_kv_blocks_used, 0);
  EXPECT_EQ(stats.num_kv_blocks_cached, 0);
  EXPECT_EQ(stats.prefix_cache_device_bytes, 0);
  EXPECT_EQ(stats.prefix_cache_host_bytes, 0);
  // And it works again after the reset (two requests in this server's lifetime after it).
  const Tokens p = concat(encode(kSystem), encode("three"));
  const Outcome first = cached->run_one(p, 8);
  const Outcome again = cached->run_one(p, 8);
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_GT(again.num_cached_prompt_tokens, 0);
  EXPECT_EQ(cached->engine().integrity_error(), "");
}

TEST_F(PrefixCacheTest, SoakOfMultiTurnRequestsStaysWithinBudget) {
  StackOptions on;
  on.depth = 3;
  auto probe = stack(on);
  const int64_t bytes = on.device_bytes / probe->engine().config().prefix_device_checkpoints;
  on.device_bytes = 6 * bytes;
  on.host_bytes = 4 * bytes;
  on.blocks = 8 * 16;
  auto cached = stack(on);
  std::vector<Tokens> history(6);
  for (int c = 0; c < 6; ++c) history[c] = encode("Chat " + std::to_string(c) + ". ");
  for (int turn = 0; turn < 6; ++turn) {
    std::vector<Tokens> prompts;
    for (int c = 0; c < 6; ++c) {
      history[c] = concat(history[c], encode(" User: turn " + std::to_string(turn) + "?\nAssistant:"));
      if (history[c].size() > 200) history[c].erase(history[c].begin(), history[c].begin() + 60);  // a new conversation
      prompts.push_back(history[c]);
    }
    const std::vector<Outcome> outs = cached->run(prompts, 8);
    for (int c = 0; c < 6; ++c) history[c] = concat(history[c], outs[c].tokens);
    const EngineStats stats = cached->engine().stats();
    EXPECT_LE(stats.prefix_cache_device_bytes, 6 * bytes);
    EXPECT_LE(stats.prefix_cache_host_bytes, 4 * bytes);
  }
  EXPECT_GT(cached->engine().stats().prefix_cache_hit_tokens, 0u);
  ASSERT_TRUE(cached->engine().reset_prefix_cache(std::chrono::seconds(10)));
  EXPECT_EQ(cached->engine().stats().num_kv_blocks_used, 0);
  EXPECT_EQ(cached->engine().stats().num_kv_blocks_cached, 0);
}

// The MTP head's row at the resume point is re-run after a cache hit (runtime/mtp_resume_rows.h):
// the request that resumes from another's end-of-prompt checkpoint, with a different next
// token than the saver's, drafts exactly as a run without the cache, so the drafted and
// accepted counts by position are equal (with the saver's row they differ: weaker drafts).
// P inside a block (its partial block is copied anyway) and on a block edge (the last full
// block is then copied for the row instead of shared).
TEST_F(PrefixCacheTest, MtpRowAtTheResumePointIsReRunSoAcceptanceMatchesAColdRun) {
  const char* kContinuations[] = {" Purple", " Red, and a pear. User: why those?\nAssistant:", " no", "!",
                                  " Green apple.\nUser: again\nAssistant:", " 42", "\n", " Blue"};
  for (const bool on_edge : {false, true}) {
    StackOptions on;
    on.depth = 3;
    StackOptions off = on;
    off.cache = false;
    Tokens turn1 = concat(encode(kSystem), encode("User: name a colour and a fruit.\nAssistant:"));
    while ((turn1.size() % 16 == 0) != on_edge) turn1.insert(turn1.end() - 1, encode(" ")[0]);
    DraftCounter counter_cached;
    DraftCounter counter_cold;
    auto cached = stack(on, &counter_cached);
    auto plain = stack(off, &counter_cold);
    const Outcome first = cached->run_one(turn1, 12);
    const auto before = counter_cached.counts();
    for (const char* continuation : kContinuations) {
      const Tokens turn2 = concat(turn1, encode(continuation));
      if (turn2[turn1.size()] == first.tokens[0]) continue;  // the saver must have gone on differently at P
      const Outcome hot = cached->run_one(turn2, 24);
      EXPECT_EQ(hot.num_cached_prompt_tokens, static_cast<int32_t>(turn1.size())) << "on_edge " << on_edge << continuation;
      EXPECT_EQ(hot.tokens, plain->run_one(turn2, 24).tokens) << "on_edge " << on_edge << continuation;
    }
    auto after = counter_cached.counts();
    for (auto& [position, n] : after.first) n -= before.first.count(position) ? before.first.at(position) : 0;
    for (auto& [position, n] : after.second) n -= before.second.count(position) ? before.second.at(position) : 0;
    auto nonzero = [](std::map<int32_t, int64_t> m) {
      std::erase_if(m, [](const auto& entry) { return entry.second == 0; });
      return m;
    };
    const auto cold_counts = counter_cold.counts();
    EXPECT_EQ(nonzero(after.first), nonzero(cold_counts.first)) << "drafted, on_edge " << on_edge;
    EXPECT_EQ(nonzero(after.second), nonzero(cold_counts.second)) << "accepted, on_edge " << on_edge;
    EXPECT_GT(nonzero(cold_counts.first).size(), 0u);
    EXPECT_EQ(cached->engine().integrity_error(), "");
  }
}
// A prefix first cached by a request without drafts (draft_depth 0: its MTP rows were never
// computed) serves speculative requests once one of them has computed it: that one's saves
// upgrade the nodes and checkpoints, so the next resumes, exactly and drafting as a cold run.
TEST_F(PrefixCacheTest, SpeculativeRequestsResumeAPrefixANonSpeculativeOneCachedFirst) {
  StackOptions on;
  on.depth = 3;
  StackOptions off = on;
  off.cache = false;
  DraftCounter counter_cached;
  DraftCounter counter_cold;
  auto cached = stack(on, &counter_cached);
  auto plain = stack(off, &counter_cold);
  const Tokens turn1 = concat(encode(kSystem), encode("User: name a colour and a fruit.\nAssistant:"));
  RequestSpec no_drafts;
  no_drafts.prompt_tokens = turn1;
  no_drafts.max_tokens = 8;
  no_drafts.sampling.temperature = 0.0f;
  no_drafts.draft_depth = 0;
  ASSERT_EQ(testing::run_to_completion(cached->engine(), {no_drafts})[0].tokens.size(), 8u);
  // Nothing cached has MTP rows: the first speculative request prefills again.
  const Outcome saver = cached->run_one(turn1, 8);
  EXPECT_EQ(saver.num_cached_prompt_tokens, 0);
  const auto before = counter_cached.counts();
  const Tokens turn2 = concat(turn1, encode(" Purple"));
  ASSERT_NE(turn2[turn1.size()], saver.tokens[0]) << "the row at the resume point must be re-run";
  const Outcome hot = cached->run_one(turn2, 16);
  EXPECT_EQ(hot.num_cached_prompt_tokens, static_cast<int32_t>(turn1.size()));
  EXPECT_EQ(hot.tokens, plain->run_one(turn2, 16).tokens);
  auto after = counter_cached.counts();
  for (auto& [position, n] : after.first) n -= before.first.count(position) ? before.first.at(position) : 0;
  for (auto& [position, n] : after.second) n -= before.second.count(position) ? before.second.at(position) : 0;
  auto nonzero = [](std::map<int32_t, int64_t> m) {
    std::erase_if(m, [](const auto& entry) { return entry.second == 0; });
    return m;
  };
  const auto cold = counter_cold.counts();
  EXPECT_EQ(nonzero(after.first), nonzero(cold.first)) << "drafted after the hit, as in a cold run";
  EXPECT_EQ(nonzero(after.second), nonzero(cold.second)) << "accepted after the hit, as in a cold run";
  EXPECT_GT(nonzero(cold.first).size(), 0u);
  EXPECT_EQ(cached->engine().integrity_error(), "");
}
}  // namespace
}  // namespace deltaserve::scheduler
