#include "runtime/grammar/constraint.h"

#include <algorithm>
#include <limits>

namespace deltaserve::runtime::grammar {

Constraint::Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary,
                       std::vector<int32_t> end_token_ids, std::string free_until)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), end_token_ids_(std::move(end_token_ids)),
      free_until_(std::move(free_until)) {}

size_t Constraint::KeyHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (const uint32_t x : v) h = (h ^ x) * 1099511628211ull;
  return static_cast<size_t>(h);
}

std::shared_ptr<const TokenMask> Constraint::mask(const MatcherState& state) const {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = cache_.find(state.data); it != cache_.end()) {
      ++num_cached_;
      return it->second;
    }
  }
  auto mask = std::make_shared<TokenMask>(vocabulary_->allowed(*grammar_, state));
  if (state.dead() || accepting(*grammar_, state)) {
    for (const int32_t id : end_token_ids_) {
      if (id >= 0 && id < mask->num_tokens()) mask->set(id);
    }
  }
  std::lock_guard lock(mutex_);
  ++num_computed_;
  if (cache_bytes_ + mask->num_bytes() > kMaxMaskCacheBytes) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  if (cache_.emplace(state.data, mask).second) cache_bytes_ += mask->num_bytes();
  return mask;
}

int64_t Constraint::num_masks_computed() const {
  std::lock_guard lock(mutex_);
  return num_computed_;
}

int64_t Constraint::num_masks_cached() const {
  std::lock_guard lock(mutex_);
  return num_cached_;
}

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> constraint) : constraint_(std::move(constraint)) {
  if (constraint_->free_until().empty()) {
    started_ = true;
    state_ = initial_state(constraint_->grammar());
  }
}

void ConstraintState::feed_grammar(std::string_view bytes) {
  if (!state_.dead()) advance_bytes(constraint_->grammar(), state_, bytes);
}

void ConstraintState::accept(int32_t id) {
  const Vocabulary& vocab = constraint_->vocabulary();
  const bool known = id >= 0 && id < vocab.num_tokens();
  if (started_) {
    const bool is_end = std::find(constraint_->end_token_ids().begin(), constraint_->end_token_ids().end(), id) !=
                        constraint_->end_token_ids().end();
    if (is_end) return;  // the output ends; nothing follows
    if (!known || vocab.piece(id).empty()) {
      state_.data.clear();  // a token the grammar never allows
      return;
    }
    feed_grammar(vocab.piece(id));
    return;
  }
  if (!known) return;
  // Free phase: look for the marker across token boundaries.
  const std::string& marker = constraint_->free_until();
  tail_ += vocab.piece(id);
  const size_t at = tail_.find(marker);
  if (at == std::string::npos) {
    if (tail_.size() >= marker.size()) tail_.erase(0, tail_.size() - (marker.size() - 1));
    return;
  }
  started_ = true;
  state_ = initial_state(constraint_->grammar());
  feed_grammar(std::string_view(tail_).substr(at + marker.size()));
  tail_.clear();
}

std::shared_ptr<const TokenMask> ConstraintState::mask() const {
  if (!started_) return nullptr;
  return constraint_->mask(state_);
}

bool ConstraintState::complete() const { return started_ && accepting(constraint_->grammar(), state_); }

void ConstraintState::apply(std::span<float> logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::shared_ptr<const TokenMask> m = mask();
  if (!m) {
    // Free (reasoning): any text, but not the end. An end here would finish the output with
    // no constrained part at all (empty content for a schema, no call for a forced call).
    for (const int32_t id : constraint_->end_token_ids()) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kNegInf;
    }
    return;
  }
  const bool none = m->count() == 0;
  if (none && constraint_->end_token_ids().empty()) return;  // nothing can be forced: leave the row
  const std::vector<uint64_t>& words = m->words();
  for (size_t w = 0; w * 64 < logits.size(); ++w) {
    const uint64_t bits = w < words.size() ? words[w] : 0;
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(logits.size(), (w + 1) * 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = kNegInf;
    }
  }
  if (none) {
    for (const int32_t id : constraint_->end_token_ids()) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = 0.0f;
    }
  }
}

}  // namespace deltaserve::runtime::grammar
