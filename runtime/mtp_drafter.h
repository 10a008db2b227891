// Keeps the MTP head in step with each speculative sequence and drafts from it
// (MODEL.md 4.2-4.5). After every step the head is run over the step's accepted rows with
// the trunk's post-norm hidden state of each row and the token that followed it ("catch-up":
// its KV cache then holds exact rows for every position). The last catch-up row's output
// gives the first draft of the next step; deeper drafts chain the head's own post-norm
// output with the previous draft, one position further each.
//
// Greedy requests draft the head's argmax (runtime/greedy.h's rule): the backend's argmax_ids,
// their logits stay on the device. Sampled requests that the runner's DrawSource names draft
// the backend's draw of the head's row with the target row's own draw parameters at the same
// output position (coupled drafts, runtime/backend_runner.h): ids only, as for greedy ones.
// Other sampled requests' drafts come from the runner's DraftPicker, which draws each from
// the head's distribution q (the request's transforms) and keeps q for verification
// (runtime/draft_verifier.h); for them the head's logits row of the next first draft is kept
// between steps (num_vocab floats per sequence).
//
// Lazy catch-up: a decode step that drafted nothing for a stream (the policy chose depth 0)
// does not run the head over its rows; they wait (trunk hidden state + next token, H + 1
// values a row) until the stream drafts again, when one pass before the drafts takes the
// waiting rows of every returning stream. So a loaded server whose policy turned drafting
// down pays no MTP work for those streams. At most kPendingWindow..2 * kPendingWindow rows
// wait per stream: older ones are dropped, and the head's KV rows at their positions stay
// stale (whatever the blocks held). The first drafts after a long stretch at depth 0 then
// attend over those stale rows; they may be accepted less often, but verification decides
// every emitted token, so outputs never change. The same holds for a prefix-cache entry
// saved while rows waited.
//
// Owner: the BackendRunner, on the engine thread.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/parallel.h"
#include "runtime/backend.h"
#include "runtime/model_runner.h"

namespace deltaserve::runtime {

class MtpDrafter {
 public:
  explicit MtpDrafter(Backend& backend) : backend_(backend) {}

  // Chooses draft `draft_index` (0-based, output position output_index + draft_index) of
  // plan.sequences[seq_index], a sampled request, from the head's logits row. Called in
  // increasing draft_index per sequence, during draft(); with set_parallel, the calls of one
  // draft index for different sequences run side by side (a picker touches only its
  // sequence's state).
  using DraftPicker =
      std::function<int32_t(size_t seq_index, int32_t draft_index, std::span<const float> head_logits)>;

  // The backend's draw parameters for a sampled request's draft at an output position; nullopt
  // for the requests the DraftPicker serves.
  using DrawSource = std::function<std::optional<kernels::DrawParams>(const SequencePlan& seq, int64_t output_position)>;
  void set_draw_source(DrawSource source) { draw_source_ = std::move(source); }

  // Drafts for each sequence of the plan (empty where none are wanted or possible): up to
  // plan.sequences[i].draft_depth tokens; greedy requests take the head's argmax, sampled
  // ones what `pick` returns (no picker: the argmax for them too).
  std::vector<std::vector<int32_t>> draft(const StepPlan& plan, const DraftPicker& pick = nullptr);

  // One sequence's rows of the finished step, for catch-up: positions
  // [num_cached, num_cached + num_rows), with their trunk hidden states, followed by the
  // tokens next_tokens (the token after each row).
  struct CatchUp {
    const SequencePlan* seq = nullptr;
    std::vector<float> hidden;        // [num_rows][H]
    std::vector<int32_t> next_tokens;  // [num_rows]
    bool drafts_next = false;         // the next step may draft: keep the last row's output
    // Position of row 0; -1: seq->num_cached_tokens. One less when the row before the step's
    // (a resumed sequence's row P-1, runtime/mtp_resume_rows.h) is re-run first.
    int32_t first_position = -1;
    // A decode step at depth 0: the rows may wait for the stream's next draft (lazy catch-up).
    bool may_wait = false;
    int64_t next_output_position = -1;  // drafts_next: the output position of the next first draft
  };
  void catch_up(const std::vector<CatchUp>& rows);

  // Forgets sequences that are not in `live` (finished, cancelled or waiting).
  void retain(const std::vector<RequestId>& live);

  // On (the default): argmax drafts take the backend's argmax_ids (no logits copied); off:
  // the host argmax of copied logits (the reference path; same ids).
  void set_device_argmax(bool on) { device_argmax_ = on; }
  // Threads for the pickers of one draft index (null: this thread). Must outlive draft().
  void set_parallel(const kernels::ParallelFor* pool) { pool_ = pool; }

  // Rows waiting per stream before the oldest are dropped (see the header comment).
  static constexpr int32_t kPendingWindow = 64;
  // Rows that waited and were run through the head since construction; rows dropped.
  int64_t num_lazy_rows() const { return num_lazy_rows_; }
  int64_t num_dropped_rows() const { return num_dropped_rows_; }

 private:
  // fn(0) .. fn(n - 1), on pool_ where set.
  void for_each_pick(size_t n, const std::function<void(size_t)>& fn) const;
  struct State {
    int32_t num_rows = 0;        // MTP cache rows valid: positions [0, num_rows)
    std::vector<float> output;   // head output at row num_rows - 1 (chaining input)
    int32_t first_draft = -1;    // head argmax (or draw) from it: the next step's first draft
    int64_t first_draft_position = -1;  // a drawn first draft: the output position it was drawn for
    std::vector<float> first_logits;  // sampled requests: the head's logits row of it
    // Rows [num_rows, num_rows + pending_tokens.size()) that have not been through the head.
    std::vector<float> pending_hidden;   // [rows][H]
    std::vector<int32_t> pending_tokens;  // [rows]
  };

  // One head pass over rows [num_cached_rows, +tokens) of a sequence.
  struct HeadRows {
    const SequencePlan* seq = nullptr;
    int32_t num_cached_rows = 0;
    std::vector<int32_t> tokens;
    std::vector<float> hidden;
    bool drafts_next = false;
    int64_t next_output_position = -1;
  };
  // Runs the passes and records each sequence's new state (first draft when drafts_next).
  void run_head(std::vector<HeadRows>& rows);
  // Appends a deferred step's rows to the stream's waiting rows (false: the state does not
  // continue at these rows, so they cannot wait).
  bool defer(const CatchUp& c);
  // Catches up the waiting rows of the plan's sequences that draft this step.
  void catch_up_waiting(const StepPlan& plan);

  // The argmax draft of out_'s plan sequence i (its one logit row).
  int32_t head_argmax(size_t i) const;
  // The backend's draw parameters for seq's draft at `position` (draw_source_), if it has them.
  std::optional<kernels::DrawParams> draw_of(const SequencePlan& seq, int64_t position) const {
    return draw_source_ ? draw_source_(seq, position) : std::nullopt;
  }

  Backend& backend_;
  DrawSource draw_source_;
  std::unordered_map<RequestId, State> states_;
  ForwardOutput out_;
  bool device_argmax_ = true;
  const kernels::ParallelFor* pool_ = nullptr;  // set_parallel
  int64_t num_lazy_rows_ = 0;
  int64_t num_dropped_rows_ = 0;
};

}  // namespace deltaserve::runtime
