// `deltaserve run`: loads a model on the CPU backend and generates greedily from a prompt
// of token ids, once, without a server. The quickest end-to-end check of a model file.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"

namespace deltaserve::cli {
namespace {

struct RunOptions {
  std::string model_path;
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 16;
  int threads = 0;
};

void print_run_usage() {
  std::fprintf(stderr,
               "usage: deltaserve run --model PATH --prompt-ids ID,ID,... [--max-tokens N] [--threads N]\n"
               "  Greedy generation on the CPU backend; prints the generated ids and tokens/s.\n");
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(static_cast<int32_t>(std::stol(item)));
  return ids;
}

bool parse_run_options(int argc, char** argv, RunOptions& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--model" && has_value) o.model_path = argv[++i];
    else if (arg == "--prompt-ids" && has_value) o.prompt_ids = parse_ids(argv[++i]);
    else if (arg == "--max-tokens" && has_value) o.max_tokens = std::atoi(argv[++i]);
    else if (arg == "--threads" && has_value) o.threads = std::atoi(argv[++i]);
    else return false;
  }
  return !o.model_path.empty() && !o.prompt_ids.empty() && o.max_tokens > 0;
}

}  // namespace

int run_main(int argc, char** argv) {
  RunOptions options;
  try {
    if (!parse_run_options(argc, argv, options)) {
      print_run_usage();
      return 2;
    }
  } catch (const std::exception&) {
    print_run_usage();
    return 2;
  }
  try {
    auto model = runtime::load_model(options.model_path);
    const int32_t block_tokens = 16;
    const int32_t total = static_cast<int32_t>(options.prompt_ids.size()) + options.max_tokens;
    const int32_t num_blocks = (total + block_tokens - 1) / block_tokens;
    runtime::CpuBackend backend(*model, runtime::CacheConfig{1, block_tokens, num_blocks}, options.threads);
    std::printf("model: %s (%s, %lld layers, vocab %lld)\n", options.model_path.c_str(), model->format.c_str(),
                static_cast<long long>(model->config.num_layers), static_cast<long long>(model->config.num_vocab));

    runtime::SequenceStep step;
    step.tokens = options.prompt_ids;
    step.kv_blocks.resize(static_cast<size_t>(num_blocks));
    std::iota(step.kv_blocks.begin(), step.kv_blocks.end(), 0);
    runtime::ForwardOutput out;
    std::vector<int32_t> generated;
    const auto start = std::chrono::steady_clock::now();
    backend.forward(runtime::BatchPlan{{step}}, out);
    const auto prefill_done = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < options.max_tokens; ++i) {
      const float* logits = out.row_logits(0);
      int32_t best = 0;
      for (int32_t v = 1; v < out.num_vocab; ++v)
        if (logits[v] > logits[best]) best = v;
      generated.push_back(best);
      if (i + 1 == options.max_tokens) break;
      step.num_cached_tokens += static_cast<int32_t>(step.tokens.size());
      step.tokens = {best};
      backend.forward(runtime::BatchPlan{{step}}, out);
    }
    const auto end = std::chrono::steady_clock::now();
    std::printf("generated ids:");
    for (int32_t id : generated) std::printf(" %d", id);
    const double prefill_s = std::chrono::duration<double>(prefill_done - start).count();
    const double decode_s = std::chrono::duration<double>(end - prefill_done).count();
    std::printf("\nprefill: %zu tokens in %.3f s; decode: %d tokens in %.3f s (%.1f tokens/s)\n",
                options.prompt_ids.size(), prefill_s, options.max_tokens - 1, decode_s,
                decode_s > 0 ? (options.max_tokens - 1) / decode_s : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve run: %s\n", e.what());
    return 1;
  }
}

}  // namespace deltaserve::cli
