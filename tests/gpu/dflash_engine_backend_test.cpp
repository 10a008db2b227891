// The DFlash drafter on a GPU engine (Engine + BackendRunner + GpuBackend, the embedded model and
// its tiny drafter models/deltaserve-tiny-moe-dflash; tests/scheduler/speculation_test.cpp has
// the CPU twins): greedy tokens with DFlash blocks of 4 and 16 rows equal the tokens of no
// speculation, token for token, at 1 and 8 streams; the drafts are accepted about as often as on
// the CPU engine, as they are when the GPU's captured trunk layers (the drafter's context) are
// the CPU's (capture_backend_test.cpp compares the layers themselves).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend_runner.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/dflash_drafter.h"
#include "runtime/gpu/gpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/step_cost_table.h"
#include "runtime/tokenizer/tokenizer.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

constexpr const char* kModel = "models/deltaserve-tiny-moe.gguf";
constexpr const char* kDFlashModel = "models/deltaserve-tiny-moe-dflash";

class GpuDFlashEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = runtime::load_model(kModel).release();
    tokenizer_ = runtime::Tokenizer::from_gguf(*model_->gguf).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static std::vector<RequestSpec> prompts(int n, int32_t max_tokens) {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      RequestSpec spec;
      spec.prompt_tokens = tokenizer_->encode(testing::kSpeculationPrompts[i % 8]);
      spec.max_tokens = max_tokens + i % 5;
      spec.sampling.temperature = 0.0f;
      specs.push_back(spec);
    }
    return specs;
  }

  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    int64_t drafted = 0, accepted = 0;
  };

  // The requests at once on a fresh stack (GPU, or the CPU for the acceptance reference),
  // drafting up to depth tokens a step from the DFlash drafter (0: no speculation). Flat costs:
  // every stream drafts its whole block every step.
  static Run run(const std::vector<RequestSpec>& specs, int32_t depth, int32_t slots, bool gpu) {
    runtime::CacheConfig cache{slots, 16, slots * 16, 1 + depth};
    std::unique_ptr<runtime::DFlashDrafter> drafter;
    if (depth > 0) {
      runtime::DFlashModel dflash = runtime::load_dflash_model(kDFlashModel, model_->config);
      cache.max_capture_layers = static_cast<int32_t>(dflash.config.target_layer_ids.size());
      drafter = std::make_unique<runtime::DFlashDrafter>(std::move(dflash), model_->weights.token_embd,
                                                         model_->weights.output, 2);
    }
    std::unique_ptr<runtime::Backend> backend;
    if (gpu) backend = std::make_unique<runtime::GpuBackend>(*model_, cache);
    else backend = std::make_unique<runtime::CpuBackend>(*model_, cache, 2);
    runtime::BackendRunner runner(*backend, 256, depth, std::move(drafter));
    SchedulerConfig config;
    config.draft_min_expected = 0.0;
    config.step_costs = std::make_shared<const runtime::StepCostTable>(
        runtime::StepCostKey{"test", "flat"}, std::vector<int32_t>{1, 32}, std::vector<int32_t>{1, 16},
        std::vector<std::vector<double>>{{1, 1}, {1, 1}}, std::vector<int32_t>{}, std::vector<double>{});
    testing::DraftCounter counter;
    Engine engine(runner, config, &counter);
    engine.start();
    Run r;
    r.tokens = testing::tokens_of(testing::run_to_completion(engine, specs));
    const auto [drafted, accepted] = counter.counts();
    for (const auto& [position, n] : drafted) r.drafted += n;
    for (const auto& [position, n] : accepted) r.accepted += n;
    return r;
  }

  static inline runtime::LoadedModel* model_ = nullptr;
  static inline runtime::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(GpuDFlashEngineTest, GreedyTokensEqualNoSpeculation) {
  for (const int32_t streams : {1, 8}) {
    const std::vector<RequestSpec> specs = prompts(streams, 40);
    const Run plain = run(specs, 0, streams, true);
    ASSERT_EQ(plain.tokens.size(), specs.size());
    ASSERT_GE(plain.tokens[0].size(), 40u);
    for (const int32_t depth : {3, 15}) {
      const std::string what = std::to_string(streams) + " streams, block of " + std::to_string(depth + 1);
      const Run gpu = run(specs, depth, streams, true);
      EXPECT_EQ(gpu.tokens, plain.tokens) << what;
      const Run cpu = run(specs, depth, streams, false);
      std::printf("GPU DFlash, %s: %lld of %lld drafts accepted (CPU: %lld of %lld)\n", what.c_str(),
                  static_cast<long long>(gpu.accepted), static_cast<long long>(gpu.drafted),
                  static_cast<long long>(cpu.accepted), static_cast<long long>(cpu.drafted));
      EXPECT_GT(gpu.drafted, 0) << what;
      EXPECT_GT(cpu.accepted, 0) << what;
      // (Near) the same captured layers give (near) the same drafts; the bound leaves room for
      // greedy tokens where the two backends' rounding parts (other tokens, other drafts).
      EXPECT_GE(gpu.accepted * 4, cpu.accepted * 3) << what << ": the GPU's drafts are accepted less often";
    }
  }
}

}  // namespace
}  // namespace deltaserve::scheduler
