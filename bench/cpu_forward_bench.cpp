// CPU backend prefill and decode speed on the oracle fixtures (recorded, not asserted).
// Usage: cpu_forward_bench [--threads N] [MODEL ...]; with no model, every fixture GGUF.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"

namespace {

using namespace deltaserve::runtime;
using Clock = std::chrono::steady_clock;

struct Result {
  double prefill_tokens_per_s;
  double decode_tokens_per_s;
};

Result measure(const LoadedModel& model, int threads, int32_t prompt_tokens, int32_t decode_tokens) {
  const int32_t block_tokens = 16;
  const int32_t num_blocks = (prompt_tokens + decode_tokens + block_tokens - 1) / block_tokens;
  CpuBackend backend(model, CacheConfig{1, block_tokens, num_blocks}, threads);
  SequenceStep step;
  for (int32_t i = 0; i < prompt_tokens; ++i) step.tokens.push_back(static_cast<int32_t>((i * 7 + 3) % model.config.num_vocab));
  step.kv_blocks.resize(static_cast<size_t>(num_blocks));
  std::iota(step.kv_blocks.begin(), step.kv_blocks.end(), 0);
  ForwardOutput out;
  const auto t0 = Clock::now();
  backend.forward(BatchPlan{{step}}, out);
  const auto t1 = Clock::now();
  for (int32_t i = 0; i < decode_tokens; ++i) {
    step.num_cached_tokens += static_cast<int32_t>(step.tokens.size());
    step.tokens = {static_cast<int32_t>(i % model.config.num_vocab)};
    backend.forward(BatchPlan{{step}}, out);
  }
  const auto t2 = Clock::now();
  return {prompt_tokens / std::chrono::duration<double>(t1 - t0).count(),
          decode_tokens / std::chrono::duration<double>(t2 - t1).count()};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else models.push_back(arg);
  }
  if (models.empty()) {
    for (const char* name : {"tiny_dense", "tiny_moe"})
      for (const char* file : {"model-f32.gguf", "model-bf16.gguf", "model-q8_0.gguf", "model-q4_0.gguf"}) {
        const std::string path = std::string("tests/fixtures/") + name + "/" + file;
        if (std::filesystem::exists(path)) models.push_back(path);
      }
  }
  std::printf("| model | threads | prefill 64 tok/s | decode tok/s |\n|---|---|---|---|\n");
  for (const std::string& path : models) {
    auto model = load_model(path);
    const Result r = measure(*model, threads, 64, 64);
    std::printf("| %s | %d | %.0f | %.0f |\n", path.c_str(), threads, r.prefill_tokens_per_s, r.decode_tokens_per_s);
  }
  return 0;
}
