// GPU embedding lookup (embedding_gpu.h): one block per token, threads over 8-element chunks
// decoded by the shared device decoders (gpu_decode.h).
#include <cstddef>
#include <cstdint>

#include "kernels/embedding/embedding_gpu.h"
#include "kernels/gpu/gpu_compat.h"
#include "kernels/gpu/gpu_decode.h"

namespace deltaserve::kernels {
namespace {

constexpr int kThreads = 128;

template <class D>
__global__ void __launch_bounds__(kThreads) embedding_kernel(const uint8_t* table, size_t row_bytes,
                                                              int64_t num_embd, const int32_t* tokens, float* out) {
  gpu::begin_kernel();
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + static_cast<size_t>(tokens[t]) * row_bytes;
  float* o = out + t * num_embd;
  for (int64_t c = threadIdx.x; c < num_embd / 8; c += blockDim.x) {
    float w[8];
    int64_t x0 = 0, x1 = 0;
    D::decode(row, c, w, x0, x1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[x0 + i] = w[i];
      o[x1 + i] = w[4 + i];
    }
  }
}

template <class D>
gpuError_t launch(const void* table, size_t row_bytes, int64_t num_embd, const int32_t* tokens, int64_t num_tokens,
                  float* out, gpuStream_t stream) {
  gpu::launch(embedding_kernel<D>, static_cast<unsigned>(num_tokens), kThreads, 0, stream,
              static_cast<const uint8_t*>(table), row_bytes, num_embd, tokens, out);
  return gpuGetLastError();
}

}  // namespace

gpuError_t embedding_lookup_gpu(const void* table, DType type, int64_t num_embd, const int32_t* tokens,
                                int64_t num_tokens, float* out, gpuStream_t stream) {
  if (num_embd <= 0 || num_embd % 8 != 0 || num_tokens < 0) return gpuErrorInvalidValue;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(table);
  size_t row_bytes = 0;
  switch (type) {
    case DType::F32: row_bytes = 4 * static_cast<size_t>(num_embd); break;
    case DType::F16:
    case DType::BF16: row_bytes = 2 * static_cast<size_t>(num_embd); break;
    case DType::Q8_0: row_bytes = static_cast<size_t>(num_embd / 32) * 34; break;
    case DType::Q4_0: row_bytes = static_cast<size_t>(num_embd / 32) * 18; break;
    case DType::Q4_K: row_bytes = static_cast<size_t>(num_embd / 256) * 144; break;
    case DType::Q5_K: row_bytes = static_cast<size_t>(num_embd / 256) * 176; break;
    case DType::Q6_K: row_bytes = static_cast<size_t>(num_embd / 256) * 210; break;
    default: return gpuErrorInvalidValue;
  }
  const bool plain = type == DType::F32 || type == DType::F16 || type == DType::BF16;
  const int64_t block = type == DType::Q8_0 || type == DType::Q4_0 ? 32 : plain ? 1 : 256;
  if (num_embd % block != 0) return gpuErrorInvalidValue;
  if (plain ? (addr % 16 != 0 || row_bytes % 16 != 0) : (addr % 2 != 0)) return gpuErrorInvalidValue;
  if (num_tokens == 0) return gpuSuccess;
  switch (type) {
    case DType::F32: return launch<gpu::DecodeF32>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::F16: return launch<gpu::DecodeHalf<false>>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::BF16: return launch<gpu::DecodeHalf<true>>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::Q8_0: return launch<gpu::DecodeQ8_0>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::Q4_0: return launch<gpu::DecodeQ4_0>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::Q4_K: return launch<gpu::DecodeQ4_K>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::Q5_K: return launch<gpu::DecodeQ5_K>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    case DType::Q6_K: return launch<gpu::DecodeQ6_K>(table, row_bytes, num_embd, tokens, num_tokens, out, stream);
    default: return gpuErrorInvalidValue;
  }
}

}  // namespace deltaserve::kernels
