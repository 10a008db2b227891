// Standalone probe (not part of the build): what does one dependent launch cost inside a CUDA
// graph, apart from its work? The 27B's one-stream decode step has 359 launches, and its
// timeline (bench/RESULTS.md) puts a one-block kernel at ~3.4 us from its wait's return to the
// next one's, and every staged matvec ~5.6 us above its bytes' time. Here chains of K kernels
// that do next to nothing (each block reads one value of the previous kernel's output and
// writes one), captured into a graph and replayed, three ways:
//   plain: ordinary launches (the next kernel starts when the previous one has completed);
//   pdl:   programmatic dependent launch, griddepcontrol.wait then launch_dependents (what
//          gpu::begin_kernel does);
//   flag:  programmatic dependent launch, launch_dependents first, then a block waits for a
//          counter the previous kernel's blocks release (after their writes and a fence) to
//          reach its block count, with acquire loads: no wait for the grid's completion.
// A kernel launches only when every block of the one before it has started (launch_dependents
// at the top), so a spinning block never holds a slot an earlier kernel still needs.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o launch_chain_probe bench/probes/launch_chain_probe.cu
//   ./launch_chain_probe      # us per launch by grid size and form
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

enum Form { kPlain = 0, kPdl = 1, kFlag = 2 };

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Kernel i of the chain: block b reads in[b % in_n], writes out[b] = it + 1.
template <int F>
__global__ void chain_kernel(const float* in, int in_n, float* out, const unsigned* wait_on, unsigned wait_for, unsigned* done,
                             int spin_work) {
  if constexpr (F == kPdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  if constexpr (F == kFlag) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0 && wait_on != nullptr) {
      while (load_acquire(wait_on) < wait_for) {
      }
    }
    __syncthreads();
  }
  float v = in[blockIdx.x % in_n];
  // Optional busy work (cycles), to see whether the handoff overlaps anything.
  for (int i = 0; i < spin_work; ++i) v = v * 1.0000001f + 1e-7f;
  if (threadIdx.x == 0) out[blockIdx.x] = v + 1.0f;
  if constexpr (F == kFlag) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(done, 1u);
    }
  }
}

template <int F>
void launch(cudaStream_t s, int grid, const float* in, int in_n, float* out, const unsigned* wait_on, unsigned wait_for, unsigned* done,
            int spin_work) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = F == kPlain ? 0 : 1;
  CK(cudaLaunchKernelEx(&cfg, chain_kernel<F>, in, in_n, out, wait_on, wait_for, done, spin_work));
}

double time_chain(int form, int grid, int k, int spin_work, float* buf, unsigned* counters, cudaStream_t s) {
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(counters, 0, sizeof(unsigned) * (k + 1), s));
  for (int i = 0; i < k; ++i) {
    const float* in = buf + static_cast<size_t>(i % 2) * 4096;
    float* out = buf + static_cast<size_t>((i + 1) % 2) * 4096;
    const unsigned* wait_on = i == 0 ? nullptr : counters + i - 1;
    if (form == kPlain) launch<kPlain>(s, grid, in, grid, out, wait_on, grid, counters + i, spin_work);
    if (form == kPdl) launch<kPdl>(s, grid, in, grid, out, wait_on, grid, counters + i, spin_work);
    if (form == kFlag) launch<kFlag>(s, grid, in, grid, out, wait_on, grid, counters + i, spin_work);
  }
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  const int reps = 20;
  CK(cudaEventRecord(a, s));
  for (int r = 0; r < reps; ++r) CK(cudaGraphLaunch(exec, s));
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return 1000.0 * ms / (reps * k);
}

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* buf;
  unsigned* counters;
  const int k = 256;
  CK(cudaMalloc(&buf, 2 * 4096 * sizeof(float)));
  CK(cudaMemset(buf, 0, 2 * 4096 * sizeof(float)));
  CK(cudaMalloc(&counters, (k + 1) * sizeof(unsigned)));
  const char* names[] = {"plain", "pdl", "flag"};
  printf("us per launch, chains of %d kernels of 256 threads in one graph (20 replays)\n", k);
  printf("%8s %8s %10s %10s %10s\n", "grid", "work", names[0], names[1], names[2]);
  for (int spin : {0, 2000}) {
    for (int grid : {1, 28, 132, 320, 528, 1056, 2176}) {
      double t[3];
      for (int f = 0; f < 3; ++f) t[f] = time_chain(f, grid, k, spin, buf, counters, s);
      printf("%8d %8d %10.2f %10.2f %10.2f\n", grid, spin, t[0], t[1], t[2]);
    }
  }
  return 0;
}
