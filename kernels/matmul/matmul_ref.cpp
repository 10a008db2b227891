// CPU matmul (matmul.h). Each ParallelFor task owns kMatmulOutputsPerTask consecutive output
// features (a tile of weight rows small enough to stay in L2); inside a task, activation rows
// go in groups of up to kRowsPerGroup, and each weight chunk is decoded once per group
// (row_dot.h). The per-element arithmetic is independent of the grouping: batch-invariant.
#include "kernels/matmul/matmul.h"

#include <algorithm>
#include <cassert>

#include "kernels/row_dot.h"

namespace deltaserve::kernels {
namespace {

constexpr int kRowsPerGroup = 4;  // 4 rows x 8 lanes of accumulators fit the 16 SSE registers
constexpr int64_t kInBlock = 256;  // a multiple of every decoder's chunk

// Rows [row_begin, row_begin + R) x outputs [out_begin, out_end) (at most one task's worth).
// The input dimension is walked in blocks of kInBlock so that the x block (R x kInBlock) and
// the tile's weight slices stay in L1 across the tile's outputs; accumulators persist across
// blocks, so each output sees exactly dot_row's sequence of operations.
template <class Decoder, int R>
void matmul_group(const MatmulArgs& a, int64_t row_begin, int64_t out_begin, int64_t out_end) {
  static_assert(kInBlock % Decoder::kChunk == 0);
  const float* xs[R];
  for (int r = 0; r < R; ++r) xs[r] = a.x + (row_begin + r) * a.x_stride;
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  detail::Lanes acc[kMatmulOutputsPerTask][R];
  for (auto& per_out : acc) {
    for (auto& lanes : per_out) lanes = detail::Lanes{detail::Float4{}, detail::Float4{}};
  }
  for (int64_t in_begin = 0; in_begin < a.num_in; in_begin += kInBlock) {
    const int64_t in_end = std::min(a.num_in, in_begin + kInBlock);
    for (int64_t o = out_begin; o < out_end; ++o) {
      detail::accumulate_range<Decoder, R>(w + o * a.w_row_bytes, xs, in_begin, in_end,
                                           acc[o - out_begin]);
    }
  }
  for (int64_t o = out_begin; o < out_end; ++o) {
    for (int r = 0; r < R; ++r) {
      const float dot = detail::reduce_lanes(acc[o - out_begin][r]);
      float* y = a.y + (row_begin + r) * a.y_stride + o;
      *y = a.accumulate ? *y + dot : dot;
    }
  }
}

template <class Decoder>
void matmul_tile(const MatmulArgs& a, int64_t out_begin, int64_t out_end) {
  int64_t row = 0;
  for (; row + kRowsPerGroup <= a.num_rows; row += kRowsPerGroup) {
    matmul_group<Decoder, kRowsPerGroup>(a, row, out_begin, out_end);
  }
  switch (a.num_rows - row) {
    case 3: matmul_group<Decoder, 3>(a, row, out_begin, out_end); break;
    case 2: matmul_group<Decoder, 2>(a, row, out_begin, out_end); break;
    case 1: matmul_group<Decoder, 1>(a, row, out_begin, out_end); break;
    default: break;
  }
}

}  // namespace

void matmul_ref(const MatmulArgs& a, const ParallelFor& parallel) {
  assert(a.num_in >= 0 && a.num_in % dtype_traits(a.w_type).block_elements == 0);
  assert(a.w_row_bytes >= dtype_row_bytes(a.w_type, a.num_in));
  assert(a.num_rows <= 1 || a.x_stride >= a.num_in);
  assert(a.num_rows <= 1 || a.y_stride >= a.num_out);
  if (a.num_rows <= 0 || a.num_out <= 0) return;
  const int64_t num_tasks = (a.num_out + kMatmulOutputsPerTask - 1) / kMatmulOutputsPerTask;
  detail::visit_decoder(a.w_type, [&]<class Decoder>(Decoder) {
    parallel.run(num_tasks, [&](int64_t task_begin, int64_t task_end) {
      for (int64_t t = task_begin; t < task_end; ++t) {
        const int64_t out_begin = t * kMatmulOutputsPerTask;
        matmul_tile<Decoder>(a, out_begin, std::min(a.num_out, out_begin + kMatmulOutputsPerTask));
      }
    });
  });
}

void matmul_expert_ref(const MatmulArgs& args, int64_t expert, const ParallelFor& parallel) {
  MatmulArgs one = args;
  one.w = expert_weights(args.w, expert, args.num_out, args.w_row_bytes);
  matmul_ref(one, parallel);
}

}  // namespace deltaserve::kernels
