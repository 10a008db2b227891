#include "runtime/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
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

// exp of arguments below this is 0 in double; a margin below a min-p floor's log keeps every
// token whose exp could still reach the floor (the exact test follows the exp).
constexpr double kExpUnderflowArgument = -746.0;
constexpr double kExpArgumentMargin = 1e-3;
// Rows shorter than this take their exps on the calling thread (a pool's wake-up would cost more).
constexpr int64_t kParallelMinTokens = 32768;

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

// Sorts ids (in increasing id order) into more_likely's order. Long lists by an LSD radix sort
// over the logits' bits (flat distributions, e.g. high temperatures, put most of the vocabulary
// in a top-p candidate set; a comparison sort of 250k ids costs ~10x more): keys ordered as the
// floats descending (-0 as +0), stable, so equal logits keep the id order, as more_likely.
void sort_by_likelihood(std::vector<int32_t>& ids, const std::vector<float>& v) {
  constexpr size_t kRadixMinIds = 4096;
  if (ids.size() < kRadixMinIds) {
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return more_likely(v, a, b); });
    return;
  }
  auto descending_key = [&](int32_t id) {
    const float f = v[static_cast<size_t>(id)] == 0.0f ? 0.0f : v[static_cast<size_t>(id)];
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits ^ 0x80000000u;
    return ~ascending;
  };
  std::vector<std::pair<uint32_t, int32_t>> items(ids.size()), scratch(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) items[k] = {descending_key(ids[k]), ids[k]};
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<size_t, 257> start{};
    for (const auto& item : items) ++start[((item.first >> shift) & 0xFFu) + 1];
    for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
    for (const auto& item : items) scratch[start[(item.first >> shift) & 0xFFu]++] = item;
    items.swap(scratch);
  }
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = items[k].second;
}

// Top-p over the kept tokens (ids in id order, weights w): the smallest set of most likely
// tokens whose mass reaches top_p of their total (summed in id order), at least one, in
// likelihood order. Only the tokens of weight >= floor are sorted: together the others weigh
// less than ids.size() * floor = (total - top_p total) / 2, so the prefix ends among the first
// (the whole order is the fallback where rounding or NaN leaves the target unreached).
std::vector<int32_t> top_p_prefix(const std::vector<double>& w, const std::vector<int32_t>& ids, float top_p,
                                  const std::vector<float>& processed) {
  double total = 0;
  for (int32_t i : ids) total += w[static_cast<size_t>(i)];
  const double target = top_p * total;
  const double floor = (total - target) / (2.0 * static_cast<double>(ids.size()));
  auto prefix_of = [&](std::vector<int32_t> order) {
    sort_by_likelihood(order, processed);
    double mass_before = 0;
    size_t n = 0;
    while (n < order.size() && mass_before < target) mass_before += w[static_cast<size_t>(order[n++])];
    order.resize(std::max<size_t>(n, 1));
    return std::make_pair(order, mass_before);
  };
  std::vector<int32_t> candidates;
  for (int32_t i : ids) {
    if (w[static_cast<size_t>(i)] >= floor) candidates.push_back(i);
  }
  if (!candidates.empty()) {
    auto [prefix, mass] = prefix_of(std::move(candidates));
    if (mass >= target || prefix.size() == ids.size()) return prefix;
  }
  return prefix_of(ids).first;
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

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(std::move(params)), seed_(seed) {
  if (params_.constraint) constraint_.emplace(params_.constraint);
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
  if (constraint_) constraint_->apply(v);
  return v;
}

TokenDistribution Sampler::distribution(const std::vector<float>& processed) const {
  TokenDistribution dist;
  dist.weights.assign(processed.size(), 0.0);
  if (processed.empty()) return dist;
  const int32_t top = argmax(processed);
  if (params_.greedy()) {
    dist.weights[static_cast<size_t>(top)] = dist.total = 1.0;
    return dist;
  }
  const double inv_temperature = 1.0 / params_.temperature;
  const double max_logit = processed[top] * inv_temperature;
  const double min_p_floor = params_.min_p > 0.0f ? params_.min_p : 0.0;  // relative to the max
  // A token's unnormalised probability exp(l / T - max), 0 where -inf, underflow or min-p drop
  // it. It grows with the logit, so every filter here keeps a most-likely prefix of the tokens
  // (more_likely's order), which lets top-k pick its candidates before any exp.
  const double skip_below = min_p_floor > 0.0 ? std::log(min_p_floor) - kExpArgumentMargin : kExpUnderflowArgument;
  auto weight_of = [&](int32_t i) -> double {
    if (processed[i] == kNegInf) return 0.0;
    const double arg = processed[i] * inv_temperature - max_logit;
    if (arg < skip_below) return 0.0;  // exp would give 0 or less than the min-p floor
    const double w = std::exp(arg);
    return w <= 0.0 || w < min_p_floor ? 0.0 : w;
  };
  std::vector<int32_t> kept;  // the tokens with a weight; id order unless said otherwise
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < processed.size()) {
    for (int32_t i : most_likely(processed, params_.top_k)) {
      const double w = weight_of(i);
      if (w == 0.0) continue;
      dist.weights[static_cast<size_t>(i)] = w;
      kept.push_back(i);
    }
  } else {
    // Every token's exp, in chunks on the pool where one is set (each weight is its own, so
    // the split changes no bit); the kept list, and later the total, in id order here.
    const auto n = static_cast<int64_t>(processed.size());
    auto fill = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dist.weights[static_cast<size_t>(i)] = weight_of(static_cast<int32_t>(i));
    };
    if (parallel_ != nullptr && n >= kParallelMinTokens) parallel_->run(n, fill);
    else fill(0, n);
    for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
      if (dist.weights[static_cast<size_t>(i)] != 0.0) kept.push_back(i);
    }
  }
  if (kept.empty()) {  // nothing finite (all -inf or NaN): the argmax, as greedy
    dist.weights[static_cast<size_t>(top)] = dist.total = 1.0;
    return dist;
  }
  if (params_.top_p < 1.0f) {
    if (!std::is_sorted(kept.begin(), kept.end())) std::sort(kept.begin(), kept.end());
    const std::vector<int32_t> nucleus = top_p_prefix(dist.weights, kept, params_.top_p, processed);
    std::vector<double> nucleus_weights(dist.weights.size(), 0.0);
    for (int32_t i : nucleus) nucleus_weights[static_cast<size_t>(i)] = dist.weights[static_cast<size_t>(i)];
    dist.weights.swap(nucleus_weights);
    // Back to id order: a small set sorts, a large one (a flat distribution) is read off the weights.
    kept = nucleus;
    if (kept.size() * 64 >= dist.weights.size()) {
      kept.clear();
      for (int32_t i = 0; i < static_cast<int32_t>(dist.weights.size()); ++i) {
        if (dist.weights[static_cast<size_t>(i)] != 0.0) kept.push_back(i);
      }
    }
  }
  if (!std::is_sorted(kept.begin(), kept.end())) std::sort(kept.begin(), kept.end());
  for (int32_t i : kept) dist.total += dist.weights[static_cast<size_t>(i)];
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
                                      : draw_token(distribution(processed), sampler_uniform(seed_, position));
  return describe(processed, id);
}

}  // namespace deltaserve::runtime
