// BlockPool and SlotPool: allocation, exhaustion without side effects, and the integrity
// check catching bookkeeping bugs.
#include "scheduler/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "scheduler/slot_pool.h"

namespace deltaserve::scheduler {
namespace {

TEST(BlockPool, AllocatesDistinctIdsAndReturnsThem) {
  BlockPool pool(8);
  std::vector<int32_t> a;
  std::vector<int32_t> b;
  ASSERT_TRUE(pool.block_alloc(3, a));
  ASSERT_TRUE(pool.block_alloc(5, b));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 8);
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.front(), 0);
  EXPECT_EQ(all.back(), 7);
  pool.block_free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 3);
  std::string why;
  EXPECT_TRUE(pool.check_integrity(&why)) << why;
}

TEST(BlockPool, ExhaustionChangesNothing) {
  BlockPool pool(4);
  std::vector<int32_t> a{99};
  ASSERT_TRUE(pool.block_alloc(3, a));
  EXPECT_EQ(a.size(), 4u);  // appended after the existing entry
  a.erase(a.begin());
  std::vector<int32_t> b;
  EXPECT_FALSE(pool.block_alloc(2, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.block_alloc(0, b));
  EXPECT_FALSE(pool.block_alloc(-1, b));
}

TEST(BlockPool, DoubleFreeIsCaughtNotCorrupting) {
  BlockPool pool(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.block_alloc(2, a));
  std::vector<int32_t> copy = a;
  pool.block_free(a);
  pool.block_free(copy);  // second free of the same ids
  std::vector<int32_t> bogus{7, -1};
  pool.block_free(bogus);
  EXPECT_EQ(pool.num_bad_frees(), 4);
  EXPECT_EQ(pool.num_free(), 4);  // the free list stayed exact
  std::string why;
  EXPECT_FALSE(pool.check_integrity(&why));
  EXPECT_NE(why.find("bad frees"), std::string::npos);
}

TEST(BlockPool, RejectsEmptyPool) { EXPECT_THROW(BlockPool(0), std::invalid_argument); }

TEST(BlockPool, BlocksForTokens) {
  EXPECT_EQ(blocks_for_tokens(0, 16), 0);
  EXPECT_EQ(blocks_for_tokens(1, 16), 1);
  EXPECT_EQ(blocks_for_tokens(16, 16), 1);
  EXPECT_EQ(blocks_for_tokens(17, 16), 2);
}

TEST(SlotPool, AllocatesEverySlotOnceThenRunsOut) {
  SlotPool pool(3);
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) {
    auto slot = pool.slot_alloc();
    ASSERT_TRUE(slot.has_value());
    got.push_back(*slot);
  }
  EXPECT_FALSE(pool.slot_alloc().has_value());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  pool.slot_free(1);
  EXPECT_EQ(pool.slot_alloc(), 1);
  std::string why;
  EXPECT_TRUE(pool.check_integrity(&why)) << why;
}

TEST(SlotPool, DoubleFreeIsCaught) {
  SlotPool pool(2);
  const int32_t slot = *pool.slot_alloc();
  pool.slot_free(slot);
  pool.slot_free(slot);
  pool.slot_free(5);
  EXPECT_EQ(pool.num_bad_frees(), 2);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_FALSE(pool.check_integrity(nullptr));
}

}  // namespace
}  // namespace deltaserve::scheduler
