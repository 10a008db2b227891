// The trunk's hidden state at the last computed row of each checkpoint, so that a sequence
// resumed from a prefix-cache checkpoint at P re-runs the MTP head's row P-1 with its own
// next token (docs/prefix-cache.md, "MTP"). The head's row t pairs the trunk's hidden state
// at t with token t+1; a checkpoint's row P-1 was computed with the saver's token P, which a
// resumed request may not share. Re-run, the row equals a cold run's, so the drafts (and
// their acceptance) after a cache hit are those of a run without the cache.
//
// Tracks, on the host: per state slot the hidden state (H floats) of its last caught-up row;
// per checkpoint buffer the one its save copied (moved along with a spill); per slot the one
// a restore put there, until the resumed sequence's first step takes it. A save of a slot
// whose last step was not caught up (a non-speculative sequence) leaves no entry, and an
// entry is only used when its position is exactly P-1.
// Owner: the BackendRunner, on the engine thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/cache_ops.h"

namespace deltaserve::runtime {

class MtpResumeRows {
 public:
  struct Row {
    int32_t position = -1;
    std::vector<float> hidden;  // [H]
  };

  // Before a step's ops run (every step, ops or not): a save copies the slot's last row, a
  // move carries it, a restore hands it to the slot, a block copy marks its destination.
  void on_cache_ops(std::span<const CacheOp> ops);
  // After a step's catch-up: the slot's last row (`position`, its hidden state).
  void on_caught_up(int32_t slot, int32_t position, std::span<const float> hidden);
  // The slot's last row is not known (its sequence stepped without a catch-up).
  void forget(int32_t slot);
  // The row to re-run for the sequence now in `slot` that resumes at num_cached_tokens, if
  // a restore left one at position num_cached_tokens - 1 and row_block (the sequence's
  // block holding that row) was copied by this step's ops, so it is the sequence's own (a
  // shared block is never written by a reader); taken once either way.
  std::optional<Row> take_resume(int32_t slot, int32_t num_cached_tokens, int32_t row_block);

 private:
  using Key = std::pair<int32_t, int32_t>;  // (tier, index)
  static Key key(const CheckpointRef& ref) { return {static_cast<int32_t>(ref.tier), ref.index}; }

  std::unordered_map<int32_t, Row> last_;    // by slot
  std::map<Key, Row> checkpoints_;           // by checkpoint buffer
  std::unordered_map<int32_t, Row> resume_;  // by slot, until its first step
  std::vector<int32_t> copied_blocks_;       // destinations of this step's block copies
};

}  // namespace deltaserve::runtime
