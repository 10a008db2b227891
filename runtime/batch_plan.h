// One step of work for a backend: several sequences, each contributing a run of rows
// (a prefill chunk, one decode token, or a token plus drafts to verify). Built by the
// scheduler's runner each step; read-only to the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/sampling/draw_rule.h"

namespace deltaserve::runtime {

struct SequenceStep {
  int32_t slot = 0;               // recurrent-state slot of this sequence
  int32_t num_cached_tokens = 0;  // tokens already in its state and KV cache; the position
                                  // of tokens[0]. 0 means a new sequence: the slot is reset.
  std::vector<int32_t> tokens;    // this step's rows, in order
  // KV block ids covering positions [0, num_cached_tokens + tokens.size()), in order.
  std::vector<int32_t> kv_blocks;
  int32_t num_logits = 1;  // logits wanted for the last num_logits rows (0 for a prefill
                           // chunk that does not end the prompt)
  // Post-final-norm hidden states wanted for the last max(num_hidden, num_logits) rows (the
  // MTP head's input).
  int32_t num_hidden = 0;
  // Verify rows: keep the recurrent state after each row, so rollback() can return to any
  // of them. At most CacheConfig::max_verify_rows rows.
  bool keep_row_states = false;
  // false: the caller needs only each logit row's argmax id (ForwardOutput::argmax_ids) or
  // drawn id (draws); the logits of this sequence's rows are not copied to (nor stored on) the
  // host.
  bool logits_to_host = true;
  // Empty, or one per logit row: the backend draws each row's token by the sampling rule
  // (kernels/sampling/draw_ref.h; on its device where it has one) into ForwardOutput::drawn_ids.
  std::vector<kernels::DrawParams> draws{};
};

struct BatchPlan {
  std::vector<SequenceStep> sequences;
  // Trunk layers (0-based, increasing) whose output (the residual stream after the layer) is
  // wanted for every hidden row, in ForwardOutput::layer_hidden: the DFlash drafter's context
  // (runtime/dflash_drafter.h). Empty: none. Backends that cannot capture (a layer split's
  // stages) throw std::logic_error when it is not empty; the GPU backend throws
  // std::invalid_argument for more than CacheConfig::max_capture_layers of them.
  std::vector<int32_t> capture_layers{};  // {}: aggregate initialisers may leave it out

  int64_t num_rows() const {
    int64_t n = 0;
    for (const SequenceStep& s : sequences) n += static_cast<int64_t>(s.tokens.size());
    return n;
  }
  int64_t num_logit_rows() const {
    int64_t n = 0;
    for (const SequenceStep& s : sequences) n += s.num_logits;
    return n;
  }
};

// One MTP draft pass (MODEL.md 4.2): row i of a sequence pairs a hidden state h_t (the trunk's
// post-final-norm output, or the previous MTP output when chaining) with the token x_{t+1};
// it sits at MTP cache position num_cached_rows + i (the position t of its hidden state).
struct MtpSequenceStep {
  int32_t num_cached_rows = 0;    // MTP KV rows already cached for this sequence
  std::vector<int32_t> tokens;    // x_{t+1} per row
  std::vector<float> hidden;      // [tokens.size()][H]
  std::vector<int32_t> kv_blocks; // block table covering the MTP positions, as for the trunk
  int32_t num_logits = 1;         // logits (and outputs) for the last num_logits rows
  bool logits_to_host = true;     // as SequenceStep::logits_to_host
  std::vector<kernels::DrawParams> draws{};  // as SequenceStep::draws
};

struct MtpPlan {
  std::vector<MtpSequenceStep> sequences;
};

// Rows that asked for logits (and hidden states), sequence after sequence, in row order.
//
// Logit rows are numbered 0 .. num_rows - 1 across the plan (sequence i owns
// [logit_begin[i], logit_begin[i] + its num_logits)). Every backend fills argmax_ids for all
// of them (runtime/greedy.h's rule: lowest id on ties, NaN never wins; computed on the device
// by a device backend). `logits` holds only the "host rows": the logit rows of sequences with
// logits_to_host, in the same order; sequence i's rows start at host row host_logit_begin[i]
// (-1 when its logits stayed on the device). With every sequence logits_to_host (the default)
// host rows are logit rows: host_logit_begin == logit_begin.
struct ForwardOutput {
  int64_t num_rows = 0;  // logit rows
  int64_t num_vocab = 0;
  std::vector<int32_t> argmax_ids;  // [num_rows]: the greedy id of every logit row
  // [num_rows]: the drawn id of every logit row of a sequence with draws, -1 elsewhere.
  std::vector<int32_t> drawn_ids;
  std::vector<float> logits;        // [num_host_rows()][num_vocab]
  // Per plan sequence: index of its first logit row, of its first host row (-1: none), and of
  // its first hidden row.
  std::vector<int64_t> logit_begin;
  std::vector<int64_t> host_logit_begin;
  std::vector<int64_t> hidden_begin;
  // [hidden rows][H]: post-final-norm hidden (trunk) or post-mtp.norm output (MTP): the
  // next MTP input. A sequence's hidden rows are its last max(num_hidden, num_logits) rows.
  std::vector<float> hidden;
  int64_t num_hidden_rows = 0;  // rows of hidden (set with the layout)
  // [hidden rows][capture_layers.size()][H]: the plan's captured layer outputs, concatenated
  // per row in capture_layers order (empty when the plan captured none).
  std::vector<float> layer_hidden;

  int64_t num_host_rows() const { return num_vocab > 0 ? static_cast<int64_t>(logits.size()) / num_vocab : 0; }
  // Logit rows of plan sequence i.
  int64_t sequence_logit_rows(size_t i) const {
    return (i + 1 < logit_begin.size() ? logit_begin[i + 1] : num_rows) - logit_begin[i];
  }
  // r: a host row (host_logit_begin[i] + j), not a logit row.
  const float* row_logits(int64_t r) const { return logits.data() + r * num_vocab; }
  // Logits of logit row j of plan sequence i; throws std::logic_error when its logits stayed
  // on the device (logits_to_host = false).
  const float* sequence_logits(size_t i, int64_t j = 0) const;
  const float* row_hidden(int64_t r, int64_t num_embd) const { return hidden.data() + r * num_embd; }

  // For backends: forget the previous layout, then add each plan sequence in order (its
  // num_logits, its hidden row count, its logits_to_host). The caller then fills hidden,
  // argmax_ids ([num_rows]) and logits ([host rows][num_vocab]).
  void begin_layout(int64_t vocab);
  void add_sequence(int32_t num_logits, int64_t num_hidden, bool to_host);
  int64_t num_host_rows_planned() const { return num_host_rows_planned_; }

 private:
  int64_t num_host_rows_planned_ = 0;
};

}  // namespace deltaserve::runtime
