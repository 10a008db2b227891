#include <stdexcept>
#include <string>

#include "runtime/backend.h"

namespace deltaserve::runtime {

void Backend::reserve_checkpoints(int32_t num_device, int32_t num_host) {
  if (num_device < 0 || num_host < 0) throw std::invalid_argument("checkpoint counts must be >= 0");
  if (num_device != 0 || num_host != 0)
    throw std::logic_error("backend " + name() + " keeps no prefix-cache checkpoints");
}

void Backend::apply_cache_ops(std::span<const CacheOp> ops) {
  if (!ops.empty()) throw std::logic_error("backend " + name() + " keeps no prefix-cache checkpoints");
}

ActivationBuffer Backend::stage_input(int64_t num_rows) {
  (void)num_rows;
  throw std::logic_error("backend " + name() + " cannot run as a stage of a layer split");
}

ActivationBuffer Backend::stage_output() {
  throw std::logic_error("backend " + name() + " cannot run as a stage of a layer split");
}

void check_cache_ops(std::span<const CacheOp> ops, const CacheOpLimits& limits) {
  auto fail = [](size_t i, const std::string& why) {
    throw std::invalid_argument("cache op " + std::to_string(i) + ": " + why);
  };
  auto check_ref = [&](size_t i, CheckpointRef ref) {
    const int32_t count = ref.tier == CheckpointTier::kDevice ? limits.num_device : limits.num_host;
    if (ref.index < 0 || ref.index >= count) fail(i, "checkpoint " + std::to_string(ref.index) + " out of range");
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const CacheOp& op = ops[i];
    switch (op.kind) {
      case CacheOp::Kind::kSave:
      case CacheOp::Kind::kRestore:
        if (op.slot < 0 || op.slot >= limits.num_slots) fail(i, "slot " + std::to_string(op.slot) + " out of range");
        check_ref(i, op.checkpoint);
        break;
      case CacheOp::Kind::kMove:
        check_ref(i, op.checkpoint);
        check_ref(i, op.to);
        if (op.checkpoint == op.to) fail(i, "move onto itself");
        break;
      case CacheOp::Kind::kCopyBlock:
        if (op.src_block < 0 || op.src_block >= limits.num_blocks || op.dst_block < 0 ||
            op.dst_block >= limits.num_blocks || op.src_block == op.dst_block)
          fail(i, "block copy " + std::to_string(op.src_block) + " -> " + std::to_string(op.dst_block) + " invalid");
        break;
      default:
        fail(i, "unknown kind");
    }
  }
}

}  // namespace deltaserve::runtime
