// The GPU backend: the Qwen3.5 hybrid over a batch plan on one CUDA or HIP device with the
// kernels of kernels/*_gpu.h. Same semantics as the CPU backend (runtime/cpu/cpu_backend.h),
// which is its oracle: plan checks, slot reset when num_cached_tokens == 0, verify rows with
// keep_row_states, rollback, the MTP head, the ForwardOutput layout.
//
// Memory, all sized at construction from the CacheConfig and never grown:
// - weights: one device allocation (GpuWeights);
// - KV cache: one allocation, a paged pool per attention layer plus the MTP block's own,
//   [num_kv_blocks][kv_block_tokens][nkv][hd] f32 for K and for V;
// - recurrent state: one allocation; per GDN layer a pool of state entries ([Hv][dk][dv]
//   delta in CacheConfig::state_precision: f32, or bf16 with the rounding of kernels/gdn/gdn_gpu.h;
//   + [Kc-1][Dc] conv, f32). Slot s owns entries [s * E, (s + 1) * E), E = 1
//   when max_verify_rows < 2, else 2 * max_verify_rows: two banks of max_verify_rows entries. The
//   slot's live state is one entry (state_entry(s)); a plain step updates it in place; a
//   verify step (keep_row_states, T rows) reads it and writes the state after row t into
//   entry t of the *other* bank, and the live entry becomes the last one; rollback(s, k)
//   moves the live entry to row k - 1's entry. Nothing is copied; a step without verify rows
//   touches no ring. All GDN layers use the same entry index.
// - workspace: one allocation for max_step_rows rows (CacheConfig::max_step_rows, or when 0:
//   num_state_slots * max_verify_rows + kDefaultPrefillRows), the attention split-K scratch,
//   the device mirror of the step staging and the output rows;
// - pinned: ONE page-locked host arena (PinnedArena): step index arrays in, logit/hidden rows out.
//
// Greedy ids: after the LM head one argmax_gpu launch (inside the step graph) writes the
// argmax of every logit row; the ids come back with the hidden rows in one copy, and only the
// logit rows of sequences with logits_to_host are copied (ForwardOutput's host rows).
//
// Launches (the decode hot path): the
// residual adds are fused into the output projections / MoE combine, same-type projections of
// one input share a launch, gate*up*SiLU is one gated matmul launch. Every kernel launch goes
// through DS_GPU_LAUNCH and is counted (kernel_launches(), launches_last_forward()).
//
// Graphs: a forward whose sequences all carry the same number of rows (decode: 1 each; verify:
// 1 + d each) is captured once per shape (StepGraphKey: sequences, rows each, block-table
// stride bucket, output rows) and replayed after; block-table strides are bucketed to powers
// of two and the attention grid is sized for the bucket's key bound, so a shape recurs as the
// contexts grow. Replays are bitwise equal to eager runs. GpuTuning::step_graphs kOff (or
// set_graphs_enabled(false)) runs everything eagerly.
//
// Per forward: the per-row index arrays (tokens, positions, row -> sequence, block tables,
// GDN entries, output row maps) are written into the pinned arena and sent with one async
// copy; every layer runs on one stream without host sync; the requested hidden rows, the
// argmax ids and the captured layers of the hidden rows (BatchPlan::capture_layers, at most
// CacheConfig::max_capture_layers) come back with one async copy (plus one per run of host
// logit rows), then one stream synchronisation.
//
// Owner: the engine thread (no method is thread-safe). forward/forward_mtp block until the
// step's results are on the host. Device or SDK failures abort with a report (DS_GPU_CHECK);
// bad plans throw std::invalid_argument before any device work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gpu/gpu_compat.h"
#include "runtime/backend.h"
#include "runtime/gpu/device_arena.h"
#include "runtime/gpu/gpu_layers.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/gpu/kernel_trace.h"
#include "runtime/gpu/pinned_arena.h"
#include "runtime/gpu/step_graphs.h"
#include "runtime/gpu/step_timeline.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime {

class GpuBackend final : public Backend {
 public:
  // Rows of a step when CacheConfig::max_step_rows is 0: every slot's verify rows plus one
  // prefill chunk of this many tokens (the scheduler's default max_prefill_chunk_tokens).
  static constexpr int32_t kDefaultPrefillRows = 512;
  // Device (and pinned) bytes the logit rows of one step may take: bounds max_logit_rows()
  // for large vocabularies (never below num_state_slots * max_verify_rows).
  static constexpr int64_t kLogitBudgetBytes = int64_t{256} << 20;
  // Prefill chunks (is_prefill_chunk) run through the tiled matmul, the chunked GDN kernel and
  // prefill attention; decode and verify rows through the matrix-vector kernels, gdn_step and
  // paged attention. The two classes round differently, so the class of a row must not depend
  // on the load: it reads only the sequence's own step, and the scheduler cuts prompts only at
  // multiples of prefill_chunk_align() leaving at least that many rows (so the GDN kernel's
  // 64-row chunks fall on the same positions however a prompt is cut, and the last call of a
  // prompt is never a lone row). MTP rows are drafts only, so their threshold is free.
  static constexpr int64_t kTrunkPrefillMinRows = 2;
  static constexpr int64_t kMtpPrefillMinRows = 16;
  static constexpr int32_t kPrefillChunkAlign = 64;
  static bool is_prefill_chunk(int64_t num_rows, bool keep_row_states, int64_t min_rows) {
    return !keep_row_states && num_rows >= min_rows;
  }

  // The model must outlive the backend. Uploads the weights (blocking) and allocates every
  // buffer. Throws std::runtime_error for shapes or weight types the GPU kernels lack (naming
  // the tensor or the field), a missing device, or too little memory; std::invalid_argument
  // for a bad CacheConfig.
  GpuBackend(const LoadedModel& model, const CacheConfig& cache, int device_index = 0);
  ~GpuBackend() override;
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  std::string name() const override;
  std::string device_name() const override;
  std::string speed_settings() const override;
  const ModelConfig& config() const override { return config_; }
  const CacheConfig& cache_config() const override { return cache_; }
  void forward(const BatchPlan& plan, ForwardOutput& out) override;
  void forward_mtp(const MtpPlan& plan, ForwardOutput& out) override;
  void rollback(int32_t slot, int32_t num_rows_kept) override;
  BackendMemoryStats memory_stats() const override;
  // Prefix-cache checkpoints (gpu_checkpoints.cpp): the device tier in one device allocation,
  // the host tier in one page-locked allocation, both made by reserve_checkpoints; every op is
  // an async copy on the step's stream (device-to-device, or to/from the pinned tier).
  int64_t checkpoint_bytes() const override;
  void reserve_checkpoints(int32_t num_device, int32_t num_host) override;
  void apply_cache_ops(std::span<const CacheOp> ops) override;
  int32_t prefill_chunk_align() const override { return kPrefillChunkAlign; }
  // Kernels launched since construction (a graph replay counts its kernel nodes).
  int64_t kernel_launches() const override { return launches_; }
  int64_t launches_last_forward() const { return launches_last_forward_; }
  // Bytes the last forward copied device -> host (hidden rows, argmax ids, host logit rows).
  int64_t bytes_to_host_last_forward() const { return bytes_to_host_last_forward_; }
  // Step graphs: as GpuTuning::step_graphs says at construction. While tracing, the setting is
  // kept for set_trace(false) and graphs stay off.
  void set_graphs_enabled(bool on) {
    if (trace_.enabled()) graphs_after_trace_ = on;
    else graphs_.set_enabled(on);
  }
  bool graphs_enabled() const { return graphs_.enabled(); }
  int64_t graph_captures() const { return graphs_.num_captures(); }
  int64_t graph_replays() const { return graphs_.num_replays(); }
  // Kernel trace (runtime/gpu/kernel_trace.h, gpu_backend_trace.cpp): on, every launch is
  // bracketed by an event pair and classed, and every forward runs eagerly (graphs off, their
  // captures dropped); off restores the graph setting. take_trace() synchronises the stream
  // and returns the per-class totals since the last take (empty while off); take after each
  // forward to keep the event pool at one forward's launches.
  void set_trace(bool on);
  bool trace_enabled() const { return trace_.enabled(); }
  std::vector<gpu::KernelClassTime> take_trace();

  int64_t kv_cache_bytes() const { return static_cast<int64_t>(kv_arena_.bytes()); }
  int64_t state_bytes() const { return static_cast<int64_t>(state_arena_.bytes()); }
  int64_t max_step_rows() const { return max_rows_; }
  int64_t max_logit_rows() const { return max_logit_rows_; }

  // Test hooks (blocking device reads): the live state entry of a slot, and its contents in
  // one GDN layer (by GDN layer index), as the CPU backend's delta_state / conv_state (a bf16
  // delta state widened to f32, exactly).
  int32_t state_entry(int32_t slot) const { return live_entry_.at(static_cast<size_t>(slot)); }
  std::vector<float> read_delta_state(int gdn_layer, int32_t slot) const;
  std::vector<float> read_conv_state(int gdn_layer, int32_t slot) const;

 private:
  void check_model() const;
  void size_buffers();
  void check_plan(const BatchPlan& plan) const;
  void check_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                  const std::vector<int32_t>& kv_blocks) const;
  void reset_slot(int32_t slot);
  // Writes the block tables of the plan's sequences into the staging; returns the stride.
  struct OutputRows {
    std::vector<int32_t> hidden_rows;  // step rows whose normed hidden state is returned
    std::vector<int32_t> logit_index;  // per logit row: its index among hidden_rows
  };
  // Sequences in staged order (decode/verify first, then prefill chunks), each plan sequence's
  // first staged row, and how many staged sequences are decode/verify.
  struct StagedOrder {
    std::vector<size_t> seqs;
    std::vector<int64_t> first_row;
    int64_t num_decode_seqs = 0;
  };
  static StagedOrder staged_order(const std::vector<int64_t>& counts, const std::vector<bool>& prefill);
  // Stages the rows of the sequences (given in staged order; the first num_decode_seqs are
  // decode/verify) and the output row maps.
  gpu::StepRowsView stage_common(const std::vector<const std::vector<int32_t>*>& tokens,
                                 const std::vector<int32_t>& first_positions,
                                 const std::vector<const std::vector<int32_t>*>& kv_blocks, const OutputRows& rows,
                                 int64_t num_decode_seqs, size_t& hidden_rows_at, size_t& logit_index_at);
  // Adds the block's mixer and FFN into the residual rows ws_.x. input_normed: ws_.a already
  // holds the block's attn_norm of ws_.x (the previous block's FFN wrote it; input_deferred:
  // as a deferred norm, gpu::NextNorm::deferred); next_attn_norm: the next block's attn_norm,
  // for this block's FFN to write into ws_.a (null: none; next_deferred: deferred).
  void run_block(const gpu::GpuLayerWeights& lw, const gpu::KvPool* kv, const gpu::GdnStatePools* gdn,
                 const gpu::StepRowsView& rows, bool input_normed = false,
                 const gpu::DeviceTensor* next_attn_norm = nullptr, bool input_deferred = false, bool next_deferred = false);
  // Whether the norm between block `prev`'s FFN and block `next`'s mixer, or between a block's
  // mixer and its FFN, is deferred (gpu::norm_deferred on their matrices).
  bool mixer_norm_deferred(const gpu::GpuLayerWeights& prev, const gpu::GpuLayerWeights& next) const;
  bool ffn_norm_deferred(const gpu::GpuLayerWeights& lw) const;
  // Enqueues the final norm of the hidden rows, the LM head of the logit rows and their argmax
  // ids into the output buffer; lm_head_finish copies hidden rows, ids and the host logit rows
  // to the host (one synchronisation).
  // num_captured: the step's captured layers (their region of the output buffer lies before
  // the logits).
  void lm_head_enqueue(const gpu::DeviceTensor& norm, const int32_t* hidden_rows, int64_t num_hidden,
                       const int32_t* logit_index, int64_t num_logits, int64_t num_captured);
  // The step's draws (SequenceStep::draws): each drawn logit row and its params, staged with
  // the step's other inputs; draw_enqueue launches them after the LM head, and lm_head_finish
  // brings their ids back with the argmax ids.
  struct StagedDraws {
    size_t rows_at = 0, params_at = 0;
    int64_t count = 0;
  };
  StagedDraws stage_draws(const std::vector<const std::vector<kernels::DrawParams>*>& per_sequence, const ForwardOutput& out);
  void draw_enqueue(const StagedDraws& draws, int64_t num_hidden, int64_t num_logits, int64_t num_captured);
  void lm_head_finish(int64_t num_hidden, int64_t num_logits, int64_t num_captured, const StagedDraws& draws,
                      ForwardOutput& out);
  // Embedding, every trunk layer and the LM head of a staged step (no host sync); the hidden
  // rows of the residual stream after each of capture_layers into the output buffer.
  void enqueue_trunk(const gpu::StepRowsView& rows, size_t hidden_at, int64_t num_hidden, size_t logit_at,
                     int64_t num_logits, const std::vector<int32_t>& capture_layers);
  std::string fuse_down_combine_setting() const;  // speed_settings' words for fuse_down_combine_rows_
  gpu::GpuLayerContext context() const {
    return {config_, stream_, cache_.kv_block_tokens, ws_, &launches_, trace_.enabled() ? &trace_ : nullptr, prefill_math_,
            tiled_decode_experts_, tiled_decode_min_outputs_, fuse_down_combine_rows_, carry_input_norms_, defer_norms_,
            kernels::MatvecContext{matvec_math_, matvec_split_scratch_, matvec_split_bytes_, -1, &launches_}};
  }
  template <class T>
  const T* device(size_t staging_offset) const {
    return reinterpret_cast<const T*>(staging_device_ + staging_offset);
  }

  const LoadedModel& model_;
  const ModelConfig& config_;
  CacheConfig cache_;
  int device_ = 0;
  gpuStream_t stream_ = nullptr;
  std::unique_ptr<gpu::GpuWeights> weights_;

  int64_t max_rows_ = 0;        // rows of one step
  int64_t max_logit_rows_ = 0;  // logit rows of one step
  int64_t max_context_ = 0;     // num_kv_blocks * kv_block_tokens: positions of one sequence
  int64_t entries_per_slot_ = 1;
  int64_t delta_entry_elems_ = 0, conv_entry_floats_ = 0;  // elements of one state entry
  size_t delta_elem_bytes_ = 4;                              // 4 (f32) or 2 (bf16): cache_.state_precision

  gpu::DeviceArena kv_arena_{"KV cache"};
  gpu::DeviceArena state_arena_{"recurrent state"};
  gpu::DeviceArena work_arena_{"workspace"};
  std::unique_ptr<gpu::PinnedArena> pinned_;
  std::unique_ptr<gpu::StagingLayout> staging_;
  unsigned char* staging_device_ = nullptr;  // device mirror of the pinned input region
  float* output_device_ = nullptr;           // [hidden rows][H], [logit rows] ids, [logit rows][V]
  uint32_t* argmax_ws_ = nullptr;            // argmax_gpu workspace (counters zero between launches)
  size_t output_floats_ = 0;

  gpu::GpuWorkspace ws_;
  std::vector<gpu::KvPool> kv_;              // one per attention layer, in layer order
  gpu::KvPool mtp_kv_;
  std::vector<gpu::GdnStatePools> gdn_;      // one per GDN layer, in layer order
  std::vector<int> layer_cache_index_;       // trunk layer -> index in gdn_ or kv_
  std::vector<int32_t> live_entry_;          // per slot: the state entry holding its live state
  std::vector<int32_t> ring_first_;          // per slot: first ring entry of its last verify step
  std::vector<int32_t> verify_rows_;         // per slot: rows of its last verify step (0 = none)

  gpu::StepGraphs graphs_{cache_.gpu_tuning.step_graphs};
  mutable int64_t launches_ = 0;             // counted by DS_GPU_LAUNCH through context()
  mutable gpu::KernelTrace trace_;           // fed by DS_GPU_LAUNCH through context() while on
  bool graphs_after_trace_ = false;          // the graph setting to restore when tracing stops
  int64_t launches_last_forward_ = 0;
  std::unique_ptr<gpu::StepTimeline> timeline_;  // a measuring build's in-step table (step_timeline.h)
  // Products of the tiled prefill matmuls, set at construction: the exact bf16 tensor-core form
  // for Q4_0 weights where the device has bf16 mma (kernels::MatmulMath::kTensorExact: exact
  // products, f32 sums; the other weight types run f32 FMA), else f32 FMA.
  kernels::MatmulMath prefill_math_ = kernels::MatmulMath::kF32;
  bool tiled_decode_experts_ = false;  // GpuLayerContext::tiled_decode_experts, set at construction
  int64_t tiled_decode_min_outputs_ = 0;  // GpuLayerContext::tiled_decode_min_outputs, likewise
  std::pair<int64_t, int64_t> fuse_down_combine_rows_{1, 0};  // GpuLayerContext::fuse_down_combine_rows, likewise
  bool carry_input_norms_ = false;  // GpuLayerContext::carry_input_norms, likewise
  bool defer_norms_ = false;        // GpuLayerContext::defer_norms, likewise
  // Q4_0 decode matvec arithmetic (cache_.decode_matvec resolved at start), for the backend's
  // lifetime; every launch gets it in GpuLayerContext::matvec.
  kernels::MatvecMath matvec_math_ = kernels::MatvecMath::kCudaCores;
  void* matvec_split_scratch_ = nullptr;  // kernels::MatvecContext::split_scratch (tensor math only)
  size_t matvec_split_bytes_ = 0;
  int64_t bytes_to_host_last_forward_ = 0;
  // Prefix-cache checkpoints (gpu_checkpoints.cpp): per checkpoint, every GDN layer's delta entry
  // (delta_elem_bytes_ each element) then its conv entry (f32), packed.
  gpu::DeviceArena checkpoint_arena_{"prefix-cache checkpoints"};
  unsigned char* checkpoint_device_ = nullptr;
  std::unique_ptr<gpu::PinnedArena> checkpoint_host_;
  int32_t num_device_checkpoints_ = 0, num_host_checkpoints_ = 0;
  bool checkpoints_reserved_ = false;
  unsigned char* checkpoint_at(CheckpointRef ref) const;
  void copy_state(int32_t slot, unsigned char* checkpoint, bool checkpoint_on_host, bool to_checkpoint);
};

}  // namespace deltaserve::runtime
