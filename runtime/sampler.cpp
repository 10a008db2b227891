#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/greedy.h"

namespace deltaserve::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Most likely first; the lower id first among equals (deterministic everywhere).
bool more_likely(const std::vector<float>& v, int32_t a, int32_t b) {
  return v[a] != v[b] ? v[a] > v[b] : a < b;
}

// The greedy rule (runtime/greedy.h), shared with argmax_ids and the device argmax.
int32_t argmax(const std::vector<float>& v) { return argmax_token(v); }

}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter, uint32_t stream) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57, kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), stream, 0};
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

double sampler_uniform(uint64_t seed, uint64_t position, DrawStream stream) {
  return philox4x32(seed, position, static_cast<uint32_t>(stream))[0] * (1.0 / 4294967296.0);
}

int32_t draw_token(const TokenDistribution& dist, double u) {
  const double target = u * dist.total;
  double cumulative = 0;
  int32_t last = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(dist.weights.size()); ++i) {
    if (dist.weights[i] == 0.0) continue;
    cumulative += dist.weights[i];
    if (target < cumulative) return i;
    last = i;
  }
  return last;  // u * total rounded up to the total: the last kept id
}

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(std::move(params)), seed_(seed) {}

void Sampler::set_prompt(std::span<const int32_t> prompt_ids) {
  prompt_ids_.assign(prompt_ids.begin(), prompt_ids.end());
  std::sort(prompt_ids_.begin(), prompt_ids_.end());
  prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
}

void Sampler::accept(int32_t id) {
  ++output_counts_[id];
  ++num_output_tokens_;
}

std::vector<float> Sampler::processed_logits(std::span<const float> logits) const {
  std::vector<float> v(logits.begin(), logits.end());
  const auto n = static_cast<int32_t>(v.size());
  auto in_range = [n](int32_t id) { return id >= 0 && id < n; };
  for (const auto& [id, bias] : params_.logit_bias) {
    if (in_range(id)) v[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t id) {
      if (!in_range(id)) return;
      v[id] = v[id] > 0 ? v[id] / params_.repetition_penalty : v[id] * params_.repetition_penalty;
    };
    for (int32_t id : prompt_ids_) penalise(id);
    for (const auto& [id, count] : output_counts_) {
      if (!std::binary_search(prompt_ids_.begin(), prompt_ids_.end(), id)) penalise(id);
    }
  }
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    for (const auto& [id, count] : output_counts_) {
      if (in_range(id) && count > 0) {
        v[id] -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
      }
    }
  }
  return v;
}

TokenDistribution Sampler::distribution(const std::vector<float>& processed) const {
  TokenDistribution dist;
  dist.weights.assign(processed.size(), 0.0);
  if (processed.empty()) return dist;
  if (params_.greedy()) {
    dist.weights[static_cast<size_t>(argmax(processed))] = dist.total = 1.0;
    return dist;
  }
  const double inv_temperature = 1.0 / params_.temperature;
  const double max_logit = processed[argmax(processed)] * inv_temperature;
  // Candidates with their unnormalised probabilities exp(l / T - max).
  std::vector<int32_t> kept;
  std::vector<double> weight(processed.size(), 0.0);
  const double min_p_floor = params_.min_p > 0.0f ? params_.min_p : 0.0;  // relative to the max
  for (int32_t i = 0; i < static_cast<int32_t>(processed.size()); ++i) {
    if (processed[i] == kNegInf) continue;
    const double w = std::exp(processed[i] * inv_temperature - max_logit);
    if (w <= 0.0 || w < min_p_floor) continue;
    weight[i] = w;
    kept.push_back(i);
  }
  if (kept.empty()) {  // nothing finite (all -inf or NaN): the argmax, as greedy
    dist.weights[static_cast<size_t>(argmax(processed))] = dist.total = 1.0;
    return dist;
  }
  auto by_likelihood = [&](int32_t a, int32_t b) { return more_likely(processed, a, b); };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + params_.top_k, kept.end(), by_likelihood);
    kept.resize(params_.top_k);
  }
  if (params_.top_p < 1.0f) {
    std::sort(kept.begin(), kept.end(), by_likelihood);
    double total = 0;
    for (int32_t i : kept) total += weight[i];
    double mass_before = 0;
    size_t n = 0;
    while (n < kept.size() && mass_before < params_.top_p * total) mass_before += weight[kept[n++]];
    kept.resize(std::max<size_t>(n, 1));
  }
  std::sort(kept.begin(), kept.end());
  for (int32_t i : kept) {
    dist.weights[static_cast<size_t>(i)] = weight[i];
    dist.total += weight[i];
  }
  return dist;
}

SampledToken Sampler::describe(const std::vector<float>& processed, int32_t id) const {
  SampledToken out;
  out.id = id;
  if (!params_.logprobs && params_.top_logprobs <= 0) return out;
  const float max_logit = processed[argmax(processed)];
  double sum = 0;
  for (float x : processed) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);
  out.logprob = static_cast<float>(processed[id] - log_z);
  const size_t num_top = std::min<size_t>(std::max(params_.top_logprobs, 0), processed.size());
  std::vector<int32_t> order(processed.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + num_top, order.end(),
                    [&](int32_t a, int32_t b) { return more_likely(processed, a, b); });
  for (size_t k = 0; k < num_top; ++k) {
    out.top_logprobs.push_back({order[k], static_cast<float>(processed[order[k]] - log_z)});
  }
  return out;
}

SampledToken Sampler::sample_at(std::span<const float> logits, uint64_t position) const {
  if (logits.empty()) return SampledToken{};
  const std::vector<float> processed = processed_logits(logits);
  const int32_t id = params_.greedy() ? argmax(processed)
                                      : draw_token(distribution(processed), sampler_uniform(seed_, position));
  return describe(processed, id);
}

}  // namespace deltaserve::runtime
