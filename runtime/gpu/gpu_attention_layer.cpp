// Gated attention on the GPU (MODEL.md 2.3), the device twin of
// runtime/cpu/cpu_attention_layer.cpp: q|gate, k, v projections over all rows, per-head q/k
// RMSNorm, partial RoPE, KV append into the paged pool, paged causal attention for the
// decode/verify rows, prefill attention for the rows of prefill chunks (StepRowsView's
// split), sigmoid gate, output projection added into the residual. The three projections of
// the decode rows share one launch when their weight types agree.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/attention/attention_gpu.h"
#include "kernels/attention/attention_prep_gpu.h"
#include "runtime/gpu/gpu_layers.h"

namespace deltaserve::runtime::gpu {

void attention_forward(const GpuLayerContext& ctx, const GpuAttentionWeights& w, const KvPool& cache,
                       const StepRowsView& rows, const float* a, float* y, const NextNorm& post, const InputNorm& in) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t n = rows.num_rows;
  const int64_t hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int64_t qg_width = 2 * nh * hd, kv_width = nkv * hd;
  const long long ln = n;

  const DeviceTensor* proj[] = {&w.q, &w.k, &w.v};
  float* const proj_out[] = {ws.qg, ws.k, ws.v};
  matmul_many(ctx, proj, proj_out, 3, a, row_split(rows), in);
  // Query head h of row r at qg[(r * nh + h) * 2hd], its gate right after. One launch norms
  // and rotates q and k in place and appends K/V, bit-identical to the former five launches.
  kernels::AttentionPrepGpuArgs prep{};
  prep.q = ws.qg;
  prep.q_stride = qg_width;
  prep.q_head_stride = 2 * hd;
  prep.k = ws.k;
  prep.v = ws.v;
  prep.kv_stride = kv_width;
  prep.q_norm = w.q_norm.f32();
  prep.k_norm = w.k_norm.f32();
  prep.k_cache = cache.k;
  prep.v_cache = cache.v;
  prep.block_tables = rows.block_tables;
  prep.block_table_stride = rows.block_table_stride;
  prep.row_seq = rows.row_seq;
  prep.positions = rows.positions;
  prep.block_tokens = ctx.kv_block_tokens;
  prep.num_rows = n;
  prep.num_heads = nh;
  prep.num_kv_heads = nkv;
  prep.head_dim = hd;
  prep.rope_dims = c.rope_dims;
  prep.rope_base = c.rope_base;
  prep.eps = c.rms_eps;
  // "rope ..." first: kernel_trace.cpp files it under rope+kv.
  DS_GPU_LAUNCH(ctx, 1, kernels::attention_prep_gpu(prep, ctx.stream),
                "rope q/k + q/k norms + kv_append %lld rows, heads %lld/%lld, hd %lld, table stride %lld", ln,
                static_cast<long long>(nh), static_cast<long long>(nkv), static_cast<long long>(hd),
                static_cast<long long>(rows.block_table_stride));

  kernels::PagedAttentionGpuArgs att{};
  att.q_stride = qg_width;
  att.q_head_stride = 2 * hd;
  att.out_stride = nh * hd;
  att.k_cache = cache.k;
  att.v_cache = cache.v;
  att.block_tables = rows.block_tables;
  att.block_table_stride = rows.block_table_stride;
  att.block_tokens = ctx.kv_block_tokens;
  att.num_heads = nh;
  att.num_kv_heads = nkv;
  att.head_dim = hd;
  att.max_keys = rows.max_keys;
  att.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  att.workspace = ws.att_scratch;
  // sync_counters stay null: two launches (chunks, then the combine kernel), as the fused
  // form's last block (a fence, an arrival count, then a head group's outputs one after another)
  // cost more than the launch. head_splits and value_loads stay 0: the kernel's rules.
  // Rows go in groups that fit the fixed workspace (a long prefill chunk may not fit at once);
  // a row's chunking depends only on its own position, so the grouping changes no result.
  att.num_rows = 1;
  const int64_t floats_per_row = kernels::paged_attention_workspace_floats(att);
  if (floats_per_row > ws.att_scratch_floats)
    throw std::logic_error("GPU attention: workspace smaller than one row at max_keys " + std::to_string(rows.max_keys));
  const int64_t group = ws.att_scratch_floats / floats_per_row, nd = rows.num_decode_rows;
  for (int64_t r0 = 0; r0 < nd; r0 += group) {
    att.num_rows = std::min(group, nd - r0);
    att.q = ws.qg + r0 * qg_width;
    att.gate = att.q + hd;
    att.out = ws.att_o + r0 * nh * hd;
    att.row_seq = rows.row_seq + r0;
    att.positions = rows.positions + r0;
    DS_GPU_LAUNCH(ctx, kernels::paged_attention_launches(att), kernels::paged_attention_gpu(att, ctx.stream),
                 "paged_attention rows [%lld, %lld) of %lld, max_keys %lld, heads %lld/%lld, hd %lld, ws %lld floats",
                 static_cast<long long>(r0), static_cast<long long>(r0 + att.num_rows), ln,
                 static_cast<long long>(rows.max_keys), static_cast<long long>(nh), static_cast<long long>(nkv),
                 static_cast<long long>(hd), static_cast<long long>(ws.att_scratch_floats));
  }
  if (rows.num_prefill_seqs() > 0) {
    kernels::PrefillAttentionGpuArgs pre{};
    pre.q = ws.qg + nd * qg_width;
    pre.gate = pre.q + hd;
    pre.q_stride = qg_width;
    pre.q_head_stride = 2 * hd;
    pre.out = ws.att_o + nd * nh * hd;
    pre.out_stride = nh * hd;
    pre.k_cache = cache.k;
    pre.v_cache = cache.v;
    pre.block_tables = rows.block_tables + rows.num_decode_seqs * rows.block_table_stride;
    pre.block_table_stride = rows.block_table_stride;
    pre.seq_row_begin = rows.prefill_row_begin;
    pre.seq_first_position = rows.prefill_first_position;
    pre.num_seqs = rows.num_prefill_seqs();
    pre.max_rows_per_seq = rows.max_prefill_rows;
    pre.block_tokens = ctx.kv_block_tokens;
    pre.num_heads = nh;
    pre.num_kv_heads = nkv;
    pre.head_dim = hd;
    pre.scale = att.scale;
    DS_GPU_LAUNCH(ctx, 1, kernels::prefill_attention_gpu(pre, ctx.stream),
                  "prefill_attention: %lld sequences, %lld rows (longest %lld), heads %lld/%lld, hd %lld",
                  static_cast<long long>(pre.num_seqs), static_cast<long long>(rows.num_prefill_rows()),
                  static_cast<long long>(pre.max_rows_per_seq), static_cast<long long>(nh), static_cast<long long>(nkv),
                  static_cast<long long>(hd));
  }
  matmul_then_norm(ctx, w.output, ws.att_o, row_split(rows), y, post);
}

}  // namespace deltaserve::runtime::gpu
