// matmul_gpu, matmul_prefill_gpu and matmul_experts_gpu against matmul_ref /
// matmul_expert_ref, and their batch invariance; matmul_segments_gpu (several matrices, gated
// pairs, expert segments in one launch) bitwise against the separate launches.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/quant.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/matmul_checks.h"

namespace deltaserve::kernels::gputest {

StagedTiles g_staged_tiles = StagedTiles::kAuto;
MatvecContext g_matvec;

std::string shape_text(DType type, int64_t in, int64_t out, int64_t rows) {
  const char* math = g_matvec.math == MatvecMath::kTensorCores ? " tensor-cores"
                     : g_matvec.math == MatvecMath::kStaged    ? " staged"
                                                                : "";
  return std::string(dtype_name(type)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
         " rows=" + std::to_string(rows) + math;
}

void check_matmul(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_rows, bool accumulate) {
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out);
  const int64_t x_stride = num_in + 4;  // a padded stride, still float4-aligned
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * x_stride));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_out));
  std::vector<float> ref = y0;
  MatmulArgs a{w.data(), type, num_in, num_out, dtype_row_bytes(type, num_in), x.data(), num_rows, x_stride,
               ref.data(), num_out, accumulate};
  a.staged_tiles = g_staged_tiles;
  matmul_ref(a, serial_for());

  DeviceBuffer<uint8_t> dw(w);
  DeviceBuffer<float> dx(x), dy(static_cast<size_t>(num_rows * num_out));
  if (accumulate) dy.upload(y0); else dy.poison();
  MatmulArgs g = a;
  g.w = dw.get();
  g.x = dx.get();
  g.y = dy.get();
  CHECK_GPU(matmul_gpu(g, g_matvec, nullptr));
  const std::vector<float> got = dy.download();
  const ErrorStats e = compare(got.data(), ref.data(), got.size());

  // Batch invariance: each row alone, bit-identical to the batched result.
  bool invariant = true;
  if (!accumulate && num_rows > 1) {
    DeviceBuffer<float> one(static_cast<size_t>(num_out));
    for (int64_t r = 0; r < num_rows; ++r) {
      one.poison();
      MatmulArgs s = g;
      s.x = dx.get() + r * x_stride;
      s.num_rows = 1;
      s.y = one.get();
      CHECK_GPU(matmul_gpu(s, g_matvec, nullptr));
      const std::vector<float> alone = one.download();
      invariant = invariant && bitwise_equal(alone.data(), got.data() + r * num_out, static_cast<size_t>(num_out));
    }
  }
  // 1e-8: both sides multiply the same decoded weights; what differs is f32 rounding of the sum
  // (order, fused multiply-add), which for a single output with cancellation reached 1.2e-10
  // (Q4_0 in=224 out=1, |err| 1.9e-6). A wrong block or index gives NMSE near 1.
  ctx.results.record(accumulate ? "matmul_gpu(accumulate)" : "matmul_gpu", shape_text(type, num_in, num_out, num_rows), e,
                     kMatmulNmse, invariant, invariant ? "batch-invariant" : "NOT batch-invariant");
}

void check_experts(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_experts, int64_t num_tokens,
                   int64_t k) {
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out * num_experts);
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_tokens * num_in));
  const int64_t num_pairs = num_tokens * k;
  std::vector<int32_t> ids(static_cast<size_t>(num_pairs));
  for (int32_t& id : ids) id = static_cast<int32_t>(ctx.rng() % static_cast<uint32_t>(num_experts));
  const size_t row_bytes = dtype_row_bytes(type, num_in);
  std::vector<float> ref(static_cast<size_t>(num_pairs * num_out));
  for (int64_t p = 0; p < num_pairs; ++p) {
    MatmulArgs a{w.data(), type, num_in, num_out, row_bytes, x.data() + (p / k) * num_in, 1, num_in,
                 ref.data() + p * num_out, num_out};
    matmul_expert_ref(a, ids[static_cast<size_t>(p)], serial_for());
  }
  DeviceBuffer<uint8_t> dw(w);
  DeviceBuffer<float> dx(x), dy(ref.size()), one(static_cast<size_t>(num_out));
  DeviceBuffer<int32_t> dids(ids);
  dy.poison();
  MatmulExpertsArgs ea{MatmulArgs{dw.get(), type, num_in, num_out, row_bytes, dx.get(), 0, num_in, dy.get(), num_out},
                       dids.get(), num_pairs, k};
  CHECK_GPU(matmul_experts_gpu(ea, g_matvec, nullptr));
  const std::vector<float> got = dy.download();
  const ErrorStats e = compare(got.data(), ref.data(), got.size());
  // Each pair equals the plain matvec on that expert's matrix, bit for bit.
  bool same = true;
  for (int64_t p = 0; p < num_pairs; ++p) {
    one.poison();
    MatmulArgs s{dw.get() + static_cast<size_t>(ids[static_cast<size_t>(p)]) * static_cast<size_t>(num_out) * row_bytes,
                 type, num_in, num_out, row_bytes, dx.get() + (p / k) * num_in, 1, num_in, one.get(), num_out};
    CHECK_GPU(matmul_gpu(s, g_matvec, nullptr));
    const std::vector<float> alone = one.download();
    same = same && bitwise_equal(alone.data(), got.data() + p * num_out, static_cast<size_t>(num_out));
  }
  ctx.results.record("matmul_experts_gpu", shape_text(type, num_in, num_out, num_pairs) + " E=" + std::to_string(num_experts),
                     e, kMatmulNmse, same, same ? "== matmul_gpu per pair" : "differs from matmul_gpu");
}

// matmul_prefill_gpu: the tiled form against the reference; batch invariance on a few rows
// run alone (the first, one past a 64-row tile edge, the last).
void check_prefill(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_rows, bool accumulate) {
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out);
  const int64_t x_stride = num_in + 4;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * x_stride));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_out));
  std::vector<float> ref = y0;
  MatmulArgs a{w.data(), type, num_in, num_out, dtype_row_bytes(type, num_in), x.data(), num_rows, x_stride,
               ref.data(), num_out, accumulate};
  matmul_ref(a, serial_for());
  DeviceBuffer<uint8_t> dw(w);
  DeviceBuffer<float> dx(x), dy(static_cast<size_t>(num_rows * num_out));
  if (accumulate) dy.upload(y0); else dy.poison();
  MatmulArgs g = a;
  g.w = dw.get();
  g.x = dx.get();
  g.y = dy.get();
  CHECK_GPU(matmul_prefill_gpu(g, nullptr));
  const std::vector<float> got = dy.download();
  bool invariant = true;
  if (!accumulate) {
    DeviceBuffer<float> one(static_cast<size_t>(num_out));
    for (int64_t r : {int64_t{0}, std::min<int64_t>(64, num_rows - 1), num_rows - 1}) {
      one.poison();
      MatmulArgs s = g;
      s.x = dx.get() + r * x_stride;
      s.num_rows = 1;
      s.y = one.get();
      CHECK_GPU(matmul_prefill_gpu(s, nullptr));
      const std::vector<float> alone = one.download();
      invariant = invariant && bitwise_equal(alone.data(), got.data() + r * num_out, static_cast<size_t>(num_out));
    }
  }
  ctx.results.record(accumulate ? "matmul_prefill(acc)" : "matmul_prefill_gpu", shape_text(type, num_in, num_out, num_rows),
                     compare(got.data(), ref.data(), got.size()), kMatmulNmse, invariant,
                     invariant ? "batch-invariant" : "NOT batch-invariant");
}

// One matmul_segments_gpu launch against the separate launches it replaces, bit for bit:
// with_experts: [gated expert pairs (gate/up stacks, k pairs per x row), plain accumulate,
// gated plain]; else [gated plain, plain, plain accumulate over fewer rows] (row groups of 8).
void check_segments(Context& ctx, DType type, int64_t num_in, int64_t num_rows, bool with_experts) {
  const int64_t num_experts = 5, k = 3, out_g = 37, out_p = 33;
  const size_t rb = dtype_row_bytes(type, num_in);
  const int64_t stack = with_experts ? num_experts : 1;
  const std::vector<uint8_t> wg = random_weights(ctx.rng, type, num_in, out_g * stack);
  const std::vector<uint8_t> wu = random_weights(ctx.rng, type, num_in, out_g * stack);
  const std::vector<uint8_t> wp = random_weights(ctx.rng, type, num_in, out_p);
  const std::vector<uint8_t> ws2 = random_weights(ctx.rng, type, num_in, out_g);
  const std::vector<uint8_t> wu2 = random_weights(ctx.rng, type, num_in, out_g);
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * out_p));
  const int64_t pairs = with_experts ? num_rows * k : num_rows;
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  for (int32_t& id : ids) id = static_cast<int32_t>(ctx.rng() % static_cast<uint32_t>(num_experts));
  DeviceBuffer<uint8_t> dwg(wg), dwu(wu), dwp(wp), dws(ws2), dwu2(wu2);
  DeviceBuffer<float> dx(x), g1(static_cast<size_t>(pairs * out_g)), p1(y0), s1(static_cast<size_t>(num_rows * out_g));
  DeviceBuffer<float> tg(static_cast<size_t>(pairs * out_g)), tu(tg.size()), p2(y0), s2(s1.size()), su(s1.size());
  DeviceBuffer<int32_t> dids(ids);
  g1.poison();
  s1.poison();
  const int64_t acc_rows = with_experts ? num_rows : std::max<int64_t>(1, num_rows - 2);

  MatmulSegment segs[3]{};
  segs[0].args = MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx.get(), pairs, num_in, g1.get(), out_g};
  segs[0].w_up = dwu.get();
  if (with_experts) segs[0].expert_ids = dids.get(), segs[0].pairs_per_x_row = k;
  segs[1].args = MatmulArgs{dwp.get(), type, num_in, out_p, rb, dx.get(), acc_rows, num_in, p1.get(), out_p, true};
  segs[2].args = MatmulArgs{dws.get(), type, num_in, out_g, rb, dx.get(), num_rows, num_in, s1.get(), out_g};
  if (with_experts) segs[2].w_up = dwu2.get();
  segs[0].args.staged_tiles = g_staged_tiles;
  CHECK_GPU(matmul_segments_gpu(segs, 3, g_matvec, nullptr));

  // The separate launches. A launch with expert segments runs every segment on the CUDA cores
  // under kTensorCores (matmul_gpu.h, MatvecMath), so its separate launches do too there;
  // kStaged runs them staged either way.
  MatvecContext separate = g_matvec;
  if (with_experts && separate.math == MatvecMath::kTensorCores) separate.math = MatvecMath::kCudaCores;
  if (with_experts) {
    CHECK_GPU(matmul_experts_gpu(MatmulExpertsArgs{MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx.get(), 0, num_in, tg.get(), out_g},
                                                   dids.get(), pairs, k}, separate, nullptr));
    CHECK_GPU(matmul_experts_gpu(MatmulExpertsArgs{MatmulArgs{dwu.get(), type, num_in, out_g, rb, dx.get(), 0, num_in, tu.get(), out_g},
                                                   dids.get(), pairs, k}, separate, nullptr));
  } else {
    CHECK_GPU(matmul_gpu(MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx.get(), pairs, num_in, tg.get(), out_g}, separate, nullptr));
    CHECK_GPU(matmul_gpu(MatmulArgs{dwu.get(), type, num_in, out_g, rb, dx.get(), pairs, num_in, tu.get(), out_g}, separate, nullptr));
  }
  CHECK_GPU(swiglu_gpu(tg.get(), tu.get(), tg.get(), pairs * out_g, nullptr));
  CHECK_GPU(matmul_gpu(MatmulArgs{dwp.get(), type, num_in, out_p, rb, dx.get(), acc_rows, num_in, p2.get(), out_p, true}, separate, nullptr));
  CHECK_GPU(matmul_gpu(MatmulArgs{dws.get(), type, num_in, out_g, rb, dx.get(), num_rows, num_in, s2.get(), out_g}, separate, nullptr));
  if (with_experts) {
    CHECK_GPU(matmul_gpu(MatmulArgs{dwu2.get(), type, num_in, out_g, rb, dx.get(), num_rows, num_in, su.get(), out_g}, separate, nullptr));
    CHECK_GPU(swiglu_gpu(s2.get(), su.get(), s2.get(), num_rows * out_g, nullptr));
  }
  const std::vector<float> a1 = g1.download(), b1 = tg.download(), a2 = p1.download(), b2 = p2.download();
  const std::vector<float> a3 = s1.download(), b3 = s2.download();
  const bool same = bitwise_equal(a1.data(), b1.data(), a1.size()) && bitwise_equal(a2.data(), b2.data(), a2.size()) &&
                    bitwise_equal(a3.data(), b3.data(), a3.size());
  const ErrorStats e = compare(a1.data(), b1.data(), a1.size());
  ctx.results.record(with_experts ? "matmul_segments_gpu(experts)" : "matmul_segments_gpu",
                     shape_text(type, num_in, out_g, num_rows), e, kMatmulNmse, same,
                     same ? "== separate launches" : "differs from separate launches");
}

// Tensor-core launches with pre-split activations (MatvecContext::split_scratch) == the same
// launches splitting as they go, bit for bit: three segments (plain, gated, plain on a second
// activation matrix), with the scratch large enough, and too small for both matrices (the
// launch must then fall back, not overrun it).
void check_presplit(Context& ctx, int64_t num_in, int64_t num_rows) {
  const DType type = DType::Q4_0;
  const int64_t out_p = 70, out_g = 37;
  const size_t rb = dtype_row_bytes(type, num_in);
  const std::vector<uint8_t> wp = random_weights(ctx.rng, type, num_in, out_p), wg = random_weights(ctx.rng, type, num_in, out_g);
  const std::vector<uint8_t> wu = random_weights(ctx.rng, type, num_in, out_g);
  const std::vector<float> x1 = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  const std::vector<float> x2 = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  DeviceBuffer<uint8_t> dwp(wp), dwg(wg), dwu(wu);
  DeviceBuffer<float> dx1(x1), dx2(x2);
  const size_t one = matvec_split_scratch_bytes(num_rows, num_in);
  DeviceBuffer<uint8_t> scratch(2 * one + 256);
  std::vector<std::vector<float>> results;  // per setting: the three outputs, concatenated
  for (size_t bytes : {size_t{0}, 2 * one, one}) {
    MatvecContext presplit = g_matvec;
    presplit.split_scratch = bytes > 0 ? scratch.get() : nullptr;
    presplit.split_scratch_bytes = bytes;
    presplit.split_min_macs = 1;
    DeviceBuffer<float> y1(static_cast<size_t>(num_rows * out_p)), y2(static_cast<size_t>(num_rows * out_g)), y3(y1.size());
    y1.poison(), y2.poison(), y3.poison();
    MatmulSegment segs[3]{};
    segs[0].args = MatmulArgs{dwp.get(), type, num_in, out_p, rb, dx1.get(), num_rows, num_in, y1.get(), out_p};
    segs[1].args = MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx1.get(), num_rows, num_in, y2.get(), out_g};
    segs[1].w_up = dwu.get();
    segs[2].args = MatmulArgs{dwp.get(), type, num_in, out_p, rb, dx2.get(), num_rows, num_in, y3.get(), out_p};
    CHECK_GPU(matmul_segments_gpu(segs, 3, presplit, nullptr));
    std::vector<float> all = y1.download();
    for (const std::vector<float>& v : {y2.download(), y3.download()}) all.insert(all.end(), v.begin(), v.end());
    results.push_back(all);
  }
  const bool same = bitwise_equal(results[0].data(), results[1].data(), results[0].size()) &&
                    bitwise_equal(results[0].data(), results[2].data(), results[0].size());
  ctx.results.record("matmul_segments_gpu(pre-split)", shape_text(type, num_in, out_p, num_rows),
                     compare(results[1].data(), results[0].data(), results[0].size()), kMatmulNmse, same,
                     same ? "== splitting in the kernel (scratch large, too small)" : "differs from splitting in the kernel");
}

namespace {

// The Q4_0 checks under MatvecMath::kStaged (where the device has bf16 mma).
void run_staged_matvec_checks(Context& ctx) {
  // Q4_0 staged on the tensor cores (kStaged): rows of 1, 3 and 5 chunks of 1,024 inputs, of 3
  // and 17 chunks of 256 (the narrow walk), and 224 (the CUDA cores, by the shape rule);
  // outputs across the 16-row tiles; row counts across the groups of 1, 2, 4 and 8 and several
  // groups; accumulate, gated and plain segments in one launch, the norm epilogue.
  g_matvec = MatvecContext{matvec_math_on_device(MatvecMath::kStaged)};
  if (g_matvec.math == MatvecMath::kStaged) {
    const DType t = DType::Q4_0;
    const std::vector<int64_t> ins =
        ctx.quick ? std::vector<int64_t>{768, 3072} : std::vector<int64_t>{224, 768, 4352, 1024, 3072, 5120};
    const std::vector<int64_t> st_rows =
        ctx.quick ? std::vector<int64_t>{1, 3, 9} : std::vector<int64_t>{1, 2, 3, 4, 5, 8, 9, 13, 17};
    for (int64_t in : ins) {
      for (int64_t out : ctx.quick ? std::vector<int64_t>{5, 64} : std::vector<int64_t>{1, 7, 16, 64, 129}) {
        for (int64_t r : st_rows) check_matmul(ctx, t, in, out, r, false);
      }
    }
    check_matmul(ctx, t, 2048, 33, 3, true);
    check_matmul(ctx, t, 1024, 33, 9, true);
    check_matmul(ctx, t, 512, 33, 9, true);
    // Expert pairs (one per row group, each == the one-row product on its expert's matrix).
    check_experts(ctx, t, 2048, 40, 6, 3, 4);
    check_experts(ctx, t, 512, 33, 16, 37, 8);
    check_experts(ctx, t, 224, 33, 5, 4, 2);  // the CUDA cores, by the shape rule
    for (int64_t r : {1, 3, 9}) {
      for (int64_t in : {2048, 256}) {
        check_segments(ctx, t, in, r, true);
        check_segments(ctx, t, in, r, false);
      }
    }
    // The input norm: the narrow walk (768: 3 chunks of 256), the 35B-A3B's 2,048 and the 27B's
    // 5,120 (past the norm's 8 elements a thread), 17,408 (68 a thread).
    for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{1, 2, 3, 4, 5, 8, 11, 17}) {
      for (int64_t in : ctx.quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{768, 2048, 5120}) check_input_norm(ctx, in, r);
    }
    check_input_norm(ctx, 17408, 2);
    // The deferred norm: widths 768 (the readers' narrow walk: 3 chunks of 256), 2,048, 2,304
    // (9 chunks of 256) and the 27B's 5,120 (320 tile sums: two a reader thread), rows across
    // the groups of 1, 2, 4 and 8 and past them.
    for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 3, 9} : std::vector<int64_t>{1, 2, 3, 4, 5, 8, 9, 17}) {
      for (int64_t h : ctx.quick ? std::vector<int64_t>{5120} : std::vector<int64_t>{768, 2048, 2304, 5120}) check_deferred_norm(ctx, h, r);
    }
    check_deferred_norm(ctx, 16384, 3);  // four tile sums a reader thread
    check_deferred_norm_bound(ctx);
    for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 9} : std::vector<int64_t>{1, 2, 3, 8, 13}) {
      check_matmul_norm(ctx, t, 1024, 2048, r, true);
      check_matmul_norm(ctx, t, 2048, 100, r, false);
      check_matmul_norm(ctx, t, 256, 2048, r, true);
    }
    // Two 16-row tiles a block (StagedTiles::kTwo, forced for every launch of 1-2 rows; kAuto
    // takes it only for launches of hundreds of tiles): against matmul_ref, the batch
    // invariance checks then compare 1-row launches on two tiles with groups of 4-8 rows on
    // one, bitwise; outputs that leave the second tile empty or part full; the narrow walk
    // (768), 2 chunks (2,048) and more; gated, accumulating, input-norm and norm-epilogue
    // launches; and one tile against two directly.
    g_staged_tiles = StagedTiles::kTwo;
    for (int64_t in : ctx.quick ? std::vector<int64_t>{768, 5120} : std::vector<int64_t>{768, 2048, 3072, 5120}) {
      for (int64_t out : ctx.quick ? std::vector<int64_t>{16, 129} : std::vector<int64_t>{1, 16, 40, 129}) {
        for (int64_t r : {1, 2, 3, 9}) check_matmul(ctx, t, in, out, r, false);
      }
    }
    check_matmul(ctx, t, 3072, 33, 2, true);
    for (int64_t r : {1, 2}) {
      check_segments(ctx, t, 2048, r, false);
      check_input_norm(ctx, 5120, r);
      check_matmul_norm(ctx, t, 1024, 2048, r, true);
    }
    g_staged_tiles = StagedTiles::kAuto;
    for (int64_t r : {1, 2}) {
      for (bool norm : {false, true}) {
        check_staged_tiles(ctx, 5120, 37, 70, r, norm);
        check_staged_tiles(ctx, 2048, 8, 16, r, norm);
        check_staged_tiles(ctx, 768, 100, 9, r, norm);
      }
    }
  }
}

}  // namespace

void run_matmul_tests(Context& ctx) {
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                         DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const std::vector<int64_t> rows = ctx.quick ? std::vector<int64_t>{1, 3, 9} : std::vector<int64_t>{1, 2, 3, 5, 8, 13};
  const std::vector<int64_t> outs = ctx.quick ? std::vector<int64_t>{5, 64} : std::vector<int64_t>{1, 7, 64, 129};
  for (DType t : types) {
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    // Q4_0, the benchmarks' type, at more row lengths (256, 768, 4352: rows shorter than, and
    // several times, a warp's stride); 2048 stays last: the accumulate, expert and segment
    // checks below use it.
    std::vector<int64_t> ins = k_quant               ? std::vector<int64_t>{256, 768, 2048}
                               : t == DType::Q4_0 ? std::vector<int64_t>{32, 224, 256, 768, 4352, 2048}
                                                  : std::vector<int64_t>{32, 224, 2048};
    if (ctx.quick) ins = std::vector<int64_t>{ins[1], ins.back()};
    for (int64_t in : ins) {
      for (int64_t out : outs) {
        for (int64_t r : rows) check_matmul(ctx, t, in, out, r, false);
      }
    }
    check_matmul(ctx, t, ins.back(), 33, 3, true);
    check_experts(ctx, t, ins.back(), 40, 6, 3, 4);
    check_experts(ctx, t, ins.back(), 33, 16, 37, 8);  // 296 pairs, several per expert
    for (int64_t r : {1, 3, 9}) {
      check_segments(ctx, t, ins.back(), r, true);
      check_segments(ctx, t, ins.back(), r, false);
    }
    // Prefill: in sizes with a short last 128-element window (224: 96 left over) and
    // several windows; rows across 64-row tile edges; outputs across 64-output tile edges.
    for (int64_t in : ins) {
      for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 70} : std::vector<int64_t>{1, 64, 65, 200}) {
        check_prefill(ctx, t, in, ctx.quick ? 65 : 129, r, false);
      }
    }
    check_prefill(ctx, t, ins.back(), 70, 67, true);
  }
  // Norm epilogue: row groups of 1, 2, 4 and 8 and several groups; norm widths below, at and
  // above the norm's thread count, a width not a multiple of 8 outputs per block.
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F32}) {
    for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 9} : std::vector<int64_t>{1, 2, 3, 8, 13, 64}) {
      check_matmul_norm(ctx, t, 256, 2048, r, true);
      check_matmul_norm(ctx, t, 64, 100, r, false);
    }
    check_matmul_norm(ctx, t, 512, 1000, 5, true);
  }
  // A K-quant through the norm epilogue's instantiation (rows of whole 256-element blocks).
  for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 9} : std::vector<int64_t>{1, 3, 8, 13}) {
    check_matmul_norm(ctx, DType::Q5_K, 256, 2048, r, true);
  }
  check_matmul_norm(ctx, DType::Q5_K, 512, 1000, 5, true);
  // rms_norm_gpu's other row forms (32 held per thread; the batched walk past 8,192) against
  // the epilogue's definitional order, bit for bit.
  check_matmul_norm(ctx, DType::Q4_0, 256, 5120, 2, true);
  check_matmul_norm(ctx, DType::Q4_0, 256, 9000, 1, false);
  // Q4_0 on the tensor cores (where the device has bf16 mma): the same checks, with row counts
  // across the 8-row tiles and the 64-row groups (1..8 tiles, several groups), every launch
  // pre-split (check_presplit holds both paths to the same bits).
  g_matvec = MatvecContext{matvec_math_on_device(MatvecMath::kTensorCores)};
  if (g_matvec.math == MatvecMath::kTensorCores) {
    for (int64_t r : ctx.quick ? std::vector<int64_t>{9, 70} : std::vector<int64_t>{9, 16, 64, 65, 130}) {
      check_presplit(ctx, 2048, r);
      check_presplit(ctx, 96, r);
    }
    DeviceBuffer<uint8_t> scratch(2 * matvec_split_scratch_bytes(130, 4352));
    g_matvec.split_scratch = scratch.get();
    g_matvec.split_scratch_bytes = scratch.size();
    g_matvec.split_min_macs = 1;
    const DType t = DType::Q4_0;
    const std::vector<int64_t> ins = ctx.quick ? std::vector<int64_t>{224, 2048} : std::vector<int64_t>{32, 96, 224, 768, 4352, 2048};
    const std::vector<int64_t> tc_rows =
        ctx.quick ? std::vector<int64_t>{1, 9, 70} : std::vector<int64_t>{1, 2, 7, 8, 9, 16, 17, 31, 33, 64, 65, 130};
    for (int64_t in : ins) {
      for (int64_t out : outs) {
        for (int64_t r : tc_rows) check_matmul(ctx, t, in, out, r, false);
      }
    }
    check_matmul(ctx, t, 2048, 33, 3, true);
    check_matmul(ctx, t, 2048, 33, 70, true);
    for (int64_t r : {1, 3, 9, 40}) {
      check_segments(ctx, t, 2048, r, true);
      check_segments(ctx, t, 2048, r, false);
    }
    for (int64_t r : ctx.quick ? std::vector<int64_t>{1, 9} : std::vector<int64_t>{1, 2, 3, 8, 13, 64, 70}) {
      check_matmul_norm(ctx, t, 256, 2048, r, true);
      check_matmul_norm(ctx, t, 64, 100, r, false);
    }
    check_matmul_norm(ctx, t, 512, 1000, 5, true);
  }
  run_staged_matvec_checks(ctx);
  g_matvec = MatvecContext{};
}

}  // namespace deltaserve::kernels::gputest
