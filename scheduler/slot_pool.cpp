#include "scheduler/slot_pool.h"

#include <stdexcept>

namespace deltaserve::scheduler {

SlotPool::SlotPool(int32_t num_slots) {
  if (num_slots < 1) throw std::invalid_argument("SlotPool: num_slots must be >= 1");
  in_use_.assign(static_cast<size_t>(num_slots), false);
  free_.reserve(static_cast<size_t>(num_slots));
  for (int32_t slot = num_slots - 1; slot >= 0; --slot) free_.push_back(slot);
}

std::optional<int32_t> SlotPool::slot_alloc() {
  if (free_.empty()) return std::nullopt;
  const int32_t slot = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(slot)] = true;
  return slot;
}

void SlotPool::slot_free(int32_t slot) {
  if (slot < 0 || slot >= num_total() || !in_use_[static_cast<size_t>(slot)]) {
    ++num_bad_frees_;
    return;
  }
  in_use_[static_cast<size_t>(slot)] = false;
  free_.push_back(slot);
}

bool SlotPool::check_integrity(std::string* why) const {
  auto fail = [why](std::string message) {
    if (why != nullptr) *why = "SlotPool: " + std::move(message);
    return false;
  };
  if (num_bad_frees_ != 0) return fail(std::to_string(num_bad_frees_) + " bad frees");
  std::vector<bool> seen(in_use_.size(), false);
  for (const int32_t slot : free_) {
    if (slot < 0 || slot >= num_total()) return fail("free slot out of range");
    if (seen[static_cast<size_t>(slot)]) return fail("slot " + std::to_string(slot) + " free twice");
    if (in_use_[static_cast<size_t>(slot)]) return fail("slot " + std::to_string(slot) + " free and in use");
    seen[static_cast<size_t>(slot)] = true;
  }
  int32_t num_in_use = 0;
  for (const bool used : in_use_) num_in_use += used ? 1 : 0;
  if (num_in_use + num_free() != num_total()) return fail("used + free != total");
  return true;
}

}  // namespace deltaserve::scheduler
