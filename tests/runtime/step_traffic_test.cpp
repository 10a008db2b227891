// step_traffic / step_flops: the decode/prefill lower bound of bench's GB/s and its FLOP count,
// on a hand-made two-layer model (one GDN layer, one attention layer with routed experts, an MTP
// block that must not count).
#include "runtime/step_traffic.h"

#include <gtest/gtest.h>

namespace deltaserve::runtime {
namespace {

TensorView view(const std::string& name, int64_t ne0, int64_t ne1, size_t num_bytes) {
  TensorView v;
  v.name = name;
  v.type = kernels::DType::F32;
  v.num_dims = 2;
  v.ne = {ne0, ne1, 1, 1};
  v.num_bytes = num_bytes;
  return v;
}

LoadedModel tiny_model(bool tied) {
  LoadedModel m;
  ModelConfig& c = m.config;
  c.arch = Architecture::Moe;
  c.num_vocab = 10;
  c.num_embd = 4;
  c.num_layers = 2;
  c.layer_kinds = {LayerKind::GatedDeltaNet, LayerKind::Attention};
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.ssm_k_heads = 1;
  c.ssm_v_heads = 1;
  c.ssm_head_dim = 2;  // Dc = 2 + 2 + 2 = 6
  c.conv_kernel = 4;
  c.num_experts = 4;
  c.num_experts_used = 2;
  for (const TensorView& v : {view("token_embd.weight", 4, 10, 160), view("output_norm.weight", 4, 1, 16),
                              view("blk.1.attn_q.weight", 4, 3, 50), view("blk.0.ffn_gate_exps.weight", 4, 25, 400),
                              view("blk.0.ffn_gate_inp_shexp.weight", 4, 1, 16),
                              view("blk.2.nextn.eh_proj.weight", 8, 4, 1000), view("blk.2.attn_q.weight", 4, 3, 1000)})
    m.tensors[v.name] = v;
  if (!tied) m.tensors["output.weight"] = view("output.weight", 4, 10, 160);
  return m;
}

TEST(StepTraffic, ExpectedDistinctExperts) {
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 1), 2.0);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 2), 3.0);  // 4 (1 - 0.5^2)
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 4, 3), 4.0);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(0, 0, 3), 0.0);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 0), 0.0);
}

TEST(StepTraffic, DecodeByHand) {
  const StepTraffic t = step_traffic(tiny_model(false), /*streams=*/2, /*rows=*/1, /*context=*/3);
  EXPECT_DOUBLE_EQ(t.embedding_bytes, 2 * 16);            // 2 rows of 4 f32
  EXPECT_DOUBLE_EQ(t.trunk_bytes, 160 + 16 + 50 + 16);    // LM head, norm, attn_q, shexp gate; no MTP
  EXPECT_DOUBLE_EQ(t.expert_bytes, 3 * 100);              // 3 distinct of 4 experts, 100 B each
  EXPECT_DOUBLE_EQ(t.kv_bytes, 2 * (3 + 1) * 1 * 2 * 4 * 2);  // streams x positions x nkv*hd x f32 x K,V
  EXPECT_DOUBLE_EQ(t.state_bytes, 2 * (1 * 2 * 2 + 3 * 6) * 4 * 2);  // streams x (S + conv) x f32 x r+w
  EXPECT_DOUBLE_EQ(t.total(), 32 + 242 + 300 + 128 + 352);
}

TEST(StepTraffic, Bf16DeltaStateHalvesOnlyTheDeltaPart) {
  const StepTraffic t = step_traffic(tiny_model(false), 2, 1, 3, StatePrecision::kBf16);
  EXPECT_DOUBLE_EQ(t.state_bytes, 2 * (1 * 2 * 2 * 2 + 3 * 6 * 4) * 2);  // streams x (S bf16 + conv f32) x r+w
}

TEST(StepTraffic, TiedEmbeddingsReadTheWholeTableAndPrefillTouchesAllExperts) {
  const StepTraffic t = step_traffic(tiny_model(true), /*streams=*/1, /*prompt=*/40, /*context=*/0);
  EXPECT_DOUBLE_EQ(t.embedding_bytes, 160);
  EXPECT_DOUBLE_EQ(t.trunk_bytes, 16 + 50 + 16);
  EXPECT_NEAR(t.expert_bytes, 400, 1e-6);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 40 * 2 * 4 * 2);
}

TEST(StepFlops, DecodeByHand) {
  const StepFlops f = step_flops(tiny_model(false), /*streams=*/2, /*rows=*/1, /*context=*/3);
  // Per row: LM head 40 + attn_q 12 + routed gate 100 x 2/4 elements; vectors and MTP left out.
  EXPECT_DOUBLE_EQ(f.product_flops, 2.0 * 102 * 2);
  EXPECT_DOUBLE_EQ(f.attention_flops, 1 * 2 * 4.0 * (2 * 2) * (3 + 1));  // layers x streams x 4 x nh*hd x positions
  EXPECT_DOUBLE_EQ(f.gdn_flops, 1 * 2 * 6.0 * (1 * 2 * 2));               // layers x rows x 6 x Hv*dk*dv
  EXPECT_DOUBLE_EQ(f.total(), 408 + 128 + 48);
}

TEST(StepFlops, PrefillCountsTheTiedHeadAndTheTriangleOfPositions) {
  const StepFlops f = step_flops(tiny_model(true), /*streams=*/1, /*prompt=*/40, /*context=*/0);
  EXPECT_DOUBLE_EQ(f.product_flops, 2.0 * (40 + 12 + 50) * 40);
  EXPECT_DOUBLE_EQ(f.attention_flops, 4.0 * 4 * (40 * 41 / 2));
  EXPECT_DOUBLE_EQ(f.gdn_flops, 40 * 6.0 * 4);
  EXPECT_DOUBLE_EQ(step_flops(tiny_model(true), -1, -1, -1).total(), 0);
}

TEST(StepTraffic, NegativeCountsAreZero) {
  const StepTraffic t = step_traffic(tiny_model(false), -1, -1, -1);
  EXPECT_DOUBLE_EQ(t.embedding_bytes, 0);
  EXPECT_DOUBLE_EQ(t.expert_bytes, 0);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 0);
  EXPECT_DOUBLE_EQ(t.state_bytes, 0);
}

}  // namespace
}  // namespace deltaserve::runtime
