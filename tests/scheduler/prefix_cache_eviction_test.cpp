// The prefix index's eviction under KV pressure (scheduler/prefix_cache.h): only checkpoints
// whose removal returns a block to the pool are dropped; those whose blocks live sequences
// still hold cost no KV memory and stay (a running sequence's earlier checkpoints, which its
// preemption then resumes from). Also what a speculative saver upgrades in the index.
#include <gtest/gtest.h>

#include <numeric>

#include "scheduler/prefix_cache.h"

namespace deltaserve::scheduler {
namespace {

constexpr int32_t kBlockTokens = 4;

std::vector<int32_t> iota_tokens(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 100);
  return t;
}

TEST(PrefixCacheEviction, KeepsCheckpointsWhoseBlocksLiveSequencesHold) {
  BlockPool pool(16);
  PrefixCache cache(kBlockTokens, 8, 0, pool);
  std::vector<runtime::CacheOp> ops;
  const std::vector<int32_t> tokens = iota_tokens(20);
  std::vector<int32_t> live;  // a running sequence's 5 blocks (tokens [0, 20))
  ASSERT_TRUE(pool.block_alloc(5, live));
  cache.save(tokens, 8, live, tokens[8], false, 0, ops);   // block edge, 2 blocks
  cache.save(tokens, 14, live, tokens[14], false, 0, ops);  // 3 blocks and a partial one
  // Everything the cache holds, the sequence holds too: nothing can be freed.
  EXPECT_FALSE(cache.evict_for_blocks());
  EXPECT_EQ(cache.num_checkpoints(), 2);
  // The sequence is preempted: its checkpoint at 20 is saved, then it lets go of its blocks.
  cache.save(tokens, 20, live, -1, false, 0, ops);
  pool.block_free(live);
  EXPECT_EQ(pool.num_free(), 11);
  // The deepest checkpoint frees the blocks past the one before it (block 4: [16, 20)); the
  // earlier checkpoints share the rest and stay.
  ASSERT_TRUE(cache.evict_for_blocks());
  EXPECT_EQ(cache.num_checkpoints(), 2);
  EXPECT_EQ(pool.num_free(), 12);
  const PrefixCache::Hit hit = cache.lookup(tokens, 19, false);
  EXPECT_EQ(hit.num_tokens, 14);
  // Then the one at 14 (its partial block and block 3), then the one at 8, then nothing.
  ASSERT_TRUE(cache.evict_for_blocks());
  EXPECT_EQ(pool.num_free(), 14);
  ASSERT_TRUE(cache.evict_for_blocks());
  EXPECT_EQ(pool.num_free(), 16);
  EXPECT_FALSE(cache.evict_for_blocks());
  std::string why;
  EXPECT_TRUE(pool.check_integrity(&why)) << why;
}

// Two checkpoints in one partial block (tails 9 and 10 of the same saver): neither frees it
// alone, yet the pool must refill once no live sequence holds it.
TEST(PrefixCacheEviction, BlocksSharedOnlyBetweenCheckpointsAreFreedToo) {
  BlockPool pool(4);
  PrefixCache cache(kBlockTokens, 8, 0, pool);
  std::vector<runtime::CacheOp> ops;
  const std::vector<int32_t> tokens = iota_tokens(12);
  std::vector<int32_t> live;
  ASSERT_TRUE(pool.block_alloc(3, live));
  cache.save(tokens, 9, live, tokens[9], false, 0, ops);
  cache.save(tokens, 10, live, tokens[10], false, 0, ops);
  pool.block_free(live);
  EXPECT_EQ(pool.num_free(), 1);  // blocks 0 and 1 (nodes) and 2 (both partials) are cached
  ASSERT_TRUE(cache.evict_for_blocks());
  ASSERT_TRUE(cache.evict_for_blocks());
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_FALSE(cache.evict_for_blocks());
  std::string why;
  EXPECT_TRUE(pool.check_integrity(&why)) << why;
}

// A prefix cached first by a saver without drafts has no MTP rows; the same save by one that
// drafted takes over the nodes' and the partial block's references and saves its state again
// (with the hidden row a resume re-runs), so speculative lookups hit from then on.
TEST(PrefixCacheEviction, SpeculativeSaverUpgradesWhatANonSpeculativeOneCached) {
  BlockPool pool(8);
  PrefixCache cache(kBlockTokens, 8, 0, pool);
  std::vector<runtime::CacheOp> ops;
  const std::vector<int32_t> tokens = iota_tokens(12);
  std::vector<int32_t> plain;
  std::vector<int32_t> drafting;
  ASSERT_TRUE(pool.block_alloc(3, plain));
  ASSERT_TRUE(pool.block_alloc(3, drafting));
  cache.save(tokens, 10, plain, tokens[10], false, 0, ops);
  EXPECT_EQ(cache.lookup(tokens, 11, true).num_tokens, 0);
  ops.clear();
  cache.save(tokens, 10, drafting, tokens[10], true, 1, ops);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].kind, runtime::CacheOp::Kind::kSave);
  EXPECT_EQ(ops[0].slot, 1);
  const PrefixCache::Hit hit = cache.lookup(tokens, 11, true);
  EXPECT_EQ(hit.num_tokens, 10);
  EXPECT_EQ(hit.blocks, std::vector<int32_t>(drafting.begin(), drafting.begin() + 2));
  EXPECT_EQ(hit.partial_block, drafting[2]);
  EXPECT_EQ(cache.num_checkpoints(), 1);
  pool.block_free(plain);
  pool.block_free(drafting);
  EXPECT_EQ(pool.num_free(), 5);  // the drafting saver's 3 blocks stay cached, the other's return
  cache.clear();
  EXPECT_EQ(pool.num_free(), 8);
  std::string why;
  EXPECT_TRUE(pool.check_integrity(&why)) << why;
}

}  // namespace
}  // namespace deltaserve::scheduler
