// Allocator of the paged KV cache's block ids. The runtime owns the memory behind the ids;
// the scheduler decides which sequence owns which block and passes the ids in the plan.
//
// Owner: the Scheduler, on the engine thread only; not thread-safe, never blocks.
// Invariant: every id in [0, num_total) is either in the free list or holds a reference count
// >= 1 (running sequences and the prefix cache each hold one per use; docs/prefix-cache.md);
// check_integrity() verifies it (called when idle and by the tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltaserve::scheduler {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_total() const { return static_cast<int32_t>(refs_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_total() - num_free(); }

  // Appends num_blocks ids (each with one reference) to `blocks` and returns true, or changes
  // nothing and returns false when fewer are free (pressure, not an error: the caller waits,
  // evicts cached prefixes or preempts).
  bool block_alloc(int32_t num_blocks, std::vector<int32_t>& blocks);
  // One more reference to a block in use (a cached prefix shared by another holder). Sharing
  // a free id is a bookkeeping bug: ignored and counted as a bad free.
  void block_share(int32_t id);
  // Drops one reference of every id of `blocks` and clears it; an id whose count reaches 0
  // returns to the pool. Freeing an id that is not in use is a bookkeeping bug: it is
  // ignored (the pool stays consistent) and counted.
  void block_free(std::vector<int32_t>& blocks);
  void block_release(int32_t id);  // one id
  int32_t block_refs(int32_t id) const { return refs_[static_cast<size_t>(id)]; }

  // Number of ids that block_free() rejected (double frees, out of range). Always 0.
  int64_t num_bad_frees() const { return num_bad_frees_; }

  // Full O(total) check: the free list holds distinct in-range ids, exactly the ones not
  // marked in use, and no bad free happened. On failure returns false and says why.
  bool check_integrity(std::string* why) const;

 private:
  std::vector<int32_t> free_;  // LIFO: a freed block is reused first (warm in caches)
  std::vector<int32_t> refs_;  // [num_total]: 0 = free
  int64_t num_bad_frees_ = 0;
};

// Blocks of `block_tokens` tokens needed to hold `num_tokens` positions.
inline int32_t blocks_for_tokens(int64_t num_tokens, int32_t block_tokens) {
  return static_cast<int32_t>((num_tokens + block_tokens - 1) / block_tokens);
}

}  // namespace deltaserve::scheduler
