// Dense matmul of f32 activations against a weight matrix in any DType (weights stay in their
// file format and are decoded on the fly): y[r][o] (+)= dot(W row o, x row r).
//
// Layout (ggml ne order, as the GGUF stores it): W has num_out rows of num_in elements, row o
// at w + o * w_row_bytes; x row r at x + r * x_stride floats; y row r at y + r * y_stride.
//
// Determinism: each y[r][o] is computed exactly as dot_row(w_type, W row o, x row r, num_in)
// (see quant.h for the fixed summation order), so results are bit-identical whatever the
// ParallelFor split, whatever num_rows, and whichever other rows share the batch.
//
// Calling thread: any; blocks until done; work is spread only through the given ParallelFor.
// x and y must not overlap. Preconditions (assert): num_in is a multiple of the block size,
// w_row_bytes >= dtype_row_bytes(w_type, num_in), x_stride >= num_in, y_stride >= num_out.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/embedding/embedding.h"  // embedding_lookup_ref, for callers that expect it here
#include "kernels/parallel.h"

namespace deltaserve::kernels {

// The GPU staged matvec's tiles a block for launches of 1-2 rows (matmul_gpu.h): kAuto, its
// rule; kOne / kTwo force one form (the parity tests). The bits are the same either way; the
// CPU reference ignores it.
enum class StagedTiles : int32_t { kAuto, kOne, kTwo };

struct MatmulArgs {
  const void* w;
  DType w_type;
  int64_t num_in;
  int64_t num_out;
  size_t w_row_bytes;
  const float* x;
  int64_t num_rows;
  int64_t x_stride;  // floats between activation rows
  float* y;
  int64_t y_stride;  // floats between output rows
  bool accumulate = false;  // y += W x (the dot is rounded first, then added once)
  StagedTiles staged_tiles = StagedTiles::kAuto;  // GPU staged matvec only (see above)
};

// Work is split over output features: ParallelFor tasks of kMatmulOutputsPerTask outputs.
inline constexpr int64_t kMatmulOutputsPerTask = 16;

void matmul_ref(const MatmulArgs& args, const ParallelFor& parallel);

// Expert-stacked weights (MoE: ggml ne = {num_in, num_out, num_experts}, e.g.
// ffn_gate_exps) store expert e's num_out rows contiguously right after expert e - 1's, so
// expert e's matrix starts e * num_out * w_row_bytes bytes into the tensor.
inline const void* expert_weights(const void* w_stacked, int64_t expert, int64_t num_out,
                                  size_t w_row_bytes) {
  return static_cast<const uint8_t*>(w_stacked) +
         static_cast<size_t>(expert) * static_cast<size_t>(num_out) * w_row_bytes;
}

// matmul_ref against expert `expert` of a stacked tensor: args.w points at the whole stacked
// tensor (expert 0), every other field is as for one expert's matrix.
void matmul_expert_ref(const MatmulArgs& args, int64_t expert, const ParallelFor& parallel);

}  // namespace deltaserve::kernels
