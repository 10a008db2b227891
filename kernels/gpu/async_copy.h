// cp.async pieces shared by the kernels that stage global memory in shared memory without
// holding it in registers (the tiled matmuls' windows, matmul_tile.h; the GDN step's state
// slice, gdn.cu): a 16-byte copy, the group commit and the wait. CUDA sm_80 and up; elsewhere
// (HIP, older targets, the host pass) the copy is a plain load and store and commit / wait do
// nothing, which gives the same bytes in shared memory once the block's barrier follows. Only
// for nvcc / hipcc translation units.
#pragma once

#include "kernels/gpu/gpu_compat.h"

#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DS_ASYNC_COPY 1
#endif

namespace deltaserve::kernels::gpu {

// 16 bytes from src (global, 16-byte aligned) to dst (shared, 16-byte aligned).
__device__ __forceinline__ void async_copy16(void* dst, const void* src) {
#if defined(DS_ASYNC_COPY)
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}

// A shared-memory window's base for async_copy16_at: its shared-space address where cp.async
// exists, converted once (each conversion of a generic pointer is three instructions, and
// ptxas repeats them for every predicated copy), else the pointer.
#if defined(DS_ASYNC_COPY)
using SharedBase = unsigned;
__device__ __forceinline__ SharedBase shared_base(void* window) { return static_cast<unsigned>(__cvta_generic_to_shared(window)); }
// async_copy16 to byte `offset` of the window.
__device__ __forceinline__ void async_copy16_at(SharedBase base, unsigned offset, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(base + offset), "l"(src) : "memory");
}
#else
using SharedBase = unsigned char*;
__device__ __forceinline__ SharedBase shared_base(void* window) { return static_cast<unsigned char*>(window); }
__device__ __forceinline__ void async_copy16_at(SharedBase base, unsigned offset, const void* src) {
  async_copy16(base + offset, src);
}
#endif

// Closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void async_commit() {
#if defined(DS_ASYNC_COPY)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void async_wait() {
#if defined(DS_ASYNC_COPY)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace deltaserve::kernels::gpu
