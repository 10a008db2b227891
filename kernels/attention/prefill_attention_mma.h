// Internal to the prefill attention kernels (prefill_attention.cu, prefill_attention_mma.cu):
// the cache address both forms read, and the tensor-core form's seam. Only for nvcc / hipcc
// translation units.
#pragma once

#include <cstdint>

#include "kernels/attention/attention_gpu.h"
#include "kernels/gpu/gpu_compat.h"

namespace deltaserve::kernels::detail {

// The element offset of cache position p of KV head kvh through a sequence's block table
// (positions and block_tokens fit int32: a 32-bit division, far cheaper than a 64-bit one).
__device__ __forceinline__ int64_t prefill_cached_offset(const PrefillAttentionGpuArgs& a, const int32_t* table, int p,
                                                         int64_t kvh) {
  const int bt = static_cast<int>(a.block_tokens);
  const int64_t block = table[p / bt];
  return ((block * a.block_tokens + p % bt) * a.num_kv_heads + kvh) * a.head_dim;
}

// Whether the tensor-core tile (prefill_attention_mma.cu) can serve these validated args on the
// current device: CUDA with bf16 mma (sm_80 and up), head_dim 128 or 256, and the device's
// opt-in shared memory holds the tile (~170 KB at 128, ~204 KB at 256: sm_90 yes; sm_80's 163
// KB and sm_86 / sm_89's 99 KB no, so those keep the CUDA-core kernel). Always false on HIP.
bool prefill_attention_mma_usable(const PrefillAttentionGpuArgs& a);

// Launches the tensor-core tile (prefill_attention_mma_usable(a) must hold).
gpuError_t prefill_attention_mma_launch(const PrefillAttentionGpuArgs& a, gpuStream_t stream);

}  // namespace deltaserve::kernels::detail
