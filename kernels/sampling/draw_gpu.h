// The sampling rule on the device (kernels/sampling/draw_ref.h is the reference; draw_rule.h
// the shared arithmetic): token ids drawn from logits rows that stay on the device, bit for
// bit the ids draw_ref gives for the same rows. So a sampled request whose rows need nothing
// else (no bias, penalty, constraint or logprobs) sends only its ids to the host, as a greedy
// one does.
//
// One block per draw, whatever the batch: a draw's result depends only on its row and params.
// The block walks its row a few times: the argmax, every token's mass (with the exact total),
// then for top-k and top-p a radix select over the likelihood keys (one 8-bit digit a pass,
// exact integer histograms; a pass stops early once one token is left), and the inverse CDF
// (the warps' chunk totals, then one warp's walk of its chunk). Masses are recomputed where a
// pass needs them rather than stored: a row stays in L2 between passes.
//
// Calling thread: any; enqueues on `stream`; no allocation. gpuErrorInvalidValue on bad sizes
// (vocab past draw::kMaxVocab, a stride below vocab).
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/sampling/draw_rule.h"

namespace deltaserve::kernels {

struct DrawGpuArgs {
  const float* logits;       // [logit rows][logits_stride]
  int64_t logits_stride;
  int64_t vocab;
  const int32_t* rows;       // [num_draws]: the logit row of each draw
  const DrawParams* params;  // [num_draws]
  int32_t* ids;              // ids[rows[d]] = draw d's token
  int64_t num_draws;
};
gpuError_t draw_gpu(const DrawGpuArgs& args, gpuStream_t stream);

}  // namespace deltaserve::kernels
