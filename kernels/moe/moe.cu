// MoE routing (moe_gpu.h). moe_route_gpu: one warp per row; probabilities in registers (up to
// 256 experts; shared memory beyond); k rounds of a warp (probability, id) argmax. moe_router_gpu: the router's dot products
// spread over (output block, row group) blocks, one warp per output as matmul_gpu's matvec
// computes it; the block that finishes last for its row group (a counter per group) routes
// the group's rows with the same warp routine as moe_route_gpu, one warp per row. With the input norm, each block
// first normalises its row group into shared memory (norm_block.h, rms_norm_gpu's order).
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/norm/norm_block.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 256;  // router blocks (the routing itself is one warp's, whatever the block)
constexpr int kMaxUsed = 32;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxGridY = 65535;
// Router: outputs (expert rows, then the shared gate row) per block; a warp takes outputs
// warp_id, warp_id + warps, ... (a fixed count so the host's grid never needs the warp width).
constexpr int kRouterOutputsPerBlock = 8;
constexpr int kRouterUnroll = 4;  // chunks per lane in flight (loads issued before the FMAs)
// Dynamic shared memory a router block may use without an opt-in attribute (every target).
constexpr size_t kRouterMaxSharedBytes = size_t{48} << 10;

// One row's routing by ONE warp (no block barriers: the block-wide form, two
// barriers per top-k round, made the fused router's serial tail most of its time at batch 1).
// probs[0, ne) (shared memory, this warp's alone) holds the row's logits on entry, written by
// this warp or before a barrier, and is overwritten. Softmax: max, exp, each lane summing its
// elements e = lane, lane + W, ... in order, then the warp butterfly; divide. k rounds of a
// warp argmax (lower id on ties, NaN never wins); the lane that owns the winner (e mod W) marks
// it taken, and only that lane reads it again, so no cross-lane sync is needed. Weights are
// renormalised by the selected sum (added in rank order, every lane alike); lane j < k writes
// ids[j] and weights[j]. Every lane of the warp calls it.
__device__ void route_row_warp(float* probs, int ne, int num_used, int32_t* ids, float* weights) {
  const int lane = gpu::lane_id();
  gpu::sync_warp();
  float m = -INFINITY;
  for (int e = lane; e < ne; e += kWarpSize) m = fmaxf(m, probs[e]);
  m = gpu::warp_max(m);
  float partial = 0.0f;
  for (int e = lane; e < ne; e += kWarpSize) {
    const float p = expf(probs[e] - m);
    probs[e] = p;
    partial += p;
  }
  const float total = gpu::warp_sum(partial);
  for (int e = lane; e < ne; e += kWarpSize) probs[e] /= total;

  float chosen_p = 0.0f;
  int chosen_e = 0;
  for (int k = 0; k < num_used; ++k) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int e = lane; e < ne; e += kWarpSize) {
      if (gpu::arg_better(probs[e], e, v, i)) v = probs[e], i = e;
    }
    gpu::warp_argmax(v, i);
    const bool found = i < ne;  // false only when every remaining probability is NaN
    if (lane == k) chosen_p = found ? v : 0.0f, chosen_e = found ? i : 0;
    if (found && lane == i % kWarpSize) probs[i] = -1.0f;
  }
  float selected = 0.0f;
  for (int k = 0; k < num_used; ++k) selected += gpu::shuffle(chosen_p, k);
  if (lane < num_used) {
    ids[lane] = chosen_e;
    weights[lane] = chosen_p / selected;
  }
}

// gpu::warp_argmax's result (the warp's best (v, i) by gpu::arg_better; no lane holds a NaN
// here): on sm_80+ by two warp reductions (the largest order key, then the lowest id holding
// it) instead of a five-step butterfly of shuffles and compares. Order key: larger is better,
// -0 and +0 alike (they compare equal, so the id decides, as in arg_better).
__device__ __forceinline__ void warp_argmax_fast(float& v, int& i) {
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t bits = __float_as_uint(v == 0.0f ? 0.0f : v);
  const uint32_t key = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  const uint32_t best = __reduce_max_sync(0xffffffffu, key);
  const int winner = static_cast<int>(__reduce_min_sync(0xffffffffu, key == best ? static_cast<uint32_t>(i) : 0xffffffffu));
  const float winner_v = __shfl_sync(0xffffffffu, v, winner & (kWarpSize - 1));
  v = winner_v;  // the winner lane holds (v, winner); INT_MAX: every lane holds (-inf, INT_MAX)
  i = winner;
#else
  gpu::warp_argmax(v, i);
#endif
}

// Experts per lane route_row_warp_registers holds (rows of up to kWarpSize x this many experts).
constexpr int kRoutedPerLane = 8;

// route_row_warp with the row's probabilities in registers (lane l holds experts l, l + W, ...,
// the elements route_row_warp's lane l owns), for ne <= kWarpSize * kRoutedPerLane: the softmax
// is the same operations in the same order, and each top-k round picks what route_row_warp's
// round picks (below), so the same ids and weights bit for bit. load(e) returns logit e; all
// loads go out together. Why: the fused router's last block runs this on one warp while the
// MoE layer waits (at one row about half the router's time, nearly all of it this warp's
// dependent instructions with the scan and shuffle-butterfly rounds, which the tree and the
// warp reductions shorten; bench/RESULTS.md).
template <class Load>
__device__ void route_row_warp_registers(Load load, int ne, int num_used, int32_t* ids, float* weights) {
  const int lane = gpu::lane_id();
  float p[kRoutedPerLane];
#pragma unroll
  for (int j = 0; j < kRoutedPerLane; ++j) {
    const int e = lane + j * kWarpSize;
    p[j] = e < ne ? load(e) : -INFINITY;
  }
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kRoutedPerLane; ++j) {
    if (lane + j * kWarpSize < ne) m = fmaxf(m, p[j]);
  }
  m = gpu::warp_max(m);
  float partial = 0.0f;
#pragma unroll
  for (int j = 0; j < kRoutedPerLane; ++j) {
    if (lane + j * kWarpSize < ne) {
      p[j] = expf(p[j] - m);
      partial += p[j];
    }
  }
  const float total = gpu::warp_sum(partial);
#pragma unroll
  for (int j = 0; j < kRoutedPerLane; ++j) {
    if (lane + j * kWarpSize < ne) p[j] /= total;
  }

  float chosen_p = 0.0f;
  int chosen_e = 0;
  for (int k = 0; k < num_used; ++k) {
    // The lane's best (value, id) by gpu::arg_better, a strict total order with NaN last, so a
    // tree over its elements, then the empty start (-inf, INT_MAX), picks what the rolled scan
    // from that start picks: a 3-deep tree instead of an 8-long chain, on the path of one warp
    // that the whole MoE layer waits for.
    float tv[kRoutedPerLane];
    int ti[kRoutedPerLane];
#pragma unroll
    for (int j = 0; j < kRoutedPerLane; ++j) {
      const int e = lane + j * kWarpSize;
      tv[j] = e < ne ? p[j] : -INFINITY;
      ti[j] = e < ne ? e : 0x7fffffff;
    }
#pragma unroll
    for (int width = kRoutedPerLane / 2; width > 0; width /= 2) {
#pragma unroll
      for (int j = 0; j < width; ++j) {
        if (gpu::arg_better(tv[j + width], ti[j + width], tv[j], ti[j])) tv[j] = tv[j + width], ti[j] = ti[j + width];
      }
    }
    float v = -INFINITY;
    int i = 0x7fffffff;
    if (gpu::arg_better(tv[0], ti[0], v, i)) v = tv[0], i = ti[0];
    warp_argmax_fast(v, i);
    const bool found = i < ne;  // false only when every remaining probability is NaN
    if (lane == k) chosen_p = found ? v : 0.0f, chosen_e = found ? i : 0;
#pragma unroll
    for (int j = 0; j < kRoutedPerLane; ++j) {
      if (found && lane + j * kWarpSize == i) p[j] = -1.0f;
    }
  }
  float selected = 0.0f;
  for (int k = 0; k < num_used; ++k) selected += gpu::shuffle(chosen_p, k);
  if (lane < num_used) {
    ids[lane] = chosen_e;
    weights[lane] = chosen_p / selected;
  }
}

// One block of one warp per row (the routing is one warp's work).
__global__ void __launch_bounds__(kWarpSize) moe_route_kernel(const MoeRouteArgs a) {
  gpu::begin_kernel();
  extern __shared__ float probs[];  // [num_experts]; selected experts are set to -1
  const int64_t r = blockIdx.x;
  const int ne = static_cast<int>(a.num_experts);
  const float* logits = a.logits + r * a.num_experts;
  if (ne <= kWarpSize * kRoutedPerLane) {
    route_row_warp_registers([logits](int e) { return logits[e]; }, ne, static_cast<int>(a.num_used),
                             a.expert_ids + r * a.num_used, a.weights + r * a.num_used);
    return;
  }
  for (int e = threadIdx.x; e < ne; e += blockDim.x) probs[e] = logits[e];
  route_row_warp(probs, ne, static_cast<int>(a.num_used), a.expert_ids + r * a.num_used, a.weights + r * a.num_used);
}

// Rows of a router row group routed side by side (one warp and one probability buffer each)
// when the buffers take at most 16 KiB; else 1 (warp 0, row after row, one buffer).
__host__ __device__ constexpr int router_parallel_rows(int rows_per_group, int64_t num_experts) {
  const int warps = kThreads / kWarpSize;
  const int rows = rows_per_group < warps ? rows_per_group : warps;
  return static_cast<int64_t>(rows) * num_experts * 4 <= (int64_t{16} << 10) ? rows : 1;
}

// Weight chunks per lane a router warp loads before the input norm (c = lane + u * W, u <
// kRouterHoist: every chunk of a 2,048-wide row), so their round trip overlaps the norm.
constexpr int kRouterHoist = 8;

__device__ __forceinline__ void load_router_chunks(const float* w, int64_t num_in, float (&pre)[kRouterHoist][8]) {
  const int lane = gpu::lane_id();
  const int64_t num_chunks = num_in / 8;
#pragma unroll
  for (int u = 0; u < kRouterHoist; ++u) {
    const int64_t c = lane + u * kWarpSize;
    int64_t x0, x1;
    if (c < num_chunks) gpu::DecodeF32::decode(reinterpret_cast<const uint8_t*>(w), c, pre[u], x0, x1);
  }
}

// acc[r] += chunk (w8) times x row r at elements 8c .. 8c + 7, in element order.
template <int R>
__device__ __forceinline__ void router_fma_chunk(const float (&w8)[8], const float* const* xs, int64_t c, float (&acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float4 xa = *reinterpret_cast<const float4*>(xs[r] + 8 * c);
    const float4 xb = *reinterpret_cast<const float4*>(xs[r] + 8 * c + 4);
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(w8[e], xv[e], acc[r]);
  }
}

// acc[r] = dot(weight row, x row r) for R rows: lane l takes 8-element chunks l, l + W, ...,
// fused multiply-adds in element order, chunks in increasing order, then the warp butterfly:
// matmul_gpu's F32 matvec sequence for one output, so the logits are its bits. kHoisted: the
// lane's first kRouterHoist chunks are already in pre (load_router_chunks).
template <int R, bool kHoisted>
__device__ __forceinline__ void router_dot(const float* w, const float* const* xs, int64_t num_in,
                                           const float (&pre)[kRouterHoist][8], float (&acc)[R]) {
  const int lane = gpu::lane_id();
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const uint8_t* row = reinterpret_cast<const uint8_t*>(w);
  const int64_t num_chunks = num_in / 8;
  int64_t c = lane;
  if constexpr (kHoisted) {
#pragma unroll
    for (int u = 0; u < kRouterHoist; ++u, c += kWarpSize) {
      if (c < num_chunks) router_fma_chunk<R>(pre[u], xs, c, acc);
    }
  }
  for (; c + (kRouterUnroll - 1) * kWarpSize < num_chunks; c += kRouterUnroll * kWarpSize) {
    float wv[kRouterUnroll][8];
    int64_t x0, x1;
#pragma unroll
    for (int u = 0; u < kRouterUnroll; ++u) gpu::DecodeF32::decode(row, c + u * kWarpSize, wv[u], x0, x1);
#pragma unroll
    for (int u = 0; u < kRouterUnroll; ++u) router_fma_chunk<R>(wv[u], xs, c + u * kWarpSize, acc);
  }
  for (; c < num_chunks; c += kWarpSize) {
    float wv[8];
    int64_t x0, x1;
    gpu::DecodeF32::decode(row, c, wv, x0, x1);
    router_fma_chunk<R>(wv, xs, c, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = gpu::warp_sum(acc[r]);
}

// Block (output block x, row group y) of R rows: its outputs' logits for the group's rows,
// then a counter per group; the group's last block routes its rows and resets the counter.
// kNorm: a.norm_w is set (its own instantiation, so the plain router's code and registers stay
// as they were).
template <int R, bool kNorm>
__global__ void __launch_bounds__(kThreads) moe_router_kernel(const MoeRouterArgs a) {
  // The block's router rows (and the shared-expert gate row) to L2 while the previous kernel
  // finishes (gpu::prefetch_l2); the first row group only, the others read the same rows.
  if (blockIdx.y == 0) {
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kRouterOutputsPerBlock;
    const int64_t end = min(first + kRouterOutputsPerBlock, a.num_experts);
    if (first < end) {
      gpu::prefetch_l2_range(reinterpret_cast<const uint8_t*>(a.router_w) + first * a.w_row_bytes,
                             static_cast<size_t>(end - first) * a.w_row_bytes);
    }
    if (a.shared_gate_w != nullptr && blockIdx.x == a.num_experts / kRouterOutputsPerBlock) {  // output num_experts
      gpu::prefetch_l2_range(a.shared_gate_w, static_cast<size_t>(a.num_in) * sizeof(float));
    }
    if (kNorm && blockIdx.x == 0) gpu::prefetch_l2_range(a.norm_w, static_cast<size_t>(a.num_in) * sizeof(float));
  }
  gpu::begin_kernel();
  // Dynamic shared memory: [R][num_in] normed rows (input norm only), then
  // [router_parallel_rows][num_experts] probabilities (one buffer per routing warp).
  extern __shared__ float smem[];
  __shared__ bool is_last;
  const int64_t ne = a.num_experts;
  const int64_t num_out = ne + (a.shared_gate_w != nullptr ? 1 : 0);
  // Output o's weight row (expert rows, then the shared gate row).
  const auto weight_row = [&](int64_t o) {
    return o < ne ? reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(a.router_w) + o * a.w_row_bytes)
                  : a.shared_gate_w;
  };
  // This warp's first output's first chunks, loaded before the input norm, for groups of one
  // or two rows (the latency-bound shapes; with 4 or 8 rows the registers would halve the
  // blocks per multiprocessor).
  constexpr bool kHoist = R <= 2;
  const int first_j = gpu::warp_id();
  const int64_t first_o = static_cast<int64_t>(blockIdx.x) * kRouterOutputsPerBlock + first_j;
  float pre[kRouterHoist][8];
  if (kHoist && first_j < kRouterOutputsPerBlock && first_o < num_out) load_router_chunks(weight_row(first_o), a.num_in, pre);
  const int64_t group = blockIdx.y;
  const int64_t row0 = group * R;
  const int num_valid = static_cast<int>(min(static_cast<int64_t>(R), a.num_rows - row0));
  float* const probs = smem + (kNorm ? R * a.num_in : 0);
  const float* xs[R];
  if constexpr (kNorm) {
    // Every block normalises the group's rows itself (rms_norm_gpu's bits); output block 0
    // also hands them to the launches after this one.
    __shared__ float norm_scratch[R * detail::kNormMaxThreads / kWarpSize];
    if (detail::norm_rows_cacheable(a.num_in)) {  // all rows at once, one wait on L2
      detail::block_rms_norm_rows_as_norm_gpu<R>(a.x + row0 * a.x_stride, a.x_stride, num_valid, a.norm_w, smem, a.num_in,
                                                 a.num_in, a.norm_eps, norm_scratch);
    } else {
      for (int r = 0; r < num_valid; ++r) {
        detail::block_rms_norm_as_norm_gpu(a.x + (row0 + r) * a.x_stride, a.norm_w, smem + r * a.num_in, a.num_in,
                                           a.norm_eps, norm_scratch);
      }
    }
    __syncthreads();
    if (blockIdx.x == 0) {
      for (int r = 0; r < num_valid; ++r) {
        float* out = a.norm_out + (row0 + r) * a.norm_out_stride;
        for (int64_t i = threadIdx.x; i < a.num_in; i += blockDim.x) out[i] = smem[r * a.num_in + i];
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) xs[r] = smem + (r < num_valid ? r : 0) * a.num_in;  // pad rows: row 0
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) xs[r] = a.x + (row0 + (r < num_valid ? r : 0)) * a.x_stride;  // pad rows: row 0
  }

  const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
  for (int j = gpu::warp_id(); j < kRouterOutputsPerBlock; j += num_warps) {
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kRouterOutputsPerBlock + j;
    if (o >= num_out) break;
    float acc[R];
    if (kHoist && j == first_j) {
      router_dot<R, true>(weight_row(o), xs, a.num_in, pre, acc);
    } else {
      router_dot<R, false>(weight_row(o), xs, a.num_in, pre, acc);
    }
    if (gpu::lane_id() == 0) {
      for (int r = 0; r < num_valid; ++r) {
        if (o < ne) {
          a.logits[(row0 + r) * ne + o] = acc[r];
        } else {
          a.shared_gate_logits[row0 + r] = acc[r];
        }
      }
      gpu::fence_acq_rel_device();  // this warp's logits are visible device-wide before the count says so
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(a.sync_counters + group, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!is_last) return;
  gpu::fence_acq_rel_device();  // acquire side: the other blocks' logits before this block reads them
  const int warp = gpu::warp_id();
  if (ne <= kWarpSize * kRoutedPerLane) {  // warp w routes rows w, w + warps, ... in registers
    for (int r = warp; r < num_valid; r += num_warps) {
      const int64_t row = row0 + r;
      const float* logits = a.logits + row * ne;  // written by other blocks: read from L2
      route_row_warp_registers([logits](int e) { return detail::load_from_other_block(logits + e); }, static_cast<int>(ne),
                               static_cast<int>(a.num_used), a.expert_ids + row * a.num_used, a.weights + row * a.num_used);
    }
    if (threadIdx.x == 0) a.sync_counters[group] = 0;  // ready for the next launch (graph replays too)
    return;
  }
  // Warp w routes rows w, w + P, ... of the group (P = router_parallel_rows), each row in its
  // own probability buffer: the rows side by side instead of one after another.
  const int parallel = router_parallel_rows(R, ne);
  if (warp < parallel) {
    float* const mine = probs + warp * ne;
    for (int r = warp; r < num_valid; r += parallel) {
      const int64_t row = row0 + r;
      const volatile float* logits = a.logits + row * ne;  // written by other blocks: not via L1
      for (int e = gpu::lane_id(); e < ne; e += kWarpSize) mine[e] = logits[e];  // lane e mod W owns e
      route_row_warp(mine, static_cast<int>(ne), static_cast<int>(a.num_used), a.expert_ids + row * a.num_used,
                     a.weights + row * a.num_used);
    }
  }
  if (threadIdx.x == 0) a.sync_counters[group] = 0;  // ready for the next launch (graph replays too)
}

bool valid_routing(int64_t num_experts, int64_t num_used) {
  return num_used >= 1 && num_used <= kMaxUsed && num_used <= num_experts && num_experts <= kMaxExperts;
}

bool valid(const MoeRouterArgs& a) {
  if (!valid_routing(a.num_experts, a.num_used) || a.num_rows < 0 || a.num_in <= 0 || a.num_in % 8 != 0) return false;
  if (a.x == nullptr || a.router_w == nullptr || a.logits == nullptr || a.expert_ids == nullptr || a.weights == nullptr ||
      a.sync_counters == nullptr)
    return false;
  if ((a.shared_gate_w == nullptr) != (a.shared_gate_logits == nullptr)) return false;
  if (!gpu::aligned16(a.x) || a.x_stride < a.num_in || a.x_stride % 4 != 0) return false;
  if (!gpu::aligned16(a.router_w) || a.w_row_bytes % 16 != 0 || a.w_row_bytes < static_cast<size_t>(a.num_in) * sizeof(float))
    return false;
  if (a.shared_gate_w != nullptr && !gpu::aligned16(a.shared_gate_w)) return false;
  if (a.norm_w == nullptr) return a.norm_out == nullptr;
  if (a.norm_out == nullptr || !gpu::aligned16(a.norm_out) || a.norm_out_stride < a.num_in || a.norm_out_stride % 4 != 0)
    return false;
  if (!moe_router_fuses_norm(a.num_in, a.num_rows, a.num_experts)) return false;
  if (a.num_rows == 0) return true;
  // norm_out is written while other blocks still read x: the two may not overlap.
  const float* x_end = a.x + (a.num_rows - 1) * a.x_stride + a.num_in;
  const float* out_end = a.norm_out + (a.num_rows - 1) * a.norm_out_stride + a.num_in;
  return out_end <= a.x || x_end <= a.norm_out;
}

// Rows per router block for num_rows rows (1, 2, 4 or 8): a row's bits do not depend on it.
int64_t router_rows_per_group(int64_t num_rows) {
  if (num_rows <= 2) return num_rows < 1 ? 1 : num_rows;
  return num_rows <= 4 ? 4 : 8;
}

size_t router_shared_bytes(const MoeRouterArgs& a) {
  const int rows = static_cast<int>(router_rows_per_group(a.num_rows));
  const int64_t normed = a.norm_w != nullptr ? rows * a.num_in : 0;
  return static_cast<size_t>(normed + router_parallel_rows(rows, a.num_experts) * a.num_experts) * sizeof(float);
}

template <int R>
gpuError_t launch_router(const MoeRouterArgs& a, gpuStream_t stream) {
  const int64_t num_groups = (a.num_rows + R - 1) / R;
  if (num_groups > kMaxGridY) return gpuErrorInvalidValue;
  const int64_t num_out = a.num_experts + (a.shared_gate_w != nullptr ? 1 : 0);
  const dim3 grid(static_cast<unsigned>((num_out + kRouterOutputsPerBlock - 1) / kRouterOutputsPerBlock),
                  static_cast<unsigned>(num_groups));
  if (a.norm_w != nullptr) {
    gpu::launch(moe_router_kernel<R, true>, grid, kThreads, router_shared_bytes(a), stream, a);
  } else {
    gpu::launch(moe_router_kernel<R, false>, grid, kThreads, router_shared_bytes(a), stream, a);
  }
  return gpuGetLastError();
}

}  // namespace

bool moe_router_fuses_norm(int64_t num_in, int64_t num_rows, int64_t num_experts) {
  if (num_in <= 0 || num_experts <= 0) return false;
  const int rows = static_cast<int>(router_rows_per_group(num_rows));
  const int64_t floats = rows * num_in + router_parallel_rows(rows, num_experts) * num_experts;
  return static_cast<size_t>(floats) * sizeof(float) <= kRouterMaxSharedBytes;
}

gpuError_t moe_route_gpu(const MoeRouteArgs& a, gpuStream_t stream) {
  if (!valid_routing(a.num_experts, a.num_used) || a.num_rows < 0) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  const size_t smem = static_cast<size_t>(a.num_experts) * sizeof(float);
  gpu::launch(moe_route_kernel, static_cast<unsigned>(a.num_rows), kWarpSize, smem, stream, a);
  return gpuGetLastError();
}

gpuError_t moe_router_gpu(const MoeRouterArgs& a, gpuStream_t stream) {
  if (!valid(a)) return gpuErrorInvalidValue;
  if (a.num_rows == 0) return gpuSuccess;
  // Row groups share each weight load (as matmul_gpu's); a row's bits do not depend on R.
  switch (router_rows_per_group(a.num_rows)) {
    case 1: return launch_router<1>(a, stream);
    case 2: return launch_router<2>(a, stream);
    case 4: return launch_router<4>(a, stream);
    default: return launch_router<8>(a, stream);
  }
}

}  // namespace deltaserve::kernels
