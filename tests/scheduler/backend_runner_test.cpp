// The real stack below the server: Engine + runtime::BackendRunner + CpuBackend on the tiny MoE
// oracle model. Greedy output must not depend on what else shares the steps, and every slot
// and KV block must come back.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/backend_runner.h"
#include "scheduler/engine.h"

namespace deltaserve::scheduler {
namespace {

// Collects the events of many requests; waits for all of them to finish.
class Collector {
 public:
  EventSink sink() {
    return [this](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      Result& r = results_[e.id];
      r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) {
        r.finish = e.finish;
        ++num_finished_;
        done_.notify_all();
      }
    };
  }
  bool wait(size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_.wait_for(lock, std::chrono::seconds(120), [&] { return num_finished_ >= n; });
  }
  struct Result {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::None;
  };
  std::map<RequestId, Result> results() {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::map<RequestId, Result> results_;
  size_t num_finished_ = 0;
};

class BackendRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = runtime::load_model("tests/fixtures/tiny_moe/model-f32.gguf"); }

  RequestSpec greedy_request(int i) const {
    RequestSpec spec;
    for (int t = 0; t < 5 + (i * 7) % 29; ++t) spec.prompt_tokens.push_back((i * 13 + t * 5) % 97);
    spec.sampling.temperature = 0.0f;
    spec.max_tokens = 8 + i % 9;
    return spec;
  }

  // Runs the requests concurrently (all submitted at once) on a fresh engine.
  std::vector<std::vector<int32_t>> run_all(const std::vector<RequestSpec>& specs, int32_t slots,
                                            int32_t blocks) {
    runtime::CpuBackend backend(*model_, runtime::CacheConfig{slots, 16, blocks}, 2);
    runtime::BackendRunner runner(backend, 512);
    SchedulerConfig config;
    config.max_num_batched_tokens = 64;
    config.max_prefill_chunk_tokens = 16;
    Engine engine(runner, config);
    engine.start();
    Collector collector;
    std::vector<RequestId> ids;
    for (const RequestSpec& spec : specs) {
      const SubmitResult r = engine.submit(spec, collector.sink());
      EXPECT_EQ(r.status, SubmitStatus::Accepted) << r.message;
      ids.push_back(r.id);
    }
    EXPECT_TRUE(collector.wait(specs.size()));
    EXPECT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
    const EngineStats stats = engine.stats();
    last_stats_ = stats;
    EXPECT_EQ(stats.num_state_slots_used, 0);
    EXPECT_EQ(stats.num_kv_blocks_used, 0);
    EXPECT_EQ(engine.integrity_error(), "");
    auto results = collector.results();
    std::vector<std::vector<int32_t>> tokens;
    for (RequestId id : ids) {
      EXPECT_EQ(results[id].finish, FinishReason::Length);
      tokens.push_back(results[id].tokens);
    }
    return tokens;
  }

  std::unique_ptr<runtime::LoadedModel> model_;
  EngineStats last_stats_;
};

TEST_F(BackendRunnerTest, SixteenConcurrentGreedyStreamsEqualEachAlone) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 16; ++i) specs.push_back(greedy_request(i));
  const std::vector<std::vector<int32_t>> together = run_all(specs, 16, 256);
  for (int i = 0; i < 16; ++i) {
    const std::vector<std::vector<int32_t>> alone = run_all({specs[static_cast<size_t>(i)]}, 1, 16);
    EXPECT_EQ(together[static_cast<size_t>(i)], alone[0]) << "request " << i;
    EXPECT_EQ(together[static_cast<size_t>(i)].size(), static_cast<size_t>(specs[static_cast<size_t>(i)].max_tokens));
  }
}

// Too few KV blocks for all streams at once: preemption by recompute must not change output.
TEST_F(BackendRunnerTest, PreemptionUnderBlockPressureKeepsOutput) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 8; ++i) specs.push_back(greedy_request(i + 20));
  const std::vector<std::vector<int32_t>> roomy = run_all(specs, 8, 128);
  const std::vector<std::vector<int32_t>> tight = run_all(specs, 8, 8);
  EXPECT_GT(last_stats_.num_preemptions, 0u);
  EXPECT_EQ(roomy, tight);
}

TEST_F(BackendRunnerTest, SeededSamplingIsReproducibleUnderLoad) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) {
    RequestSpec spec = greedy_request(i);
    spec.sampling.temperature = 0.9f;
    spec.sampling.top_p = 0.9f;
    spec.sampling.seed = 1000 + static_cast<uint64_t>(i);
    specs.push_back(spec);
  }
  const std::vector<std::vector<int32_t>> together = run_all(specs, 6, 64);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(together[static_cast<size_t>(i)], run_all({specs[static_cast<size_t>(i)]}, 1, 16)[0]) << i;
}

// The CPU backend reporting device and pinned memory, as a GPU backend does.
class MemoryReportingBackend final : public runtime::Backend {
 public:
  explicit MemoryReportingBackend(runtime::Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  const runtime::ModelConfig& config() const override { return inner_.config(); }
  const runtime::CacheConfig& cache_config() const override { return inner_.cache_config(); }
  void forward(const runtime::BatchPlan& plan, runtime::ForwardOutput& out) override { inner_.forward(plan, out); }
  void forward_mtp(const runtime::MtpPlan& plan, runtime::ForwardOutput& out) override {
    inner_.forward_mtp(plan, out);
  }
  void rollback(int32_t slot, int32_t num_rows_kept) override { inner_.rollback(slot, num_rows_kept); }
  runtime::BackendMemoryStats memory_stats() const override { return {3 << 20, 80 << 20, 64 << 10, 2}; }

 private:
  runtime::Backend& inner_;
};

TEST_F(BackendRunnerTest, EngineStatsCarryTheBackendsMemory) {
  runtime::CpuBackend cpu(*model_, runtime::CacheConfig{2, 16, 32}, 1);
  EXPECT_EQ(runtime::BackendRunner(cpu, 512).stats().device_bytes_used, 0);  // the CPU holds no device memory
  MemoryReportingBackend backend(cpu);
  runtime::BackendRunner runner(backend, 512);
  Engine engine(runner, SchedulerConfig{});
  engine.start();
  Collector collector;
  ASSERT_EQ(engine.submit(greedy_request(0), collector.sink()).status, SubmitStatus::Accepted);
  ASSERT_TRUE(collector.wait(1));
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.device_bytes_used, 3 << 20);
  EXPECT_EQ(stats.device_bytes_total, 80 << 20);
  EXPECT_EQ(stats.pinned_bytes, 64 << 10);
  EXPECT_EQ(stats.pinned_registrations, 2);
}

}  // namespace
}  // namespace deltaserve::scheduler
