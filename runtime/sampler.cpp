#include "runtime/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

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

// The k most likely tokens that are not -inf (all of them if fewer), in no particular order.
// A bounded heap for small k, whose top is the least likely token kept so far.
std::vector<int32_t> most_likely(const std::vector<float>& v, int32_t k) {
  auto by_likelihood = [&](int32_t a, int32_t b) { return more_likely(v, a, b); };
  std::vector<int32_t> ids;
  const auto n = static_cast<int32_t>(v.size());
  if (static_cast<int64_t>(k) * 16 >= n) {
    for (int32_t i = 0; i < n; ++i) {
      if (v[i] != kNegInf) ids.push_back(i);
    }
    if (static_cast<size_t>(k) < ids.size()) {
      std::nth_element(ids.begin(), ids.begin() + k, ids.end(), by_likelihood);
      ids.resize(static_cast<size_t>(k));
    }
    return ids;
  }
  ids.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < n; ++i) {
    if (v[i] == kNegInf) continue;
    if (ids.size() < static_cast<size_t>(k)) {
      ids.push_back(i);
      std::push_heap(ids.begin(), ids.end(), by_likelihood);
    } else if (more_likely(v, i, ids.front())) {
      std::pop_heap(ids.begin(), ids.end(), by_likelihood);
      ids.back() = i;
      std::push_heap(ids.begin(), ids.end(), by_likelihood);
    }
  }
  return ids;
}

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

uint32_t sampler_word(uint64_t seed, uint64_t position, DrawStream stream) {
  return philox4x32(seed, position, static_cast<uint32_t>(stream))[0];
}

double sampler_uniform(uint64_t seed, uint64_t position, DrawStream stream) {
  return sampler_word(seed, position, stream) * (1.0 / 4294967296.0);
}

int32_t draw_token(const TokenDistribution& dist, uint32_t word) { return kernels::draw_from(dist, word); }

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(std::move(params)), seed_(seed) {
  if (params_.constraint) constraint_.emplace(params_.constraint, params_.thinking_budget);
}

void Sampler::set_prompt(std::span<const int32_t> prompt_ids) {
  prompt_ids_.assign(prompt_ids.begin(), prompt_ids.end());
  std::sort(prompt_ids_.begin(), prompt_ids_.end());
  prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
}

void Sampler::accept(int32_t id) {
  ++output_counts_[id];
  ++num_output_tokens_;
  if (constraint_) constraint_->accept(id);
}

std::vector<float> Sampler::processed_logits(std::span<const float> logits) const {
  std::vector<float> v(logits.begin(), logits.end());
  const auto n = static_cast<int32_t>(v.size());
  auto in_range = [n](int32_t id) { return id >= 0 && id < n; };
  for (const auto& [id, bias] : params_.logit_bias) {
    if (in_range(id)) v[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    // A penalty under 1 raises repeated tokens; a tiny one (the API takes any value > 0) would
    // divide a logit past the float range, and an infinite logit makes every logprob NaN
    // (null on the wire): the division saturates at the largest finite value.
    constexpr float kMaxLogit = std::numeric_limits<float>::max();
    auto penalise = [&](int32_t id) {
      if (!in_range(id)) return;
      v[id] = v[id] > 0 ? std::min(v[id] / params_.repetition_penalty, kMaxLogit) : v[id] * params_.repetition_penalty;
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
  if (constraint_) constraint_->apply(v);
  return v;
}

kernels::DrawParams draw_params_of(const SamplingParams& params, uint64_t seed, uint64_t position) {
  kernels::DrawParams p;
  // 1 / T overflows a float for T under ~2.9e-39 (the API takes any T in (0, 2]): with an
  // infinite factor the most likely token's (l - top) * inf is NaN and no token has mass (the
  // draw falls to id 0). The largest finite factor keeps the rule: only the top weighs.
  const float inverse = 1.0f / params.temperature;
  p.inv_temperature = std::isfinite(inverse) ? inverse : std::numeric_limits<float>::max();
  p.top_k = params.top_k;
  p.top_p = params.top_p;
  p.min_p = params.min_p;
  p.word = sampler_word(seed, position);
  return p;
}

bool only_draw_needed(const SamplingParams& p) {
  return !p.greedy() && !p.logprobs && p.top_logprobs <= 0 && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && !p.constraint;
}

kernels::DrawParams Sampler::draw_params(uint64_t position) const { return draw_params_of(params_, seed_, position); }

TokenDistribution Sampler::distribution(const std::vector<float>& processed) const {
  if (processed.empty()) return {};
  if (params_.greedy()) {
    TokenDistribution dist;
    dist.mass.assign(processed.size(), 0);
    dist.mass[static_cast<size_t>(argmax(processed))] = dist.total = 1;
    return dist;
  }
  return kernels::draw_masses(processed.data(), static_cast<int64_t>(processed.size()), draw_params(0), parallel_);
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
  if (num_top == 0) return out;
  // The num_top most likely ids: the finite ones first, then -inf ones in id order.
  std::vector<int32_t> order = most_likely(processed, static_cast<int32_t>(num_top));
  for (int32_t i = 0; order.size() < num_top; ++i) {
    if (processed[i] == kNegInf) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return more_likely(processed, a, b); });
  for (size_t k = 0; k < num_top; ++k) {
    out.top_logprobs.push_back({order[k], static_cast<float>(processed[order[k]] - log_z)});
  }
  return out;
}

SampledToken Sampler::sample_at(std::span<const float> logits, uint64_t position) const {
  if (logits.empty()) return SampledToken{};
  const std::vector<float> processed = processed_logits(logits);
  const int32_t id = params_.greedy() ? argmax(processed)
                                      : draw_token(distribution(processed), sampler_word(seed_, position));
  return describe(processed, id);
}

}  // namespace deltaserve::runtime
