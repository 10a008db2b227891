// A request's output constraint and its per-request progress, as the sampler uses them.
//
// Constraint (shared, one per request or per identical schema): the compiled grammar (or none:
// the output is free once the marker is passed), the model's vocabulary, the ids that may end
// the output once the grammar is complete (EOS and the request's stop ids), and optionally a
// marker ("</think>") before which the output is free: with reasoning on, the grammar starts at
// the first byte after the marker. With a marker it may also hold the close sequence of the
// reasoning ("\n</think>\n\n", as the chat template writes it): a request's reasoning budget
// forces it once spent (a literal grammar phase; its masks are cached per position). It caches
// the token mask of every grammar state it has computed (a state recurs constantly: inside a
// string, between array items), so the vocabulary walk is paid once per distinct state; the
// cache is bounded (kMaxMaskCacheBytes) and thread-safe (one mutex; a miss computes outside it).
//
// ConstraintState (one per request, a value: the sampler's copy for drafting copies it):
// advances over every emitted token's bytes, and answers the mask of the next token, or
// nothing while the output is still free (the end ids are refused then all the same when a
// grammar waits after the marker). With a reasoning budget of N tokens, the free phase takes
// at most N tokens: then only tokens that continue the close sequence are allowed (the part
// of it the free text already ends with is not repeated), and after the close the output is
// free again or under the grammar. A model that writes the marker itself never meets it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/grammar_matcher.h"
#include "runtime/grammar/token_mask.h"

namespace deltaserve::runtime::grammar {

inline constexpr size_t kMaxMaskCacheBytes = size_t{64} << 20;

class Constraint {
 public:
  Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary,
             std::vector<int32_t> end_token_ids, std::string free_until = {}, std::string close = {});

  bool has_grammar() const { return grammar_ != nullptr; }
  const Grammar& grammar() const { return *grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  const std::vector<int32_t>& end_token_ids() const { return end_token_ids_; }
  const std::string& free_until() const { return free_until_; }
  // Empty, or the bytes a spent reasoning budget forces; they contain free_until.
  const std::string& close() const { return close_; }

  // The tokens allowed after `state` (grammar tokens, plus the end ids when the state is
  // complete); cached. num_tokens is the vocabulary's size.
  std::shared_ptr<const TokenMask> mask(const MatcherState& state) const;
  // Masks computed (cache misses) and served from the cache, for tests and metrics.
  int64_t num_masks_computed() const;
  int64_t num_masks_cached() const;
  // The tokens that continue close() once its first `done` bytes are written (each token's
  // bytes a prefix of the rest); cached per position.
  std::shared_ptr<const TokenMask> close_mask(size_t done) const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::vector<int32_t> end_token_ids_;
  std::string free_until_;
  std::string close_;
  std::shared_ptr<const Grammar> close_grammar_;  // close_ as a literal grammar
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const TokenMask>> close_masks_;  // per position in close_
  mutable std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const TokenMask>, KeyHash> cache_;
  mutable size_t cache_bytes_ = 0;
  mutable int64_t num_computed_ = 0, num_cached_ = 0;
};

class ConstraintState {
 public:
  // reasoning_budget: free-phase tokens allowed before the close is forced; -1 = no limit
  // (also when the constraint has no close sequence).
  explicit ConstraintState(std::shared_ptr<const Constraint> constraint, int32_t reasoning_budget = -1);

  // The token was emitted (its bytes advance the grammar once it has started).
  void accept(int32_t id);
  // The allowed next tokens; null while the output is free (before the marker).
  std::shared_ptr<const TokenMask> mask() const;
  // Sets every disallowed logit to -inf (while free: only the end ids, so the output cannot
  // end before its constrained part begins). Ids past the vocabulary are
  // disallowed. When nothing at all is allowed (a token outside the grammar was forced in),
  // only the end ids stay.
  void apply(std::span<float> logits) const;

  bool started() const { return started_; }
  bool closing() const { return closing_.has_value(); }  // the budget is forcing the close
  bool complete() const;  // started, and the bytes so far are a whole sentence
  bool failed() const { return started_ && constraint_->has_grammar() && state_.dead(); }
  const Constraint& constraint() const { return *constraint_; }

 private:
  void feed_grammar(std::string_view bytes);
  void start(std::string_view bytes);  // the marker is passed; `bytes` follow it
  void accept_free(int32_t id);
  void accept_closing(int32_t id);

  std::shared_ptr<const Constraint> constraint_;
  int32_t budget_ = -1;
  int32_t free_tokens_ = 0;       // tokens accepted in the free phase
  std::optional<size_t> closing_;  // bytes of the close written while it is forced
  bool started_ = false;
  std::string tail_;  // free phase: the last bytes that may begin the marker or the close
  MatcherState state_;
};

}  // namespace deltaserve::runtime::grammar
