// Grouping a step's (row, rank) expert pairs by expert (moe_gpu.h moe_group_pairs_gpu), so
// the expert matvec reads each expert's weights once per group of pairs instead of once per
// pair. One block: counts per expert in shared memory, an exclusive scan of the groups per
// expert (warp 0), then each pair takes the next slot of its expert (a shared-memory
// atomic: the slot order may vary, the products do not, since a row's arithmetic in the
// matvec does not depend on its group or position).
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/moe/moe_gpu.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int64_t kMaxExperts = 4096;

__global__ void __launch_bounds__(kThreads) moe_group_pairs_kernel(const MoeGroupPairsArgs a) {
  gpu::begin_kernel();
  extern __shared__ int32_t shared[];
  const int ne = static_cast<int>(a.num_experts), rows = a.rows_per_group;
  int32_t* const count = shared;       // [ne] pairs per expert, then the slots handed out
  int32_t* const first = shared + ne;  // [ne] first group of each expert
  __shared__ int32_t total;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < a.num_pairs; p += blockDim.x) {
    const int32_t e = a.expert_ids[p];
    if (e >= 0 && e < ne) atomicAdd(count + e, 1);
  }
  __syncthreads();
  if (threadIdx.x < gpu::kWarpSize) {  // warp 0: exclusive scan of ceil(count / rows) over experts
    const int lane = static_cast<int>(threadIdx.x);
    const int per_lane = (ne + gpu::kWarpSize - 1) / gpu::kWarpSize;
    const int begin = min(ne, lane * per_lane), end = min(ne, begin + per_lane);
    int32_t sum = 0;
    for (int e = begin; e < end; ++e) sum += (count[e] + rows - 1) / rows;
    int32_t inclusive = sum;
    for (int offset = 1; offset < gpu::kWarpSize; offset *= 2) {
      const int32_t v = gpu::shuffle_up(inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    int32_t at = inclusive - sum;
    for (int e = begin; e < end; ++e) {
      first[e] = at;
      at += (count[e] + rows - 1) / rows;
    }
    if (lane == gpu::kWarpSize - 1) total = inclusive;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < ne; e += blockDim.x) count[e] = 0;
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(total) * rows; i += blockDim.x) a.group_pairs[i] = -1;
  if (threadIdx.x == 0) *a.num_groups = total;
  __syncthreads();  // the -1 fill before the pairs (same block: ordered by the barrier)
  for (int64_t p = threadIdx.x; p < a.num_pairs; p += blockDim.x) {
    const int32_t e = a.expert_ids[p];
    if (e < 0 || e >= ne) continue;
    const int32_t slot = atomicAdd(count + e, 1);
    const int64_t group = first[e] + slot / rows;
    a.group_pairs[group * rows + slot % rows] = static_cast<int32_t>(p);
    if (slot % rows == 0) a.group_expert[group] = e;
  }
}

}  // namespace

int64_t moe_pair_groups_bound(int64_t num_pairs, int64_t num_experts, int rows_per_group) {
  if (num_pairs <= 0 || rows_per_group <= 0) return 0;
  // Each expert with pairs leaves at most one group short of full.
  const int64_t full = num_pairs / rows_per_group;
  const int64_t partial = num_experts < num_pairs ? num_experts : num_pairs;
  return full + partial < num_pairs ? full + partial : num_pairs;
}

gpuError_t moe_group_pairs_gpu(const MoeGroupPairsArgs& a, gpuStream_t stream) {
  if ((a.rows_per_group != 2 && a.rows_per_group != 4) || a.num_experts < 1 || a.num_experts > kMaxExperts ||
      a.num_pairs < 0 || a.expert_ids == nullptr || a.group_expert == nullptr || a.group_pairs == nullptr ||
      a.num_groups == nullptr)
    return gpuErrorInvalidValue;
  const size_t smem = static_cast<size_t>(2 * a.num_experts) * sizeof(int32_t);
  gpu::launch(moe_group_pairs_kernel, 1, kThreads, smem, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
