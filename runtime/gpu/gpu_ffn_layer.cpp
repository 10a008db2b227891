// FFN on the GPU (MODEL.md 2.6), the device twin of runtime/cpu/cpu_ffn_layer.cpp: dense
// SwiGLU, or MoE: router matmul, softmax top-k (moe_route_gpu), each (row, rank) pair through
// its expert (matmul_experts_gpu), weighted sum in rank order plus the sigmoid-gated shared
// expert (moe_combine_gpu). Also the shared matmul and RMSNorm helpers.
#include <string>

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

// y row p = W_{ids[p]} x row (p / pairs_per_x_row), p < num_pairs.
void matmul_experts(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, const int32_t* ids,
                    int64_t num_pairs, int64_t pairs_per_x_row, float* y) {
  kernels::MatmulExpertsArgs args{};
  args.base = matmul_args(w, x, num_pairs, y);
  args.expert_ids = ids;
  args.num_pairs = num_pairs;
  args.pairs_per_x_row = pairs_per_x_row;
  DS_GPU_CHECK(kernels::matmul_experts_gpu(args, ctx.stream), "matmul_experts %s: %lld pairs, in %lld, out %lld",
               w.name.c_str(), static_cast<long long>(num_pairs), static_cast<long long>(w.ne0),
               static_cast<long long>(w.ne1));
}

void swiglu_mlp(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& down,
                const float* x, int64_t n, float* g, float* u, float* y) {
  matmul(ctx, gate, x, n, g);
  matmul(ctx, up, x, n, u);
  DS_GPU_CHECK(kernels::swiglu_gpu(g, u, g, n * gate.ne1, ctx.stream), "swiglu %lld x %lld", static_cast<long long>(n),
               static_cast<long long>(gate.ne1));
  matmul(ctx, down, g, n, y);
}

void moe_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, int64_t n, const float* b, float* y) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t k = c.num_experts_used;
  matmul(ctx, w.router, b, n, ws.router_logits);
  const kernels::MoeRouteArgs route{ws.router_logits, n, c.num_experts, k, ws.expert_ids, ws.expert_weights};
  DS_GPU_CHECK(kernels::moe_route_gpu(route, ctx.stream), "moe_route: %lld rows, %lld experts, top %lld",
               static_cast<long long>(n), static_cast<long long>(c.num_experts), static_cast<long long>(k));
  // Pairs p = row * k + rank (moe_route's [row][rank] order): gate/up read x row p / k.
  matmul_experts(ctx, w.gate_exps, b, ws.expert_ids, n * k, k, ws.exp_g);
  matmul_experts(ctx, w.up_exps, b, ws.expert_ids, n * k, k, ws.exp_u);
  DS_GPU_CHECK(kernels::swiglu_gpu(ws.exp_g, ws.exp_u, ws.exp_g, n * k * w.gate_exps.ne1, ctx.stream),
               "expert swiglu %lld pairs", static_cast<long long>(n * k));
  matmul_experts(ctx, w.down_exps, ws.exp_g, ws.expert_ids, n * k, 1, ws.exp_out);

  swiglu_mlp(ctx, w.gate_shexp, w.up_shexp, w.down_shexp, b, n, ws.sh_g, ws.sh_u, ws.sh_out);
  matmul(ctx, w.shared_gate_inp, b, n, ws.sh_gate);  // [n][1] gate logits
  const kernels::MoeCombineArgs combine{ws.exp_out, ws.expert_weights, ws.sh_out, ws.sh_gate, y, n, k, c.num_embd};
  DS_GPU_CHECK(kernels::moe_combine_gpu(combine, ctx.stream), "moe_combine %lld rows x %lld", static_cast<long long>(n),
               static_cast<long long>(c.num_embd));
}

}  // namespace

void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y) {
  DS_GPU_CHECK(kernels::matmul_gpu(matmul_args(w, x, num_rows, y), ctx.stream), "matmul %s (%s): %lld rows, in %lld, out %lld",
               w.name.c_str(), std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(num_rows),
               static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

void rms_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
              int64_t y_stride) {
  const int64_t h = w.ne0;
  const kernels::RmsNormArgs args{x, h, w.f32(), y, y_stride, num_rows, h, ctx.config.rms_eps};
  DS_GPU_CHECK(kernels::rms_norm_gpu(args, ctx.stream), "rms_norm %s: %lld rows of %lld", w.name.c_str(),
               static_cast<long long>(num_rows), static_cast<long long>(h));
}

void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, int64_t num_rows, const float* b, float* y) {
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, num_rows, b, y);
  } else {
    swiglu_mlp(ctx, w.gate, w.up, w.down, b, num_rows, ctx.ws.ffn_g, ctx.ws.ffn_u, y);
  }
}

}  // namespace deltaserve::runtime::gpu
