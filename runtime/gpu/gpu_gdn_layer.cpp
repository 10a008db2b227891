// Gated DeltaNet on the GPU (MODEL.md 2.5), the device twin of runtime/cpu/cpu_gdn_layer.cpp:
// projections over all rows of the step, then one fused gdn_step_gpu launch for every
// sequence (conv + SiLU, L2 norms, gates, delta rule over the sequence's rows in order, from
// its state entry; ring snapshots for verify rows; the gated RMSNorm in its epilogue, bitwise
// equal to gated_rms_norm_gpu), output projection added into the residual. Prefill chunks
// (StepRowsView's split) go through the tiled projections and the chunked gdn_prefill_gpu
// instead (the step kernel where that one is missing), then gated_rms_norm_gpu over their rows.
#include "kernels/gdn/gdn_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "runtime/gpu/gpu_layers.h"

namespace deltaserve::runtime::gpu {

void gdn_forward(const GpuLayerContext& ctx, const GpuGdnWeights& w, const GdnStatePools& state,
                 const StepRowsView& rows, const float* a, float* y, const NextNorm& post, const InputNorm& in) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t n = rows.num_rows;
  const int64_t dc = c.conv_channels(), dv_all = c.ssm_value_dim(), hv = c.ssm_v_heads, d = c.ssm_head_dim;

  // qkv [n][Dc], z [n][Dv], beta [n][Hv] pre-sigmoid, alpha [n][Hv] pre-softplus: one launch
  // for the decode rows when the four weight types agree.
  const DeviceTensor* proj[] = {&w.qkv, &w.gate, &w.beta, &w.alpha};
  float* const proj_out[] = {ws.qkv, ws.z, ws.beta, ws.alpha};
  matmul_many(ctx, proj, proj_out, 4, a, row_split(rows), in);

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
  g.num_seqs = rows.num_decode_seqs;
  g.delta_states = state.delta;
  g.delta_type = state.delta_type;
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
  const int64_t np_seqs = rows.num_prefill_seqs();
  // The fused norm runs a sequence's rows one after another in one block: fine for decode and
  // verify rows, not for prefill chunks through the step kernel (no chunked kernel: HIP).
  const bool fuse_norm =
      kernels::gdn_step_fuses_norm(c.ssm_k_heads, hv, d) && (ws.gdn_prefill_ws != nullptr || np_seqs == 0);
  if (fuse_norm) {
    g.norm_w = w.norm.f32();
    g.z = ws.z;
    g.z_stride = dv_all;
    g.norm_eps = c.rms_eps;
  }
  // Without the chunked kernel (HIP for now) prefill chunks run through the step kernel.
  if (ws.gdn_prefill_ws == nullptr) g.num_seqs = rows.num_seqs;
  // Rows [0, step_rows) go through the step kernel; with the norm fused they leave it normed.
  const int64_t step_rows = g.num_seqs == rows.num_seqs ? n : rows.num_decode_rows;
  if (g.num_seqs > 0)
    DS_GPU_LAUNCH(ctx, 1, kernels::gdn_step_gpu(g, ctx.stream), "gdn_step%s: %lld rows, %lld sequences, Hk %lld, Hv %lld, d %lld",
                  fuse_norm ? " + gated_rms_norm" : "", static_cast<long long>(step_rows),
                  static_cast<long long>(g.num_seqs), static_cast<long long>(c.ssm_k_heads), static_cast<long long>(hv),
                  static_cast<long long>(d));
  if (ws.gdn_prefill_ws != nullptr && np_seqs > 0) {
    const int64_t first = rows.num_decode_rows, s0 = rows.num_decode_seqs;
    kernels::GdnPrefillArgs p{};
    p.qkv = ws.qkv + first * dc;
    p.qkv_stride = dc;
    p.alpha = ws.alpha + first * hv;
    p.beta_logit = ws.beta + first * hv;
    p.ab_stride = hv;
    p.conv_w = g.conv_w;
    p.ssm_a = g.ssm_a;
    p.dt_bias = g.dt_bias;
    p.out = ws.gdn_o + first * dv_all;
    p.out_stride = dv_all;
    p.seq_row_begin = rows.prefill_row_begin;
    p.num_seqs = np_seqs;
    p.num_rows = rows.num_prefill_rows();
    p.delta_states = state.delta;
    p.delta_type = state.delta_type;
    p.conv_states = state.conv;
    p.state_in = rows.state_in + s0;
    p.state_out = rows.state_out + s0;
    p.first_position = rows.prefill_first_position;
    p.workspace = ws.gdn_prefill_ws;
    p.num_k_heads = c.ssm_k_heads;
    p.num_v_heads = hv;
    p.head_dim_k = d;
    p.head_dim_v = d;
    p.conv_kernel = c.conv_kernel;
    p.l2_eps = g.l2_eps;
    DS_GPU_LAUNCH(ctx, kernels::kGdnPrefillLaunches, kernels::gdn_prefill_gpu(p, ctx.stream),
                  "gdn_prefill: %lld rows, %lld sequences, Hk %lld, Hv %lld, d %lld", static_cast<long long>(p.num_rows),
                  static_cast<long long>(np_seqs), static_cast<long long>(c.ssm_k_heads), static_cast<long long>(hv),
                  static_cast<long long>(d));
  }

  const int64_t norm_first = fuse_norm ? step_rows : 0;  // rows still raw o
  if (norm_first < n) {
    float* const o = ws.gdn_o + norm_first * dv_all;
    const kernels::GatedRmsNormArgs norm{o, ws.z + norm_first * dv_all, w.norm.f32(), o, (n - norm_first) * hv, d, c.rms_eps};
    DS_GPU_LAUNCH(ctx, 1, kernels::gated_rms_norm_gpu(norm, ctx.stream), "gated_rms_norm %lld groups of %lld",
                  static_cast<long long>((n - norm_first) * hv), static_cast<long long>(d));
  }
  matmul_then_norm(ctx, w.output, ws.gdn_o, row_split(rows), y, post);
}

}  // namespace deltaserve::runtime::gpu
