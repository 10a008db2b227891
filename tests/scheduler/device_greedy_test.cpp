// Greedy tokens from the backend's argmax ids (runtime::BackendRunner::set_device_greedy, the
// default) and sampled tokens from its draws (set_backend_draws, the default) equal the
// reference path (every sampled row's logits on the host through the sampler and
// verify_drafts), token for token, at draft depths 0..3 and in batches that mix plain greedy
// requests with greedy ones that need their logits (penalty, bias, logprobs) and seeded
// sampled ones. The plain greedy and plain sampled rows really stay off the host: a spy
// backend sees logits_to_host = false on their rows (trunk and MTP) and no logits for them in
// the output.
#include <gtest/gtest.h>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/backend_runner.h"
#include "scheduler/engine.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::scheduler {
namespace {

// The CPU backend, counting what the runner asks to see.
class SpyBackend final : public runtime::Backend {
 public:
  explicit SpyBackend(runtime::Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  const runtime::ModelConfig& config() const override { return inner_.config(); }
  const runtime::CacheConfig& cache_config() const override { return inner_.cache_config(); }
  void forward(const runtime::BatchPlan& plan, runtime::ForwardOutput& out) override {
    inner_.forward(plan, out);
    int64_t host_rows = 0;
    for (const runtime::SequenceStep& s : plan.sequences) {
      (s.logits_to_host ? trunk_host_rows : trunk_device_rows) += s.num_logits;
      if (s.logits_to_host) host_rows += s.num_logits;
    }
    check(out, host_rows);
  }
  void forward_mtp(const runtime::MtpPlan& plan, runtime::ForwardOutput& out) override {
    inner_.forward_mtp(plan, out);
    int64_t host_rows = 0;
    for (const runtime::MtpSequenceStep& s : plan.sequences) {
      (s.logits_to_host ? mtp_host_rows : mtp_device_rows) += s.num_logits;
      if (s.logits_to_host) host_rows += s.num_logits;
    }
    check(out, host_rows);
  }
  void rollback(int32_t slot, int32_t num_rows_kept) override { inner_.rollback(slot, num_rows_kept); }

  // Written on the engine thread; read after Engine::stop().
  int64_t trunk_host_rows = 0, trunk_device_rows = 0, mtp_host_rows = 0, mtp_device_rows = 0;
  int64_t layout_errors = 0;

 private:
  void check(const runtime::ForwardOutput& out, int64_t host_rows) {
    // Host rows are exactly the logits_to_host rows; every logit row has its id.
    if (out.num_host_rows() != host_rows || static_cast<int64_t>(out.argmax_ids.size()) != out.num_rows ||
        static_cast<int64_t>(out.drawn_ids.size()) != out.num_rows)
      ++layout_errors;
  }
  runtime::Backend& inner_;
};

using testing::Outcome;

class DeviceGreedyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = runtime::load_model("models/deltaserve-tiny-moe.gguf").release();
    tokenizer_ = runtime::Tokenizer::from_gguf(*model_->gguf).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static RequestSpec request(const std::string& text, int32_t max_tokens) {
    RequestSpec spec;
    spec.prompt_tokens = tokenizer_->encode(text);
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = 0.0f;
    return spec;
  }

  // Plain greedy requests, then greedy ones the device path must leave to the sampler, then a
  // seeded sampled one.
  static std::vector<RequestSpec> mixed_requests() {
    const char* texts[] = {"def fibonacci(n):\n", "import os\nimport sys\n\ndef main():\n", "The quick brown fox",
                           "class Stack:\n    def __init__(self):\n", "for i in range(10):\n    ",
                           "It was a dark and stormy night;", "    return self._"};
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 7; ++i) specs.push_back(request(texts[i], 20 + i % 3));
    specs.push_back(request("Once upon a time", 24));  // seeded, filtered: drawn by the backend
    specs[3].sampling.repetition_penalty = 1.3f;
    specs[4].sampling.logit_bias = {{tokenizer_->encode(" ")[0], 2.0f}};
    specs[5].sampling.logprobs = true;
    specs[5].sampling.top_logprobs = 2;
    specs[6].sampling.temperature = 0.8f;
    specs[6].sampling.seed = 99;
    specs[7].sampling.temperature = 0.7f;
    specs[7].sampling.top_k = 20;
    specs[7].sampling.top_p = 0.9f;
    specs[7].sampling.seed = 5;
    return specs;
  }

  std::vector<Outcome> run(const std::vector<RequestSpec>& specs, int32_t depth, bool device_greedy) {
    runtime::CacheConfig cache{8, 16, 8 * 16, 1 + depth};
    runtime::CpuBackend cpu(*model_, cache, 2);
    SpyBackend spy(cpu);
    runtime::BackendRunner runner(spy, 256, depth);
    runner.set_device_greedy(device_greedy);
    runner.set_backend_draws(device_greedy);
    SchedulerConfig config;
    config.draft_min_expected = 0.0;  // always draft at full depth
    Engine engine(runner, config);
    engine.start();
    std::vector<Outcome> result = testing::run_to_completion(engine, specs);
    for (const Outcome& o : result) EXPECT_EQ(o.finish, FinishReason::Length) << o.error;
    engine.stop();
    last_ = {spy.trunk_host_rows, spy.trunk_device_rows, spy.mtp_host_rows, spy.mtp_device_rows, spy.layout_errors};
    return result;
  }

  struct Counts {
    int64_t trunk_host, trunk_device, mtp_host, mtp_device, layout_errors;
  };
  Counts last_{};
  static inline runtime::LoadedModel* model_ = nullptr;
  static inline runtime::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(DeviceGreedyTest, EqualsTheLogitsPathAtEveryDepth) {
  const std::vector<RequestSpec> specs = mixed_requests();
  std::vector<Outcome> depth0;
  for (int32_t depth = 0; depth <= 3; ++depth) {
    const std::vector<Outcome> host = run(specs, depth, false);
    EXPECT_EQ(last_.trunk_device + last_.mtp_device, 0) << "reference path: every row to the host, depth " << depth;
    const std::vector<Outcome> device = run(specs, depth, true);
    EXPECT_EQ(last_.layout_errors, 0);
    EXPECT_GT(last_.trunk_device, 0) << "plain greedy rows stayed on the device, depth " << depth;
    EXPECT_GT(last_.trunk_host, 0) << "the other requests still get logits, depth " << depth;
    if (depth > 0) {
      EXPECT_GT(last_.mtp_device, 0) << "greedy drafts from ids, depth " << depth;
    }
    ASSERT_EQ(device.size(), host.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(device[i].tokens, host[i].tokens) << "request " << i << ", depth " << depth;
      EXPECT_EQ(device[i].tokens.size(), static_cast<size_t>(specs[i].max_tokens));
      ASSERT_EQ(device[i].logprobs.size(), host[i].logprobs.size()) << "request " << i;
      for (size_t k = 0; k < host[i].logprobs.size(); ++k) {
        EXPECT_EQ(device[i].logprobs[k].token, host[i].logprobs[k].token);
        EXPECT_EQ(device[i].logprobs[k].logprob, host[i].logprobs[k].logprob);
      }
    }
    // Greedy output never depends on speculation (the seeded request: exact verification).
    if (depth == 0) depth0 = device;
    for (size_t i = 0; i < specs.size(); ++i)
      EXPECT_EQ(device[i].tokens, depth0[i].tokens) << "request " << i << ", depth " << depth;
  }
}

}  // namespace
}  // namespace deltaserve::scheduler
