// Gated attention mixer on the CPU (MODEL.md 2.3): q|gate, k, v projections over all rows,
// per-head q/k RMSNorm, partial RoPE, KV append into the paged cache, causal attention per
// sequence, sigmoid gate, output projection.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "runtime/cpu/cpu_layers.h"

namespace deltaserve::runtime::cpu {

void attention_forward(const LayerContext& ctx, const AttentionWeights& w, KvLayer& cache,
                       const StepRows& rows, const float* a, float* y) {
  const ModelConfig& c = ctx.config;
  const int64_t n = rows.num_rows();
  const int64_t hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int64_t qg_width = 2 * nh * hd, kv_width = nkv * hd;

  std::vector<float> qg(static_cast<size_t>(n * qg_width));
  std::vector<float> k(static_cast<size_t>(n * kv_width)), v(static_cast<size_t>(n * kv_width));
  matmul(ctx, w.q, a, n, qg.data());
  matmul(ctx, w.k, a, n, k.data());
  matmul(ctx, w.v, a, n, v.data());

  // Query head h of row r sits at qg[(r * nh + h) * 2hd], its gate right after it, so the
  // queries form n*nh rows of stride 2hd.
  kernels::rms_norm_ref({qg.data(), 2 * hd, f32_data(w.q_norm), qg.data(), 2 * hd, n * nh, hd, c.rms_eps},
                        ctx.pool);
  kernels::rms_norm_ref({k.data(), hd, f32_data(w.k_norm), k.data(), hd, n * nkv, hd, c.rms_eps}, ctx.pool);
  kernels::rope_neox_ref({qg.data(), qg_width, 2 * hd, rows.positions.data(), n, nh, c.rope_dims, c.rope_base});
  kernels::rope_neox_ref({k.data(), kv_width, hd, rows.positions.data(), n, nkv, c.rope_dims, c.rope_base});

  // Append this step's K and V at their positions.
  for (const SequenceRows& seq : rows.sequences) {
    for (int64_t i = 0; i < seq.num_rows; ++i) {
      const int64_t r = seq.row_begin + i;
      const int64_t p = rows.positions[static_cast<size_t>(r)];
      const int64_t block = (*seq.kv_blocks)[static_cast<size_t>(p / ctx.kv_block_tokens)];
      const size_t at = static_cast<size_t>((block * ctx.kv_block_tokens + p % ctx.kv_block_tokens) * kv_width);
      std::memcpy(cache.k.data() + at, k.data() + r * kv_width, sizeof(float) * static_cast<size_t>(kv_width));
      std::memcpy(cache.v.data() + at, v.data() + r * kv_width, sizeof(float) * static_cast<size_t>(kv_width));
    }
  }

  std::vector<float> o(static_cast<size_t>(n * nh * hd));
  for (const SequenceRows& seq : rows.sequences) {
    kernels::PagedAttentionArgs att{};
    att.q = qg.data() + seq.row_begin * qg_width;
    att.gate = att.q + hd;
    att.q_stride = qg_width;
    att.q_head_stride = 2 * hd;
    att.out = o.data() + seq.row_begin * nh * hd;
    att.out_stride = nh * hd;
    att.k_cache = cache.k.data();
    att.v_cache = cache.v.data();
    att.block_table = seq.kv_blocks->data();
    att.block_tokens = ctx.kv_block_tokens;
    att.positions = rows.positions.data() + seq.row_begin;
    att.num_rows = seq.num_rows;
    att.num_heads = nh;
    att.num_kv_heads = nkv;
    att.head_dim = hd;
    att.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    kernels::paged_attention_ref(att, ctx.pool);
  }
  matmul(ctx, w.output, o.data(), n, y);
}

}  // namespace deltaserve::runtime::cpu
