#include "scheduler/block_pool.h"

#include <stdexcept>

namespace deltaserve::scheduler {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks < 1) throw std::invalid_argument("BlockPool: num_blocks must be >= 1");
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Highest id pushed first so that a fresh pool hands out 0, 1, 2, ... (readable plans).
  for (int32_t id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

bool BlockPool::block_alloc(int32_t num_blocks, std::vector<int32_t>& blocks) {
  if (num_blocks < 0 || num_blocks > num_free()) return false;
  for (int32_t i = 0; i < num_blocks; ++i) {
    const int32_t id = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(id)] = 1;
    blocks.push_back(id);
  }
  return true;
}

void BlockPool::block_share(int32_t id) {
  if (id < 0 || id >= num_total() || refs_[static_cast<size_t>(id)] == 0) {
    ++num_bad_frees_;
    return;
  }
  ++refs_[static_cast<size_t>(id)];
}

void BlockPool::block_release(int32_t id) {
  if (id < 0 || id >= num_total() || refs_[static_cast<size_t>(id)] == 0) {
    ++num_bad_frees_;
    return;
  }
  if (--refs_[static_cast<size_t>(id)] == 0) free_.push_back(id);
}

void BlockPool::block_free(std::vector<int32_t>& blocks) {
  for (const int32_t id : blocks) block_release(id);
  blocks.clear();
}

bool BlockPool::check_integrity(std::string* why) const {
  auto fail = [why](std::string message) {
    if (why != nullptr) *why = "BlockPool: " + std::move(message);
    return false;
  };
  if (num_bad_frees_ != 0) return fail(std::to_string(num_bad_frees_) + " bad frees");
  std::vector<bool> seen(refs_.size(), false);
  for (const int32_t id : free_) {
    if (id < 0 || id >= num_total()) return fail("free id " + std::to_string(id) + " out of range");
    if (seen[static_cast<size_t>(id)]) return fail("id " + std::to_string(id) + " free twice");
    if (refs_[static_cast<size_t>(id)] != 0) return fail("id " + std::to_string(id) + " free and in use");
    seen[static_cast<size_t>(id)] = true;
  }
  int32_t num_in_use = 0;
  for (const int32_t refs : refs_) {
    if (refs < 0) return fail("negative reference count");
    num_in_use += refs > 0 ? 1 : 0;
  }
  if (num_in_use + num_free() != num_total()) return fail("used + free != total");
  return true;
}

}  // namespace deltaserve::scheduler
