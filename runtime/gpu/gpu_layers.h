// The GPU backend's layer functions (the device twins of runtime/cpu/cpu_layers.h). Internal
// to runtime/gpu. Every function only enqueues kernels on ctx.stream: no host sync, no
// allocation; all buffers come from the workspace sized at start. A failing launch aborts
// through DS_GPU_CHECK with the op and its shapes (the plan and the weights were checked
// before, so a failure here is a bug or a device fault).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kernels/gdn/gdn_gpu.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/matmul/matmul_gpu.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/gpu/kernel_trace.h"
#include "runtime/model_config.h"

namespace deltaserve::runtime::gpu {

// Device pointers to one step's index arrays (all in the staging mirror).
struct StepRowsView {
  int64_t num_rows = 0;
  int64_t num_seqs = 0;
  const int32_t* tokens = nullptr;         // [num_rows]
  const int32_t* positions = nullptr;      // [num_rows]: position in its own sequence
  const int32_t* row_seq = nullptr;        // [num_rows]: plan sequence index
  const int32_t* seq_row_begin = nullptr;  // [num_seqs + 1]
  const int32_t* state_in = nullptr;       // [num_seqs]: GDN state entries (trunk only)
  const int32_t* state_out = nullptr;      // [num_seqs]
  const int32_t* ring_first = nullptr;     // [num_seqs]
  const int32_t* block_tables = nullptr;   // [num_seqs][block_table_stride]
  int64_t block_table_stride = 0;
  int64_t max_keys = 0;                    // max over rows of position + 1
  // Rows [0, num_decode_rows) are the first num_decode_seqs sequences: decode and verify rows,
  // through the matrix-vector kernels, gdn_step and paged attention. The remaining sequences
  // are prefill chunks, through the tiled matmul, the chunked GDN kernel and prefill
  // attention (GpuBackend::is_prefill_chunk decides, from the sequence's own rows only).
  int64_t num_decode_rows = 0;
  int64_t num_decode_seqs = 0;
  const int32_t* prefill_row_begin = nullptr;       // [prefill seqs + 1], from num_decode_rows
  const int32_t* prefill_first_position = nullptr;  // [prefill seqs]
  int64_t max_prefill_rows = 0;                     // rows of the longest prefill chunk
  int64_t num_prefill_rows() const { return num_rows - num_decode_rows; }
  int64_t num_prefill_seqs() const { return num_seqs - num_decode_seqs; }
};

// Rows of one call split as in StepRowsView: [0, num_decode_rows) matrix-vector,
// [num_decode_rows, num_rows) tiled.
struct RowSplit {
  int64_t num_rows = 0;
  int64_t num_decode_rows = 0;
  int64_t num_prefill_rows() const { return num_rows - num_decode_rows; }
};
inline RowSplit row_split(const StepRowsView& rows) { return {rows.num_rows, rows.num_decode_rows}; }

// Scratch buffers for max_rows rows (sized at start; see GpuBackend for the bounds).
struct GpuWorkspace {
  int64_t max_rows = 0;
  float *x = nullptr, *a = nullptr, *y = nullptr;               // [R][H]: residual, normed, mixer/FFN out
  float *qg = nullptr, *k = nullptr, *v = nullptr, *att_o = nullptr;  // attention
  float* att_scratch = nullptr;  // paged_attention_gpu workspace
  int64_t att_scratch_floats = 0;
  uint32_t* att_sync = nullptr;  // [R][num_heads] paged_attention_gpu counters (every head split), zero between launches
  float* gdn_prefill_ws = nullptr;  // gdn_prefill_gpu workspace for max_rows rows (null: no chunked GDN)
  unsigned char* expert_prefill_ws = nullptr;  // matmul_experts_prefill_gpu workspace (max_rows * k pairs)
  float *qkv = nullptr, *z = nullptr, *beta = nullptr, *alpha = nullptr, *gdn_o = nullptr;  // GDN
  int32_t* gdn_sync = nullptr;   // [max_seqs][Hk] counters, zero between launches
  float *ffn_g = nullptr, *ffn_u = nullptr;                     // dense FFN [R][I]
  float* router_logits = nullptr;                               // [R][E]
  int32_t* router_sync = nullptr;  // [R] moe_router_gpu counters, zero between launches
  unsigned* norm_sync = nullptr;   // [R] matmul_norm_gpu counters, zero between launches
  // [R][norm_squares_stride]: a deferred norm's per-16-output sums of squares (NextNorm::deferred)
  float* norm_squares = nullptr;
  int64_t norm_squares_stride = 0;
  int32_t* expert_ids = nullptr;                                // [R][k]
  float* expert_weights = nullptr;                              // [R][k]
  // Decode pairs grouped by expert (moe_group_pairs_gpu): [R*k] experts, [R*k][4] pairs, count.
  int32_t *pair_group_expert = nullptr, *pair_group_pairs = nullptr, *pair_group_count = nullptr;
  float *exp_g = nullptr, *exp_u = nullptr, *exp_out = nullptr; // [R*k][Ie], [R*k][H]
  float *sh_g = nullptr, *sh_u = nullptr, *sh_gate = nullptr;   // [R][Is], [R][1]
  float* sh_out = nullptr;                                      // [R][H]
  float* mtp_cat = nullptr;                                     // [R][2H]
  float* lm_in = nullptr;                                       // [R][H]: normed logit rows
};

struct GpuLayerContext {
  const ModelConfig& config;
  gpuStream_t stream;
  int64_t kv_block_tokens;
  const GpuWorkspace& ws;
  int64_t* launches;  // kernel launch counter: every enqueued kernel adds one (DS_GPU_LAUNCH)
  KernelTrace* trace = nullptr;  // non-null only while tracing (GpuBackend::set_trace)
  kernels::MatmulMath prefill_math = kernels::MatmulMath::kF32;  // tiled prefill products
  // Decode and verify rows' routed-expert products through the expert-grouped exact tensor-core
  // tile instead of the matvec (a backend-lifetime choice, so a row's bits never follow the load).
  bool tiled_decode_experts = false;
  // Decode and verify rows' plain Q4_0 products with matrices of at least this many outputs
  // through the exact tile as well (matmul_prefill_gpu, kTensorExact) instead of the
  // tensor-core matvec; 0: none. Same backend-lifetime rule (kTiledDecodeMinOutputs says why).
  int64_t tiled_decode_min_outputs = 0;
  // Under the staged matvec: the MoE decode rows' down products and combine in one launch
  // (moe_down_combine_gpu, the same bits as the two launches) for steps of
  // fuse_down_combine_rows (first, second: inclusive) decode rows; second < first: never.
  std::pair<int64_t, int64_t> fuse_down_combine_rows{1, 0};
  // Under the staged matvec: decode steps' products carry their input norms (InputNorm,
  // products_normalise_input) instead of reading an rms_norm launch's output; same bits.
  bool carry_input_norms = false;
  // Under the staged matvec: the dense models' norms between a product that adds into the
  // residual and the products that read the norm are deferred (norm_deferred; NextNorm and
  // InputNorm::deferred). Their own bits: a backend-lifetime choice, never the load's.
  bool defer_norms = false;
  // Every matvec launch's math and pre-split scratch (a backend-lifetime choice), its
  // split_launches pointing at *launches (DS_GPU_LAUNCH).
  kernels::MatvecContext matvec{};
};

// The default fuse_down_combine_rows (gpu_ffn_layer.cpp says why).
inline constexpr std::pair<int64_t, int64_t> kFusedDownCombineRows{1, 16};

// Tensor mode's tiled_decode_min_outputs: the LM head's width class. The exact tile splits a
// matrix by 128 outputs and 32 rows, never along K, so at decode row counts a narrow matrix
// gives too few blocks for the GPU. In tensor mode every Q4_0 projection of the 35B-A3B on the
// tile made a 64-stream step much slower, the LM head alone (248,320 outputs) faster; the 27B's
// FFN gate/up (17,408 outputs) on it too gained at 64 streams but lost at one
// (bench/RESULTS.md), so the line is drawn above them. A rule on the matrix's shape only: a row's bits never follow the load.
inline constexpr int64_t kTiledDecodeMinOutputs = 65536;

// DS_GPU_LAUNCH(ctx, num_kernels, call, "shapes", ...): DS_GPU_CHECK of a kernel entry point
// that launches num_kernels kernels, counted in *ctx.launches, plus the activation splits a
// tensor-core matvec launched first (zero elsewhere), which the call added to *ctx.launches
// itself (ctx.matvec.split_launches). Every launch of the backend goes through it, so the
// count equals the node count of a captured step graph. While tracing, an event pair brackets
// the call, classed by the shape format (its literal starts with the op name; KernelTrace,
// kernel_class()); off, the hook costs one branch on null.
#define DS_GPU_LAUNCH(ctx, num_kernels, call, ...)                                         \
  do {                                                                                     \
    ::deltaserve::runtime::gpu::KernelTrace* const ds_gpu_trace_ = (ctx).trace;            \
    if (ds_gpu_trace_ != nullptr) ds_gpu_trace_->begin((ctx).stream, __VA_ARGS__);        \
    const int64_t ds_gpu_before_ = *(ctx).launches;                                        \
    DS_GPU_CHECK(call, __VA_ARGS__);                                                       \
    *(ctx).launches += (num_kernels);                                                      \
    const int64_t ds_gpu_count_ = *(ctx).launches - ds_gpu_before_;                        \
    if (ds_gpu_trace_ != nullptr) ds_gpu_trace_->end((ctx).stream, ds_gpu_count_);         \
  } while (0)

// One GDN layer's state pools: entries of [Hv][dk][dv] delta_type and [Kc-1][Dc] floats.
struct GdnStatePools {
  void* delta = nullptr;
  float* conv = nullptr;
  kernels::StateType delta_type = kernels::StateType::kF32;
};
// One attention layer's paged cache: [num_blocks][block_tokens][nkv][hd] floats each.
struct KvPool {
  float* k = nullptr;
  float* v = nullptr;
};

// y[r] = W x[r] (or y[r] += W x[r] when accumulate) for rows r < num_rows (x, y dense with
// strides num_in / num_out), through the matrix-vector kernel.
void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
            bool accumulate = false);
// The same over step rows: decode rows through matmul_gpu, prefill rows through the tiled
// matmul_prefill_gpu (each row's bits depend only on its own kernel class).
void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, RowSplit rows, float* y,
            bool accumulate = false);

// An input RMSNorm carried into the products that read its output, for decode steps under the
// staged matvec (products_normalise_input): every block of their launch normalises the rows
// it multiplies (kernels::MatmulSegment::input_norm_w, rms_norm_gpu's bits), so the step has no
// norm launch there. Where a launch cannot take it (mixed weight types, prefill rows, other
// matvec kinds) the rows go through an rms_norm launch into out first. w null: none.
struct InputNorm {
  const DeviceTensor* w = nullptr;
  const float* residual = nullptr;  // [N][H]: the rows to normalise
  float* out = nullptr;             // [N][H]: the normed rows, where an rms_norm launch writes them
  // Set (w null): x's decode rows are a deferred norm's x * w rows (NextNorm::deferred), its
  // sums of squares in ctx.ws.norm_squares; the products take the scale; prefill rows are normed.
  bool deferred = false;
};
// Whether this step's products carry their input norms: ctx.carry_input_norms (the staged
// matvec), steps of 1 to
// kCarriedInputNormMaxRows decode rows only, models of at most kCarriedInputNormMaxWidth
// hidden units. Same bits either way, so the choice may follow the load.
bool products_normalise_input(const GpuLayerContext& ctx, RowSplit rows);
// Why bounds: every block of a product normalises the rows it multiplies, so the norm's reads
// grow with rows x blocks x width; past two rows, or on the 27B's 5,120-wide rows, the
// separate launch was faster (bench/RESULTS.md).
inline constexpr int64_t kCarriedInputNormMaxRows = 2;
inline constexpr int64_t kCarriedInputNormMaxWidth = 2048;

// y_i[r] = W_i x[r] for every i, in as few launches as the weight types allow (one per type,
// at most kMaxMatmulSegments matrices each); same bits as one matmul per matrix. With in.w set,
// x (== in.out) is the norm of in.residual, carried into the launch where it can be.
void matmul_many(const GpuLayerContext& ctx, const DeviceTensor* const* ws, float* const* ys, int count, const float* x,
                 RowSplit rows, const InputNorm& in = {});

// The next block's input RMSNorm, written at the end of a mixer or an FFN: out[r] = RMSNorm(y[r]) * w.
struct NextNorm {
  const DeviceTensor* w = nullptr;  // null: none
  float* out = nullptr;             // [N][out_stride]; may be the FFN's input b (read before)
  int64_t out_stride = 0;
  // Deferred (norm_deferred said so for the product and its readers): the decode rows' out is
  // y * w, not scaled, with y's per-16-output sums of squares in ctx.ws.norm_squares, from the
  // product's own launch; the readers scale their products (kernels::MatmulSegment::
  // deferred_norm). Prefill rows get the norm launch as ever.
  bool deferred = false;
};
// Whether the norm (weight `norm`) between `producer` (a plain product of the decode rows adding into the
// residual) and `consumers` (the products reading the norm; gated_pair: consumers[0..1] are a
// gated pair, one launch) is deferred: ctx.defer_norms, and both launches take it (kernels::
// matmul_segments_deferred_norm_supported). A function of the matrices and the backend's
// setting only, so every step of a model makes the same choice whatever its rows.
bool norm_deferred(const GpuLayerContext& ctx, const DeviceTensor& producer, const DeviceTensor& norm,
                   const DeviceTensor* const* consumers, int count, bool gated_pair);
// Mixers: read the normed rows a [N][H], ADD their output into y [N][H] (the residual add
// fused into the output projection: y + W o rounds exactly as a separate add did), then, with
// post.w set, write post.out = RMSNorm(y) * post.w (the FFN's input norm, by matmul_then_norm).
// With in.w set, a is not normed yet: in carries its norm (in.out == a).
void gdn_forward(const GpuLayerContext& ctx, const GpuGdnWeights& w, const GdnStatePools& state,
                 const StepRowsView& rows, const float* a, float* y, const NextNorm& post, const InputNorm& in = {});
void attention_forward(const GpuLayerContext& ctx, const GpuAttentionWeights& w, const KvPool& cache,
                       const StepRowsView& rows, const float* a, float* y, const NextNorm& post, const InputNorm& in = {});
// The FFN's own input norm (ffn_normalises_input): b = RMSNorm(y) * w, written by the FFN's
// first launch from the residual y before it adds anything to y.
struct FfnInputNorm {
  const DeviceTensor* w = nullptr;  // null: b holds the normed rows already
  float* b = nullptr;               // [N][H]: the FFN's input b
  bool deferred = false;            // (w null) b's decode rows are a deferred norm's (InputNorm::deferred)
};
// Whether the FFN takes its input norm itself for a step: MoE steps of at most 4 rows, where
// the fused router normalises its rows in each block (rms_norm_gpu's bits), so the norm costs
// no launch: 40 fewer launches per 35B-A3B decode step; dense FFNs where the step's products
// carry their input norms (products_normalise_input: the gate/up launch normalises them).
bool ffn_normalises_input(const GpuLayerContext& ctx, RowSplit rows);
// FFN: dense SwiGLU or MoE with the shared expert, by ctx.config.arch; ADDS its output into y.
// With next.w set it also writes next.out as rms_norm would from the final y: MoE in the
// combine launch (moe_combine_gpu's epilogue, same bits), dense by an rms_norm launch. With
// in.w set (only where ffn_normalises_input) b = in.b is the norm of y: MoE by the router
// launch, dense carried into the gate/up launch (b then not written) or an rms_norm launch.
void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y,
                 const NextNorm& next = {}, const FfnInputNorm& in = {});

// y += W x over all rows (decode rows: matvec; prefill rows: tiled), then, with next.w set,
// next.out = RMSNorm(y) * next.w for every row: one rms_norm launch, or, with next.deferred,
// the decode rows' norm left to the readers. next.out may not alias x or y.
void matmul_then_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, RowSplit rows, float* y,
                      const NextNorm& next);
// The expert pair grouping rule as words for logs.
std::string expert_grouping_setting();

// x[r] <- RMSNorm(src[r]) * w over num_rows rows of H (strides H); y may alias x.
void rms_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
              int64_t y_stride);

}  // namespace deltaserve::runtime::gpu
