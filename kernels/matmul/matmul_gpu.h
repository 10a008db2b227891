// GPU matmul of f32 activations against weights in their file format (matmul.h's contract,
// over device pointers): y[r][o] (+)= dot(W row o, x row r). Weight types: F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
//
// Matrix-vector form for decode and verify steps: every output element is one warp's dot
// product over the whole row, in a fixed order (lane l takes 8-element chunks l, l + W, ...,
// fused multiply-adds in element order, then a butterfly over the warp). Activation rows go
// through in groups of up to 8 that share each weight load; a row's arithmetic does not
// depend on the group, so results are batch-invariant: row r alone is bit-identical to row r
// in any batch. Not bit-identical to matmul_ref (different order, fused multiply-add): the
// tests hold it to an NMSE bound.
//
// Calling thread: any; enqueues on `stream` and returns (no synchronisation, no allocation).
// Returns gpuErrorInvalidValue without launching when a precondition fails: num_in a multiple
// of 8 and of the block size; x 16-byte aligned with x_stride % 4 == 0; for F32/F16/BF16 the
// weight rows 16-byte aligned (w and w_row_bytes); quantised rows 2-byte aligned.
// Otherwise the launch status (gpuGetLastError).
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul.h"

namespace deltaserve::kernels {

struct MatvecContext;  // the launch's matvec choices (below)
gpuError_t matmul_gpu(const MatmulArgs& args, const MatvecContext& context, gpuStream_t stream);

// Which arithmetic the Q4_0 matrix-vector forms use (matmul_gpu, matmul_norm_gpu, and the
// plain and gated segments of matmul_segments_gpu), MatvecContext::math of the launch:
// kCudaCores: the f32 fused multiply-add chain above. kTensorCores (CUDA sm_80 and up; else
// kCudaCores): exact products on bf16 tensor cores (weights as integers, activations split
// into three bf16 parts), f32 sums (matmul_mma.cu); the same accuracy against matmul_ref and
// the same batch invariance, but not the same bits as kCudaCores, so a backend keeps one
// choice for its lifetime. It applies to launches without expert segments; a launch with an
// expert segment stays on the CUDA cores with every segment in it (the expert walks of 1-4
// pairs measured faster there), so under kTensorCores an expert pair is no longer
// bit-identical to matmul_gpu on the expert's matrix, and a matrix is batch-invariant against
// itself only when it always goes in the same kind of launch (the backend's layers do so).
// kStaged (CUDA sm_80 and up; else kCudaCores): for a few activation rows. Launches whose
// matrices all have 16-byte aligned rows of a multiple of 256 inputs (all of 1,024, or none),
// expert segments included but no expert-grouped ones, stage the weights in shared memory and
// multiply on tensor cores with exact products, the activation's three bf16 parts in the mma's
// columns (matmul_mma_staged.cu); other launches as kCudaCores. Again the same accuracy and
// batch invariance, its own last bits; an expert pair is bit-identical to a one-row matmul_gpu
// on its expert's matrix, and a caller that groups pairs by expert (ExpertPairGroups) under
// kStaged gets CUDA-core bits for them, so the backend does not group there.
enum class MatvecMath { kCudaCores, kTensorCores, kStaged };
// The math a launch asking for `math` runs: math, or kCudaCores where the device has no bf16 mma.
MatvecMath matvec_math_on_device(MatvecMath math);
bool tensor_matvec_available();  // the current device has bf16 mma (CUDA sm_80 and up)

// kStaged launches of 1-2 activation rows (no expert segments) give each block one 16-row
// weight tile or two side by side (matmul_mma_staged.cu): two share the block's activation
// loads and its fixed work (parameters, copy addresses, the input norm's scales, the sums'
// epilogue) over twice the weights. Each output row's arithmetic is the one-tile walk's, so
// the bits are the same either way: two for launches of at least 4 one-tile blocks per
// multiprocessor, one for the rest (matmul_mma_staged.cu says why). MatmulArgs::staged_tiles
// (a launch's first segment's) forces one form, so the parity tests compare them bit for bit.

// Device scratch for kTensorCores launches of many rows (MatvecContext::split_scratch; null:
// none): such a launch first splits each of its activation matrices into bf16 parts there,
// once, instead of in every 16-row weight tile (matmul_mma.cu). Results are the same bits with
// or without it; a launch whose activations do not fit splits as it goes. The scratch must
// stay valid, and untouched by other work on the stream, while launches that use it run
// (captured graphs included). Only launches of at least split_min_macs multiply-adds (weights
// x rows over the segments) pre-split; split_min_macs < 0: the default (matmul_mma.cu says
// why; tests pass 1 to pre-split every launch). matvec_split_scratch_bytes: the bytes one
// activation matrix of num_rows x num_in takes.
size_t matvec_split_scratch_bytes(int64_t num_rows, int64_t num_in);

// The decode matvec's choices, passed with every matrix-vector launch (matmul_gpu,
// matmul_norm_gpu, matmul_experts_gpu, matmul_segments_gpu and the matmul_segments_*_supported
// rules): no state lives in the kernels. A backend fills one from its tuning at start-up and
// passes the same values for its lifetime (a row's bits follow the math); tests pass their own.
struct MatvecContext {
  MatvecMath math = MatvecMath::kCudaCores;  // run as matvec_math_on_device(math)
  void* split_scratch = nullptr;             // device; null: every launch splits as it goes
  size_t split_scratch_bytes = 0;
  int64_t split_min_macs = -1;               // < 0: the default (above)
  // Host counter the launch adds its activation-split launches to (kernels launched besides
  // the matvec's own; a caller that counts kernel launches points it at its count); null: none.
  int64_t* split_launches = nullptr;
};

// Tiled form for prefill chunks (many rows, 64 and up): same contract, preconditions and
// weight types as matmul_gpu; blocks of 64 rows x 64 outputs decode each weight tile into
// shared memory once and share it across the 64 rows (weights are read num_rows / 64 times
// instead of num_rows / 8). Each y[r][o] is one f32 fused multiply-add chain over k in order,
// independent of the other rows: batch-invariant (row r alone == row r in any batch), but not
// bit-identical to matmul_gpu (different summation order), so a backend that must give the
// same bits for a token whether it came in a prefill chunk or a decode step uses one form for
// both.
// math: kF32 (default) plain f32 FMA. kTf32: the tile's products on TF32 tensor cores (x and
// weights rounded to nearest TF32, 10-bit mantissas; f32 accumulation in k steps of 8, k
// ascending), CUDA sm_80 and up; HIP and older targets run kF32. Still batch-invariant (each
// element's value depends only on its x row and weight row), but NMSE ~1e-7 against matmul_ref
// instead of ~1e-13, so a caller picks it per use (e.g. prefill-only projections). It measured
// no faster than f32 (bench/RESULTS.md): the tile is bound by staging (per-row uncoalesced x
// and weight loads, decode, barriers), not by the FMAs.
// kTensorExact: Q4_0 weights on bf16 tensor cores with exact products (matmul_tile_exact.h: the
// weight as the integer q - 8, the activation as three bf16 parts; the tensor core sums each
// block's products, one fused multiply-add by the block's scale), CUDA sm_80 and up; other
// weight types, HIP and older targets run kF32. Batch-invariant like the others, NMSE ~1e-13
// against matmul_ref (the f32 tile's order of error), but its own bits. tensor_exact_available()
// says whether the current device runs it.
enum class MatmulMath { kF32, kTf32, kTensorExact };
bool tensor_exact_available();
gpuError_t matmul_prefill_gpu(const MatmulArgs& args, gpuStream_t stream, MatmulMath math = MatmulMath::kF32);

// matmul_gpu followed by an RMS norm of the finished rows, in one launch (the decode step's
// attention/GDN out-projection, which accumulates into the residual, and the FFN norm after
// it): y as matmul_gpu, then out[r][i] = y[r][i] / rms(y[r]) * weight[i] over the num_out
// elements of each row, bit-identical to rms_norm_gpu on the finished y. The last block to
// finish a row group does the group's norm (counted in counters[group], which it resets to
// zero, so CUDA-graph replays find zeros). counters: num_rows entries, zero on entry, zero
// on return; out may not alias y or x. Preconditions as matmul_gpu, plus non-null weight,
// out, counters and out_stride >= num_out; else gpuErrorInvalidValue, nothing launched.
struct MatmulNormEpilogue {
  const float* weight;   // [num_out]
  float eps;
  float* out;            // [num_rows][out_stride]
  int64_t out_stride;
  unsigned* counters;    // [num_rows], device, zero-filled
};
gpuError_t matmul_norm_gpu(const MatmulArgs& args, const MatmulNormEpilogue& norm, const MatvecContext& context,
                           gpuStream_t stream);

// Expert-indexed matvec for MoE: for each pair p < num_pairs (a routed (row, rank), pairs in
// row-major [row][rank] order), y row p = W_{expert_ids[p]} x row (p / x_rows_per_pair)...
// i.e. x row p / pairs_per_x_row: gate/up projections pass pairs_per_x_row = k (each token
// row feeds its k experts), the down projection passes 1 (one input row per pair).
// args.w is the stacked tensor (expert 0); args.num_rows is ignored (num_pairs rows of y).
// Each pair's result is bit-identical to matmul_gpu on that expert's matrix and that x row.
struct MatmulExpertsArgs {
  MatmulArgs base;
  const int32_t* expert_ids;  // [num_pairs], device
  int64_t num_pairs;
  int64_t pairs_per_x_row;
};
gpuError_t matmul_experts_gpu(const MatmulExpertsArgs& args, const MatvecContext& context, gpuStream_t stream);

// Several matrix-vector products in ONE launch (fewer launches per decode step): each segment
// is a matmul_gpu (args), a matmul_experts_gpu (expert_ids set: args.num_rows is the pair
// count, x row p / pairs_per_x_row), or a gated pair (w_up set: y[r][o] = SiLU(dot(W row o,
// x row r)) * dot(W_up row o, x row r), swiglu_gpu of the two products; W_up has W's shape,
// type and row bytes, and for expert segments the same expert stride). Every output element is
// bit-identical to the segment run alone through matmul_gpu / matmul_experts_gpu (then
// swiglu_gpu for a gated pair): batch-invariant like them. Segments must share w_type; they may
// differ in shapes, x, y and row counts; a gated segment cannot accumulate; no two segments may
// write the same y elements. If any segment is expert-indexed, rows go one per block row for
// all segments (same results, weights of plain segments re-read per row from L2).
// Preconditions per segment as matmul_gpu; else gpuErrorInvalidValue, nothing launched.
//
// Expert-grouped segments (expert_ids and groups set): the pairs come grouped by expert
// (moe_group_pairs_gpu's output): group g computes pairs groups.pairs[g][0, R) (a prefix of
// them valid, -1 after it) with expert groups.expert[g]'s matrix, sharing each weight load
// between them; y row p and x row p / pairs_per_x_row as before, so every pair's result is
// still the bits of matmul_experts_gpu (a row's arithmetic does not depend on R or on its
// neighbours). All grouped segments of a launch must share rows_per_group, and the launch's
// plain segments then go in row groups of that size too. expert_ids is only a flag here.
inline constexpr int kMaxMatmulSegments = 4;
struct ExpertPairGroups {
  const int32_t* expert = nullptr;  // [max_groups], device
  const int32_t* pairs = nullptr;   // [max_groups][rows_per_group], device; -1 past a group's pairs
  const int32_t* count = nullptr;   // [1], device: groups in use (<= max_groups)
  int64_t max_groups = 0;           // host bound on *count
  int rows_per_group = 0;           // 2 or 4
};
struct MatmulSegment {
  MatmulArgs args;
  const void* w_up = nullptr;
  const int32_t* expert_ids = nullptr;
  int64_t pairs_per_x_row = 1;
  ExpertPairGroups groups;          // rows_per_group > 0: expert-grouped (see above)
  // Input norm (input_norm_w set): x's rows are residual rows and the product's input is
  // rms_norm_gpu's output for them, RMSNorm(x row) * input_norm_w with eps input_norm_eps, its
  // bits exactly: every block of the launch normalises the rows it multiplies (the one-row
  // decode step's norm launch, its wait and its round trips, gone). Only where
  // matmul_segments_input_norm_supported holds; else matmul_segments_gpu refuses the launch.
  const float* input_norm_w = nullptr;
  float input_norm_eps = 0.0f;
  // A deferred RMSNorm between a product that adds into the residual and the products that
  // read its norm. RMSNorm(x) * w = s * (x * w) with s = 1 / sqrt(mean(x^2) + eps) a scalar per
  // row, and a product is linear, so W (RMSNorm(x) * w) = s * (W (x * w)): the producer writes
  // x * w and per-16-output sums of x^2, the consumers multiply their products by s, and the
  // step has no norm launch (its wait, its round trips, its stores) between them. Its own bits
  // (not rms_norm_gpu's), so a model takes it for every decode row count or for none.
  // Producer (norm_partials.squares set; one plain segment, any accumulate): besides y, out
  // row r = y row r * w elementwise, and squares[r * squares_stride + t] = the sum of y[r][o]^2
  // over tile t's 16 outputs o = 16 t .. 16 t + 15 (a fixed butterfly).
  struct NormPartials {
    const float* w = nullptr;  // [num_out]: the norm's weight
    float* out = nullptr;      // [rows][out_stride]
    int64_t out_stride = 0;
    float* squares = nullptr;  // [rows][squares_stride], squares_stride >= ceil(num_out / 16)
    int64_t squares_stride = 0;
  } norm_partials;
  // Consumer (deferred_norm.squares set): x rows are a producer's out rows (x * w) and each
  // output is multiplied by s = 1 / sqrt(S / num_in + eps), S the sum of the row's
  // ceil(num_in / 16) squares in a fixed order (thread t of 256 adding t, t + 256, ..., then
  // a butterfly and the warps in order); rows of at most 16,384 inputs.
  struct DeferredNorm {
    const float* squares = nullptr;
    int64_t squares_stride = 0;
    float eps = 0.0f;
  } deferred_norm;
};
gpuError_t matmul_segments_gpu(const MatmulSegment* segs, int num_segs, const MatvecContext& context, gpuStream_t stream);

// Whether matmul_segments_gpu takes these segments with their deferred norm (producer or
// consumer side): the staged matvec (matvec_math_on_device(context.math) == kStaged) and its
// shape rule, Q4_0, no expert segments, no input norm; a producer alone in its launch, not gated; consumers all
// with the same x, x_stride, rows, width and squares. A rule on the matrices and the setting
// only, so a model can ask it once for all row counts.
bool matmul_segments_deferred_norm_supported(const MatmulSegment* segs, int num_segs, const MatvecContext& context);
// The widest rows a deferred norm's readers take (each reader thread adds a bounded share of
// the row's tile sums).
inline constexpr int64_t kDeferredNormMaxInputs = 16384;

// Whether matmul_segments_gpu takes these segments with their input norm: the staged matvec
// (matvec_math_on_device(context.math) == kStaged) and its shape rule, Q4_0, plain or gated
// segments (no expert ones), every segment with the same x, x_stride, rows, width (num_in) and norm.
bool matmul_segments_input_norm_supported(const MatmulSegment* segs, int num_segs, const MatvecContext& context);

}  // namespace deltaserve::kernels
