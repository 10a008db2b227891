// The prefix cache's index (docs/prefix-cache.md): a trie whose edges are full KV blocks, with
// recurrent-state checkpoints hanging off its nodes. A checkpoint at position P sits on the
// node of depth floor(P / B) and keeps the tail tokens [floor(P/B)·B, P), the block holding
// them (shared read-only; a reader copies it before writing), the token that followed P
// when it was saved, and its state buffer (device or host tier).
//
// References: each node holds one on its block, each checkpoint one on its partial block;
// a node lives while its subtree holds a checkpoint. Checkpoint buffers are fixed counts per
// tier; the device tier spills its least recently used checkpoint to the host tier, the host
// tier evicts. Every decision that moves state appends a runtime::CacheOp for the runner.
//
// Owner: the Scheduler, on the engine thread only; not thread-safe, never blocks.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/cache_ops.h"
#include "scheduler/block_pool.h"
#include "scheduler/prefix_directory.h"

namespace deltaserve::scheduler {

struct PrefixCacheStats {
  uint64_t num_queries = 0;       // requests' first admissions, which looked the cache up
  uint64_t num_hits = 0;          // ... and resumed from a checkpoint
  uint64_t num_query_tokens = 0;  // prompt tokens of those admissions
  uint64_t num_hit_tokens = 0;    // tokens they did not compute
  // Re-admissions of preempted sequences, counted apart (as vLLM's preempted_* stats): they
  // mostly find the state their own preemption saved, so counted above they would raise the
  // hit rate with recomputation avoided rather than prefixes shared.
  uint64_t num_preempted_queries = 0;
  uint64_t num_preempted_hits = 0;
  uint64_t num_preempted_query_tokens = 0;  // tokens (prompt and generated) of those admissions
  uint64_t num_preempted_hit_tokens = 0;
  uint64_t num_evictions = 0;     // checkpoints dropped (budget or KV pressure)
  uint64_t num_spills = 0;        // checkpoints moved from the device tier to the host tier
  int32_t num_device_checkpoints = 0;
  int32_t num_host_checkpoints = 0;
  int32_t num_nodes = 0;          // cached full blocks
};

class PrefixCache {
 public:
  // num_device / num_host: checkpoint buffers per tier (as reserved on the backend).
  PrefixCache(int32_t block_tokens, int32_t num_device, int32_t num_host, BlockPool& blocks);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Checkpoint;
  struct Hit {
    int32_t num_tokens = 0;          // P; 0 = miss
    Checkpoint* checkpoint = nullptr;
    std::vector<int32_t> blocks;     // the full blocks of [0, floor(P/B)·B), in order
    int32_t partial_block = -1;      // the block of the tail, or -1 when P is on a block edge
    int32_t next_token = -1;         // the saver's token at P (-1 if none)
  };
  // The longest usable prefix of `tokens` of at most max_tokens tokens. need_mtp: the request
  // drafts, so the MTP head's rows of the prefix must have been computed (the savers drafted).
  Hit lookup(std::span<const int32_t> tokens, int32_t max_tokens, bool need_mtp) const;
  // Taking a hit, in two phases around the caller's block allocation (which may evict):
  // share_blocks() shares the full blocks into kv_blocks and pins the checkpoint (no eviction
  // drops it); then either use(), which appends the copy of the partial block into cow_block
  // (the caller's first new block; -1 when there is no partial block) and the restore into
  // `slot` to ops and refreshes the LRU stamp, or unpin() when the admission fell through
  // (the caller frees the shared blocks). Both unpin.
  void share_blocks(const Hit& hit, std::vector<int32_t>& kv_blocks);
  void use(const Hit& hit, int32_t slot, int32_t cow_block, std::vector<runtime::CacheOp>& ops);
  void unpin(const Hit& hit);
  // Counts an admission's lookup (hit tokens 0 for a miss); preempted: the re-admission of a
  // preempted sequence (its own counters), num_tokens then counts its generated tokens too.
  void count_query(int32_t num_tokens, int32_t num_hit_tokens, bool preempted);

  // Checkpoints the state of `slot`, which holds exactly tokens[0, num_tokens): the blocks of
  // kv_blocks covering [0, num_tokens) are shared into the trie. next_token: the sequence's
  // token at num_tokens (-1 if none). Dedupes an existing identical checkpoint; skips the
  // save when no buffer can be had. mtp_valid: the sequence's MTP rows were computed.
  void save(std::span<const int32_t> tokens, int32_t num_tokens, std::span<const int32_t> kv_blocks,
            int32_t next_token, bool mtp_valid, int32_t slot, std::vector<runtime::CacheOp>& ops);

  // Drops the least recently used checkpoint (either tier); false when there is none.
  bool evict_lru();
  // Under KV pressure: drops the least recently used checkpoint whose removal returns a block
  // to the pool, else the least recently used one that references a block no live sequence
  // holds; false when there is none. A checkpoint whose blocks live sequences all hold too
  // (the prefix of a running sequence, a system prompt every request shares) costs no KV
  // memory and is kept.
  bool evict_for_blocks();
  // Drops everything: every reference returns to the pool.
  void clear();

  const PrefixCacheStats& stats() const { return stats_; }
  // The checkpoints' prefixes, for other threads (the replica router); lives as long as the cache.
  const PrefixDirectory& directory() const { return directory_; }
  int32_t num_checkpoints() const { return stats_.num_device_checkpoints + stats_.num_host_checkpoints; }
  // Adds the cache's reference counts per block to counts[block] (integrity check).
  void count_block_refs(std::vector<int32_t>& counts) const;

 private:
  struct Node;
  using Lru = std::list<Checkpoint*>;
  Node* child(const Node& node, std::span<const int32_t> block_tokens) const;
  bool take_buffer(runtime::CheckpointRef& ref, std::vector<runtime::CacheOp>& ops);
  void remove(Checkpoint* c);
  bool frees_blocks(const Checkpoint& c) const;  // removing c would return a block to the pool
  void prune(Node* node);
  Lru& lru(runtime::CheckpointTier tier);

  int32_t block_tokens_;
  BlockPool& blocks_;
  std::unique_ptr<Node> root_;
  std::vector<int32_t> free_buffers_[2];  // per tier: free checkpoint indices
  Lru lru_[2];                            // per tier: least recently used first
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
  PrefixDirectory directory_;  // one entry per checkpoint (save adds, remove drops)
};

}  // namespace deltaserve::scheduler
