#include "kernels/sampling/draw_ref.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace deltaserve::kernels {
namespace {

// Rows shorter than this take their masses on the calling thread (a pool's wake-up costs more).
constexpr int64_t kParallelMinTokens = 32768;

}  // namespace

int32_t argmax_ref(const float* row, int64_t vocab) {
  int32_t best = -1;
  float best_value = 0.0f;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = row[i];
    if (v != v) continue;  // NaN never wins
    if (best < 0 || v > best_value) {  // strict: the lowest id keeps a tie
      best = static_cast<int32_t>(i);
      best_value = v;
    }
  }
  return best < 0 ? 0 : best;
}

uint64_t select_prefix_key(std::vector<std::pair<uint64_t, uint64_t>> items, uint64_t target) {
  if (items.empty()) throw std::invalid_argument("select_prefix_key: no items");
  // Most significant digit first: keep the bin where the running weight reaches the target,
  // with the weight of the bins before it subtracted; 8 passes at most, each over fewer items.
  for (int shift = 56; shift >= 0 && items.size() > 1; shift -= 8) {
    std::array<uint64_t, 256> weight{};
    for (const auto& [key, w] : items) weight[(key >> shift) & 0xFFu] += w;
    uint64_t before = 0;
    int digit = 0;
    for (; digit < 255 && before + weight[static_cast<size_t>(digit)] < target; ++digit)
      before += weight[static_cast<size_t>(digit)];
    if (before + weight[static_cast<size_t>(digit)] < target) {  // never reached: the whole set
      uint64_t largest = 0;
      for (const auto& item : items) largest = std::max(largest, item.first);
      return largest;
    }
    target -= before;
    std::erase_if(items, [&](const auto& item) { return static_cast<int>((item.first >> shift) & 0xFFu) != digit; });
  }
  return items.front().first;
}

DrawMasses draw_masses(const float* logits, int64_t vocab, const DrawParams& params, const ParallelFor* pool) {
  const int64_t n = vocab;
  if (n <= 0) throw std::invalid_argument("draw: empty logits row");
  if (n > draw::kMaxVocab)
    throw std::invalid_argument("draw: vocabulary of " + std::to_string(n) + " tokens exceeds " +
                                std::to_string(draw::kMaxVocab));
  DrawMasses out;
  out.mass.assign(static_cast<size_t>(n), 0);
  const int32_t top = argmax_ref(logits, n);
  const float top_logit = logits[top];
  if (!(top_logit > -3.0e38f && top_logit < 3.0e38f)) {  // not finite: only the argmax
    out.mass[static_cast<size_t>(top)] = out.total = 1;
    return out;
  }
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out.mass[static_cast<size_t>(i)] = draw::token_mass(logits[i], top_logit, params);
  };
  if (pool != nullptr && n >= kParallelMinTokens) pool->run(n, fill);
  else fill(0, n);

  // Steps 3 and 4 keep the tokens whose likelihood key is at most `limit`.
  uint64_t limit = ~uint64_t{0};
  const bool top_k = params.top_k > 0, top_p = params.top_p < 1.0f;
  std::vector<std::pair<uint64_t, uint64_t>> items;  // (key, mass) of the tokens with mass
  if (top_k || top_p) {
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t m = out.mass[static_cast<size_t>(i)];
      if (m != 0) items.emplace_back(draw::likelihood_key(logits[i], static_cast<uint32_t>(i)), m);
    }
  }
  if (top_k && static_cast<size_t>(params.top_k) < items.size()) {
    std::vector<std::pair<uint64_t, uint64_t>> counted(items.size());
    for (size_t k = 0; k < items.size(); ++k) counted[k] = {items[k].first, 1};
    limit = select_prefix_key(std::move(counted), static_cast<uint64_t>(params.top_k));
    if (top_p) std::erase_if(items, [&](const auto& item) { return item.first > limit; });
  }
  if (top_p && !items.empty()) {
    uint64_t total = 0;
    for (const auto& item : items) total += item.second;
    limit = select_prefix_key(std::move(items), draw::top_p_target(total, params.top_p));
  }
  for (int64_t i = 0; i < n; ++i) {
    uint64_t& m = out.mass[static_cast<size_t>(i)];
    if (m != 0 && limit != ~uint64_t{0} &&
        draw::likelihood_key(logits[i], static_cast<uint32_t>(i)) > limit)
      m = 0;
    out.total += m;
  }
  return out;
}

int32_t draw_from(const DrawMasses& masses, uint32_t word) {
  const uint64_t target = draw::draw_target(masses.total, word);
  uint64_t running = 0;
  for (size_t i = 0; i < masses.mass.size(); ++i) {
    running += masses.mass[i];
    if (running > target) return static_cast<int32_t>(i);
  }
  return 0;  // total 0: no token has mass
}

int32_t draw_ref(const float* logits, int64_t vocab, const DrawParams& params) {
  return draw_from(draw_masses(logits, vocab, params), params.word);
}

}  // namespace deltaserve::kernels
