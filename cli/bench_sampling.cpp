#include "cli/bench_sampling.h"

#include <chrono>
#include <random>
#include <string>

#include "runtime/backend_runner.h"
#include "runtime/grammar/constraint_grammars.h"

namespace deltaserve::cli {
namespace {

// Byte tokens first, then text-like pieces: letters, digits, spaces and JSON punctuation in
// rough proportion, with some multi-byte UTF-8.
std::shared_ptr<const runtime::grammar::Vocabulary> synthetic_vocabulary(int64_t num_vocab, uint64_t seed) {
  static const std::string kAlphabet =
      "etaoinshrdlucmfwypvbgkjqxz etaoinshrdlu ETAOIN 0123456789 \"\"{}[]:,.-_\n\xC3\xA9\xE6\x97\xA5";
  std::mt19937_64 rng(seed);
  std::vector<std::string> pieces(static_cast<size_t>(num_vocab));
  for (int64_t id = 0; id < num_vocab; ++id) {
    if (id < 256) {
      pieces[static_cast<size_t>(id)] = std::string(1, static_cast<char>(id));
      continue;
    }
    const size_t len = 2 + rng() % 7;
    std::string& p = pieces[static_cast<size_t>(id)];
    while (p.size() < len) p += kAlphabet[rng() % kAlphabet.size()];
  }
  return std::make_shared<runtime::grammar::Vocabulary>(std::move(pieces));
}

}  // namespace

BenchSamplers::BenchSamplers(int64_t num_vocab, int32_t num_streams, bool constrained, uint64_t seed)
    : pool_(runtime::BackendRunner::num_sampling_threads()) {
  std::shared_ptr<const runtime::grammar::Vocabulary> vocab;
  std::shared_ptr<const runtime::grammar::Grammar> grammar;
  if (constrained) {
    vocab = synthetic_vocabulary(num_vocab, seed);
    grammar = runtime::grammar::json_object_grammar();
  }
  for (int32_t s = 0; s < num_streams; ++s) {
    runtime::SamplingParams params;
    params.temperature = 1.0f;
    if (constrained) {
      // One constraint per stream (as per request in serving), so each has its own mask cache.
      auto c = std::make_shared<runtime::grammar::Constraint>(grammar, vocab, std::vector<int32_t>{0});
      constraints_.push_back(c);
      params.constraint = c;
    }
    samplers_.push_back(std::make_unique<runtime::Sampler>(params, seed + static_cast<uint64_t>(s)));
    samplers_.back()->set_parallel(&pool_);
  }
}

double BenchSamplers::sample(const runtime::ForwardOutput& out) {
  const auto t0 = std::chrono::steady_clock::now();
  pool_.run(static_cast<int64_t>(samplers_.size()), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const std::span<const float> row(out.sequence_logits(s), static_cast<size_t>(out.num_vocab));
      runtime::Sampler& sampler = *samplers_[static_cast<size_t>(s)];
      sampler.accept(sampler.sample(row).id);
    }
  });
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int64_t BenchSamplers::num_masks_computed() const {
  int64_t n = 0;
  for (const auto& c : constraints_) n += c->num_masks_computed();
  return n;
}

int64_t BenchSamplers::num_masks_cached() const {
  int64_t n = 0;
  for (const auto& c : constraints_) n += c->num_masks_cached();
  return n;
}

}  // namespace deltaserve::cli
