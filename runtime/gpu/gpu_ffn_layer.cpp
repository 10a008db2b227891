// FFN on the GPU (MODEL.md 2.6), the device twin of runtime/cpu/cpu_ffn_layer.cpp: dense
// SwiGLU, or MoE: router products, softmax top-k (one moe_router_gpu launch), each (row, rank)
// pair through its expert, weighted sum in rank order plus the sigmoid-gated shared expert
// (moe_combine_gpu), added into the residual. Gate and up products with the SiLU product run
// as one gated matmul_segments_gpu launch (experts and shared expert together), as do the
// expert and shared down projections: 4 launches per MoE layer, the combine also writing the
// next block's input norm; 3 under the staged matvec, whose down products and combine are one
// launch (moe_down_combine_gpu; the MoE half is in gpu_moe_layer.cpp). Also the shared matmul
// and RMSNorm helpers (gpu_products.h).
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/matmul/matmul_experts_prefill_gpu.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe_down_combine_gpu.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "runtime/gpu/gpu_layers.h"
#include "runtime/gpu/gpu_products.h"

namespace deltaserve::runtime::gpu {


kernels::MatmulArgs matmul_args(const DeviceTensor& w, const float* x, int64_t num_rows, float* y) {
  kernels::MatmulArgs args{};
  args.w = w.data;
  args.w_type = w.type;
  args.num_in = w.ne0;
  args.num_out = w.ne1;
  args.w_row_bytes = w.row_bytes;
  args.x = x;
  args.num_rows = num_rows;
  args.x_stride = w.ne0;
  args.y = y;
  args.y_stride = w.ne1;
  return args;
}

// One segment per launch slot; expert segments read x row p / pairs_per_x_row.
kernels::MatmulSegment segment(const DeviceTensor& w, const float* x, int64_t num_rows, float* y) {
  kernels::MatmulSegment s{};
  s.args = matmul_args(w, x, num_rows, y);
  return s;
}
kernels::MatmulSegment expert_segment(const DeviceTensor& w, const float* x, const int32_t* ids, int64_t num_pairs,
                                      int64_t pairs_per_x_row, float* y) {
  kernels::MatmulSegment s = segment(w, x, num_pairs, y);
  s.expert_ids = ids;
  s.pairs_per_x_row = pairs_per_x_row;
  return s;
}
// Gated: y = SiLU(gate x) * (up x), swiglu_gpu's bits.
kernels::MatmulSegment gated(kernels::MatmulSegment s, const DeviceTensor& up) {
  s.w_up = up.data;
  return s;
}
bool same_layout(const DeviceTensor& a, const DeviceTensor& b) {
  return a.type == b.type && a.ne0 == b.ne0 && a.ne1 == b.ne1 && a.row_bytes == b.row_bytes;
}
namespace {

// A decode-row segment reading a deferred norm's rows (InputNorm::deferred).
kernels::MatmulSegment reads_deferred_norm(kernels::MatmulSegment s, const GpuLayerContext& ctx) {
  s.deferred_norm.squares = ctx.ws.norm_squares;
  s.deferred_norm.squares_stride = ctx.ws.norm_squares_stride;
  s.deferred_norm.eps = ctx.config.rms_eps;
  return s;
}
// The decode-row segment of a product that adds into the residual y and writes the next norm
// deferred (NextNorm::deferred).
kernels::MatmulSegment writes_deferred_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows,
                                            float* y, const DeviceTensor& norm, float* out, int64_t out_stride) {
  kernels::MatmulSegment s = segment(w, x, num_rows, y);
  s.args.accumulate = true;
  s.norm_partials.w = norm.f32();
  s.norm_partials.out = out;
  s.norm_partials.out_stride = out_stride;
  s.norm_partials.squares = ctx.ws.norm_squares;
  s.norm_partials.squares_stride = ctx.ws.norm_squares_stride;
  return s;
}

}  // namespace

// Launches the segments, fusing those of one weight type into one launch.
void launch_segments(const GpuLayerContext& ctx, std::vector<kernels::MatmulSegment> segs, const char* what) {
  while (!segs.empty()) {
    std::vector<kernels::MatmulSegment> batch, rest;
    for (const kernels::MatmulSegment& s : segs) {
      const bool fits = batch.empty() || (s.args.w_type == batch[0].args.w_type &&
                                          static_cast<int>(batch.size()) < kernels::kMaxMatmulSegments);
      (fits ? batch : rest).push_back(s);
    }
    DS_GPU_LAUNCH(ctx, 1, kernels::matmul_segments_gpu(batch.data(), static_cast<int>(batch.size()), ctx.matvec, ctx.stream),
                  "%s: %d segments (%s), %lld rows, first in %lld out %lld", what, static_cast<int>(batch.size()),
                  std::string(kernels::dtype_name(batch[0].args.w_type)).c_str(),
                  static_cast<long long>(batch[0].args.num_rows), static_cast<long long>(batch[0].args.num_in),
                  static_cast<long long>(batch[0].args.num_out));
    segs.swap(rest);
  }
}

// Tiled prefill form of a product over rows [first, first + count) of dense buffers.
void matmul_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t first, int64_t count, float* y,
                  bool accumulate) {
  kernels::MatmulArgs args = matmul_args(w, x + first * w.ne0, count, y + first * w.ne1);
  args.accumulate = accumulate;
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_prefill_gpu(args, ctx.stream, ctx.prefill_math), "matmul_prefill %s (%s): %lld rows, in %lld, out %lld",
                w.name.c_str(), std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(count),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

// Whether decode rows' product with w runs on the exact tile (tensor mode: plain Q4_0 products
// of matrices with at least ctx.tiled_decode_min_outputs outputs).
bool decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w) {
  return ctx.tiled_decode_min_outputs > 0 && w.type == kernels::DType::Q4_0 && w.ne1 >= ctx.tiled_decode_min_outputs;
}

// Decode rows [0, num_rows) of a product on the exact tile (decode_tiled).
void matmul_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
                         bool accumulate) {
  kernels::MatmulArgs args = matmul_args(w, x, num_rows, y);
  args.accumulate = accumulate;
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_prefill_gpu(args, ctx.stream, kernels::MatmulMath::kTensorExact),
                "matmul %s (%s) tiled: %lld rows, in %lld, out %lld", w.name.c_str(),
                std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(num_rows),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

// Decode rows [0, num_rows) of g = SiLU(gate x) * (up x) on the exact tile (decode_tiled of
// both matrices), u: scratch like g.
void gated_product_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                                int64_t num_rows, float* g, float* u, const char* what) {
  matmul_decode_tiled(ctx, gate, x, num_rows, g, false);
  matmul_decode_tiled(ctx, up, x, num_rows, u, false);
  DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, num_rows * gate.ne1, ctx.stream), "swiglu %s: %lld rows x %lld", what,
                static_cast<long long>(num_rows), static_cast<long long>(gate.ne1));
}

// Rows [first, first + count) of g = SiLU(gate x) * (up x) through the tiled kernel.
void gated_product_tiled(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                         int64_t first, int64_t count, float* g, float* u) {
  const int64_t width = gate.ne1;
  matmul_tiled(ctx, gate, x, first, count, g, false);
  matmul_tiled(ctx, up, x, first, count, u, false);
  DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g + first * width, u + first * width, g + first * width, count * width, ctx.stream),
                "swiglu %lld prefill rows x %lld", static_cast<long long>(count), static_cast<long long>(width));
}

namespace {

// The decode rows' segments (reading in.out) with in's norm carried into their launch, when
// the step allows it (products_normalise_input) and the launch takes it; false: the caller
// fills in.out first (normalise_input).
bool carry_input_norm(const GpuLayerContext& ctx, std::vector<kernels::MatmulSegment>& segs, const InputNorm& in,
                      RowSplit rows) {
  if (in.w == nullptr || segs.empty() || !products_normalise_input(ctx, rows)) return false;
  std::vector<kernels::MatmulSegment> carried = segs;
  for (kernels::MatmulSegment& s : carried) {
    s.args.x = in.residual;
    s.args.x_stride = in.w->ne0;
    s.input_norm_w = in.w->f32();
    s.input_norm_eps = ctx.config.rms_eps;
  }
  if (!kernels::matmul_segments_input_norm_supported(carried.data(), static_cast<int>(carried.size()), ctx.matvec)) return false;
  segs.swap(carried);
  return true;
}

// in.out = RMSNorm(in.residual) * in.w over the step's rows (an input norm no launch carried).
void normalise_input(const GpuLayerContext& ctx, const InputNorm& in, RowSplit rows) {
  rms_norm(ctx, *in.w, in.residual, rows.num_rows, in.out, in.w->ne0);
}

// g = SiLU(gate x) * (up x) over the step rows (u: scratch like g): decode rows as one gated
// segment launch (or two products and swiglu_gpu when the layouts differ), prefill rows as
// two tiled products and swiglu_gpu. With in.w set x (== in.out) is the norm of in.residual,
// carried into the gated launch where it can be.
void gated_product(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                   RowSplit rows, float* g, float* u, const InputNorm& in = {}) {
  const int64_t nd = rows.num_decode_rows, np = rows.num_prefill_rows(), width = gate.ne1;
  if (in.w != nullptr) {
    std::vector<kernels::MatmulSegment> segs;
    if (nd > 0 && !decode_tiled(ctx, gate) && same_layout(gate, up)) segs.push_back(gated(segment(gate, x, nd, g), up));
    if (carry_input_norm(ctx, segs, in, rows)) {
      launch_segments(ctx, std::move(segs), "gate*up (input norm)");
      return;
    }
    normalise_input(ctx, in, rows);
  }
  if (nd > 0) {
    // A deferred norm's rows (in.deferred) go to the gated launch, which takes it or refuses
    // (norm_deferred said it takes it).
    if (!in.deferred && decode_tiled(ctx, gate) && decode_tiled(ctx, up)) {
      gated_product_decode_tiled(ctx, gate, up, x, nd, g, u, "ffn");
    } else if (in.deferred || same_layout(gate, up)) {
      const kernels::MatmulSegment s = gated(segment(gate, x, nd, g), up);
      launch_segments(ctx, {in.deferred ? reads_deferred_norm(s, ctx) : s}, "gate*up");
    } else {
      matmul(ctx, gate, x, nd, g);
      matmul(ctx, up, x, nd, u);
      DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, nd * width, ctx.stream), "swiglu %lld x %lld",
                    static_cast<long long>(nd), static_cast<long long>(width));
    }
  }
  if (np > 0) gated_product_tiled(ctx, gate, up, x, nd, np, g, u);
}


}  // namespace

void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
            bool accumulate) {
  if (decode_tiled(ctx, w)) return matmul_decode_tiled(ctx, w, x, num_rows, y, accumulate);
  kernels::MatmulArgs args = matmul_args(w, x, num_rows, y);
  args.accumulate = accumulate;
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_gpu(args, ctx.matvec, ctx.stream), "matmul %s (%s): %lld rows, in %lld, out %lld",
               w.name.c_str(), std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(num_rows),
               static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

void rms_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
              int64_t y_stride) {
  const int64_t h = w.ne0;
  const kernels::RmsNormArgs args{x, h, w.f32(), y, y_stride, num_rows, h, ctx.config.rms_eps};
  DS_GPU_LAUNCH(ctx, 1, kernels::rms_norm_gpu(args, ctx.stream), "rms_norm %s: %lld rows of %lld", w.name.c_str(),
               static_cast<long long>(num_rows), static_cast<long long>(h));
}

void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, RowSplit rows, float* y, bool accumulate) {
  if (rows.num_decode_rows > 0) matmul(ctx, w, x, rows.num_decode_rows, y, accumulate);
  if (rows.num_prefill_rows() > 0) matmul_tiled(ctx, w, x, rows.num_decode_rows, rows.num_prefill_rows(), y, accumulate);
}

void matmul_then_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, RowSplit rows, float* y,
                      const NextNorm& next) {
  if (next.w == nullptr) return matmul(ctx, w, x, rows, y, /*accumulate=*/true);
  const int64_t nd = rows.num_decode_rows, np = rows.num_prefill_rows(), h = next.w->ne0;
  if (next.deferred) {  // the decode rows' norm left to its readers; the prefill rows' launched
    if (nd > 0) launch_segments(ctx, {writes_deferred_norm(ctx, w, x, nd, y, *next.w, next.out, next.out_stride)}, "deferred norm");
    if (np > 0) {
      matmul_tiled(ctx, w, x, nd, np, y, /*accumulate=*/true);
      rms_norm(ctx, *next.w, y + nd * h, np, next.out + nd * next.out_stride, next.out_stride);
    }
    return;
  }
  // One norm launch over every row. Not in the matvec's launch (matmul_norm_gpu): inside a
  // step graph a launch costs next to nothing, while the fused form's serial tail (the last
  // block of a row group normalises the group's rows alone) grows with rows x width.
  matmul(ctx, w, x, rows, y, /*accumulate=*/true);
  rms_norm(ctx, *next.w, y, rows.num_rows, next.out, next.out_stride);
}

void matmul_many(const GpuLayerContext& ctx, const DeviceTensor* const* ws, float* const* ys, int count, const float* x,
                 RowSplit rows, const InputNorm& in) {
  if (in.w != nullptr) {
    std::vector<kernels::MatmulSegment> segs;
    bool tiled = false;
    for (int i = 0; i < count; ++i) {
      tiled = tiled || decode_tiled(ctx, *ws[i]);
      segs.push_back(segment(*ws[i], x, rows.num_decode_rows, ys[i]));
    }
    if (!tiled && rows.num_decode_rows > 0 && carry_input_norm(ctx, segs, in, rows)) {
      launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
      return;
    }
    normalise_input(ctx, in, rows);
  }
  if (rows.num_decode_rows > 0) {
    std::vector<kernels::MatmulSegment> segs;
    // A deferred norm's rows (in.deferred) all go to the segment launch, which takes the norm
    // or refuses (norm_deferred said it takes it).
    for (int i = 0; i < count; ++i) {
      if (!in.deferred && decode_tiled(ctx, *ws[i])) {
        matmul_decode_tiled(ctx, *ws[i], x, rows.num_decode_rows, ys[i], false);
      } else {
        const kernels::MatmulSegment s = segment(*ws[i], x, rows.num_decode_rows, ys[i]);
        segs.push_back(in.deferred ? reads_deferred_norm(s, ctx) : s);
      }
    }
    if (!segs.empty()) launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
  }
  if (rows.num_prefill_rows() > 0)
    for (int i = 0; i < count; ++i) matmul_tiled(ctx, *ws[i], x, rows.num_decode_rows, rows.num_prefill_rows(), ys[i], false);
}

bool norm_deferred(const GpuLayerContext& ctx, const DeviceTensor& producer, const DeviceTensor& norm,
                   const DeviceTensor* const* consumers, int count, bool gated_pair) {
  const int64_t h = producer.ne1;
  if (!ctx.defer_norms || ctx.ws.norm_squares == nullptr || count < 1 || count > kernels::kMaxMatmulSegments ||
      (gated_pair && count != 2) || norm.ne0 != h || norm.type != kernels::DType::F32 || decode_tiled(ctx, producer))
    return false;
  // The rules read the matrices (and the setting); one row and the workspace stand in for the step's.
  const GpuWorkspace& ws = ctx.ws;
  const kernels::MatmulSegment writer = writes_deferred_norm(ctx, producer, ws.y, 1, ws.x, norm, ws.a, h);
  if (!kernels::matmul_segments_deferred_norm_supported(&writer, 1, ctx.matvec)) return false;
  std::vector<kernels::MatmulSegment> readers;
  for (int i = 0; i < count; ++i) {
    const DeviceTensor& c = *consumers[i];
    if (c.ne0 != h || decode_tiled(ctx, c)) return false;
  }
  if (gated_pair) {
    if (!same_layout(*consumers[0], *consumers[1])) return false;
    readers.push_back(reads_deferred_norm(gated(segment(*consumers[0], ws.a, 1, ws.y), *consumers[1]), ctx));
  } else {
    for (int i = 0; i < count; ++i) readers.push_back(reads_deferred_norm(segment(*consumers[i], ws.a, 1, ws.y), ctx));
  }
  return kernels::matmul_segments_deferred_norm_supported(readers.data(), static_cast<int>(readers.size()), ctx.matvec);
}

// Why: at one or a few rows a norm launch is a chain of its own (the wait for the previous
// kernel, a round trip for the row, the block reduction, the writes, then the next kernel's
// wait), while the product that reads it waits for its activations anyway; normalising in
// every block of that product costs it one more round trip over the row (bench/RESULTS.md).
bool products_normalise_input(const GpuLayerContext& ctx, RowSplit rows) {
  return ctx.carry_input_norms && ctx.config.num_embd <= kCarriedInputNormMaxWidth && rows.num_decode_rows > 0 &&
         rows.num_decode_rows <= kCarriedInputNormMaxRows && rows.num_prefill_rows() == 0;
}

bool ffn_normalises_input(const GpuLayerContext& ctx, RowSplit rows) {
  const ModelConfig& c = ctx.config;
  if (!c.is_moe()) return products_normalise_input(ctx, rows);
  const int64_t num_rows = rows.num_rows;
  return num_rows >= 1 && num_rows <= kFusedRouterMaxRows && kernels::moe_router_fuses_norm(c.num_embd, num_rows, c.num_experts);
}

void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y,
                 const NextNorm& next, const FfnInputNorm& in) {
  if (in.w != nullptr && in.b != b) throw std::logic_error("ffn_forward: the input norm must write b");
  if (ctx.config.is_moe() && (in.deferred || next.deferred)) throw std::logic_error("ffn_forward: no deferred norm in a MoE FFN");
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, rows, b, y, next, in);
  } else {
    InputNorm gate_in{in.w, y, in.b};
    gate_in.deferred = in.deferred;
    gated_product(ctx, w.gate, w.up, b, rows, ctx.ws.ffn_g, ctx.ws.ffn_u, gate_in);
    matmul_then_norm(ctx, w.down, ctx.ws.ffn_g, rows, y, next);
  }
}

}  // namespace deltaserve::runtime::gpu
