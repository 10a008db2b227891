// Tokens/s with and without MTP speculation, per stream and aggregate, on the CPU backend
// with the embedded trained model; plus acceptance by draft position on code and prose.
// Usage: speculation_bench [--model PATH] [--threads N] [--tokens N]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/backend_runner.h"
#include "scheduler/engine.h"

namespace {

using namespace deltaserve;

class Counter final : public scheduler::EngineObserver {
 public:
  void on_drafts(int32_t position, int32_t drafted, int32_t accepted) override {
    std::lock_guard<std::mutex> lock(mutex_);
    drafted_[position] += drafted;
    accepted_[position] += accepted;
  }
  std::mutex mutex_;
  std::map<int32_t, int64_t> drafted_, accepted_;
};

struct Result {
  double aggregate_tokens_per_s = 0;
  double per_stream_tokens_per_s = 0;
  std::map<int32_t, int64_t> drafted, accepted;
};

Result run(const runtime::LoadedModel& model, const std::vector<std::vector<int32_t>>& prompts, int32_t streams,
           int32_t depth, int32_t max_tokens, int threads) {
  runtime::CpuBackend backend(model, runtime::CacheConfig{streams, 16, streams * 32, 1 + depth}, threads);
  runtime::BackendRunner runner(backend, 512, depth);
  scheduler::SchedulerConfig config;
  config.draft_min_expected = 0.0;  // fixed depth: the table compares depths, not the policy
  Counter counter;
  scheduler::Engine engine(runner, config, &counter);
  engine.start();
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  int64_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < streams; ++i) {
    scheduler::RequestSpec spec;
    spec.prompt_tokens = prompts[static_cast<size_t>(i) % prompts.size()];
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = 0.0f;
    engine.submit(spec, [&](const scheduler::RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      tokens += static_cast<int64_t>(e.tokens.size());
      if (e.finish != scheduler::FinishReason::None) {
        ++finished;
        done.notify_all();
      }
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished == streams; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Result r;
  r.aggregate_tokens_per_s = static_cast<double>(tokens) / seconds;
  r.per_stream_tokens_per_s = r.aggregate_tokens_per_s / streams;
  r.drafted = counter.drafted_;
  r.accepted = counter.accepted_;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "models/deltaserve-tiny-moe.gguf";
  int threads = 0, max_tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--model") path = argv[i + 1];
    else if (arg == "--threads") threads = std::atoi(argv[i + 1]);
    else if (arg == "--tokens") max_tokens = std::atoi(argv[i + 1]);
  }
  auto model = runtime::load_model(path);
  auto tokenizer = runtime::Tokenizer::from_gguf(*model->gguf);
  const std::vector<std::vector<int32_t>> code = {
      tokenizer->encode("def fibonacci(n):\n"), tokenizer->encode("import os\nimport sys\n\ndef main():\n"),
      tokenizer->encode("class Stack:\n    def __init__(self):\n"), tokenizer->encode("for i in range(10):\n    ")};
  const std::vector<std::vector<int32_t>> prose = {
      tokenizer->encode("It was a dark and stormy night;"), tokenizer->encode("The quick brown fox"),
      tokenizer->encode("A fortune cookie says:"), tokenizer->encode("Debian is a free operating system")};

  std::printf("## Acceptance by draft position (depth 3, greedy, %d tokens, 4 streams)\n\n", max_tokens);
  std::printf("| text | pos 1 | pos 2 given 1 | pos 3 given 2 |\n|---|---|---|---|\n");
  for (const auto& [name, prompts] : {std::pair{"code", &code}, std::pair{"prose", &prose}}) {
    const Result r = run(*model, *prompts, 4, 3, max_tokens, threads);
    std::printf("| %s |", name);
    for (int32_t j = 0; j < 3; ++j) {
      const double reached = j == 0 ? static_cast<double>(r.drafted.at(0)) : static_cast<double>(r.accepted.at(j - 1));
      std::printf(" %.2f |", reached > 0 ? static_cast<double>(r.accepted.at(j)) / reached : 0.0);
    }
    std::printf("\n");
  }
  std::printf("\n## Tokens/s by draft depth (code prompts, greedy, %d tokens per stream)\n\n", max_tokens);
  std::printf("| streams | depth 0 aggregate | depth 1 | depth 2 | depth 3 | depth 0 per stream | depth 3 per stream |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int32_t streams : {1, 4, 16}) {
    std::vector<Result> by_depth;
    for (int32_t depth = 0; depth <= 3; ++depth) by_depth.push_back(run(*model, code, streams, depth, max_tokens, threads));
    std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f |\n", streams, by_depth[0].aggregate_tokens_per_s,
                by_depth[1].aggregate_tokens_per_s, by_depth[2].aggregate_tokens_per_s, by_depth[3].aggregate_tokens_per_s,
                by_depth[0].per_stream_tokens_per_s, by_depth[3].per_stream_tokens_per_s);
  }
  return 0;
}
