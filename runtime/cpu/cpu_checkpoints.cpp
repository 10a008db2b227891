// CpuBackend's prefix-cache checkpoints (docs/prefix-cache.md): copies of a slot's recurrent
// state and of KV blocks. Nothing is aliased: a save copies the slot's live entry out, a
// restore copies into the slot's first entry and makes it live.
#include <algorithm>
#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"

namespace deltaserve::runtime {
namespace {

int64_t conv_floats(const ModelConfig& c) { return (c.conv_kernel - 1) * c.conv_channels(); }
int64_t delta_floats(const ModelConfig& c) { return c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim; }

}  // namespace

int64_t CpuBackend::checkpoint_bytes() const {
  return static_cast<int64_t>(gdn_state_.size()) * (conv_floats(config_) + delta_floats(config_)) *
         static_cast<int64_t>(sizeof(float));
}

int64_t CpuBackend::checkpoint_bytes_held() const {
  int64_t bytes = 0;
  for (const auto& tier : checkpoints_)
    for (const std::vector<float>& c : tier) bytes += static_cast<int64_t>(c.capacity() * sizeof(float));
  return bytes;
}

void CpuBackend::reserve_checkpoints(int32_t num_device, int32_t num_host) {
  if (num_device < 0 || num_host < 0) throw std::invalid_argument("checkpoint counts must be >= 0");
  if (checkpoints_reserved_) throw std::logic_error("reserve_checkpoints called twice");
  checkpoints_reserved_ = true;
  checkpoints_[0].resize(static_cast<size_t>(num_device));
  checkpoints_[1].resize(static_cast<size_t>(num_host));
}

std::vector<float>& CpuBackend::checkpoint(CheckpointRef ref) {
  return checkpoints_[ref.tier == CheckpointTier::kDevice ? 0 : 1][static_cast<size_t>(ref.index)];
}

void CpuBackend::save_state(int32_t slot, std::vector<float>& dst) {
  const int64_t conv = conv_floats(config_), delta = delta_floats(config_);
  dst.resize(static_cast<size_t>(checkpoint_bytes()) / sizeof(float));
  float* out = dst.data();
  for (size_t g = 0; g < gdn_state_.size(); ++g) {
    out = std::copy_n(conv_state(static_cast<int>(g), slot), conv, out);
    out = std::copy_n(delta_state(static_cast<int>(g), slot), delta, out);
  }
}

void CpuBackend::restore_state(const std::vector<float>& src, int32_t slot) {
  if (static_cast<int64_t>(src.size() * sizeof(float)) != checkpoint_bytes())
    throw std::logic_error("restore of a checkpoint that was never saved");
  const size_t s = static_cast<size_t>(slot);
  live_entry_[s] = static_cast<int32_t>(slot * entries_per_slot_);
  verify_rows_[s] = 0;
  ring_first_[s] = -1;
  const int64_t conv = conv_floats(config_), delta = delta_floats(config_);
  const float* in = src.data();
  for (size_t g = 0; g < gdn_state_.size(); ++g) {
    std::copy_n(in, conv, const_cast<float*>(conv_state(static_cast<int>(g), slot)));
    in += conv;
    std::copy_n(in, delta, const_cast<float*>(delta_state(static_cast<int>(g), slot)));
    in += delta;
  }
}

void CpuBackend::copy_kv_block(int32_t src, int32_t dst) {
  const size_t block_floats = static_cast<size_t>(cache_.kv_block_tokens) *
                              static_cast<size_t>(config_.num_kv_heads * config_.head_dim);
  auto copy = [&](std::vector<float>& pool) {
    if (pool.empty()) return;
    std::copy_n(pool.data() + static_cast<size_t>(src) * block_floats, block_floats,
                pool.data() + static_cast<size_t>(dst) * block_floats);
  };
  for (cpu::KvLayer& kv : kv_) {
    copy(kv.k);
    copy(kv.v);
  }
  copy(mtp_kv_.k);
  copy(mtp_kv_.v);
}

void CpuBackend::apply_cache_ops(std::span<const CacheOp> ops) {
  check_cache_ops(ops, {cache_.num_state_slots, cache_.num_kv_blocks, static_cast<int32_t>(checkpoints_[0].size()),
                        static_cast<int32_t>(checkpoints_[1].size())});
  for (const CacheOp& op : ops) {
    switch (op.kind) {
      case CacheOp::Kind::kSave: save_state(op.slot, checkpoint(op.checkpoint)); break;
      case CacheOp::Kind::kRestore: restore_state(checkpoint(op.checkpoint), op.slot); break;
      case CacheOp::Kind::kMove: checkpoint(op.to) = checkpoint(op.checkpoint); break;
      case CacheOp::Kind::kCopyBlock: copy_kv_block(op.src_block, op.dst_block); break;
    }
  }
}

}  // namespace deltaserve::runtime
