#include "runtime/grammar/token_mask.h"

#include <algorithm>
#include <bit>

namespace deltaserve::runtime::grammar {

int64_t TokenMask::count() const {
  int64_t n = 0;
  for (const uint64_t w : words_) n += std::popcount(w);
  return n;
}

Vocabulary::Vocabulary(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
  for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
    if (!pieces_[static_cast<size_t>(id)].empty()) sorted_.push_back(id);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return piece(a) < piece(b); });
  common_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = piece(sorted_[i - 1]);
    const std::string& b = piece(sorted_[i]);
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    common_[i] = static_cast<uint16_t>(std::min<size_t>(k, UINT16_MAX));
  }
}

TokenMask Vocabulary::allowed(const Grammar& g, const MatcherState& state) const {
  TokenMask mask(num_tokens());
  if (state.dead()) return mask;
  // states[d]: the state after the first d bytes of the current piece; valid for d <= depth.
  std::vector<MatcherState> states(1, state);
  size_t depth = 0;
  size_t dead_prefix = SIZE_MAX;  // the previous piece's first dead_prefix bytes are refused
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const std::string& p = piece(sorted_[i]);
    const size_t common = i == 0 ? 0 : common_[i];
    if (common >= dead_prefix) continue;  // starts with the refused prefix
    dead_prefix = SIZE_MAX;
    size_t d = std::min(common, depth);
    if (states.size() < p.size() + 1) states.resize(p.size() + 1);
    bool alive = true;
    for (; d < p.size(); ++d) {
      if (!advance(g, states[d], static_cast<uint8_t>(p[d]), states[d + 1])) {
        dead_prefix = d + 1;
        alive = false;
        break;
      }
    }
    depth = d;
    if (alive) mask.set(sorted_[i]);
  }
  return mask;
}

}  // namespace deltaserve::runtime::grammar
