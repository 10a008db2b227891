// Encoding speed of the tokenizer on one core over the oracle corpus
// (tests/fixtures/qwen3_tokenizer/corpus.jsonl), run from the repository root:
//   build/<dir>/bench/tokenizer_bench [tokenizer.json] [corpus.jsonl] [passes]
// Prints MB/s (10^6 bytes of input text per second) for the first pass (cold BPE cache),
// the later passes (warm cache), and decode. Goal: >= 10 MB/s encoding. Times are this
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a busy shared machine skews them less than
// wall time would; wall time is printed alongside.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

using deltaserve::runtime::Tokenizer;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tokenizer_path = argc > 1 ? argv[1] : "tests/fixtures/qwen3_tokenizer/tokenizer.json";
  const std::string corpus_path = argc > 2 ? argv[2] : "tests/fixtures/qwen3_tokenizer/corpus.jsonl";
  const int num_passes = argc > 3 ? std::max(2, std::atoi(argv[3])) : 5;

  const auto load_start = Clock::now();
  const auto tokenizer = Tokenizer::from_json_file(tokenizer_path);
  const double load_s = seconds_since(load_start);

  std::vector<std::string> texts;
  std::ifstream in(corpus_path);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", corpus_path.c_str());
    return 1;
  }
  size_t num_bytes = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    num_bytes += texts.back().size();
  }

  size_t num_tokens = 0;
  std::vector<std::vector<int32_t>> encoded(texts.size());
  double cold_s = 0, warm_s = 0, wall_s = 0;
  for (int pass = 0; pass < num_passes; ++pass) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_s();
    for (size_t i = 0; i < texts.size(); ++i) encoded[i] = tokenizer->encode(texts[i]);
    (pass == 0 ? cold_s : warm_s) += thread_cpu_s() - cpu_start;
    if (pass > 0) wall_s += seconds_since(start);
  }
  for (const auto& ids : encoded) num_tokens += ids.size();

  const double decode_start = thread_cpu_s();
  size_t num_decoded_bytes = 0;
  for (const auto& ids : encoded) num_decoded_bytes += tokenizer->decode(ids).size();
  const double decode_s = thread_cpu_s() - decode_start;

  const double mb = static_cast<double>(num_bytes) / 1e6;
  std::printf("tokenizer_bench: %zu strings, %.2f MB, %zu tokens (%.2f bytes/token), load %.2f s\n",
              texts.size(), mb, num_tokens, static_cast<double>(num_bytes) / num_tokens, load_s);
  std::printf("%-24s %10s %10s\n", "phase", "MB/s", "Mtok/s");
  std::printf("%-24s %10.2f %10.2f\n", "encode, cold cache", mb / cold_s, num_tokens / cold_s / 1e6);
  const double warm_per_pass = warm_s / (num_passes - 1);
  std::printf("%-24s %10.2f %10.2f\n", "encode, warm cache", mb / warm_per_pass,
              num_tokens / warm_per_pass / 1e6);
  std::printf("%-24s %10.2f %10.2f\n", "encode, warm, wall time", mb / (wall_s / (num_passes - 1)),
              num_tokens / (wall_s / (num_passes - 1)) / 1e6);
  std::printf("%-24s %10.2f %10.2f\n", "decode", num_decoded_bytes / 1e6 / decode_s,
              num_tokens / decode_s / 1e6);
  return 0;
}
