// Host sampling cost per logits row at the Qwen3.5/3.6 vocabulary (248,320 tokens), one
// core: every sampled row of every backend is drawn on the host (runtime/sampler.h), and on a
// GPU a sampled stream's step waits for it. Prints microseconds per row for the parameter
// sets clients send (OpenAI clients: temperature, often top_p; Qwen's recommended settings add
// top_k 20; logprobs), for a plain draw and for a draft distribution (MTP drafts of sampled
// requests build one per draft). Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
// but the last column: wall time with the row's pass over the vocabulary split over a pool of
// BackendRunner::num_sampling_threads() threads (a lone stream in the daemon).
//   build/<dir>/bench/sampler_bench [vocab] [rows]
#include <time.h>

#include <chrono>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend_runner.h"
#include "runtime/sampler.h"
#include "runtime/thread_pool.h"

using deltaserve::runtime::Sampler;
using deltaserve::runtime::SamplingParams;

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Logits shaped like a language model's: a few likely tokens over a long tail.
std::vector<std::vector<float>> make_rows(int64_t vocab, int rows) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> tail(0.0f, 2.0f);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  for (auto& row : out) {
    row.resize(static_cast<size_t>(vocab));
    for (float& x : row) x = tail(rng);
    for (int i = 0; i < 8; ++i) row[static_cast<size_t>(pick(rng))] = 12.0f + 2.0f * static_cast<float>(i);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t vocab = argc > 1 ? std::atoll(argv[1]) : 248320;
  const int rows = argc > 2 ? std::atoi(argv[2]) : 64;
  const auto logits = make_rows(vocab, rows);

  struct Case {
    std::string name;
    SamplingParams params;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, float temperature, int32_t top_k, float top_p, float min_p, bool logprobs) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.logprobs = logprobs;
    p.top_logprobs = logprobs ? 5 : 0;
    cases.push_back({std::move(name), p});
  };
  add("greedy", 0.0f, 0, 1.0f, 0.0f, false);
  add("temperature 1", 1.0f, 0, 1.0f, 0.0f, false);
  add("temperature 0.7, top_p 0.95", 0.7f, 0, 0.95f, 0.0f, false);
  add("temperature 0.6, top_p 0.8, top_k 20", 0.6f, 20, 0.8f, 0.0f, false);
  add("temperature 0.7, min_p 0.05", 0.7f, 0, 1.0f, 0.05f, false);
  add("temperature 1, logprobs + top 5", 1.0f, 0, 1.0f, 0.0f, true);
  add("temperature 2.5, top_p 0.95 (a flat distribution)", 2.5f, 0, 0.95f, 0.0f, false);

  std::printf("vocab %lld, %d rows per case, one core (thread CPU time)\n\n", static_cast<long long>(vocab), rows);
  const deltaserve::runtime::ThreadPool pool(deltaserve::runtime::BackendRunner::num_sampling_threads());
  std::printf("| parameters | sample us/row | distribution us/row | sample us/row, %d threads (wall) |\n|---|---|---|---|\n",
              pool.num_threads());
  int64_t checksum = 0;
  for (const Case& c : cases) {
    Sampler sampler(c.params, 11);
    const double t0 = thread_cpu_s();
    for (int r = 0; r < rows; ++r) checksum += sampler.sample_at(logits[static_cast<size_t>(r)], static_cast<uint64_t>(r)).id;
    const double t1 = thread_cpu_s();
    for (int r = 0; r < rows; ++r) {
      const auto dist = sampler.distribution(sampler.processed_logits(logits[static_cast<size_t>(r)]));
      checksum += static_cast<int64_t>(dist.total);
    }
    const double t2 = thread_cpu_s();
    Sampler pooled(c.params, 11);
    pooled.set_parallel(&pool);
    const auto w0 = std::chrono::steady_clock::now();
    for (int r = 0; r < rows; ++r) checksum -= pooled.sample_at(logits[static_cast<size_t>(r)], static_cast<uint64_t>(r)).id;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    std::printf("| %s | %.1f | %.1f | %.1f |\n", c.name.c_str(), (t1 - t0) * 1e6 / rows, (t2 - t1) * 1e6 / rows,
                wall * 1e6 / rows);
  }
  std::printf("\n(checksum %lld)\n", static_cast<long long>(checksum));
  return 0;
}
