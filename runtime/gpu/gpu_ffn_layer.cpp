// FFN on the GPU (MODEL.md 2.6), the device twin of runtime/cpu/cpu_ffn_layer.cpp: dense
// SwiGLU, or MoE: router matmul, softmax top-k (moe_route_gpu), each (row, rank) pair through
// its expert, weighted sum in rank order plus the sigmoid-gated shared expert
// (moe_combine_gpu), added into the residual. Gate and up products with the SiLU product run
// as one gated matmul_segments_gpu launch (experts and shared expert together), as do the
// expert and shared down projections: 5 launches per MoE layer. Also the shared matmul and
// RMSNorm helpers.
#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise_gpu.h"
#include "kernels/matmul_gpu.h"
#include "kernels/moe_gpu.h"
#include "kernels/norm_gpu.h"
#include "kernels/step_ops_gpu.h"
#include "runtime/gpu/gpu_layers.h"

namespace deltaserve::runtime::gpu {
namespace {

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

// Launches the segments, fusing those of one weight type into one launch.
void launch_segments(const GpuLayerContext& ctx, std::vector<kernels::MatmulSegment> segs, const char* what) {
  while (!segs.empty()) {
    std::vector<kernels::MatmulSegment> batch, rest;
    for (const kernels::MatmulSegment& s : segs) {
      const bool fits = batch.empty() || (s.args.w_type == batch[0].args.w_type &&
                                          static_cast<int>(batch.size()) < kernels::kMaxMatmulSegments);
      (fits ? batch : rest).push_back(s);
    }
    DS_GPU_LAUNCH(ctx, 1, kernels::matmul_segments_gpu(batch.data(), static_cast<int>(batch.size()), ctx.stream),
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
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_prefill_gpu(args, ctx.stream), "matmul_prefill %s (%s): %lld rows, in %lld, out %lld",
                w.name.c_str(), std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(count),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
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

// g = SiLU(gate x) * (up x) over the step rows (u: scratch like g): decode rows as one gated
// segment launch (or two products and swiglu_gpu when the layouts differ), prefill rows as
// two tiled products and swiglu_gpu.
void gated_product(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                   RowSplit rows, float* g, float* u) {
  const int64_t nd = rows.num_decode_rows, np = rows.num_prefill_rows(), width = gate.ne1;
  if (nd > 0) {
    if (same_layout(gate, up)) {
      launch_segments(ctx, {gated(segment(gate, x, nd, g), up)}, "gate*up");
    } else {
      matmul(ctx, gate, x, nd, g);
      matmul(ctx, up, x, nd, u);
      DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, nd * width, ctx.stream), "swiglu %lld x %lld",
                    static_cast<long long>(nd), static_cast<long long>(width));
    }
  }
  if (np > 0) gated_product_tiled(ctx, gate, up, x, nd, np, g, u);
}

// y += down(SiLU(gate x) * (up x)); g, u are [n][I] scratch.
void swiglu_mlp(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& down,
                const float* x, RowSplit rows, float* g, float* u, float* y) {
  gated_product(ctx, gate, up, x, rows, g, u);
  matmul(ctx, down, g, rows, y, /*accumulate=*/true);
}

// MoE with the shared expert, added into y. Launches for a decode step: router (+ shared gate
// logit), top-k, expert and shared gate*up (one launch when the types agree), expert and
// shared down, combine. Prefill rows take the shared expert through the tiled kernel; the
// routed experts stay per (row, expert) pair for now.
void moe_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t k = c.num_experts_used, n = rows.num_rows, nd = rows.num_decode_rows;
  launch_segments(ctx, {segment(w.router, b, n, ws.router_logits), segment(w.shared_gate_inp, b, n, ws.sh_gate)},
                  "moe router");
  const kernels::MoeRouteArgs route{ws.router_logits, n, c.num_experts, k, ws.expert_ids, ws.expert_weights};
  DS_GPU_LAUNCH(ctx, 1, kernels::moe_route_gpu(route, ctx.stream), "moe_route: %lld rows, %lld experts, top %lld",
                static_cast<long long>(n), static_cast<long long>(c.num_experts), static_cast<long long>(k));
  // Pairs p = row * k + rank (moe_route's [row][rank] order): gate/up read x row p / k.
  std::vector<kernels::MatmulSegment> up_segs;
  if (same_layout(w.gate_exps, w.up_exps)) {
    up_segs.push_back(gated(expert_segment(w.gate_exps, b, ws.expert_ids, n * k, k, ws.exp_g), w.up_exps));
  } else {
    up_segs.push_back(expert_segment(w.gate_exps, b, ws.expert_ids, n * k, k, ws.exp_g));
    up_segs.push_back(expert_segment(w.up_exps, b, ws.expert_ids, n * k, k, ws.exp_u));
  }
  const bool shared_gated = same_layout(w.gate_shexp, w.up_shexp);
  if (nd > 0) {
    if (shared_gated) {
      up_segs.push_back(gated(segment(w.gate_shexp, b, nd, ws.sh_g), w.up_shexp));
    } else {
      up_segs.push_back(segment(w.gate_shexp, b, nd, ws.sh_g));
      up_segs.push_back(segment(w.up_shexp, b, nd, ws.sh_u));
    }
  }
  launch_segments(ctx, std::move(up_segs), "moe gate*up");
  if (!same_layout(w.gate_exps, w.up_exps))
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.exp_g, ws.exp_u, ws.exp_g, n * k * w.gate_exps.ne1, ctx.stream),
                  "expert swiglu %lld pairs", static_cast<long long>(n * k));
  if (nd > 0 && !shared_gated)
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.sh_g, ws.sh_u, ws.sh_g, nd * w.gate_shexp.ne1, ctx.stream),
                  "shared swiglu %lld rows", static_cast<long long>(nd));
  if (rows.num_prefill_rows() > 0) gated_product_tiled(ctx, w.gate_shexp, w.up_shexp, b, nd, rows.num_prefill_rows(), ws.sh_g, ws.sh_u);
  std::vector<kernels::MatmulSegment> down_segs{expert_segment(w.down_exps, ws.exp_g, ws.expert_ids, n * k, 1, ws.exp_out)};
  if (nd > 0) down_segs.push_back(segment(w.down_shexp, ws.sh_g, nd, ws.sh_out));
  launch_segments(ctx, std::move(down_segs), "moe down");
  if (rows.num_prefill_rows() > 0) matmul_tiled(ctx, w.down_shexp, ws.sh_g, nd, rows.num_prefill_rows(), ws.sh_out, false);
  kernels::MoeCombineArgs combine{ws.exp_out, ws.expert_weights, ws.sh_out, ws.sh_gate, y, n, k, c.num_embd};
  combine.accumulate = true;
  DS_GPU_LAUNCH(ctx, 1, kernels::moe_combine_gpu(combine, ctx.stream), "moe_combine %lld rows x %lld",
                static_cast<long long>(n), static_cast<long long>(c.num_embd));
}

}  // namespace

void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
            bool accumulate) {
  kernels::MatmulArgs args = matmul_args(w, x, num_rows, y);
  args.accumulate = accumulate;
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_gpu(args, ctx.stream), "matmul %s (%s): %lld rows, in %lld, out %lld",
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

void matmul_many(const GpuLayerContext& ctx, const DeviceTensor* const* ws, float* const* ys, int count, const float* x,
                 RowSplit rows) {
  if (rows.num_decode_rows > 0) {
    std::vector<kernels::MatmulSegment> segs;
    for (int i = 0; i < count; ++i) segs.push_back(segment(*ws[i], x, rows.num_decode_rows, ys[i]));
    launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
  }
  if (rows.num_prefill_rows() > 0)
    for (int i = 0; i < count; ++i) matmul_tiled(ctx, *ws[i], x, rows.num_decode_rows, rows.num_prefill_rows(), ys[i], false);
}

void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y) {
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, rows, b, y);
  } else {
    swiglu_mlp(ctx, w.gate, w.up, w.down, b, rows, ctx.ws.ffn_g, ctx.ws.ffn_u, y);
  }
}

}  // namespace deltaserve::runtime::gpu
