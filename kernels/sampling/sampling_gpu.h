// On-device greedy sampling and draft verification: only token ids leave the device.
//
// argmax_gpu: ids[r] = argmax of logits row r (lowest id on ties, NaN never wins), the CPU
// sampler's greedy rule. One block per row (float4 loads, 8 in flight per thread):
// batch-invariant. For a large vocabulary prefer the workspace form below.
//
// greedy_verify_gpu: for sequence s with rows [b, e) = [seq_row_begin[s], seq_row_begin[s+1])
// (row b fed the last accepted token, rows b+1.. the drafts), target[i] = argmax of row i.
// Draft row b+n is accepted while target[b+n-1] == row_tokens[b+n]; num_emitted[s] = 1 +
// accepted drafts, and the emitted tokens are target[b .. b + num_emitted[s]).
//
// Calling thread: any; enqueues on `stream`; no allocation. gpuErrorInvalidValue on bad sizes.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels {

gpuError_t argmax_gpu(const float* logits, int64_t logits_stride, int64_t num_rows, int64_t vocab, int32_t* ids,
                      gpuStream_t stream);

// argmax_gpu over many blocks per row (the one to use for a full vocabulary: 248320 logits are
// 31 blocks of 8192 instead of one block): same result as the form above (the lowest id of
// the maximum; NaN never wins; an all-NaN row gives 0). One launch: each block writes its
// segment's best to the workspace, and the last block of a row to finish (a counter per row)
// reduces them. The segmentation depends only on vocab, and the (value, id) order is total,
// so the result is the same whatever the batch and whatever order blocks finish in.
//
// Workspace: argmax_workspace_words(workspace_rows, vocab) 32-bit words; the first
// workspace_rows words (the counters) must be zero before the first launch; each launch
// leaves them zero. One workspace serves one launch at a time (launches on one stream are
// fine), of any num_rows <= workspace_rows.
// Preconditions (else gpuErrorInvalidValue): 1 <= vocab <= 2^31 - 2, num_rows <= 65535,
// num_rows <= workspace_rows when that is set, logits_stride >= vocab. Calling thread: any; enqueues on `stream`; no allocation.
struct ArgmaxGpuArgs {
  const float* logits;  // [num_rows][logits_stride]
  int64_t logits_stride;
  int64_t num_rows;
  int64_t vocab;
  int32_t* ids;         // [num_rows]
  uint32_t* workspace;  // argmax_workspace_words(workspace_rows, vocab) words, counters first
  // Rows the workspace was sized for (0: num_rows). The counters are its first workspace_rows
  // words whatever num_rows is, so one workspace serves launches of any row count up to it
  // (a layout that moved with num_rows would meet an earlier launch's partials as counters).
  int64_t workspace_rows = 0;
};
int64_t argmax_workspace_words(int64_t num_rows, int64_t vocab);
gpuError_t argmax_gpu(const ArgmaxGpuArgs& args, gpuStream_t stream);

gpuError_t greedy_verify_gpu(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                             int64_t num_seqs, int32_t* num_emitted, gpuStream_t stream);

}  // namespace deltaserve::kernels
