// The MoE half of the FFN on the GPU (MODEL.md 2.6; gpu_ffn_layer.cpp has the dense half and
// the product helpers): router products, softmax top-k (one moe_router_gpu launch), each (row,
// rank) pair through its expert, the weighted sum in rank order plus the sigmoid-gated shared
// expert (moe_combine_gpu), added into the residual.
#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/matmul/matmul_experts_prefill_gpu.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe_down_combine_gpu.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "runtime/gpu/gpu_layers.h"
#include "runtime/gpu/gpu_products.h"

namespace deltaserve::runtime::gpu {
namespace {

// y row p = W_{ids[p]} x row p / pairs_per_x_row for num_pairs prefill pairs, grouped by
// expert through the tiled kernel (gated with w_up: SiLU(W x) * (W_up x)).
// plan_ready: an earlier call of this layer grouped the same ids (one launch instead of two).
void experts_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const void* w_up, const float* x, const int32_t* ids,
                   int64_t num_pairs, int64_t pairs_per_x_row, float* y, bool plan_ready,
                   kernels::MatmulMath math) {
  kernels::MatmulExpertsPrefillArgs a{};
  a.experts.base = matmul_args(w, x, num_pairs, y);
  a.experts.expert_ids = ids;
  a.experts.num_pairs = num_pairs;
  a.experts.pairs_per_x_row = pairs_per_x_row;
  a.num_experts = ctx.config.num_experts;
  a.w_up = w_up;
  a.workspace = ctx.ws.expert_prefill_ws;
  a.math = math;
  a.plan_ready = plan_ready;
  DS_GPU_LAUNCH(ctx, plan_ready ? 1 : 2, kernels::matmul_experts_prefill_gpu(a, ctx.stream),
                "matmul_experts_prefill %s (%s)%s: %lld pairs, in %lld, out %lld", w.name.c_str(),
                std::string(kernels::dtype_name(w.type)).c_str(), w_up != nullptr ? " gated" : "",
                static_cast<long long>(num_pairs), static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

// Router logits, shared-expert gate logits and the top-k routing of rows [0, n): one
// moe_router_gpu launch for up to kFusedRouterMaxRows rows (gpu_products.h says why); more
// rows take the router matvec and moe_route_gpu (two launches). The router and shared gate
// are F32 (GpuWeights / ModelWeights require it).

// With in.w set (ffn_normalises_input) the router also normalises y into b first.
void moe_router(const GpuLayerContext& ctx, const GpuFfnWeights& w, const float* b, const float* y, int64_t n,
                const FfnInputNorm& in) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  if (n > kFusedRouterMaxRows) {
    if (in.w != nullptr) rms_norm(ctx, *in.w, y, n, in.b, c.num_embd);  // not taken: ffn_normalises_input said no
    launch_segments(ctx, {segment(w.router, b, n, ws.router_logits), segment(w.shared_gate_inp, b, n, ws.sh_gate)},
                    "moe router");
    const kernels::MoeRouteArgs route{ws.router_logits, n, c.num_experts, c.num_experts_used, ws.expert_ids,
                                      ws.expert_weights};
    DS_GPU_LAUNCH(ctx, 1, kernels::moe_route_gpu(route, ctx.stream), "moe_route: %lld rows, %lld experts, top %lld",
                  static_cast<long long>(n), static_cast<long long>(c.num_experts),
                  static_cast<long long>(c.num_experts_used));
    return;
  }
  kernels::MoeRouterArgs a{};
  a.x = b;
  a.x_stride = c.num_embd;
  a.num_rows = n;
  a.num_in = w.router.ne0;
  a.router_w = w.router.f32();
  a.w_row_bytes = w.router.row_bytes;
  a.shared_gate_w = w.shared_gate_inp.f32();
  a.num_experts = c.num_experts;
  a.num_used = c.num_experts_used;
  a.logits = ws.router_logits;
  a.shared_gate_logits = ws.sh_gate;
  a.expert_ids = ws.expert_ids;
  a.weights = ws.expert_weights;
  a.sync_counters = ws.router_sync;
  if (in.w != nullptr) {
    a.x = y;
    a.norm_w = in.w->f32();
    a.norm_eps = c.rms_eps;
    a.norm_out = in.b;
    a.norm_out_stride = c.num_embd;
  }
  DS_GPU_LAUNCH(ctx, 1, kernels::moe_router_gpu(a, ctx.stream), "moe_router %s (%s)%s%s: %lld rows, %lld experts, top %lld",
                w.router.name.c_str(), std::string(kernels::dtype_name(w.router.type)).c_str(),
                in.w != nullptr ? " + input rms_norm " : "", in.w != nullptr ? in.w->name.c_str() : "",
                static_cast<long long>(n), static_cast<long long>(c.num_experts),
                static_cast<long long>(c.num_experts_used));
}

// Rows per expert group for the step's num_pairs decode pairs (0: one pair per row group):
// grouping pays once experts average a pair or more (the 35B-A3B's 256 experts at 32+
// streams); 4-row groups from 4 pairs per expert on. Same bits every way (a row's arithmetic
// does not depend on its group), so the choice may follow the load; it depends on the step's
// shape only, so graphs stay valid.
int expert_group_rows(const ModelConfig& c, int64_t num_pairs) {
  if (c.num_experts <= 0 || num_pairs < c.num_experts) return 0;
  return num_pairs >= 4 * c.num_experts ? 4 : 2;
}

// Groups the step's decode pairs by expert (one moe_group_pairs_gpu launch) when
// expert_group_rows says so; returns the groups for the expert segments (rows 0: per pair).
// Never under the staged matvec (kernels::MatvecMath::kStaged): grouped launches go to the
// CUDA cores there, so grouping, which follows the load, would change a pair's bits with it.
kernels::ExpertPairGroups expert_pair_groups(const GpuLayerContext& ctx, int64_t num_pairs) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  kernels::ExpertPairGroups g{};
  const bool staged = ctx.matvec.math == kernels::MatvecMath::kStaged;
  const int rows = num_pairs > 0 && !staged ? expert_group_rows(c, num_pairs) : 0;
  if (rows == 0) return g;
  const kernels::MoeGroupPairsArgs a{ws.expert_ids, num_pairs, c.num_experts, rows,
                                     ws.pair_group_expert, ws.pair_group_pairs, ws.pair_group_count};
  DS_GPU_LAUNCH(ctx, 1, kernels::moe_group_pairs_gpu(a, ctx.stream), "moe_group_pairs: %lld pairs, %lld experts, %d per group",
                static_cast<long long>(num_pairs), static_cast<long long>(c.num_experts), rows);
  g.expert = ws.pair_group_expert;
  g.pairs = ws.pair_group_pairs;
  g.count = ws.pair_group_count;
  g.max_groups = kernels::moe_pair_groups_bound(num_pairs, c.num_experts, rows);
  g.rows_per_group = rows;
  return g;
}

// The decode rows' down products and combine as one launch (moe_down_combine_gpu) where the
// staged matvec runs both down products (Q4_0 experts and shared expert, its shape rule): the
// fused kernel's bits are those two launches' and the combine's, so the choice never changes
// a token. Args for rows [0, nd); with next.w set, their next norm as its epilogue.
kernels::MoeDownCombineArgs down_combine_args(const GpuLayerContext& ctx, const GpuFfnWeights& w, int64_t nd, float* y,
                                              const NextNorm& next) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  kernels::MoeDownCombineArgs a{};
  a.down_exps = reinterpret_cast<const uint8_t*>(w.down_exps.data);
  a.exp_row_bytes = w.down_exps.row_bytes;
  a.expert_bytes = static_cast<size_t>(w.down_exps.ne1) * w.down_exps.row_bytes;
  a.exp_in = w.down_exps.ne0;
  a.expert_ids = ws.expert_ids;
  a.expert_weights = ws.expert_weights;
  a.num_used = c.num_experts_used;
  a.exp_g = ws.exp_g;
  a.down_shexp = reinterpret_cast<const uint8_t*>(w.down_shexp.data);
  a.sh_row_bytes = w.down_shexp.row_bytes;
  a.sh_in = w.down_shexp.ne0;
  a.sh_g = ws.sh_g;
  a.shared_gate_logit = ws.sh_gate;
  a.y = y;
  a.n = c.num_embd;
  a.num_rows = nd;
  a.accumulate = true;
  if (next.w != nullptr) {
    a.norm_w = next.w->f32();
    a.norm_eps = c.rms_eps;
    a.norm_out = next.out;
    a.norm_out_stride = next.out_stride;
    a.norm_counters = ctx.ws.norm_sync;
  }
  return a;
}

// The decode rows for which the fused launch runs (ctx.fuse_down_combine_rows, by default
// kFusedDownCombineRows: 1-16): the fused launch was faster at every count measured, 1 to 16
// rows (35B-A3B, bench/RESULTS.md); more rows were not measured, so they are not fused.
// Same bits either way, so the choice may follow the load.
bool fuse_down_combine(const GpuLayerContext& ctx, const kernels::MoeDownCombineArgs& a, const GpuFfnWeights& w) {
  return a.num_rows >= ctx.fuse_down_combine_rows.first && a.num_rows <= ctx.fuse_down_combine_rows.second &&
         ctx.matvec.math == kernels::MatvecMath::kStaged &&
         w.down_exps.type == kernels::DType::Q4_0 && w.down_shexp.type == kernels::DType::Q4_0 && w.down_shexp.ne1 == a.n &&
         w.down_exps.ne1 == a.n && kernels::moe_down_combine_supported(a);
}

// MoE with the shared expert, added into y. Launches for a decode step: router with the shared
// gate logit and the top-k routing (one launch), expert and shared gate*up (one launch when
// the types agree), expert and shared down, combine (with next's norm as its epilogue). Prefill
// rows take the shared expert through the tiled kernel and the routed experts through the
// expert-grouped tiled kernel (each expert's weights read once per tile of pairs routed to it);
// router and combine cover every row. In tensor mode (ctx.tiled_decode_experts) the decode
// rows' routed experts take the expert-grouped exact tile as well (a grouping plan, gate*up,
// down), and the shared expert stays in the matvec launches.
}  // namespace

void moe_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y,
                 const NextNorm& next, const FfnInputNorm& in) {
  const ModelConfig& c = ctx.config;
  const GpuWorkspace& ws = ctx.ws;
  const int64_t k = c.num_experts_used, n = rows.num_rows, nd = rows.num_decode_rows;
  moe_router(ctx, w, b, y, n, in);
  // Pairs p = row * k + rank (moe_route's [row][rank] order): gate/up read x row p / k.
  // Decode pairs [0, nd * k) by the matvec (or the exact tile); prefill pairs grouped by expert (tiled).
  const bool experts_gated = same_layout(w.gate_exps, w.up_exps);
  // Decode pairs through the exact tensor-core tile (ctx.tiled_decode_experts, gated experts);
  // else one per matvec row group, or, when the step has enough pairs per expert, grouped by
  // expert (expert_pair_groups) so pairs of one expert share its weight loads.
  const bool experts_decode_tiled = ctx.tiled_decode_experts && experts_gated && nd > 0;
  const kernels::ExpertPairGroups groups = experts_decode_tiled ? kernels::ExpertPairGroups{} : expert_pair_groups(ctx, nd * k);
  auto pairs_segment = [&](const DeviceTensor& wt, const float* x, int64_t per_x_row, float* y) {
    kernels::MatmulSegment s = expert_segment(wt, x, ws.expert_ids, nd * k, per_x_row, y);
    s.groups = groups;
    return s;
  };
  std::vector<kernels::MatmulSegment> up_segs;
  if (experts_decode_tiled) {
    experts_tiled(ctx, w.gate_exps, w.up_exps.data, b, ws.expert_ids, nd * k, k, ws.exp_g, false,
                  kernels::MatmulMath::kTensorExact);
  } else if (nd > 0 && experts_gated) {
    up_segs.push_back(gated(pairs_segment(w.gate_exps, b, k, ws.exp_g), w.up_exps));
  } else if (nd > 0) {
    up_segs.push_back(pairs_segment(w.gate_exps, b, k, ws.exp_g));
    up_segs.push_back(pairs_segment(w.up_exps, b, k, ws.exp_u));
  }
  const bool shared_gated = same_layout(w.gate_shexp, w.up_shexp);
  // Tensor mode: the shared expert's decode rows on the exact tile too where decode_tiled takes
  // all three of its matrices (never with the default line on the 35B-A3B: 512 and 2,048 outputs).
  const bool shared_tiled = decode_tiled(ctx, w.gate_shexp) && decode_tiled(ctx, w.up_shexp) && decode_tiled(ctx, w.down_shexp);
  if (nd > 0 && shared_tiled) {
    gated_product_decode_tiled(ctx, w.gate_shexp, w.up_shexp, b, nd, ws.sh_g, ws.sh_u, "shared expert");
  } else if (nd > 0) {
    if (shared_gated) {
      up_segs.push_back(gated(segment(w.gate_shexp, b, nd, ws.sh_g), w.up_shexp));
    } else {
      up_segs.push_back(segment(w.gate_shexp, b, nd, ws.sh_g));
      up_segs.push_back(segment(w.up_shexp, b, nd, ws.sh_u));
    }
  }
  if (!up_segs.empty()) launch_segments(ctx, std::move(up_segs), "moe gate*up");
  if (nd > 0 && !experts_gated)
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.exp_g, ws.exp_u, ws.exp_g, nd * k * w.gate_exps.ne1, ctx.stream),
                  "expert swiglu %lld pairs", static_cast<long long>(nd * k));
  const int64_t np = rows.num_prefill_rows(), ie = w.gate_exps.ne1;
  if (np > 0) {
    const float* bp = b + nd * c.num_embd;
    const int32_t* ids = ws.expert_ids + nd * k;
    if (experts_gated) {
      experts_tiled(ctx, w.gate_exps, w.up_exps.data, bp, ids, np * k, k, ws.exp_g + nd * k * ie, false, ctx.prefill_math);
    } else {
      experts_tiled(ctx, w.gate_exps, nullptr, bp, ids, np * k, k, ws.exp_g + nd * k * ie, false, ctx.prefill_math);
      experts_tiled(ctx, w.up_exps, nullptr, bp, ids, np * k, k, ws.exp_u + nd * k * ie, true, ctx.prefill_math);
      DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.exp_g + nd * k * ie, ws.exp_u + nd * k * ie, ws.exp_g + nd * k * ie,
                                                np * k * ie, ctx.stream),
                    "expert swiglu %lld prefill pairs", static_cast<long long>(np * k));
    }
  }
  if (nd > 0 && !shared_gated && !shared_tiled)
    DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(ws.sh_g, ws.sh_u, ws.sh_g, nd * w.gate_shexp.ne1, ctx.stream),
                  "shared swiglu %lld rows", static_cast<long long>(nd));
  if (rows.num_prefill_rows() > 0) gated_product_tiled(ctx, w.gate_shexp, w.up_shexp, b, nd, rows.num_prefill_rows(), ws.sh_g, ws.sh_u);
  // Decode rows' down products: each of the routed experts and the shared expert on its tile,
  // or both in one segment launch.
  if (experts_decode_tiled) {
    // The plan of the decode pairs is still in the workspace unless prefill pairs replaced it.
    experts_tiled(ctx, w.down_exps, nullptr, ws.exp_g, ws.expert_ids, nd * k, 1, ws.exp_out, /*plan_ready=*/np == 0,
                  kernels::MatmulMath::kTensorExact);
  }
  if (nd > 0 && shared_tiled) matmul_decode_tiled(ctx, w.down_shexp, ws.sh_g, nd, ws.sh_out, false);
  // Under the staged matvec the decode rows' down products and their combine are one launch
  // (fuse_down_combine); the prefill rows' combine follows their down products below.
  const kernels::MoeDownCombineArgs fused = down_combine_args(ctx, w, nd, y, next);
  const bool down_combined = nd > 0 && !experts_decode_tiled && !shared_tiled && groups.rows_per_group == 0 &&
                             fuse_down_combine(ctx, fused, w);
  if (down_combined) {
    DS_GPU_LAUNCH(ctx, 1, kernels::moe_down_combine_gpu(fused, ctx.stream),
                  "moe_down_combine %s + %s%s%s: %lld rows, top %lld, in %lld / %lld, out %lld", w.down_exps.name.c_str(),
                  w.down_shexp.name.c_str(), next.w != nullptr ? " + rms_norm " : "", next.w != nullptr ? next.w->name.c_str() : "",
                  static_cast<long long>(nd), static_cast<long long>(k), static_cast<long long>(w.down_exps.ne0),
                  static_cast<long long>(w.down_shexp.ne0), static_cast<long long>(c.num_embd));
  }
  std::vector<kernels::MatmulSegment> down_segs;
  if (nd > 0 && !experts_decode_tiled && !down_combined) down_segs.push_back(pairs_segment(w.down_exps, ws.exp_g, 1, ws.exp_out));
  if (nd > 0 && !shared_tiled && !down_combined) down_segs.push_back(segment(w.down_shexp, ws.sh_g, nd, ws.sh_out));
  if (!down_segs.empty()) launch_segments(ctx, std::move(down_segs), "moe down");
  if (np > 0)
    experts_tiled(ctx, w.down_exps, nullptr, ws.exp_g + nd * k * ie, ws.expert_ids + nd * k, np * k, 1,
                  ws.exp_out + nd * k * c.num_embd, /*plan_ready=*/!experts_decode_tiled, ctx.prefill_math);
  if (rows.num_prefill_rows() > 0) matmul_tiled(ctx, w.down_shexp, ws.sh_g, nd, rows.num_prefill_rows(), ws.sh_out, false);
  // Every launch reading b ran before this one (and before the fused launch): next.out may be b.
  // Rows [first, n): all of them, or the prefill rows when the decode rows were combined above.
  const int64_t first = down_combined ? nd : 0, h = c.num_embd;
  if (first == n) return;
  kernels::MoeCombineArgs combine{ws.exp_out + first * k * h, ws.expert_weights + first * k, ws.sh_out + first * h,
                                  ws.sh_gate + first, y + first * h, n - first, k, h};
  combine.accumulate = true;
  if (next.w != nullptr) {
    combine.norm_w = next.w->f32();
    combine.norm_eps = c.rms_eps;
    combine.norm_out = next.out + first * next.out_stride;
    combine.norm_out_stride = next.out_stride;
    combine.norm_counters = ws.norm_sync + first;
  }
  DS_GPU_LAUNCH(ctx, 1, kernels::moe_combine_gpu(combine, ctx.stream), "moe_combine%s%s: %lld rows x %lld",
                next.w != nullptr ? " + rms_norm " : "", next.w != nullptr ? next.w->name.c_str() : "",
                static_cast<long long>(n - first), static_cast<long long>(h));
}

std::string expert_grouping_setting() { return "auto"; }

}  // namespace deltaserve::runtime::gpu
