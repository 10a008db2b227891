// The prefix directory (what the replica router reads from other threads) follows the prefix
// cache's checkpoints: a save adds the prefix it resumes from, an eviction or reset drops it,
// and the longest match of a prompt is the longest checkpointed prefix of it.
#include <gtest/gtest.h>

#include <vector>

#include "scheduler/block_pool.h"
#include "scheduler/prefix_cache.h"
#include "scheduler/prefix_directory.h"

namespace deltaserve::scheduler {
namespace {

TEST(PrefixDirectory, PrefixHashesExtendOneTokenAtATime) {
  const std::vector<int32_t> tokens{5, 9, 2, 7};
  const std::vector<uint64_t> hashes = prefix_hashes(tokens);
  ASSERT_EQ(hashes.size(), 4u);
  for (size_t p = 1; p <= tokens.size(); ++p) {
    EXPECT_EQ(hashes[p - 1], prefix_hash(std::span(tokens).first(p)));
  }
  EXPECT_NE(prefix_hash(std::vector<int32_t>{1, 2}), prefix_hash(std::vector<int32_t>{2, 1}));
}

TEST(PrefixDirectory, LongestMatchCountsDuplicates) {
  PrefixDirectory d;
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6};
  const std::vector<uint64_t> hashes = prefix_hashes(prompt);
  EXPECT_EQ(d.longest_match(hashes), 0);
  d.add(prefix_hash(std::span(prompt).first(2)));
  d.add(prefix_hash(std::span(prompt).first(5)));
  d.add(prefix_hash(std::span(prompt).first(5)));
  EXPECT_EQ(d.longest_match(hashes), 5);
  d.remove(prefix_hash(std::span(prompt).first(5)));
  EXPECT_EQ(d.longest_match(hashes), 5);  // the second checkpoint of that prefix remains
  d.remove(prefix_hash(std::span(prompt).first(5)));
  EXPECT_EQ(d.longest_match(hashes), 2);
  d.remove(12345);  // unknown: ignored
  EXPECT_EQ(d.size(), 1);
  // A prompt that diverges after the first token matches nothing of length 2.
  EXPECT_EQ(d.longest_match(prefix_hashes(std::vector<int32_t>{1, 9, 3})), 0);
}

TEST(PrefixDirectory, FollowsTheCachesCheckpoints) {
  constexpr int32_t kBlockTokens = 4;
  BlockPool pool(32);
  PrefixCache cache(kBlockTokens, /*num_device=*/2, /*num_host=*/0, pool);
  std::vector<runtime::CacheOp> ops;
  const std::vector<int32_t> a{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<int32_t> b{1, 2, 3, 4, 50, 60, 70, 80, 90};
  std::vector<int32_t> blocks_a, blocks_b;
  ASSERT_TRUE(pool.block_alloc(3, blocks_a));
  ASSERT_TRUE(pool.block_alloc(3, blocks_b));
  cache.save(a, 10, blocks_a, -1, false, 0, ops);
  std::vector<int32_t> a_longer = a;
  a_longer.push_back(11);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(a_longer)), 10);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(b)), 0);  // shares a block, no checkpoint there
  cache.save(b, 9, blocks_b, -1, false, 1, ops);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(b)), 9);
  EXPECT_EQ(cache.directory().size(), 2);
  // A third save with two device buffers evicts the least recently used (a's).
  std::vector<int32_t> blocks_c;
  ASSERT_TRUE(pool.block_alloc(2, blocks_c));
  const std::vector<int32_t> c{7, 7, 7, 7, 7};
  cache.save(c, 5, blocks_c, -1, false, 2, ops);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(a_longer)), 0);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(c)), 5);
  cache.clear();
  EXPECT_EQ(cache.directory().size(), 0);
  EXPECT_EQ(cache.directory().longest_match(prefix_hashes(b)), 0);
  pool.block_free(blocks_a);
  pool.block_free(blocks_b);
  pool.block_free(blocks_c);
}

}  // namespace
}  // namespace deltaserve::scheduler
