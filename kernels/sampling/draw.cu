// The device draw (draw_gpu.h): draw_ref.h's steps, one block per draw.
#include <cstdint>

#include "kernels/gpu/gpu_compat.h"
#include "kernels/sampling/draw_gpu.h"

namespace deltaserve::kernels {
namespace {

using gpu::kWarpSize;
using u64 = unsigned long long;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarpSize;
constexpr u64 kNoLimit = ~u64{0};

struct DrawShared {
  u64 weight[256];  // a select pass's histogram: mass (or count) per digit
  unsigned count[256];
  u64 chunk_mass[kWarps];  // each warp's chunk of the row: its kept mass
  u64 scratch_u64[kWarps];
  unsigned scratch_u32[kWarps];
  float best_v[kWarps];
  int best_i[kWarps];
  u64 broadcast[3];
  int id;
};

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) v += gpu::shuffle_xor(v, mask);
  return v;
}

// Exact block sums (integers: any order gives the same bits); every thread gets the result.
__device__ u64 block_sum(u64 v, DrawShared& s) {
  v = warp_sum(v);
  if (gpu::lane_id() == 0) s.scratch_u64[gpu::warp_id()] = v;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.scratch_u64[w];
  __syncthreads();
  return total;
}

// The row's argmax by the greedy rule (draw_ref.h's argmax_ref), in every thread.
__device__ int row_argmax(const float* row, int64_t vocab, DrawShared& s) {
  float v = __int_as_float(0x7fffffff);
  int i = 0x7fffffff;
  for (int64_t e = threadIdx.x; e < vocab; e += kThreads) {
    if (gpu::arg_better(row[e], static_cast<int>(e), v, i)) v = row[e], i = static_cast<int>(e);
  }
  gpu::warp_argmax(v, i);
  if (gpu::lane_id() == 0) s.best_v[gpu::warp_id()] = v, s.best_i[gpu::warp_id()] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (gpu::arg_better(s.best_v[w], s.best_i[w], v, i)) v = s.best_v[w], i = s.best_i[w];
    }
    s.id = i == 0x7fffffff ? 0 : i;
  }
  __syncthreads();
  const int top = s.id;
  __syncthreads();
  return top;
}

// The kept mass of each warp's chunk (tokens of mass > 0 and key <= limit) into s.chunk_mass.
// Warp w owns tokens [w chunk, (w + 1) chunk): the draw's walk reads the same chunks.
__device__ void chunk_masses(const float* row, int64_t vocab, int64_t chunk, float top, const DrawParams& p, u64 limit,
                             DrawShared& s) {
  const int64_t begin = gpu::warp_id() * chunk, end = begin + chunk < vocab ? begin + chunk : vocab;
  u64 sum = 0;
  for (int64_t e = begin + gpu::lane_id(); e < end; e += kWarpSize) {
    const float l = row[e];
    if (limit != kNoLimit && draw::likelihood_key(l, static_cast<uint32_t>(e)) > limit) continue;
    sum += draw::token_mass(l, top, p);
  }
  sum = warp_sum(sum);
  if (gpu::lane_id() == 0) s.chunk_mass[gpu::warp_id()] = sum;
  __syncthreads();
}

// The smallest likelihood key k such that the tokens of mass > 0 and key <= min(k, limit)
// weigh at least `target` (by mass, or by count), as draw_ref.h's select_prefix_key: one
// 8-bit digit a pass, most significant first. Every thread gets the result.
__device__ u64 select_prefix(const float* row, int64_t vocab, float top, const DrawParams& p, u64 limit, u64 target,
                             bool by_mass, DrawShared& s) {
  u64 prefix = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) s.weight[d] = 0, s.count[d] = 0;
    __syncthreads();
    const u64 high = shift == 56 ? 0 : ~u64{0} << (shift + 8);
#if defined(DS_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // Flat rows put most tokens in a few bins: the lanes of a warp that share a digit add
    // their weights first (match + reduce: exact, the sums are integers), so one atomic per
    // distinct digit and warp reaches shared memory instead of one per token.
    for (int64_t base = threadIdx.x - gpu::lane_id(); base < vocab; base += kThreads) {
      const int64_t e = base + gpu::lane_id();
      int digit = 256;  // not in this pass
      u64 w = 0;
      if (e < vocab) {
        const float l = row[e];
        const u64 key = draw::likelihood_key(l, static_cast<uint32_t>(e));
        if (key <= limit && (key & high) == prefix) {
          const u64 m = draw::token_mass(l, top, p);
          if (m != 0) digit = static_cast<int>((key >> shift) & 0xFFu), w = by_mass ? m : 1;
        }
      }
      const unsigned group = __match_any_sync(0xffffffffu, digit);
      if (digit == 256) continue;
      // w <= 2^40: three parts whose sums over 32 lanes stay within 32 bits.
      const u64 part0 = __reduce_add_sync(group, static_cast<unsigned>(w & 0xFFFFu));
      const u64 part1 = __reduce_add_sync(group, static_cast<unsigned>((w >> 16) & 0xFFFFu));
      const u64 part2 = __reduce_add_sync(group, static_cast<unsigned>(w >> 32));
      if (gpu::lane_id() == __ffs(group) - 1) {
        atomicAdd(&s.weight[digit], part0 + (part1 << 16) + (part2 << 32));
        atomicAdd(&s.count[digit], static_cast<unsigned>(__popc(group)));
      }
    }
#else
    // Consecutive tokens of a thread often share a digit: add runs, not tokens, to the bins.
    int run_digit = -1;
    u64 run_weight = 0;
    unsigned run_count = 0;
    for (int64_t e = threadIdx.x; e < vocab; e += kThreads) {
      const float l = row[e];
      const u64 key = draw::likelihood_key(l, static_cast<uint32_t>(e));
      if (key > limit || (key & high) != prefix) continue;
      const u64 m = draw::token_mass(l, top, p);
      if (m == 0) continue;
      const int digit = static_cast<int>((key >> shift) & 0xFFu);
      if (digit != run_digit) {
        if (run_count > 0) atomicAdd(&s.weight[run_digit], run_weight), atomicAdd(&s.count[run_digit], run_count);
        run_digit = digit, run_weight = 0, run_count = 0;
      }
      run_weight += by_mass ? m : 1;
      ++run_count;
    }
    if (run_count > 0) atomicAdd(&s.weight[run_digit], run_weight), atomicAdd(&s.count[run_digit], run_count);
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 before = 0;
      int digit = 0;
      while (digit < 255 && before + s.weight[digit] < target) before += s.weight[digit++];
      s.broadcast[0] = prefix | (static_cast<u64>(digit) << shift);
      s.broadcast[1] = target - before;
      s.broadcast[2] = s.count[digit];
    }
    __syncthreads();
    prefix = s.broadcast[0];
    target = s.broadcast[1];
    const u64 left = s.broadcast[2];
    __syncthreads();
    if (left == 1 && shift > 0) {
      // One token has these digits: its whole key is the answer.
      const u64 mask = ~u64{0} << shift;
      if (threadIdx.x == 0) s.broadcast[0] = kNoLimit;
      __syncthreads();
      for (int64_t e = threadIdx.x; e < vocab; e += kThreads) {
        const float l = row[e];
        const u64 key = draw::likelihood_key(l, static_cast<uint32_t>(e));
        if (key > limit || (key & mask) != prefix) continue;
        if (draw::token_mass(l, top, p) != 0) atomicMin(&s.broadcast[0], key);
      }
      __syncthreads();
      prefix = s.broadcast[0];
      __syncthreads();
      return prefix;
    }
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) draw_kernel(const DrawGpuArgs a) {
  gpu::begin_kernel();
  __shared__ DrawShared s;
  const int64_t d = blockIdx.x;
  const int32_t row_index = a.rows[d];
  const float* row = a.logits + row_index * a.logits_stride;
  const DrawParams p = a.params[d];
  const int64_t vocab = a.vocab;

  const int top_id = row_argmax(row, vocab, s);
  const float top = row[top_id];
  if (!(top > -3.0e38f && top < 3.0e38f)) {  // not finite: only the argmax (draw_ref.h step 1)
    if (threadIdx.x == 0) a.ids[row_index] = top_id;
    return;
  }
  const int64_t per_warp = (vocab + kWarps - 1) / kWarps;
  const int64_t chunk = (per_warp + kWarpSize - 1) / kWarpSize * kWarpSize;
  u64 limit = kNoLimit;
  const bool top_k = p.top_k > 0, top_p = p.top_p < 1.0f;
  if (top_k) {
    unsigned n = 0;
    for (int64_t e = threadIdx.x; e < vocab; e += kThreads) n += draw::token_mass(row[e], top, p) != 0;
    if (block_sum(n, s) > static_cast<u64>(p.top_k)) limit = select_prefix(row, vocab, top, p, limit, p.top_k, false, s);
  }
  if (top_p) {
    chunk_masses(row, vocab, chunk, top, p, limit, s);
    u64 total = 0;
    for (int w = 0; w < kWarps; ++w) total += s.chunk_mass[w];
    __syncthreads();
    limit = select_prefix(row, vocab, top, p, limit, draw::top_p_target(total, p.top_p), true, s);
  }
  chunk_masses(row, vocab, chunk, top, p, limit, s);
  // The inverse CDF: the warp whose chunk holds the point, then its walk in 32-token steps.
  if (threadIdx.x == 0) {
    u64 total = 0;
    for (int w = 0; w < kWarps; ++w) total += s.chunk_mass[w];
    u64 point = draw::draw_target(total, p.word), before = 0;
    int w = 0;
    while (w < kWarps - 1 && before + s.chunk_mass[w] <= point) before += s.chunk_mass[w++];
    s.broadcast[0] = static_cast<u64>(w);
    s.broadcast[1] = point - before;
    s.id = 0;  // total 0 (unreachable: the top always weighs 2^40)
  }
  __syncthreads();
  if (gpu::warp_id() == static_cast<int>(s.broadcast[0])) {
    const u64 point = s.broadcast[1];
    const int64_t begin = gpu::warp_id() * chunk, end = begin + chunk < vocab ? begin + chunk : vocab;
    u64 running = 0;
    for (int64_t base = begin; base < end; base += kWarpSize) {
      const int64_t e = base + gpu::lane_id();
      u64 m = 0;
      if (e < end) {
        const float l = row[e];
        if (limit == kNoLimit || draw::likelihood_key(l, static_cast<uint32_t>(e)) <= limit) m = draw::token_mass(l, top, p);
      }
      u64 inclusive = m;
#pragma unroll
      for (int delta = 1; delta < kWarpSize; delta <<= 1) {
        const u64 below = gpu::shuffle_up(inclusive, delta);
        if (gpu::lane_id() >= delta) inclusive += below;
      }
      if (m != 0 && running + inclusive > point && running + inclusive - m <= point) s.id = static_cast<int>(e);
      const u64 step_total = gpu::shuffle(inclusive, kWarpSize - 1);
      if (running + step_total > point) break;
      running += step_total;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) a.ids[row_index] = s.id;
}

}  // namespace

gpuError_t draw_gpu(const DrawGpuArgs& a, gpuStream_t stream) {
  if (a.vocab <= 0 || a.vocab > draw::kMaxVocab || a.logits_stride < a.vocab || a.num_draws < 0 || a.num_draws > 65535)
    return gpuErrorInvalidValue;
  if (a.num_draws == 0) return gpuSuccess;
  gpu::launch(draw_kernel, static_cast<unsigned>(a.num_draws), kThreads, 0, stream, a);
  return gpuGetLastError();
}

}  // namespace deltaserve::kernels
