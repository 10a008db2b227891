// Standalone probe (not part of the build): what bounds the Q4_0 matrix-vector product at one
// activation row on an NVIDIA GPU. Kernels: the GGUF layout walked like kernels/matmul.cu
// (a lane per 8-element chunk, O outputs per warp), the same with the weights' integers made
// exact floats without the int-to-float instruction ("magic"), the same plus a per-chunk partial
// sum scaled once by the block's d ("partial"), a split layout (16-byte-aligned qs, scales
// apart) with E elements per lane, and the split layout with the "partial" math, a whole block
// (one 16-byte load) per lane and output, U blocks per lane in flight ("split partial", not yet
// run on a device). Weights rotate past the L2. bench/RESULTS.md's decision log
// (2026-12-01) has what it ruled out; the full table is in that file's history.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o q4_0_matvec_probe bench/probes/q4_0_matvec_probe.cu
//   ./q4_0_matvec_probe          # the table
//   ./q4_0_matvec_probe ncu      # one shape (27B gate), for Nsight Compute
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cstdlib>
#include <cuda_fp16.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p); return uint32_t(q[0]) | (uint32_t(q[1]) << 16);
}
__device__ __forceinline__ float wsum(float v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o); return v; }

// baseline: GGUF layout, lane per 8-element chunk (like the product kernel), O outputs per warp
template <int O>
__global__ void __launch_bounds__(128) k_gguf(const uint8_t* w, size_t row_bytes, const float* x, float* y, int n_in, int n_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = (blockIdx.x * 4 + warp) * O;
  float acc[O] = {};
  const int nc = n_in / 8;
  for (int c = lane; c < nc; c += 32) {
    const int b = c >> 2, p = c & 3;
    const float4 xa = *reinterpret_cast<const float4*>(x + 32 * b + 4 * p);
    const float4 xb = *reinterpret_cast<const float4*>(x + 32 * b + 16 + 4 * p);
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int i = 0; i < O; ++i) {
      const uint8_t* blk = w + size_t(min(o0 + i, n_out - 1)) * row_bytes + 18 * b;
      const float d = h2f(*reinterpret_cast<const uint16_t*>(blk));
      const uint32_t q = ld_u32_a2(blk + 2 + 4 * p);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t by = (q >> (8 * e)) & 255u;
        acc[i] = fmaf(float(int(by & 15u) - 8) * d, xv[e], acc[i]);
        acc[i] = fmaf(float(int(by >> 4) - 8) * d, xv[4 + e], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) { const float s = wsum(acc[i]); if (lane == 0 && o0 + i < n_out) y[o0 + i] = s; }
}


template <int I> __device__ __forceinline__ float bbyte(uint32_t w) { return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | I)); }
// MODE 1: magic conversion, w = (q-8)*d, fma (same bits as baseline); MODE 2: chunk partial sum then fma by d
template <int O, int MODE>
__global__ void __launch_bounds__(128) k_gguf_m(const uint8_t* w, size_t row_bytes, const float* x, float* y, int n_in, int n_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = (blockIdx.x * 4 + warp) * O;
  float acc[O] = {};
  const int nc = n_in / 8;
  for (int c = lane; c < nc; c += 32) {
    const int b = c >> 2, p = c & 3;
    const float4 xa = *reinterpret_cast<const float4*>(x + 32 * b + 4 * p);
    const float4 xb = *reinterpret_cast<const float4*>(x + 32 * b + 16 + 4 * p);
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int i = 0; i < O; ++i) {
      const uint8_t* blk = w + size_t(min(o0 + i, n_out - 1)) * row_bytes + 18 * b;
      const float d = h2f(*reinterpret_cast<const uint16_t*>(blk));
      const uint32_t q = ld_u32_a2(blk + 2 + 4 * p);
      const uint32_t lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
      float wv[8] = {bbyte<0>(lo), bbyte<1>(lo), bbyte<2>(lo), bbyte<3>(lo), bbyte<0>(hi), bbyte<1>(hi), bbyte<2>(hi), bbyte<3>(hi)};
      if (MODE == 1) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i] = fmaf(__fmul_rn(__fsub_rn(wv[e], 8388616.0f), d), xv[e], acc[i]);
      } else {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(__fsub_rn(wv[e], 8388616.0f), xv[e], s);
        acc[i] = fmaf(d, s, acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) { const float s = wsum(acc[i]); if (lane == 0 && o0 + i < n_out) y[o0 + i] = s; }
}

// split layout: qs [n_out][nb][16], d [n_out][nb]; lane per E elements (8, 16, 32)
template <int E, int O>
__global__ void __launch_bounds__(128) k_split(const uint8_t* qs, const uint16_t* ds, const float* x, float* y, int n_in, int n_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = (blockIdx.x * 4 + warp) * O;
  const int nb = n_in / 32;
  constexpr int kParts = 32 / E;  // units per block
  const int nu = nb * kParts;
  float acc[O] = {};
  for (int u = lane; u < nu; u += 32) {
    const int b = u / kParts, p = u % kParts;
    constexpr int kB = E / 2;  // qs bytes per unit
    float xv[E];
#pragma unroll
    for (int j = 0; j < kB / 4; ++j) {
      const float4 a = *reinterpret_cast<const float4*>(x + 32 * b + kB * p + 4 * j);
      const float4 c = *reinterpret_cast<const float4*>(x + 32 * b + 16 + kB * p + 4 * j);
      xv[4 * j] = a.x; xv[4 * j + 1] = a.y; xv[4 * j + 2] = a.z; xv[4 * j + 3] = a.w;
      xv[kB + 4 * j] = c.x; xv[kB + 4 * j + 1] = c.y; xv[kB + 4 * j + 2] = c.z; xv[kB + 4 * j + 3] = c.w;
    }
#pragma unroll
    for (int i = 0; i < O; ++i) {
      const size_t r = size_t(min(o0 + i, n_out - 1));
      const uint8_t* q0 = qs + (r * nb + b) * 16 + kB * p;
      const float d = h2f(ds[r * nb + b]);
      uint32_t words[kB / 4];
      if constexpr (kB == 16) { const uint4 v = *reinterpret_cast<const uint4*>(q0); words[0] = v.x; words[1] = v.y; words[2] = v.z; words[3] = v.w; }
      else if constexpr (kB == 8) { const uint2 v = *reinterpret_cast<const uint2*>(q0); words[0] = v.x; words[1] = v.y; }
      else { words[0] = *reinterpret_cast<const uint32_t*>(q0); }
#pragma unroll
      for (int j = 0; j < kB / 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t by = (words[j] >> (8 * e)) & 255u;
          acc[i] = fmaf(float(int(by & 15u) - 8) * d, xv[4 * j + e], acc[i]);
          acc[i] = fmaf(float(int(by >> 4) - 8) * d, xv[kB + 4 * j + e], acc[i]);
        }
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) { const float s = wsum(acc[i]); if (lane == 0 && o0 + i < n_out) y[o0 + i] = s; }
}

// split layout, whole 32-element block per lane (one 16-byte qs load per output), the "partial"
// math (magic conversion, per-block partial sum scaled once by d); U blocks per lane in flight.
template <int O, int U>
__global__ void __launch_bounds__(128) k_split_partial(const uint8_t* qs, const uint16_t* ds, const float* x, float* y, int n_in, int n_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = (blockIdx.x * 4 + warp) * O;
  const int nb = n_in / 32;
  float acc[O] = {};
  for (int b0 = lane; b0 < nb; b0 += 32 * U) {
    uint4 q[U][O];
    float d[U][O];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = min(b0 + 32 * u, nb - 1);
#pragma unroll
      for (int i = 0; i < O; ++i) {
        const size_t r = size_t(min(o0 + i, n_out - 1));
        q[u][i] = *reinterpret_cast<const uint4*>(qs + (r * nb + b) * 16);
        d[u][i] = h2f(ds[r * nb + b]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + 32 * u;
      if (b >= nb) break;
      float xv[32];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(x + 32 * b + 4 * j);
        xv[4 * j] = v.x; xv[4 * j + 1] = v.y; xv[4 * j + 2] = v.z; xv[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < O; ++i) {
        const uint32_t words[4] = {q[u][i].x, q[u][i].y, q[u][i].z, q[u][i].w};
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t lo = words[w] & 0x0f0f0f0fu, hi = (words[w] >> 4) & 0x0f0f0f0fu;
          s = fmaf(__fsub_rn(bbyte<0>(lo), 8388616.0f), xv[4 * w + 0], s);
          s = fmaf(__fsub_rn(bbyte<1>(lo), 8388616.0f), xv[4 * w + 1], s);
          s = fmaf(__fsub_rn(bbyte<2>(lo), 8388616.0f), xv[4 * w + 2], s);
          s = fmaf(__fsub_rn(bbyte<3>(lo), 8388616.0f), xv[4 * w + 3], s);
          s = fmaf(__fsub_rn(bbyte<0>(hi), 8388616.0f), xv[16 + 4 * w + 0], s);
          s = fmaf(__fsub_rn(bbyte<1>(hi), 8388616.0f), xv[16 + 4 * w + 1], s);
          s = fmaf(__fsub_rn(bbyte<2>(hi), 8388616.0f), xv[16 + 4 * w + 2], s);
          s = fmaf(__fsub_rn(bbyte<3>(hi), 8388616.0f), xv[16 + 4 * w + 3], s);
        }
        acc[i] = fmaf(d[u][i], s, acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) { const float s = wsum(acc[i]); if (lane == 0 && o0 + i < n_out) y[o0 + i] = s; }
}

template <class F>
float time_us(F f, int copies) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f(i % copies);
  std::vector<float> t;
  int n = 0;
  for (int rep = 0; rep < 10; ++rep) {
    cudaEventRecord(a);
    for (int i = 0; i < 20; ++i) f(n++ % copies);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(1000 * ms / 20);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[5];
}

void shape(const char* name, int n_in, int n_out) {
  const int nb = n_in / 32;
  const size_t bytes = size_t(n_out) * nb * 18;
  const int copies = int((size_t(512) << 20) / bytes + 1);
  std::vector<uint8_t*> w(copies), qs(copies); std::vector<uint16_t*> ds(copies);
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = uint8_t(i * 2654435761u >> 13);
  for (size_t r = 0; r < size_t(n_out) * nb; ++r) { host[r * 18] = 0x00; host[r * 18 + 1] = 0x3c; }  // d = 1
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&w[c], bytes)); CK(cudaMemcpy(w[c], host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&qs[c], size_t(n_out) * nb * 16)); CK(cudaMemset(qs[c], 0x5a, size_t(n_out) * nb * 16));
    CK(cudaMalloc(&ds[c], size_t(n_out) * nb * 2)); CK(cudaMemset(ds[c], 0x3c, size_t(n_out) * nb * 2));
  }
  float *x, *y; CK(cudaMalloc(&x, n_in * 4)); CK(cudaMalloc(&y, n_out * 4)); CK(cudaMemset(x, 0, n_in * 4));
  auto rep = [&](const char* k, float us) { printf("| %-16s | %-24s | %8.2f | %6.0f |\n", name, k, us, bytes / (us * 1e3)); };
  const size_t rb = size_t(nb) * 18;
  rep("gguf O=2", time_us([&](int c) { k_gguf<2><<<(n_out + 7) / 8, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  rep("gguf O=1", time_us([&](int c) { k_gguf<1><<<(n_out + 3) / 4, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  rep("gguf magic O=2", time_us([&](int c) { k_gguf_m<2, 1><<<(n_out + 7) / 8, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  rep("gguf partial O=2", time_us([&](int c) { k_gguf_m<2, 2><<<(n_out + 7) / 8, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  rep("gguf partial O=1", time_us([&](int c) { k_gguf_m<1, 2><<<(n_out + 3) / 4, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  rep("gguf partial O=4", time_us([&](int c) { k_gguf_m<4, 2><<<(n_out + 15) / 16, 128>>>(w[c], rb, x, y, n_in, n_out); }, copies));
  if (getenv("PROBE_ONLY_GGUF")) return;
  rep("split E=8 O=2", time_us([&](int c) { k_split<8, 2><<<(n_out + 7) / 8, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split E=16 O=2", time_us([&](int c) { k_split<16, 2><<<(n_out + 7) / 8, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split E=32 O=2", time_us([&](int c) { k_split<32, 2><<<(n_out + 7) / 8, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split E=32 O=1", time_us([&](int c) { k_split<32, 1><<<(n_out + 3) / 4, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split E=16 O=1", time_us([&](int c) { k_split<16, 1><<<(n_out + 3) / 4, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split E=32 O=4", time_us([&](int c) { k_split<32, 4><<<(n_out + 15) / 16, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split partial O=1", time_us([&](int c) { k_split_partial<1, 1><<<(n_out + 3) / 4, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split partial O=2", time_us([&](int c) { k_split_partial<2, 1><<<(n_out + 7) / 8, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split partial O=1 U=2", time_us([&](int c) { k_split_partial<1, 2><<<(n_out + 3) / 4, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  rep("split partial O=2 U=2", time_us([&](int c) { k_split_partial<2, 2><<<(n_out + 7) / 8, 128>>>(qs[c], ds[c], x, y, n_in, n_out); }, copies));
  for (int c = 0; c < copies; ++c) { cudaFree(w[c]); cudaFree(qs[c]); cudaFree(ds[c]); }
  cudaFree(x); cudaFree(y);
}

int main(int argc, char**) {
  if (argc > 1) { setenv("PROBE_ONLY_GGUF", "1", 1); shape("27b gate", 5120, 17408); return 0; }
  printf("| shape | kernel | us | GB/s (GGUF bytes) |\n|---|---|---|---|\n");
  shape("27b gate", 5120, 17408);
  shape("27b down", 17408, 5120);
  shape("27b qkv", 5120, 10240);
  shape("27b out", 6144, 5120);
  shape("qkv", 2048, 8192);
  shape("out", 4096, 2048);
  shape("expert gate", 2048, 512);
  shape("lm_head", 2048, 248320);
  return 0;
}
