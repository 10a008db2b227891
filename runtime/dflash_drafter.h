// Drafts a block of tokens per stream in one forward of a DFlash draft model
// (runtime/dflash_model.h), on the host, conditioned on the target's hidden states.
//
// Per speculative stream it keeps the draft model's context: for every known position p, each
// draft layer's key and value of the context row c_p = hidden_norm(fc(target layers' outputs
// at p)) (k_norm and RoPE at p applied). The runner captures the target layers' outputs of
// every row of the step (BatchPlan::capture_layers) and, after verification, hands the kept
// rows to catch_up(): the context then covers positions [first_position, num_cached) exactly
// as the target kept them (rejected drafts never enter it: rollback by index is free).
//
// A stream drafting d tokens at position s = num_cached runs a block of 1 + d rows: its
// input token at s, then mask_token_id at s + 1 .. s + d; every block row attends to the
// whole context and the whole block; row k >= 1's logits (the target's LM head) give the
// draft of position s + k. Greedy requests take the argmax; sampled ones what the runner's
// picker draws from the row (its q is kept for verification, as for MTP drafts). The blocks of
// all drafting streams run as one batch of rows.
//
// A stream whose context does not reach its first step's position (a prefix-cache restore
// starts mid-sequence) drafts from the positions it has seen: lower acceptance at first, same
// outputs. Owner: the BackendRunner, on the engine thread.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/dflash_model.h"
#include "runtime/mtp_drafter.h"
#include "runtime/tensor_view.h"
#include "runtime/thread_pool.h"

namespace deltaserve::runtime {

class DFlashDrafter {
 public:
  // token_embd and output: the target's embedding table and LM head ({H, V} views; any dtype
  // matmul_ref takes), which must outlive the drafter.
  DFlashDrafter(DFlashModel model, const TensorView& token_embd, const TensorView& output, int num_threads);

  const DFlashConfig& config() const { return model_.config; }
  // Drafts per stream and step at most: the block's rows but the anchor.
  int32_t max_drafts() const { return model_.config.block_size - 1; }
  // The trunk layers the runner captures for catch_up (BatchPlan::capture_layers).
  const std::vector<int32_t>& capture_layers() const { return model_.config.target_layer_ids; }

  // Up to min(draft_depth, max_drafts()) drafts per speculative sequence of the plan.
  std::vector<std::vector<int32_t>> draft(const StepPlan& plan, const MtpDrafter::DraftPicker& pick);

  // One sequence's kept rows of the finished step: positions [num_cached, + num_rows) with the
  // captured target layers' outputs, [num_rows][capture_layers().size() * H_target].
  struct CatchUp {
    const SequencePlan* seq = nullptr;
    const float* features = nullptr;
    int64_t num_rows = 0;
  };
  void catch_up(const std::vector<CatchUp>& rows);

  // Forgets sequences that are not in `live`.
  void retain(const std::vector<RequestId>& live);

  // Context positions held for a sequence (tests); -1 when it has no state.
  int32_t context_rows(RequestId id) const;

 private:
  struct State {
    int32_t first_position = 0;  // position of context row 0
    int32_t num_rows = 0;
    std::vector<std::vector<float>> k, v;  // per layer: [num_rows][num_kv_heads * head_dim]
  };
  struct Block {
    size_t seq_index = 0;
    const State* state = nullptr;
    int64_t first_row = 0;  // in the batch of block rows
    int32_t num_rows = 0;   // 1 + drafts
    int32_t position = 0;   // of the anchor
  };

  // y[rows][out] = x[rows][in] * w^T, w = [out][in] f32.
  void linear(const std::vector<float>& w, int64_t in, int64_t out, const float* x, int64_t rows, float* y) const;
  // Per-head RMSNorm (weight [head_dim]) then RoPE at positions, in place over [rows][heads * head_dim].
  void norm_rope(float* x, int64_t rows, int64_t heads, const std::vector<float>& norm, const int32_t* positions) const;
  // One decoder layer over the batch of block rows x ([rows][H], in place).
  void layer_forward(size_t l, const std::vector<Block>& blocks, const std::vector<int32_t>& positions, std::vector<float>& x) const;
  // Logits ([num_vocab]) of block row r of x (post final norm), scaled and capped as configured.
  void row_logits(const float* normed_row, std::vector<float>& logits) const;

  DFlashModel model_;
  TensorView token_embd_, output_;
  ThreadPool pool_;
  std::unordered_map<RequestId, State> states_;
};

}  // namespace deltaserve::runtime
