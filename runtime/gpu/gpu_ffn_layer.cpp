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

// y += down(SiLU(gate x) * (up x)); g is [n][I] scratch.
void swiglu_mlp(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& down,
                const float* x, int64_t n, float* g, float* u, float* y) {
  if (same_layout(gate, up)) {
    launch_segments(ctx, {gated(segment(gate, x, n, g), up)}, "ffn gate*up");
  } else {
    matmul(ctx, gate, x, n, g);
    matmul(ctx, up, x, n, u);
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, n * gate.ne1, ctx.stream), "swiglu %lld x %lld",
                  static_cast<long long>(n), static_cast<long long>(gate.ne1));
  }
  matmul(ctx, down, g, n, y, /*accumulate=*/true);
}

// MoE with the shared expert, added into y. Launches: router (+ shared gate logit), top-k,
// expert and shared gate*up (one launch when the types agree), expert and shared down, combine.
void moe_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, int64_t n, const float* b, float* y) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t k = c.num_experts_used;
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
  if (shared_gated) {
    up_segs.push_back(gated(segment(w.gate_shexp, b, n, ws.sh_g), w.up_shexp));
  } else {
    up_segs.push_back(segment(w.gate_shexp, b, n, ws.sh_g));
    up_segs.push_back(segment(w.up_shexp, b, n, ws.sh_u));
  }
  launch_segments(ctx, std::move(up_segs), "moe gate*up");
  if (!same_layout(w.gate_exps, w.up_exps))
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.exp_g, ws.exp_u, ws.exp_g, n * k * w.gate_exps.ne1, ctx.stream),
                  "expert swiglu %lld pairs", static_cast<long long>(n * k));
  if (!shared_gated)
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.sh_g, ws.sh_u, ws.sh_g, n * w.gate_shexp.ne1, ctx.stream),
                  "shared swiglu %lld rows", static_cast<long long>(n));
  launch_segments(ctx,
                  {expert_segment(w.down_exps, ws.exp_g, ws.expert_ids, n * k, 1, ws.exp_out),
                   segment(w.down_shexp, ws.sh_g, n, ws.sh_out)},
                  "moe down");
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

void matmul_many(const GpuLayerContext& ctx, const DeviceTensor* const* ws, float* const* ys, int count, const float* x,
                 int64_t num_rows) {
  std::vector<kernels::MatmulSegment> segs;
  for (int i = 0; i < count; ++i) segs.push_back(segment(*ws[i], x, num_rows, ys[i]));
  launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
}

void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, int64_t num_rows, const float* b, float* y) {
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, num_rows, b, y);
  } else {
    swiglu_mlp(ctx, w.gate, w.up, w.down, b, num_rows, ctx.ws.ffn_g, ctx.ws.ffn_u, y);
  }
}

}  // namespace deltaserve::runtime::gpu
