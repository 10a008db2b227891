// The FFN's product helpers, shared by its dense half (gpu_ffn_layer.cpp) and its MoE half
// (gpu_moe_layer.cpp): argument blocks of kernels/matmul/matmul_gpu.h from device tensors, and the
// launches of the decode (matvec or exact tile) and prefill (tiled) forms. Enqueue on
// ctx.stream; count every launch (DS_GPU_LAUNCH).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul/matmul_gpu.h"
#include "runtime/gpu/gpu_layers.h"

namespace deltaserve::runtime::gpu {

kernels::MatmulArgs matmul_args(const DeviceTensor& w, const float* x, int64_t num_rows, float* y);
// One segment per launch slot; expert segments read x row p / pairs_per_x_row.
kernels::MatmulSegment segment(const DeviceTensor& w, const float* x, int64_t num_rows, float* y);
kernels::MatmulSegment expert_segment(const DeviceTensor& w, const float* x, const int32_t* ids, int64_t num_pairs,
                                      int64_t pairs_per_x_row, float* y);
// Gated: y = SiLU(gate x) * (up x), swiglu_gpu's bits.
kernels::MatmulSegment gated(kernels::MatmulSegment s, const DeviceTensor& up);
bool same_layout(const DeviceTensor& a, const DeviceTensor& b);
// Launches the segments, fusing those of one weight type into one launch.
void launch_segments(const GpuLayerContext& ctx, std::vector<kernels::MatmulSegment> segs, const char* what);
// Tiled prefill form of a product over rows [first, first + count) of dense buffers.
void matmul_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t first, int64_t count, float* y,
                  bool accumulate);
// Whether decode rows' product with w runs on the exact tile (tensor mode: plain Q4_0 products
// of matrices with at least ctx.tiled_decode_min_outputs outputs).
bool decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w);
// Decode rows [0, num_rows) of a product on the exact tile (decode_tiled).
void matmul_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& w, const float* x, int64_t num_rows, float* y,
                         bool accumulate);
// Decode rows [0, num_rows) of g = SiLU(gate x) * (up x) on the exact tile (decode_tiled of
// both matrices), u: scratch like g.
void gated_product_decode_tiled(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                                int64_t num_rows, float* g, float* u, const char* what);
// Rows [first, first + count) of g = SiLU(gate x) * (up x) through the tiled kernel.
void gated_product_tiled(const GpuLayerContext& ctx, const DeviceTensor& gate, const DeviceTensor& up, const float* x,
                         int64_t first, int64_t count, float* g, float* u);

// Rows up to which one moe_router_gpu launch routes them (the logits are matmul_gpu's bits, the
// routing moe_route_gpu's); more rows take the router matvec and moe_route_gpu. Why the limit:
// the fused kernel's last block routes its row group's rows one after another, which at 64
// rows cost the 35B-A3B's step several times the two launches' router time (eager trace,
// bench/RESULTS.md). Same logits and routing either way (tests/gpu/moe_fused_test.cu), so the
// choice may follow the load.
inline constexpr int64_t kFusedRouterMaxRows = 4;

// MoE with the shared expert, added into y (gpu_moe_layer.cpp); ffn_forward's MoE branch.
void moe_forward(const GpuLayerContext& ctx, const GpuFfnWeights& w, RowSplit rows, const float* b, float* y,
                 const NextNorm& next, const FfnInputNorm& in);

}  // namespace deltaserve::runtime::gpu
