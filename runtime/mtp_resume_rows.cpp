#include "runtime/mtp_resume_rows.h"

#include <algorithm>

namespace deltaserve::runtime {

void MtpResumeRows::on_cache_ops(std::span<const CacheOp> ops) {
  copied_blocks_.clear();
  for (const CacheOp& op : ops) {
    switch (op.kind) {
      case CacheOp::Kind::kSave: {
        const auto it = last_.find(op.slot);
        if (it == last_.end()) {
          checkpoints_.erase(key(op.checkpoint));
        } else {
          checkpoints_[key(op.checkpoint)] = it->second;
        }
        break;
      }
      case CacheOp::Kind::kMove: {
        const auto it = checkpoints_.find(key(op.checkpoint));
        if (it == checkpoints_.end()) {
          checkpoints_.erase(key(op.to));
        } else {
          checkpoints_[key(op.to)] = std::move(it->second);
          checkpoints_.erase(it);
        }
        break;
      }
      case CacheOp::Kind::kRestore: {
        last_.erase(op.slot);  // the slot's previous sequence is gone
        const auto it = checkpoints_.find(key(op.checkpoint));
        if (it == checkpoints_.end()) {
          resume_.erase(op.slot);
        } else {
          resume_[op.slot] = it->second;
        }
        break;
      }
      case CacheOp::Kind::kCopyBlock: copied_blocks_.push_back(op.dst_block); break;
    }
  }
}

void MtpResumeRows::on_caught_up(int32_t slot, int32_t position, std::span<const float> hidden) {
  Row& row = last_[slot];
  row.position = position;
  row.hidden.assign(hidden.begin(), hidden.end());
}

void MtpResumeRows::forget(int32_t slot) { last_.erase(slot); }

std::optional<MtpResumeRows::Row> MtpResumeRows::take_resume(int32_t slot, int32_t num_cached_tokens,
                                                             int32_t row_block) {
  const auto it = resume_.find(slot);
  if (it == resume_.end()) return std::nullopt;
  std::optional<Row> row;
  const bool own_block = std::find(copied_blocks_.begin(), copied_blocks_.end(), row_block) != copied_blocks_.end();
  if (it->second.position == num_cached_tokens - 1 && own_block) row = std::move(it->second);
  resume_.erase(it);
  return row;
}

}  // namespace deltaserve::runtime
