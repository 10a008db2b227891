// Allocator of recurrent-state slots (one per live sequence: the Gated DeltaNet state and
// its conv window live in the runtime's slot of that index).
//
// Owner: the Scheduler, on the engine thread only; not thread-safe, never blocks.
// Invariant: every slot in [0, num_total) is either free or owned by exactly one sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltaserve::scheduler {

class SlotPool {
 public:
  explicit SlotPool(int32_t num_slots);

  int32_t num_total() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_total() - num_free(); }

  // A free slot, or nullopt when all are taken (pressure: the request keeps waiting).
  std::optional<int32_t> slot_alloc();
  // Returns the slot; a slot that is not in use is ignored and counted as a bad free.
  void slot_free(int32_t slot);

  int64_t num_bad_frees() const { return num_bad_frees_; }
  // Same contract as BlockPool::check_integrity.
  bool check_integrity(std::string* why) const;

 private:
  std::vector<int32_t> free_;  // LIFO
  std::vector<bool> in_use_;   // [num_total]
  int64_t num_bad_frees_ = 0;
};

}  // namespace deltaserve::scheduler
