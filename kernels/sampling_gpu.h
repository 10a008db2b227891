// On-device greedy sampling and draft verification: only token ids leave the device.
//
// argmax_gpu: ids[r] = argmax of logits row r (lowest id on ties, NaN never wins), the CPU
// sampler's greedy rule. One block per row, fixed reduction order: batch-invariant.
//
// greedy_verify_gpu: for sequence s with rows [b, e) = [seq_row_begin[s], seq_row_begin[s+1])
// (row b fed the last accepted token, rows b+1.. the drafts), target[i] = argmax of row i.
// Draft row b+n is accepted while target[b+n-1] == row_tokens[b+n]; num_emitted[s] = 1 +
// accepted drafts, and the emitted tokens are target[b .. b + num_emitted[s]).
//
// Calling thread: any; enqueues on `stream`; no allocation. gpuErrorInvalidValue on bad sizes.
#pragma once

#include <cstdint>

#include "kernels/gpu_compat.h"

namespace deltaserve::kernels {

gpuError_t argmax_gpu(const float* logits, int64_t logits_stride, int64_t num_rows, int64_t vocab, int32_t* ids,
                      gpuStream_t stream);

gpuError_t greedy_verify_gpu(const int32_t* row_tokens, const int32_t* target, const int32_t* seq_row_begin,
                             int64_t num_seqs, int32_t* num_emitted, gpuStream_t stream);

}  // namespace deltaserve::kernels
