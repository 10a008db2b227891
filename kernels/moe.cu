// MoE routing (moe_gpu.h): one block per row; probabilities in shared memory; k rounds of a
// block-wide (probability, id) argmax.
#include <cstdint>

#include "kernels/gpu_compat.h"
#include "kernels/moe_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;

constexpr int kThreads = 256;
constexpr int kMaxUsed = 32;
constexpr int64_t kMaxExperts = 4096;

__global__ void __launch_bounds__(kThreads) moe_route_kernel(const MoeRouteArgs a) {
  extern __shared__ float probs[];  // [num_experts]; selected experts are set to -1
  __shared__ float scratch[gpu::kMaxWarpsPerBlock];
  __shared__ float best_v[gpu::kMaxWarpsPerBlock];
  __shared__ int best_i[gpu::kMaxWarpsPerBlock];
  __shared__ float chosen_p[kMaxUsed];
  __shared__ int chosen_e[kMaxUsed];
  const int64_t r = blockIdx.x;
  const int ne = static_cast<int>(a.num_experts);
  const float* logits = a.logits + r * a.num_experts;

  float m = -INFINITY;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) m = fmaxf(m, logits[e]);
  m = gpu::block_max(m, scratch);
  float partial = 0.0f;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    const float p = expf(logits[e] - m);
    probs[e] = p;
    partial += p;
  }
  const float total = gpu::block_sum(partial, scratch);  // also orders the probs writes
  for (int e = threadIdx.x; e < ne; e += blockDim.x) probs[e] /= total;
  __syncthreads();

  const int num_warps = kThreads / kWarpSize;
  for (int k = 0; k < a.num_used; ++k) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
      if (gpu::arg_better(probs[e], e, v, i)) v = probs[e], i = e;
    }
    gpu::warp_argmax(v, i);
    if (gpu::lane_id() == 0) best_v[gpu::warp_id()] = v, best_i[gpu::warp_id()] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = best_v[0];
      int bi = best_i[0];
      for (int w = 1; w < num_warps; ++w) {
        if (gpu::arg_better(best_v[w], best_i[w], bv, bi)) bv = best_v[w], bi = best_i[w];
      }
      const bool found = bi < ne;  // false only when every remaining probability is NaN
      chosen_p[k] = found ? bv : 0.0f;
      chosen_e[k] = found ? bi : 0;
      if (found) probs[bi] = -1.0f;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float selected = 0.0f;
    for (int k = 0; k < a.num_used; ++k) selected += chosen_p[k];
    for (int k = 0; k < a.num_used; ++k) {
      a.expert_ids[r * a.num_used + k] = chosen_e[k];
      a.weights[r * a.num_used + k] = chosen_p[k] / selected;
    }
  }
}

}  // namespace

gpuError_t moe_route_gpu(const MoeRouteArgs& a, gpuStream_t stream) {
  if (a.num_used < 1 || a.num_used > kMaxUsed || a.num_used > a.num_experts || a.num_experts > kMaxExperts ||
      a.num_rows < 0) {
    return gpuErrorInvalidValue;
  }
  if (a.num_rows == 0) return gpuSuccess;
  const size_t smem = static_cast<size_t>(a.num_experts) * sizeof(float);
  moe_route_kernel<<<static_cast<unsigned>(a.num_rows), kThreads, smem, stream>>>(a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
