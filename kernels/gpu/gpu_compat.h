// The one vendor seam of the GPU kernels: every kernels/<op>/*.cu is written once against this
// header and built by nvcc (CUDA) or hipcc (HIP). It maps the runtime API to gpu* names, picks
// the f16/bf16 types, fixes the warp width per target at compile time, and holds the only
// lane arithmetic (shuffle reductions) the kernels use, so a 32-vs-64-lane mistake can only
// live here.
//
// Host part (plain C++, includable by g++ with the SDK's include path): gpu* names, and
// DS_GPU_CHECK for callers (runtime, tests). Device part: only under nvcc / hipcc.
//
// Warp width: 32 on NVIDIA; on AMD the target's wavefront (64 on gfx906 / gfx90a / gfx942
// CDNA, 32 on RDNA wave32), from the compiler's per-target macro. Host code never needs it:
// launch shapes are fixed thread counts and kernels derive their lane split from kWarpSize.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#define DS_GPU_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_version.h>
// ROCm 6 brought hip_bf16.h / __hip_bfloat16; ROCm 5.x (Debian's 5.2) has hip_bfloat16.
#if HIP_VERSION >= 60000000
#include <hip/hip_bf16.h>
using gpu_bf16 = __hip_bfloat16;
#else
#include <hip/hip_bfloat16.h>
using gpu_bf16 = hip_bfloat16;
#endif
using gpu_half = __half;
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
#define gpuSuccess hipSuccess
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuGetLastError hipGetLastError
#define gpuPeekAtLastError hipPeekAtLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetDevice hipGetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceProp hipDeviceProp_t
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemset hipMemset
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuMemGetInfo hipMemGetInfo
#define gpuMallocHost(ptr, bytes) hipHostMalloc((ptr), (bytes), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
// Graphs (stream capture and replay of a step's launches).
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
#define gpuStreamBeginCaptureThreadLocal(stream) hipStreamBeginCapture((stream), hipStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(exec, graph) hipGraphInstantiate((exec), (graph), nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphGetNodes hipGraphGetNodes
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
#else
#define DS_GPU_CUDA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using gpu_bf16 = __nv_bfloat16;
using gpu_half = __half;
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
#define gpuSuccess cudaSuccess
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuGetLastError cudaGetLastError
#define gpuPeekAtLastError cudaPeekAtLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDevice cudaGetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceProp cudaDeviceProp
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemset cudaMemset
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMallocHost(ptr, bytes) cudaMallocHost((ptr), (bytes))
#define gpuFreeHost cudaFreeHost
// Graphs (stream capture and replay of a step's launches).
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
#define gpuStreamBeginCaptureThreadLocal(stream) cudaStreamBeginCapture((stream), cudaStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(exec, graph) cudaGraphInstantiateWithFlags((exec), (graph), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphGetNodes cudaGraphGetNodes
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
#endif

namespace deltaserve::kernels {

// Reports a failed SDK call (the call's text, where, the device, the caller's shapes) and
// aborts: after a device error the device state can no longer be trusted (STYLE.md, Errors).
[[noreturn]] inline void gpu_check_failed(gpuError_t err, const char* call, const char* file,
                                          int line, const char* shapes) {
  int device = -1;
  (void)gpuGetDevice(&device);
  gpuDeviceProp prop{};
  const bool have_prop = device >= 0 && gpuGetDeviceProperties(&prop, device) == gpuSuccess;
  std::fprintf(stderr, "GPU error %d (%s) in %s at %s:%d on device %d (%s); shapes: %s\n",
               static_cast<int>(err), gpuGetErrorString(err), call, file, line, device,
               have_prop ? prop.name : "?", shapes != nullptr ? shapes : "-");
  std::fflush(stderr);
  std::abort();
}

}  // namespace deltaserve::kernels

// DS_GPU_CHECK(call, "printf format of the shapes", args...): aborts with a report unless the
// call returns gpuSuccess. The shape text is only formatted on failure.
#define DS_GPU_CHECK(call, ...)                                                        \
  do {                                                                                 \
    const gpuError_t ds_gpu_err_ = (call);                                             \
    if (ds_gpu_err_ != gpuSuccess) {                                                   \
      char ds_gpu_shapes_[256];                                                        \
      std::snprintf(ds_gpu_shapes_, sizeof ds_gpu_shapes_, "" __VA_ARGS__);            \
      ::deltaserve::kernels::gpu_check_failed(ds_gpu_err_, #call, __FILE__, __LINE__,  \
                                              ds_gpu_shapes_);                         \
    }                                                                                  \
  } while (0)

namespace deltaserve::kernels::gpu {

// Whether gpu::launch uses dependent launches: CUDA, a device of compute capability 9.0 or
// more, and kernels compiled for it (not JIT from older PTX, which lacks the wait). Decided
// once per process, on the first call (after the device is chosen). Defined in kernels/gpu/launch.cu.
bool dependent_launch_enabled();

namespace timeline {
// The in-step timeline of a measuring build (gpu_timeline.h): one launch's stamp, and the buffer
// every kernel unit's device copy points at.
struct Stamp {
  uint64_t started_ns = 0;   // block (0, 0, 0) began (before its grid dependency wait)
  uint64_t released_ns = 0;  // its wait returned
  // When the previous launch's last block ended, for a previous launch that stamps its blocks'
  // ends (gpu::stamp_block_end; the staged matvec); 0 otherwise.
  uint64_t previous_end_ns = 0;
  uint64_t previous_first_end_ns = 0;  // likewise, its first block's end (~0: none stamped)
  uint32_t grid_x = 0, grid_y = 0, block_x = 0, smem_bytes = 0;
};
struct DeviceBuffer {
  Stamp* stamps = nullptr;
  unsigned* count = nullptr;  // launches stamped since the last reset (may exceed capacity)
  unsigned capacity = 0;
  unsigned long long* last_end = nullptr;   // the latest block end stamped since the last launch began
  unsigned long long* first_end = nullptr;  // the earliest (~0: none)
};
// A kernel unit's function that points its device copy at the buffer; registered by each unit
// of a DS_GPU_TIMELINE build (device part below), called by timeline::enable (launch.cu).
using PointUnit = gpuError_t (*)(const DeviceBuffer&);
bool register_unit(PointUnit point);
}  // namespace timeline

// Whether p is 16-byte aligned (the launchers' check before 16-byte loads and copies).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace deltaserve::kernels::gpu

// ------------------------------------------------------------------------------------------
// Device part.
#if defined(__CUDACC__) || defined(__HIPCC__)

// The warp (wavefront) width of the target being compiled. The host pass of hipcc sees no
// target; it parses kernel bodies but never runs them, so any value is fine there.
#if defined(DS_GPU_HIP)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define DS_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define DS_WARP_SIZE 64
#endif
#else
#define DS_WARP_SIZE 32
#endif

namespace deltaserve::kernels::gpu {

inline constexpr int kWarpSize = DS_WARP_SIZE;
static_assert(kWarpSize == 32 || kWarpSize == 64, "unexpected warp width");

#if defined(DS_GPU_TIMELINE) && defined(DS_GPU_CUDA)
// The timeline of a measuring build (gpu_timeline.h): this unit's copy of the buffer pointer,
// registered with launch.cu at load so that timeline::enable can point it.
namespace timeline {
namespace {
__device__ DeviceBuffer unit_buffer;
gpuError_t point_unit(const DeviceBuffer& b) { return cudaMemcpyToSymbol(unit_buffer, &b, sizeof b); }
[[maybe_unused]] const bool unit_registered = register_unit(&point_unit);

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace
}  // namespace timeline
#endif

// Programmatic dependent launch (CUDA on sm_90 and up): a kernel started by gpu::launch may
// be scheduled while the kernel before it on the stream drains, which hides the launch
// latency and block ramp between the ~340 small kernels of a decode step. Correctness rests
// on one rule (tests/gpu/launch_rule_check.sh): every __global__ function of kernels/ calls
// begin_kernel() before any global memory access and before any early return; only L2
// prefetches (below), reads of kernel parameters and the addresses prefetches need, read from
// memory no kernel of the step writes (the GDN step's state entry index, attention's positions
// and block tables: the step's staging copy wrote them before the step's first kernel), the
// staged matvec's copies of its first weight chunks into shared memory (weights: no kernel of a
// step writes them), and the GDN step's loads of its recurrent and conv state and weights (the
// states are written only by the same layer's step of an earlier forward) may come first.
// It waits until the previous kernel on the stream has completed with its writes visible (so
// transitively every earlier one), then allows the next kernel to be scheduled. HIP and older targets: no-ops,
// and gpu::launch is an ordinary launch. A measuring build (DS_GPU_TIMELINE) also stamps the
// launch here (block (0, 0, 0) only; the read of the unit's pointer is of memory only the host
// writes).
__device__ __forceinline__ void begin_kernel() {
#if defined(DS_GPU_TIMELINE) && defined(DS_GPU_CUDA)
  const bool stamps = (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0 &&
                      timeline::unit_buffer.stamps != nullptr;
  const uint64_t started = stamps ? timeline::global_timer_ns() : 0;
#endif
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#if defined(DS_GPU_TIMELINE) && defined(DS_GPU_CUDA)
  if (stamps) {
    const uint64_t released = timeline::global_timer_ns();
    const timeline::DeviceBuffer b = timeline::unit_buffer;
    const unsigned slot = atomicAdd(b.count, 1u);
    unsigned smem = 0;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem));
    // The previous launch completed before the wait returned, so its blocks' end stamps are all in.
    const uint64_t previous_end = b.last_end != nullptr ? atomicExch(b.last_end, 0ull) : 0;
    const uint64_t previous_first_end = b.first_end != nullptr ? atomicExch(b.first_end, ~0ull) : ~0ull;
    if (slot < b.capacity)
      b.stamps[slot] =
          timeline::Stamp{started, released, previous_end, previous_first_end, gridDim.x, gridDim.y, blockDim.x, smem};
  }
#endif
}

// A measuring build (DS_GPU_TIMELINE) stamps the block's end for the next launch's stamp
// (Stamp::previous_end_ns): every thread of the block calls it last. Else nothing.
__device__ __forceinline__ void stamp_block_end() {
#if defined(DS_GPU_TIMELINE) && defined(DS_GPU_CUDA)
  __syncthreads();
  if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0 && timeline::unit_buffer.last_end != nullptr) {
    const unsigned long long now = timeline::global_timer_ns();
    atomicMax(timeline::unit_buffer.last_end, now);
    atomicMin(timeline::unit_buffer.first_end, now);
  }
#endif
}

// The device-scope fence of the last-block handshakes: a block's stores, then this fence, then
// its arrival (atomicAdd) release them; the last block's observed count, then this fence, then
// its loads acquire them (PTX's fence-fence synchronisation). __threadfence() is membar.gl, a
// sequentially consistent fence, stronger than a handshake needs. HIP: __threadfence().
__device__ __forceinline__ void fence_acq_rel_device() {
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
  __threadfence();
#endif
}

// Asks L2 for the 128-byte line holding p: no data reaches the thread and nothing waits, and
// L2 is the device's point of coherence, so it is safe before begin_kernel() on any address
// (the line fills with whatever the previous kernel has written by then; later loads see
// its final values). Kernels use it to start their weight reads while the previous kernel
// finishes. HIP: no-op.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// prefetch_l2 over [begin, begin + bytes), the block's threads striding over the lines.
__device__ __forceinline__ void prefetch_l2_range(const void* begin, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{127};
  const uintptr_t stop = reinterpret_cast<uintptr_t>(begin) + bytes;
  for (uintptr_t line = first + 128u * threadIdx.x; line < stop; line += 128u * blockDim.x) {
    prefetch_l2(reinterpret_cast<const void*>(line));
  }
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...), as a dependent launch where enabled.
// The launch status is left for gpuGetLastError(), as with <<<>>>: a dependent launch that
// fails is retried as an ordinary one, which records its own status (the same error for a
// bad launch; success where only the attribute was refused).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, gpuStream_t stream, Args&&... args) {
#if defined(DS_GPU_CUDA)
  if (dependent_launch_enabled()) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return;  // copies: args may be reused below
    (void)cudaGetLastError();
  }
#endif
  kernel<<<grid, block, smem_bytes, stream>>>(static_cast<Args&&>(args)...);
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & (kWarpSize - 1); }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) / kWarpSize; }

template <class T>
__device__ __forceinline__ T shuffle_xor(T v, int lane_mask) {
#if defined(DS_GPU_HIP)
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// The value of lane src_lane (all lanes of the warp call it).
template <class T>
__device__ __forceinline__ T shuffle(T v, int src_lane) {
#if defined(DS_GPU_HIP)
  return __shfl(v, src_lane);
#else
  return __shfl_sync(0xffffffffu, v, src_lane);
#endif
}

// The warp's lanes meet here, their shared-memory writes visible to each other.
__device__ __forceinline__ void sync_warp() {
#if defined(DS_GPU_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// The value of lane (this lane - delta); lanes below delta get their own.
template <class T>
__device__ __forceinline__ T shuffle_up(T v, int delta) {
#if defined(DS_GPU_HIP)
  return __shfl_up(v, delta);
#else
  return __shfl_up_sync(0xffffffffu, v, delta);
#endif
}

// Sum over aligned groups of kGroup lanes (a power of two <= kWarpSize) by a butterfly in a
// fixed order; every lane of the group gets the same bits (IEEE addition commutes, and each
// level pairs the same two partial sums in every lane). All lanes of the warp must call it.
template <int kGroup>
__device__ __forceinline__ float group_sum(float v) {
  static_assert(kGroup >= 1 && kGroup <= kWarpSize && (kGroup & (kGroup - 1)) == 0);
#pragma unroll
  for (int mask = kGroup / 2; mask > 0; mask >>= 1) v += shuffle_xor(v, mask);
  return v;
}

template <int kGroup>
__device__ __forceinline__ float group_max(float v) {
  static_assert(kGroup >= 1 && kGroup <= kWarpSize && (kGroup & (kGroup - 1)) == 0);
#pragma unroll
  for (int mask = kGroup / 2; mask > 0; mask >>= 1) v = fmaxf(v, shuffle_xor(v, mask));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) { return group_sum<kWarpSize>(v); }
__device__ __forceinline__ float warp_max(float v) { return group_max<kWarpSize>(v); }

// (value, index) maximum with the lowest index winning ties; NaN loses to everything.
__device__ __forceinline__ bool arg_better(float v, int i, float best_v, int best_i) {
  if (v != v) return false;
  if (best_v != best_v) return true;
  return v > best_v || (v == best_v && i < best_i);
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    const float ov = shuffle_xor(v, mask);
    const int oi = shuffle_xor(i, mask);
    if (arg_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// Block-wide sum in a fixed order (warp butterflies, then warp totals added in warp order by
// every thread). scratch: kWarpsMax floats of shared memory; all threads must call it; the
// scratch may be reused after the call returns.
inline constexpr int kMaxWarpsPerBlock = 1024 / 32;
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int num_warps = static_cast<int>((blockDim.x + kWarpSize - 1) / kWarpSize);
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int num_warps = static_cast<int>((blockDim.x + kWarpSize - 1) / kWarpSize);
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  float best = -INFINITY;
  for (int w = 0; w < num_warps; ++w) best = fmaxf(best, scratch[w]);
  __syncthreads();
  return best;
}

// Exact conversions of stored 16-bit floats (bit patterns, as the weight files hold them).
__device__ __forceinline__ float f16_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<unsigned>(bits) << 16);
}
// f32 -> bf16 bits rounded to nearest, ties to even; NaN stays NaN (quiet), +-inf stays +-inf:
// the same bits as kernels/float16.h's fp32_to_bf16 on the host.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const unsigned bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// 4 bytes from a 2-byte-aligned address (quant blocks are only 2-byte aligned in a row).
__device__ __forceinline__ uint32_t load_u32_align2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }

}  // namespace deltaserve::kernels::gpu

#endif  // __CUDACC__ || __HIPCC__
