// The real engine (Engine + BackendRunner) on a layer split over two CPU "devices"
// (runtime/layer_split_backend.h) against one CpuBackend, on both tiny architectures (the
// embedded trained MoE model and the dense fixture): greedy tokens are identical with
// speculation off and on (drafts rejected and rolled back on every device), under block
// pressure that preempts and recomputes sequences, with the prefix cache resuming from
// checkpoints split over the devices, and with an uneven split; the engine's stats carry the
// per-device layers, memory and activation bytes.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "runtime/backend_runner.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/layer_split_backend.h"
#include "runtime/model_weights.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

using Tokens = std::vector<int32_t>;

class DraftCounter final : public EngineObserver {
 public:
  void on_drafts(int32_t, int32_t num_drafted, int32_t num_accepted) override {
    std::lock_guard<std::mutex> lock(mutex_);
    drafted += num_drafted;
    accepted += num_accepted;
  }
  std::mutex mutex_;
  int64_t drafted = 0, accepted = 0;
};

struct RunOptions {
  int32_t depth = 0;
  int32_t slots = 6;
  int32_t blocks = 6 * 8;  // of 16 tokens
  bool prefix_cache = false;
  std::vector<runtime::LayerRange> ranges;  // for the split; empty = balanced
};

RunOptions depth(int32_t d) {
  RunOptions o;
  o.depth = d;
  return o;
}

struct RunResult {
  std::vector<Tokens> tokens;
  EngineStats stats;
  int64_t drafted = 0, accepted = 0;
};

class LayerSplitEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model_ = runtime::load_model(GetParam()); }

  std::vector<RequestSpec> requests(int n, int32_t max_tokens) const {
    std::vector<RequestSpec> specs;
    const int64_t vocab = model_->config.num_vocab;
    for (int i = 0; i < n; ++i) {
      RequestSpec spec;
      // A shared head (the prefix cache's hits), then a tail of each request's own.
      for (int t = 0; t < 40; ++t) spec.prompt_tokens.push_back(static_cast<int32_t>((t * 7 + 11) % vocab));
      for (int t = 0; t < 3 + (i * 5) % 17; ++t) spec.prompt_tokens.push_back(static_cast<int32_t>((i * 13 + t * 5 + 1) % vocab));
      spec.sampling.temperature = 0.0f;
      spec.max_tokens = max_tokens + i % 4;
      specs.push_back(spec);
    }
    return specs;
  }

  // Runs the requests (all submitted at once) on a fresh stack: one device, or split over two.
  RunResult run(const std::vector<RequestSpec>& specs, bool split, const RunOptions& o) {
    const runtime::CacheConfig cache{o.slots, 16, o.blocks, 1 + o.depth};
    std::unique_ptr<runtime::Backend> backend;
    if (split) {
      backend = runtime::make_cpu_layer_split({{runtime::DeviceKind::kCpu, 0}, {runtime::DeviceKind::kCpu, 1}}, o.ranges,
                                              *model_, cache, 2);
    } else {
      backend = std::make_unique<runtime::CpuBackend>(*model_, cache, 2);
    }
    runtime::BackendRunner runner(*backend, 256, o.depth);
    SchedulerConfig config;
    config.max_num_batched_tokens = 64;
    config.max_prefill_chunk_tokens = 16;
    config.draft_min_expected = 0.0;  // always draft at full depth: every draft path
    config.prefix_cache = o.prefix_cache;
    config.prefix_checkpoint_tokens = 16;
    DraftCounter drafts;
    Engine engine(runner, config, &drafts);
    engine.start();
    const std::vector<testing::Outcome> outcomes = testing::run_to_completion(engine, specs);
    for (const testing::Outcome& o : outcomes) EXPECT_EQ(o.finish, FinishReason::Length) << o.error;
    RunResult result;
    result.stats = engine.stats();
    engine.stop();
    result.tokens = testing::tokens_of(outcomes);
    result.drafted = drafts.drafted;
    result.accepted = drafts.accepted;
    return result;
  }

  std::unique_ptr<runtime::LoadedModel> model_;
};

TEST_P(LayerSplitEngineTest, GreedyTokensEqualOneDeviceWithoutSpeculation) {
  const std::vector<RequestSpec> specs = requests(6, 10);
  const RunResult one = run(specs, false, {});
  const RunResult split = run(specs, true, {});
  EXPECT_EQ(one.tokens, split.tokens);
  ASSERT_EQ(split.stats.split_devices.size(), 2u);
  EXPECT_TRUE(one.stats.split_devices.empty());
  const runtime::SplitDeviceStats& second = split.stats.split_devices[1];
  EXPECT_EQ(second.layers.end, model_->config.num_layers);
  EXPECT_GT(second.inbound.copies, 0u);
  // Every row of every step crossed once: the prompts, and every emitted token but the last
  // of each request went back in as a decode row.
  int64_t rows = 0;
  for (size_t i = 0; i < specs.size(); ++i) rows += static_cast<int64_t>(specs[i].prompt_tokens.size() + one.tokens[i].size() - 1);
  EXPECT_EQ(second.inbound.bytes, static_cast<uint64_t>(rows * model_->config.num_embd * 4));
  EXPECT_GT(split.stats.split_devices[0].bytes_used, 0);
  EXPECT_GT(second.bytes_used, 0);
}

TEST_P(LayerSplitEngineTest, GreedyTokensEqualOneDeviceWithSpeculationAndRejectedDrafts) {
  ASSERT_TRUE(model_->weights.has_mtp);
  const std::vector<RequestSpec> specs = requests(4, 12);
  const RunResult plain = run(specs, false, {});
  const RunResult one = run(specs, false, depth(3));
  const RunResult split = run(specs, true, depth(3));
  EXPECT_EQ(one.tokens, plain.tokens);
  EXPECT_EQ(split.tokens, plain.tokens);
  EXPECT_EQ(split.drafted, one.drafted);
  EXPECT_EQ(split.accepted, one.accepted);
  EXPECT_GT(split.drafted, split.accepted) << "no draft was rejected: rollback went untested";
}

TEST_P(LayerSplitEngineTest, PreemptionUnderBlockPressureKeepsOutput) {
  const std::vector<RequestSpec> specs = requests(6, 14);
  const RunResult roomy = run(specs, false, {});
  RunOptions tight_blocks = depth(2);
  tight_blocks.blocks = 10;
  const RunResult tight = run(specs, true, tight_blocks);
  EXPECT_GT(tight.stats.num_preemptions, 0u);
  EXPECT_EQ(roomy.tokens, tight.tokens);
}

TEST_P(LayerSplitEngineTest, PrefixCacheHitsOnSplitStatesMatchOneDevice) {
  const std::vector<RequestSpec> specs = requests(5, 8);
  RunOptions cached;
  cached.prefix_cache = true;
  const RunResult one = run(specs, false, cached);
  cached.slots = 1;
  // One at a time, so later requests find the shared head's checkpoint.
  RunResult split;
  for (const RequestSpec& spec : specs) {
    const RunResult r = run({spec, spec}, true, cached);
    EXPECT_EQ(r.tokens[0], r.tokens[1]);
    EXPECT_GT(r.stats.prefix_cache_hits, 0u);
    split.tokens.push_back(r.tokens[0]);
  }
  EXPECT_EQ(one.tokens, split.tokens);
}

TEST_P(LayerSplitEngineTest, OneLayerOnTheFirstDeviceKeepsOutput) {
  const std::vector<RequestSpec> specs = requests(3, 10);
  const int32_t l = static_cast<int32_t>(model_->config.num_layers);
  RunOptions uneven = depth(2);
  const RunResult one = run(specs, false, uneven);
  uneven.ranges = {{0, 1}, {1, l}};
  const RunResult split = run(specs, true, uneven);
  EXPECT_EQ(one.tokens, split.tokens);
  EXPECT_EQ(split.stats.split_devices[0].layers.size(), 1);
}

// Sampled requests: plain ones drawn by the last device (SequenceStep::draws), ones with
// logprobs or a penalty sampled on the host; seeded, so the split's tokens (and logprobs' ids)
// equal one device's, with and without speculation, under block pressure.
TEST_P(LayerSplitEngineTest, SeededSampledTokensEqualOneDevice) {
  std::vector<RequestSpec> specs = requests(6, 14);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].sampling.temperature = 0.9f;
    specs[i].sampling.seed = 500 + i;
    if (i % 3 == 1) specs[i].sampling.logprobs = true;
    if (i % 3 == 2) specs[i].sampling.presence_penalty = 0.5f;
    if (i % 2 == 0) specs[i].sampling.top_p = 0.9f;
  }
  const RunResult plain = run(specs, false, {});
  RunOptions tight;
  tight.blocks = 14;
  EXPECT_EQ(run(specs, true, {}).tokens, plain.tokens);
  EXPECT_EQ(run(specs, true, tight).tokens, plain.tokens);
  if (!model_->weights.has_mtp) return;
  tight.depth = 3;
  const RunResult split = run(specs, true, tight);
  EXPECT_EQ(split.tokens, plain.tokens);
  EXPECT_GT(split.accepted, 0);
  EXPECT_GT(split.stats.num_preemptions, 0u);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, LayerSplitEngineTest,
                         ::testing::Values("models/deltaserve-tiny-moe.gguf", "tests/fixtures/tiny_dense/model-f32.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.index == 0 ? "Moe" : "Dense");
                         });

}  // namespace
}  // namespace deltaserve::scheduler
