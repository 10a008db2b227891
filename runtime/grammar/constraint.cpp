#include "runtime/grammar/constraint.h"

#include <algorithm>
#include <limits>

namespace deltaserve::runtime::grammar {

Constraint::Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary,
                       std::vector<int32_t> end_token_ids, std::string free_until, std::string close)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), end_token_ids_(std::move(end_token_ids)),
      free_until_(std::move(free_until)), close_(std::move(close)) {
  // A close that does not pass the marker would leave the output free for good.
  if (free_until_.empty() || close_.find(free_until_) == std::string::npos) close_.clear();
  if (!close_.empty()) {
    auto g = std::make_shared<Grammar>();
    const uint32_t root = g->add_rule("close");
    g->add_alternative(root, g->literal(close_));
    g->set_root(root);
    g->finish();
    close_grammar_ = std::move(g);
    close_masks_.resize(close_.size());
  }
}

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

std::shared_ptr<const TokenMask> Constraint::close_mask(size_t done) const {
  if (done >= close_.size()) return nullptr;
  {
    std::lock_guard lock(mutex_);
    if (close_masks_[done]) return close_masks_[done];
  }
  MatcherState state = initial_state(*close_grammar_);
  advance_bytes(*close_grammar_, state, std::string_view(close_).substr(0, done));
  auto mask = std::make_shared<const TokenMask>(vocabulary_->allowed(*close_grammar_, state));
  std::lock_guard lock(mutex_);
  if (!close_masks_[done]) close_masks_[done] = mask;
  return close_masks_[done];
}

int64_t Constraint::num_masks_computed() const {
  std::lock_guard lock(mutex_);
  return num_computed_;
}

int64_t Constraint::num_masks_cached() const {
  std::lock_guard lock(mutex_);
  return num_cached_;
}

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> constraint, int32_t reasoning_budget)
    : constraint_(std::move(constraint)), budget_(constraint_->close().empty() ? -1 : reasoning_budget) {
  if (constraint_->free_until().empty()) {
    start({});
  } else if (budget_ == 0) {
    closing_ = 0;
  }
}

void ConstraintState::feed_grammar(std::string_view bytes) {
  if (!state_.dead()) advance_bytes(constraint_->grammar(), state_, bytes);
}

void ConstraintState::start(std::string_view bytes) {
  started_ = true;
  closing_.reset();
  if (constraint_->has_grammar()) {
    state_ = initial_state(constraint_->grammar());
    feed_grammar(bytes);
  }
  tail_.clear();
}

void ConstraintState::accept(int32_t id) {
  const Vocabulary& vocab = constraint_->vocabulary();
  const bool known = id >= 0 && id < vocab.num_tokens();
  if (started_) {
    if (!constraint_->has_grammar()) return;  // free after the marker
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
  if (closing_) {
    accept_closing(id);
  } else {
    accept_free(id);
  }
}

void ConstraintState::accept_free(int32_t id) {
  // Look for the marker across token boundaries.
  const std::string& marker = constraint_->free_until();
  const std::string& close = constraint_->close();
  tail_ += constraint_->vocabulary().piece(id);
  if (const size_t at = tail_.find(marker); at != std::string::npos) {
    start(std::string_view(tail_).substr(at + marker.size()));
    return;
  }
  const size_t keep = std::max(marker.size(), close.size()) - 1;
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  ++free_tokens_;
  if (budget_ < 0 || free_tokens_ < budget_) return;
  // The budget is spent: force the rest of the close. Free text already ending in a prefix
  // of it ("\n", "\n</th" cut mid-token) keeps that prefix rather than writing it twice.
  size_t done = std::min(tail_.size(), close.size() - 1);
  while (done > 0 && tail_.compare(tail_.size() - done, done, close, 0, done) != 0) --done;
  closing_ = done;
}

void ConstraintState::accept_closing(int32_t id) {
  // The mask allows only continuations of the close; a token forced in anyway counts by size.
  const std::string& close = constraint_->close();
  std::string written = close.substr(0, *closing_) + constraint_->vocabulary().piece(id);
  if (written.size() < close.size()) {
    closing_ = written.size();
    return;
  }
  const std::string& marker = constraint_->free_until();
  start(std::string_view(written).substr(close.find(marker) + marker.size()));
}

std::shared_ptr<const TokenMask> ConstraintState::mask() const {
  if (closing_) return constraint_->close_mask(*closing_);
  if (!started_ || !constraint_->has_grammar()) return nullptr;
  return constraint_->mask(state_);
}

bool ConstraintState::complete() const {
  return started_ && (!constraint_->has_grammar() || accepting(constraint_->grammar(), state_));
}

void ConstraintState::apply(std::span<float> logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::shared_ptr<const TokenMask> m = mask();
  if (!m) {
    // Free (reasoning): any text, but not the end when a grammar waits after the marker: an
    // end here would finish the output with no constrained part at all (empty content for a
    // schema, no call for a forced call). Without a grammar the output may end anywhere.
    if (!constraint_->has_grammar()) return;
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
