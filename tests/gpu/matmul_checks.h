// The matmul parity checks shared by matmul_test.cu (the product forms, the suite's driver) and
// matmul_norm_test.cu (the forms that carry a norm, the staged matvec's tiles). Each records
// one result line in ctx.results.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {

inline constexpr double kMatmulNmse = 1e-8;

// The staged matvec's tiles a block for the launches the checks make (MatmulArgs::staged_tiles
// of a launch's first segment): kAuto, the rule, or one form forced.
extern StagedTiles g_staged_tiles;
// The matvec context the checks' launches pass: the pass's math (kCudaCores, kTensorCores or
// kStaged, each where the device runs it) and, in the tensor-core pass, the pre-split scratch.
extern MatvecContext g_matvec;

std::string shape_text(DType type, int64_t in, int64_t out, int64_t rows);
void check_matmul(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_rows, bool accumulate);
void check_segments(Context& ctx, DType type, int64_t num_in, int64_t num_rows, bool with_experts);
void check_staged_tiles(Context& ctx, int64_t num_in, int64_t out_g, int64_t out_p, int64_t num_rows, bool input_norm);
void check_matmul_norm(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_rows, bool accumulate);
void check_input_norm(Context& ctx, int64_t num_in, int64_t num_rows);
void check_deferred_norm(Context& ctx, int64_t h, int64_t num_rows);
void check_deferred_norm_bound(Context& ctx);

}  // namespace deltaserve::kernels::gputest
