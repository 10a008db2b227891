// Which prompt prefixes an engine's prefix cache can resume from, readable from any thread:
// the replica router (server/replica_engine.h) asks every engine how many tokens of a new
// prompt it holds before choosing one. The PrefixCache keeps it in step with its checkpoints
// (one entry per checkpoint, keyed by the hash of the tokens [0, P) it resumes from).
//
// Approximate by design: the hash is 64-bit (a collision misroutes one request, never changes
// its output: the engine's own lookup compares tokens), and a hit here may still miss in the
// engine (an eviction in between, a drafting request needing MTP rows the saver lacked).
// Thread-safety: every method locks; add/remove run on the engine thread, never blocking on
// more than the lookup of another thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace deltaserve::scheduler {

// hashes[p - 1] = the hash of tokens [0, p), for p = 1..tokens.size(): one pass, O(n).
std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens);
// The same hash of all of `tokens` (= prefix_hashes(tokens).back()).
uint64_t prefix_hash(std::span<const int32_t> tokens);

class PrefixDirectory {
 public:
  void add(uint64_t hash);
  void remove(uint64_t hash);  // one entry of `hash`; unknown hashes are ignored
  // The largest p with hashes[p - 1] held (0 when none): the longest cached prefix of the
  // prompt whose prefix_hashes() these are.
  int32_t longest_match(std::span<const uint64_t> hashes) const;
  int32_t size() const;  // entries (checkpoints)

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, int32_t> counts_;  // hash -> checkpoints with that prefix
};

}  // namespace deltaserve::scheduler
