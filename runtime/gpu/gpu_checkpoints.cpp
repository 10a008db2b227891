// GpuBackend's prefix-cache checkpoints (docs/prefix-cache.md, runtime/cache_ops.h). Every
// operation is an async copy enqueued on the step's stream, so it is ordered before the next
// forward's kernels and after the previous step's: no host synchronisation. A save copies the
// slot's live state entry out; a restore copies into the slot's first entry and makes it live
// (its verify ring is dropped). Host-tier copies go to or from page-locked memory, so they are
// asynchronous too; the host buffer is only ever touched by the stream.
#include <stdexcept>
#include <string>

#include "runtime/gpu/gpu_backend.h"

namespace deltaserve::runtime {
namespace {

using CopyKind = decltype(gpuMemcpyDeviceToDevice);

// Host to host never happens (the scheduler only spills device -> host).
CopyKind copy_kind(bool from_host, bool to_host) {
  if (from_host && to_host) throw std::logic_error("checkpoint copy from host tier to host tier");
  if (from_host) return gpuMemcpyHostToDevice;
  return to_host ? gpuMemcpyDeviceToHost : gpuMemcpyDeviceToDevice;
}

bool on_host(CheckpointRef ref) { return ref.tier == CheckpointTier::kHost; }

}  // namespace

int64_t GpuBackend::checkpoint_bytes() const {
  const int64_t per_layer = delta_entry_elems_ * static_cast<int64_t>(delta_elem_bytes_) +
                            conv_entry_floats_ * static_cast<int64_t>(sizeof(float));
  return static_cast<int64_t>(gdn_.size()) * per_layer;
}

void GpuBackend::reserve_checkpoints(int32_t num_device, int32_t num_host) {
  if (num_device < 0 || num_host < 0) throw std::invalid_argument("checkpoint counts must be >= 0");
  if (checkpoints_reserved_) throw std::logic_error("reserve_checkpoints called twice");
  checkpoints_reserved_ = true;
  const size_t bytes = static_cast<size_t>(checkpoint_bytes());
  if (num_device > 0 && bytes > 0) {
    const size_t offset = checkpoint_arena_.reserve(bytes * static_cast<size_t>(num_device));
    checkpoint_arena_.allocate();
    checkpoint_device_ = checkpoint_arena_.at<unsigned char>(offset);
    num_device_checkpoints_ = num_device;
  }
  if (num_host > 0 && bytes > 0) {
    checkpoint_host_ = std::make_unique<gpu::PinnedArena>(bytes * static_cast<size_t>(num_host), 0);
    num_host_checkpoints_ = num_host;
  }
}

unsigned char* GpuBackend::checkpoint_at(CheckpointRef ref) const {
  unsigned char* base = ref.tier == CheckpointTier::kDevice ? checkpoint_device_ : checkpoint_host_->input();
  return base + static_cast<size_t>(ref.index) * static_cast<size_t>(checkpoint_bytes());
}

// to_checkpoint: slot's live entry -> checkpoint; else checkpoint -> the slot's first entry.
void GpuBackend::copy_state(int32_t slot, unsigned char* checkpoint, bool checkpoint_on_host, bool to_checkpoint) {
  const CopyKind kind = to_checkpoint ? copy_kind(false, checkpoint_on_host) : copy_kind(checkpoint_on_host, false);
  const size_t delta_bytes = static_cast<size_t>(delta_entry_elems_) * delta_elem_bytes_;
  const size_t conv_bytes = static_cast<size_t>(conv_entry_floats_) * sizeof(float);
  const size_t s = static_cast<size_t>(slot);
  if (!to_checkpoint) {
    live_entry_[s] = static_cast<int32_t>(slot * entries_per_slot_);
    ring_first_[s] = -1;
    verify_rows_[s] = 0;
  }
  const size_t entry = static_cast<size_t>(live_entry_[s]);
  unsigned char* at = checkpoint;
  for (const gpu::GdnStatePools& p : gdn_) {
    unsigned char* delta = static_cast<unsigned char*>(p.delta) + entry * delta_bytes;
    unsigned char* conv = reinterpret_cast<unsigned char*>(p.conv + entry * static_cast<size_t>(conv_entry_floats_));
    DS_GPU_CHECK(gpuMemcpyAsync(to_checkpoint ? at : delta, to_checkpoint ? delta : at, delta_bytes, kind, stream_),
                 "checkpoint delta state of slot %d", slot);
    at += delta_bytes;
    DS_GPU_CHECK(gpuMemcpyAsync(to_checkpoint ? at : conv, to_checkpoint ? conv : at, conv_bytes, kind, stream_),
                 "checkpoint conv state of slot %d", slot);
    at += conv_bytes;
  }
}

void GpuBackend::apply_cache_ops(std::span<const CacheOp> ops) {
  check_cache_ops(ops, {cache_.num_state_slots, cache_.num_kv_blocks, num_device_checkpoints_, num_host_checkpoints_});
  DS_GPU_CHECK(gpuSetDevice(device_), "set device %d", device_);
  const size_t block_bytes = static_cast<size_t>(cache_.kv_block_tokens) *
                             static_cast<size_t>(config_.num_kv_heads * config_.head_dim) * sizeof(float);
  auto copy_block = [&](float* pool, int32_t src, int32_t dst) {
    if (pool == nullptr) return;
    unsigned char* base = reinterpret_cast<unsigned char*>(pool);
    DS_GPU_CHECK(gpuMemcpyAsync(base + static_cast<size_t>(dst) * block_bytes, base + static_cast<size_t>(src) * block_bytes,
                                block_bytes, gpuMemcpyDeviceToDevice, stream_),
                 "copy KV block %d -> %d", src, dst);
  };
  for (const CacheOp& op : ops) {
    switch (op.kind) {
      case CacheOp::Kind::kSave: copy_state(op.slot, checkpoint_at(op.checkpoint), on_host(op.checkpoint), true); break;
      case CacheOp::Kind::kRestore: copy_state(op.slot, checkpoint_at(op.checkpoint), on_host(op.checkpoint), false); break;
      case CacheOp::Kind::kMove:
        DS_GPU_CHECK(gpuMemcpyAsync(checkpoint_at(op.to), checkpoint_at(op.checkpoint), static_cast<size_t>(checkpoint_bytes()),
                                    copy_kind(on_host(op.checkpoint), on_host(op.to)), stream_),
                     "move checkpoint %d", op.checkpoint.index);
        break;
      case CacheOp::Kind::kCopyBlock:
        for (const gpu::KvPool& kv : kv_) {
          copy_block(kv.k, op.src_block, op.dst_block);
          copy_block(kv.v, op.src_block, op.dst_block);
        }
        copy_block(mtp_kv_.k, op.src_block, op.dst_block);
        copy_block(mtp_kv_.v, op.src_block, op.dst_block);
        break;
    }
  }
}

}  // namespace deltaserve::runtime
