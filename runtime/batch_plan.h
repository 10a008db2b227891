// One step of work for a backend: several sequences, each contributing a run of rows
// (a prefill chunk, one decode token, or a token plus drafts to verify). Built by the
// scheduler's runner each step; read-only to the backend.
#pragma once

#include <cstdint>
#include <vector>

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
};

struct BatchPlan {
  std::vector<SequenceStep> sequences;

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
};

struct MtpPlan {
  std::vector<MtpSequenceStep> sequences;
};

// Rows that asked for logits (and hidden states), sequence after sequence, in row order.
struct ForwardOutput {
  int64_t num_rows = 0;  // logit rows
  int64_t num_vocab = 0;
  std::vector<float> logits;  // [num_rows][num_vocab]
  // Per plan sequence: index of its first logit row and of its first hidden row.
  std::vector<int64_t> logit_begin;
  std::vector<int64_t> hidden_begin;
  // [hidden rows][H]: post-final-norm hidden (trunk) or post-mtp.norm output (MTP): the
  // next MTP input. A sequence's hidden rows are its last max(num_hidden, num_logits) rows.
  std::vector<float> hidden;

  const float* row_logits(int64_t r) const { return logits.data() + r * num_vocab; }
  const float* row_hidden(int64_t r, int64_t num_embd) const { return hidden.data() + r * num_embd; }
};

}  // namespace deltaserve::runtime
