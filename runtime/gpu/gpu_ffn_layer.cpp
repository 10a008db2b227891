// FFN on the GPU (MODEL.md 2.6), the device twin of runtime/cpu/cpu_ffn_layer.cpp: dense
// SwiGLU, or MoE: router products, softmax top-k (one moe_router_gpu launch), each (row, rank)
// pair through its expert, weighted sum in rank order plus the sigmoid-gated shared expert
// (moe_combine_gpu), added into the residual. Gate and up products with the SiLU product run
// as one gated matmul_segments_gpu launch (experts and shared expert together), as do the
// expert and shared down projections: 4 launches per MoE layer, the combine also writing the
// next block's input norm; 3 under the staged matvec, whose down products and combine are one
// launch (moe_down_combine_gpu). Also the shared matmul and RMSNorm helpers.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise_gpu.h"
#include "kernels/matmul_experts_prefill_gpu.h"
#include "kernels/matmul_gpu.h"
#include "kernels/moe_down_combine_gpu.h"
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
// A decode-row segment reading a deferred norm's rows (InputNorm::deferred).
kernels::MatmulSegment reads_deferred_norm(kernels::MatmulSegment s, const GpuLayerContext& ctx) {
  s.deferred_norm.squares = ctx.ws.norm_squares;
  s.deferred_norm.squares_stride = ctx.ws.norm_squares_stride;
  s.deferred_norm.eps = ctx.config.rms_eps;
  return s;
}
// The decode-row segment of a product that adds into the residual y and writes the next norm
// deferred (NextNorm::deferred).
kernels::MatmulSegment writes_deferred_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows,
                                            float* y, const DeviceTensor& norm, float* out, int64_t out_stride) {
  kernels::MatmulSegment s = segment(w, x, num_rows, y);
  s.args.accumulate = true;
  s.norm_partials.w = norm.f32();
  s.norm_partials.out = out;
  s.norm_partials.out_stride = out_stride;
  s.norm_partials.squares = ctx.ws.norm_squares;
  s.norm_partials.squares_stride = ctx.ws.norm_squares_stride;
  return s;
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
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_prefill_gpu(args, ctx.stream, ctx.prefill_math), "matmul_prefill %s (%s): %lld rows, in %lld, out %lld",
                w.name.c_str(), std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(count),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

// Whether decode rows' product with w runs on the exact tile (tensor mode: plain Q4_0 products
// of matrices with at least ctx.tiled_decode_min_outputs outputs).
bool decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w) {
  return ctx.tiled_decode_min_outputs > 0 && w.type == kernels::DType::Q4_0 && w.ne1 >= ctx.tiled_decode_min_outputs;
}

// Decode rows [0, num_rows) of a product on the exact tile (decode_tiled).
void matmul_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
                         bool accumulate) {
  kernels::MatmulArgs args = matmul_args(w, x, num_rows, y);
  args.accumulate = accumulate;
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_prefill_gpu(args, ctx.stream, kernels::MatmulMath::kTensorExact),
                "matmul %s (%s) tiled: %lld rows, in %lld, out %lld", w.name.c_str(),
                std::string(kernels::dtype_name(w.type)).c_str(), static_cast<long long>(num_rows),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
}

// Decode rows [0, num_rows) of g = SiLU(gate x) * (up x) on the exact tile (decode_tiled of
// both matrices), u: scratch like g.
void gated_product_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                                int64_t num_rows, float* g, float* u, const char* what) {
  matmul_decode_tiled(ctx, gate, x, num_rows, g, false);
  matmul_decode_tiled(ctx, up, x, num_rows, u, false);
  DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, num_rows * gate.ne1, ctx.stream), "swiglu %s: %lld rows x %lld", what,
                static_cast<long long>(num_rows), static_cast<long long>(gate.ne1));
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

// The decode rows' segments (reading in.out) with in's norm carried into their launch, when
// the step allows it (products_normalise_input) and the launch takes it; false: the caller
// fills in.out first (normalise_input).
bool carry_input_norm(const GpuLayerContext& ctx, std::vector<kernels::MatmulSegment>& segs, const InputNorm& in,
                      RowSplit rows) {
  if (in.w == nullptr || segs.empty() || !products_normalise_input(ctx, rows)) return false;
  std::vector<kernels::MatmulSegment> carried = segs;
  for (kernels::MatmulSegment& s : carried) {
    s.args.x = in.residual;
    s.args.x_stride = in.w->ne0;
    s.input_norm_w = in.w->f32();
    s.input_norm_eps = ctx.config.rms_eps;
  }
  if (!kernels::matmul_segments_input_norm_supported(carried.data(), static_cast<int>(carried.size()))) return false;
  segs.swap(carried);
  return true;
}

// in.out = RMSNorm(in.residual) * in.w over the step's rows (an input norm no launch carried).
void normalise_input(const GpuLayerContext& ctx, const InputNorm& in, RowSplit rows) {
  rms_norm(ctx, *in.w, in.residual, rows.num_rows, in.out, in.w->ne0);
}

// g = SiLU(gate x) * (up x) over the step rows (u: scratch like g): decode rows as one gated
// segment launch (or two products and swiglu_gpu when the layouts differ), prefill rows as
// two tiled products and swiglu_gpu. With in.w set x (== in.out) is the norm of in.residual,
// carried into the gated launch where it can be.
void gated_product(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                   RowSplit rows, float* g, float* u, const InputNorm& in = {}) {
  const int64_t nd = rows.num_decode_rows, np = rows.num_prefill_rows(), width = gate.ne1;
  if (in.w != nullptr) {
    std::vector<kernels::MatmulSegment> segs;
    if (nd > 0 && !decode_tiled(ctx, gate) && same_layout(gate, up)) segs.push_back(gated(segment(gate, x, nd, g), up));
    if (carry_input_norm(ctx, segs, in, rows)) {
      launch_segments(ctx, std::move(segs), "gate*up (input norm)");
      return;
    }
    normalise_input(ctx, in, rows);
  }
  if (nd > 0) {
    // A deferred norm's rows (in.deferred) go to the gated launch, which takes it or refuses
    // (norm_deferred said it takes it).
    if (!in.deferred && decode_tiled(ctx, gate) && decode_tiled(ctx, up)) {
      gated_product_decode_tiled(ctx, gate, up, x, nd, g, u, "ffn");
    } else if (in.deferred || same_layout(gate, up)) {
      const kernels::MatmulSegment s = gated(segment(gate, x, nd, g), up);
      launch_segments(ctx, {in.deferred ? reads_deferred_norm(s, ctx) : s}, "gate*up");
    } else {
      matmul(ctx, gate, x, nd, g);
      matmul(ctx, up, x, nd, u);
      DS_GPU_LAUNCH(ctx, 1, kernels::swiglu_gpu(g, u, g, nd * width, ctx.stream), "swiglu %lld x %lld",
                    static_cast<long long>(nd), static_cast<long long>(width));
    }
  }
  if (np > 0) gated_product_tiled(ctx, gate, up, x, nd, np, g, u);
}

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
// moe_router_gpu launch (the logits are matmul_gpu's bits, the routing moe_route_gpu's) for up
// to kFusedRouterMaxRows rows; more rows take the router matvec and moe_route_gpu (two
// launches). The router and shared gate are F32 (GpuWeights / ModelWeights require it). Why
// the limit: the fused kernel's last block routes its row group's rows one after another,
// which at 64 rows cost 3.4 ms of router time per step against 1.0 ms for the two launches
// (H200, 35B-A3B, eager trace).
// Same logits and routing either way (tests/gpu/moe_fused_test.cu), so the choice may follow
// the load.
constexpr int64_t kFusedRouterMaxRows = 4;

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
// streams); 4-row groups from 4 pairs per expert on. DELTASERVE_GPU_GROUP_EXPERTS: 0 never
// groups, 2 or 4 forces that group size where grouping applies (side-by-side runs).
// Same bits every way (a row's arithmetic does not depend on its group), so the choice may
// follow the load; it depends on the step's shape only, so graphs stay valid.
// DELTASERVE_GPU_GROUP_EXPERTS, read once: -1 (unset: by the pairs per expert), 0, 2 or 4.
int expert_grouping() {
  static const int setting = [] {
    const char* v = std::getenv("DELTASERVE_GPU_GROUP_EXPERTS");
    const std::string s = v != nullptr ? v : "";
    return s == "0" ? 0 : s == "2" ? 2 : s == "4" ? 4 : -1;
  }();
  return setting;
}

int expert_group_rows(const ModelConfig& c, int64_t num_pairs) {
  const int setting = expert_grouping();
  if (setting == 0 || c.num_experts <= 0 || num_pairs < c.num_experts) return 0;
  if (setting > 0) return setting;
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
  const bool staged = kernels::matvec_math() == kernels::MatvecMath::kStaged;
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
// kFusedDownCombineRows: 1-16). Measured on the H200 (35B-A3B Q4_0, same call, two launches ->
// fused, bench/RESULTS.md): 1 row 2.79 -> 2.75-2.78 ms, 2 rows 3.55 -> 3.33, 4 rows 5.16 ->
// 4.78, 8 rows 8.05 -> 7.39, 16 rows 13.92 -> 12.70; more rows not measured, so not fused.
// Same bits either way, so the choice may follow the load.
bool fuse_down_combine(const GpuLayerContext& ctx, const kernels::MoeDownCombineArgs& a, const GpuFfnWeights& w) {
  return a.num_rows >= ctx.fuse_down_combine_rows.first && a.num_rows <= ctx.fuse_down_combine_rows.second &&
         kernels::matvec_math() == kernels::MatvecMath::kStaged &&
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

}  // namespace

void matmul(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
            bool accumulate) {
  if (decode_tiled(ctx, w)) return matmul_decode_tiled(ctx, w, x, num_rows, y, accumulate);
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

// Whether the norm rides in the matvec's launch (matmul_norm_gpu): off unless
// DELTASERVE_GPU_FUSE_NORM=1, and then only where its serial tail is short (the last block
// of a row group normalises the group's rows alone, so the tail grows with rows x width).
// Why off: measured on the H200 with step graphs (2026-11-30, 35B-A3B Q4_0, batch 1), the
// fused form takes 3.975 ms/step against 3.735 with the separate rms_norm launch (297 vs 337
// launches): inside a graph a launch costs next to nothing, the serial tail does. Fused for
// every row count and width it also cost 7% at 64 streams and 16% on the 27B (width 5120).
// Same bits either way (matmul_norm_gpu reproduces rms_norm_gpu), so the choice may follow
// the load. MoE steps of up to 4 rows do not get here: their fused router takes the norm
// (ffn_normalises_input), with no serial tail.
bool fused_norm_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DELTASERVE_GPU_FUSE_NORM");
    return v != nullptr && std::string(v) == "1";
  }();
  return enabled;
}

static bool fuse_norm_into_matvec(int64_t num_rows, int64_t width) {
  return fused_norm_enabled() && num_rows <= 8 && width <= 4096;
}

void matmul_then_norm(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, RowSplit rows, float* y,
                      const NextNorm& next) {
  if (next.w == nullptr) return matmul(ctx, w, x, rows, y, /*accumulate=*/true);
  const int64_t nd = rows.num_decode_rows, np = rows.num_prefill_rows(), h = next.w->ne0;
  if (next.deferred) {  // the decode rows' norm left to its readers; the prefill rows' launched
    if (nd > 0) launch_segments(ctx, {writes_deferred_norm(ctx, w, x, nd, y, *next.w, next.out, next.out_stride)}, "deferred norm");
    if (np > 0) {
      matmul_tiled(ctx, w, x, nd, np, y, /*accumulate=*/true);
      rms_norm(ctx, *next.w, y + nd * h, np, next.out + nd * next.out_stride, next.out_stride);
    }
    return;
  }
  if (nd == 0 || decode_tiled(ctx, w) || !fuse_norm_into_matvec(nd, h)) {  // one norm launch over every row
    matmul(ctx, w, x, rows, y, /*accumulate=*/true);
    rms_norm(ctx, *next.w, y, rows.num_rows, next.out, next.out_stride);
    return;
  }
  kernels::MatmulArgs args = matmul_args(w, x, nd, y);
  args.accumulate = true;
  const kernels::MatmulNormEpilogue norm{next.w->f32(), ctx.config.rms_eps, next.out, next.out_stride, ctx.ws.norm_sync};
  DS_GPU_LAUNCH(ctx, 1, kernels::matmul_norm_gpu(args, norm, ctx.stream),
                "matmul %s (%s) + rms_norm %s: %lld rows, in %lld, out %lld", w.name.c_str(),
                std::string(kernels::dtype_name(w.type)).c_str(), next.w->name.c_str(), static_cast<long long>(nd),
                static_cast<long long>(w.ne0), static_cast<long long>(w.ne1));
  if (np > 0) {  // the fused launch normed the decode rows; the prefill rows' norm follows their product
    matmul_tiled(ctx, w, x, nd, np, y, /*accumulate=*/true);
    rms_norm(ctx, *next.w, y + nd * h, np, next.out + nd * next.out_stride, next.out_stride);
  }
}

void matmul_many(const GpuLayerContext& ctx, const DeviceTensor* const* ws, float* const* ys, int count, const float* x,
                 RowSplit rows, const InputNorm& in) {
  if (in.w != nullptr) {
    std::vector<kernels::MatmulSegment> segs;
    bool tiled = false;
    for (int i = 0; i < count; ++i) {
      tiled = tiled || decode_tiled(ctx, *ws[i]);
      segs.push_back(segment(*ws[i], x, rows.num_decode_rows, ys[i]));
    }
    if (!tiled && rows.num_decode_rows > 0 && carry_input_norm(ctx, segs, in, rows)) {
      launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
      return;
    }
    normalise_input(ctx, in, rows);
  }
  if (rows.num_decode_rows > 0) {
    std::vector<kernels::MatmulSegment> segs;
    // A deferred norm's rows (in.deferred) all go to the segment launch, which takes the norm
    // or refuses (norm_deferred said it takes it).
    for (int i = 0; i < count; ++i) {
      if (!in.deferred && decode_tiled(ctx, *ws[i])) {
        matmul_decode_tiled(ctx, *ws[i], x, rows.num_decode_rows, ys[i], false);
      } else {
        const kernels::MatmulSegment s = segment(*ws[i], x, rows.num_decode_rows, ys[i]);
        segs.push_back(in.deferred ? reads_deferred_norm(s, ctx) : s);
      }
    }
    if (!segs.empty()) launch_segments(ctx, std::move(segs), ws[0]->name.c_str());
  }
  if (rows.num_prefill_rows() > 0)
    for (int i = 0; i < count; ++i) matmul_tiled(ctx, *ws[i], x, rows.num_decode_rows, rows.num_prefill_rows(), ys[i], false);
}

std::string expert_grouping_setting() {
  const int setting = expert_grouping();
  return setting < 0 ? "auto" : setting == 0 ? "off" : std::to_string(setting);
}

bool norm_deferred(const GpuLayerContext& ctx, const DeviceTensor& producer, const DeviceTensor& norm,
                   const DeviceTensor* const* consumers, int count, bool gated_pair) {
  const int64_t h = producer.ne1;
  if (!ctx.defer_norms || ctx.ws.norm_squares == nullptr || count < 1 || count > kernels::kMaxMatmulSegments ||
      (gated_pair && count != 2) || norm.ne0 != h || norm.type != kernels::DType::F32 || decode_tiled(ctx, producer))
    return false;
  // The rules read the matrices (and the setting); one row and the workspace stand in for the step's.
  const GpuWorkspace& ws = ctx.ws;
  const kernels::MatmulSegment writer = writes_deferred_norm(ctx, producer, ws.y, 1, ws.x, norm, ws.a, h);
  if (!kernels::matmul_segments_deferred_norm_supported(&writer, 1)) return false;
  std::vector<kernels::MatmulSegment> readers;
  for (int i = 0; i < count; ++i) {
    const DeviceTensor& c = *consumers[i];
    if (c.ne0 != h || decode_tiled(ctx, c)) return false;
  }
  if (gated_pair) {
    if (!same_layout(*consumers[0], *consumers[1])) return false;
    readers.push_back(reads_deferred_norm(gated(segment(*consumers[0], ws.a, 1, ws.y), *consumers[1]), ctx));
  } else {
    for (int i = 0; i < count; ++i) readers.push_back(reads_deferred_norm(segment(*consumers[i], ws.a, 1, ws.y), ctx));
  }
  return kernels::matmul_segments_deferred_norm_supported(readers.data(), static_cast<int>(readers.size()));
}

int64_t carried_input_norm_max_width() {
  static const int64_t width = [] {
    const char* env = std::getenv("DELTASERVE_GPU_INPUT_NORM_MAX_WIDTH");
    return env != nullptr && *env != '\0' ? static_cast<int64_t>(std::atoll(env)) : kCarriedInputNormMaxWidth;
  }();
  return width;
}

// Why: at one or a few rows a norm launch is a chain of its own (the wait for the previous
// kernel, a round trip for the row, the block reduction, the writes, then the next kernel's
// wait), while the product that reads it waits for its activations anyway; normalising in
// every block of that product costs it one more round trip over the row (bench/RESULTS.md).
bool products_normalise_input(const GpuLayerContext& ctx, RowSplit rows) {
  return ctx.carry_input_norms && ctx.config.num_embd <= carried_input_norm_max_width() && rows.num_decode_rows > 0 &&
         rows.num_decode_rows <= kCarriedInputNormMaxRows && rows.num_prefill_rows() == 0;
}

bool ffn_normalises_input(const GpuLayerContext& ctx, RowSplit rows) {
  const ModelConfig& c = ctx.config;
  if (!c.is_moe()) return products_normalise_input(ctx, rows);
  const int64_t num_rows = rows.num_rows;
  return num_rows >= 1 && num_rows <= kFusedRouterMaxRows && kernels::moe_router_fuses_norm(c.num_embd, num_rows, c.num_experts);
}

void ffn_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y,
                 const NextNorm& next, const FfnInputNorm& in) {
  if (in.w != nullptr && in.b != b) throw std::logic_error("ffn_forward: the input norm must write b");
  if (ctx.config.is_moe() && (in.deferred || next.deferred)) throw std::logic_error("ffn_forward: no deferred norm in a MoE FFN");
  if (ctx.config.is_moe()) {
    moe_forward(ctx, w, rows, b, y, next, in);
  } else {
    InputNorm gate_in{in.w, y, in.b};
    gate_in.deferred = in.deferred;
    gated_product(ctx, w.gate, w.up, b, rows, ctx.ws.ffn_g, ctx.ws.ffn_u, gate_in);
    matmul_then_norm(ctx, w.down, ctx.ws.ffn_g, rows, y, next);
  }
}

}  // namespace deltaserve::runtime::gpu
