// Prefix-cache operations on a backend's state slots and KV blocks (docs/prefix-cache.md).
// The scheduler decides them; the runner applies them, in order, before a step's forward,
// with Backend::apply_cache_ops. Every operation is a copy: a checkpoint is never aliased by
// a live slot, and a slot never reads another slot's state.
#pragma once

#include <cstdint>
#include <span>

namespace deltaserve::runtime {

// Where a checkpoint buffer lives: next to the state slots (device memory on a GPU backend),
// or in page-locked host memory (the spill tier).
enum class CheckpointTier : int32_t { kDevice, kHost };

struct CheckpointRef {
  CheckpointTier tier = CheckpointTier::kDevice;
  int32_t index = 0;  // in [0, the tier's count given to Backend::reserve_checkpoints)
  bool operator==(const CheckpointRef&) const = default;
};

struct CacheOp {
  enum class Kind : int32_t {
    kSave,       // slot's live recurrent state (every GDN layer: delta + conv) -> checkpoint
    kRestore,    // checkpoint -> slot (the slot's live entry becomes its first; verify rows dropped)
    kMove,       // checkpoint -> checkpoint `to` (the spill from the device tier to the host)
    kCopyBlock,  // KV block src_block -> dst_block, every attention layer and the MTP head's pool
  };
  Kind kind = Kind::kSave;
  int32_t slot = -1;          // kSave, kRestore
  CheckpointRef checkpoint;   // kSave (destination), kRestore and kMove (source)
  CheckpointRef to;           // kMove destination
  int32_t src_block = -1;     // kCopyBlock
  int32_t dst_block = -1;     // kCopyBlock

  static CacheOp save(int32_t slot, CheckpointRef dst) { return {Kind::kSave, slot, dst, {}, -1, -1}; }
  static CacheOp restore(CheckpointRef src, int32_t slot) { return {Kind::kRestore, slot, src, {}, -1, -1}; }
  static CacheOp move(CheckpointRef src, CheckpointRef dst) { return {Kind::kMove, -1, src, dst, -1, -1}; }
  static CacheOp copy_block(int32_t src, int32_t dst) { return {Kind::kCopyBlock, -1, {}, {}, src, dst}; }
};

}  // namespace deltaserve::runtime

namespace deltaserve::runtime {

struct CacheOpLimits {
  int32_t num_slots = 0;
  int32_t num_blocks = 0;
  int32_t num_device = 0;  // checkpoints reserved per tier
  int32_t num_host = 0;
};
// Throws std::invalid_argument naming the first op that is out of range (for backends).
void check_cache_ops(std::span<const CacheOp> ops, const CacheOpLimits& limits);

}  // namespace deltaserve::runtime
