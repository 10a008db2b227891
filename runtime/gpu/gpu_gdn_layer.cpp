// Gated DeltaNet on the GPU (MODEL.md 2.5), the device twin of runtime/cpu/cpu_gdn_layer.cpp:
// projections over all rows of the step, then one fused gdn_step_gpu launch for every
// sequence (conv + SiLU, L2 norms, gates, delta rule over the sequence's rows in order, from
// its state entry; ring snapshots for verify rows), gated RMSNorm, output projection added
// into the residual. The
// fused step kernel also serves prefill chunks (T rows of one sequence in order); a chunked
// prefill kernel can replace it here without touching the backend.
#include "kernels/gdn_gpu.h"
#include "kernels/norm_gpu.h"
#include "runtime/gpu/gpu_layers.h"

namespace deltaserve::runtime::gpu {

void gdn_forward(const GpuLayerContext& ctx, const GpuGdnWeights& w, const GdnStatePools& state,
                 const StepRowsView& rows, const float* a, float* y) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t n = rows.num_rows;
  const int64_t dc = c.conv_channels(), dv_all = c.ssm_value_dim(), hv = c.ssm_v_heads, d = c.ssm_head_dim;

  // qkv [n][Dc], z [n][Dv], beta [n][Hv] pre-sigmoid, alpha [n][Hv] pre-softplus: one launch
  // when the four weight types agree.
  const DeviceTensor* proj[] = {&w.qkv, &w.gate, &w.beta, &w.alpha};
  float* const proj_out[] = {ws.qkv, ws.z, ws.beta, ws.alpha};
  matmul_many(ctx, proj, proj_out, 4, a, n);

  kernels::GdnStepArgs g{};
  g.qkv = ws.qkv;
  g.qkv_stride = dc;
  g.alpha = ws.alpha;
  g.beta_logit = ws.beta;
  g.ab_stride = hv;
  g.conv_w = w.conv.f32();
  g.ssm_a = w.a.f32();
  g.dt_bias = w.dt_bias.f32();
  g.out = ws.gdn_o;
  g.out_stride = dv_all;
  g.seq_row_begin = rows.seq_row_begin;
  g.num_seqs = rows.num_seqs;
  g.delta_states = state.delta;
  g.conv_states = state.conv;
  g.state_in = rows.state_in;
  g.state_out = rows.state_out;
  g.ring_first = rows.ring_first;
  g.sync_counters = ws.gdn_sync;
  g.num_k_heads = c.ssm_k_heads;
  g.num_v_heads = hv;
  g.head_dim_k = d;
  g.head_dim_v = d;
  g.conv_kernel = c.conv_kernel;
  g.l2_eps = 1e-6f;
  DS_GPU_LAUNCH(ctx, 1, kernels::gdn_step_gpu(g, ctx.stream), "gdn_step: %lld rows, %lld sequences, Hk %lld, Hv %lld, d %lld",
               static_cast<long long>(n), static_cast<long long>(rows.num_seqs), static_cast<long long>(c.ssm_k_heads),
               static_cast<long long>(hv), static_cast<long long>(d));

  const kernels::GatedRmsNormArgs norm{ws.gdn_o, ws.z, w.norm.f32(), ws.gdn_o, n * hv, d, c.rms_eps};
  DS_GPU_LAUNCH(ctx, 1, kernels::gated_rms_norm_gpu(norm, ctx.stream), "gated_rms_norm %lld groups of %lld",
               static_cast<long long>(n * hv), static_cast<long long>(d));
  matmul(ctx, w.output, ws.gdn_o, n, y, /*accumulate=*/true);
}

}  // namespace deltaserve::runtime::gpu
