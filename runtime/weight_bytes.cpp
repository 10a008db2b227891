// Weight bytes by layer, for the layer split's balance and per-device memory.
#include <initializer_list>

#include "runtime/model_weights.h"

namespace deltaserve::runtime {
namespace {

// A fused gate_up tensor's halves are two views of one buffer: each counts its own elements.
int64_t sum_bytes(std::initializer_list<const TensorView*> views) {
  int64_t bytes = 0;
  for (const TensorView* v : views) bytes += static_cast<int64_t>(v->num_bytes);
  return bytes;
}

}  // namespace

int64_t layer_weight_bytes(const LayerWeights& l) {
  const AttentionWeights& a = l.attention;
  const GdnWeights& g = l.gdn;
  const FfnWeights& f = l.ffn;
  return sum_bytes({&l.attn_norm, &l.post_attention_norm, &a.q, &a.k, &a.v, &a.output, &a.q_norm, &a.k_norm, &g.qkv,
                    &g.gate, &g.beta, &g.alpha, &g.conv, &g.dt_bias, &g.a, &g.norm, &g.output, &f.gate, &f.up, &f.down,
                    &f.router, &f.gate_exps, &f.up_exps, &f.down_exps, &f.shared_gate_inp, &f.gate_shexp, &f.up_shexp,
                    &f.down_shexp});
}

int64_t head_weight_bytes(const ModelWeights& w) { return static_cast<int64_t>(w.token_embd.num_bytes); }

int64_t tail_weight_bytes(const ModelWeights& w) {
  int64_t bytes = sum_bytes({&w.output_norm, &w.output});
  if (w.has_mtp) {
    bytes += sum_bytes({&w.mtp.eh_proj, &w.mtp.enorm, &w.mtp.hnorm, &w.mtp.shared_head_norm});
    bytes += layer_weight_bytes(w.mtp.layer);
  }
  return bytes;
}

int64_t range_weight_bytes(const ModelWeights& w, LayerRange layers) {
  int64_t bytes = 0;
  for (int32_t i = layers.first; i < layers.end; ++i) bytes += layer_weight_bytes(w.layers[static_cast<size_t>(i)]);
  if (layers.first == 0) bytes += head_weight_bytes(w);
  if (layers.end == static_cast<int32_t>(w.layers.size())) bytes += tail_weight_bytes(w);
  return bytes;
}

}  // namespace deltaserve::runtime
