// matmul_experts_prefill_gpu against matmul_expert_ref (plain, accumulate, gated with
// swiglu_ref), and bitwise: each pair == matmul_prefill_gpu on its expert's matrix and x row
// (gated: both products, then swiglu_gpu), the gated form == its two plain products through
// swiglu_gpu, a pair alone == the same pair in the big call (batch invariance), and pairs with
// ids outside [0, num_experts) are left unwritten. Pair counts 1, 7, 64, 65 and 4096 (256
// experts, top-8, skewed: a hot expert over several tiles, most experts with few or no pairs).
// The same for MatmulMath::kTf32 and kTensorExact, and matmul_prefill_gpu's kTf32 and
// kTensorExact against matmul_ref (the exact form: Q4_0 only, other types run f32; it also has
// to give exactly the f32 tile's bits where it falls back, and NMSE at the f32 tile's level).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_experts_prefill_gpu.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe.h"
#include "kernels/quant.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr double kNmse = 1e-8;  // as matmul_prefill_gpu: same decoded weights, f32 order differs
// TF32: inputs rounded to 11 significant bits (relative error <= 2^-11 each), so a dot
// product of random terms has NMSE ~ 2 * (2^-11)^2 / 3 ~ 1.6e-7; 1e-6 leaves room for
// cancellation, and a wrong block or index still gives NMSE near 1.
constexpr double kNmseTf32 = 1e-6;

// Skewed routing: a third of the pairs to expert 3 (several tiles when there are many), the
// rest biased to low experts (u^3); a few ids out of range when `bad_ids` (pairs skipped).
std::vector<int32_t> skewed_ids(std::mt19937& rng, int64_t num_pairs, int64_t num_experts, bool bad_ids) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> ids(static_cast<size_t>(num_pairs));
  for (int32_t& id : ids) {
    const double v = u(rng);
    id = v < 0.33 ? static_cast<int32_t>(std::min<int64_t>(3, num_experts - 1))
                  : static_cast<int32_t>(static_cast<double>(num_experts) * v * v * v * 0.999);
  }
  if (bad_ids && num_pairs > 4) {
    ids[1] = -1;
    ids[static_cast<size_t>(num_pairs) - 2] = static_cast<int32_t>(num_experts);
  }
  return ids;
}

struct Case {
  DType type;
  int64_t num_in, num_out, num_experts, num_pairs, pairs_per_x_row;
  bool accumulate = false, gated = false, bad_ids = false;
  MatmulMath math = MatmulMath::kF32;
};

const char* math_suffix(MatmulMath m) { return m == MatmulMath::kTf32 ? "_tf32" : m == MatmulMath::kTensorExact ? "_exact" : ""; }

std::string case_text(const Case& c) {
  return std::string(dtype_name(c.type)) + " in=" + std::to_string(c.num_in) + " out=" + std::to_string(c.num_out) +
         " pairs=" + std::to_string(c.num_pairs) + " E=" + std::to_string(c.num_experts) + " k=" +
         std::to_string(c.pairs_per_x_row) + (c.bad_ids ? " bad-ids" : "") + (c.math == MatmulMath::kTf32 ? " tf32" : c.math == MatmulMath::kTensorExact ? " exact" : "");
}

// One call of matmul_experts_prefill_gpu into a fresh workspace.
void run_kernel(const Case& c, const void* w, const void* w_up, const float* x, int64_t x_stride, const int32_t* ids,
                int64_t num_pairs, int64_t pairs_per_x_row, float* y, bool accumulate) {
  DeviceBuffer<uint8_t> ws(matmul_experts_prefill_workspace_bytes(num_pairs, c.num_experts));
  const size_t row_bytes = dtype_row_bytes(c.type, c.num_in);
  MatmulExpertsPrefillArgs a{
      MatmulExpertsArgs{MatmulArgs{w, c.type, c.num_in, c.num_out, row_bytes, x, 0, x_stride, y, c.num_out, accumulate}, ids,
                        num_pairs, pairs_per_x_row},
      c.num_experts, w_up, ws.get(), c.math};
  CHECK_GPU(matmul_experts_prefill_gpu(a, nullptr));
}

void check_case(Context& ctx, const Case& c) {
  const size_t row_bytes = dtype_row_bytes(c.type, c.num_in);
  const std::vector<uint8_t> w = random_weights(ctx.rng, c.type, c.num_in, c.num_out * c.num_experts);
  const std::vector<uint8_t> w_up = c.gated ? random_weights(ctx.rng, c.type, c.num_in, c.num_out * c.num_experts) : w;
  const int64_t num_x_rows = (c.num_pairs + c.pairs_per_x_row - 1) / c.pairs_per_x_row;
  const int64_t x_stride = c.num_in + 4;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_x_rows * x_stride));
  const std::vector<int32_t> ids = skewed_ids(ctx.rng, c.num_pairs, c.num_experts, c.bad_ids);
  const size_t num_y = static_cast<size_t>(c.num_pairs * c.num_out);
  const std::vector<float> y0 = random_floats(ctx.rng, num_y);
  auto valid = [&](int64_t p) { return ids[static_cast<size_t>(p)] >= 0 && ids[static_cast<size_t>(p)] < c.num_experts; };

  // CPU reference (rows of skipped pairs: the initial y, never written).
  std::vector<float> ref = c.accumulate ? y0 : std::vector<float>(num_y, 0.0f);
  std::vector<float> up_ref(static_cast<size_t>(c.num_out));
  for (int64_t p = 0; p < c.num_pairs; ++p) {
    if (!valid(p)) continue;
    float* out = ref.data() + p * c.num_out;
    const float* xr = x.data() + (p / c.pairs_per_x_row) * x_stride;
    matmul_expert_ref(MatmulArgs{w.data(), c.type, c.num_in, c.num_out, row_bytes, xr, 1, x_stride, out, c.num_out, c.accumulate},
                      ids[static_cast<size_t>(p)], serial_for());
    if (c.gated) {
      matmul_expert_ref(MatmulArgs{w_up.data(), c.type, c.num_in, c.num_out, row_bytes, xr, 1, x_stride, up_ref.data(), c.num_out},
                        ids[static_cast<size_t>(p)], serial_for());
      swiglu_ref(out, up_ref.data(), out, c.num_out);
    }
  }

  DeviceBuffer<uint8_t> dw(w), dwu(w_up);
  DeviceBuffer<float> dx(x), dy(num_y);
  DeviceBuffer<int32_t> dids(ids);
  if (c.accumulate) dy.upload(y0); else dy.poison();
  run_kernel(c, dw.get(), c.gated ? dwu.get() : nullptr, dx.get(), x_stride, dids.get(), c.num_pairs, c.pairs_per_x_row, dy.get(),
             c.accumulate);
  const std::vector<float> got = dy.download();

  // Parity over the valid pairs; skipped pairs keep their bytes (poison or y0).
  std::vector<float> got_valid, ref_valid;
  bool skipped_kept = true;
  for (int64_t p = 0; p < c.num_pairs; ++p) {
    const size_t at = static_cast<size_t>(p * c.num_out), n = static_cast<size_t>(c.num_out);
    if (valid(p)) {
      got_valid.insert(got_valid.end(), got.begin() + static_cast<std::ptrdiff_t>(at), got.begin() + static_cast<std::ptrdiff_t>(at + n));
      ref_valid.insert(ref_valid.end(), ref.begin() + static_cast<std::ptrdiff_t>(at), ref.begin() + static_cast<std::ptrdiff_t>(at + n));
    } else if (c.accumulate) {
      skipped_kept = skipped_kept && bitwise_equal(got.data() + at, y0.data() + at, n);
    } else {
      std::vector<float> poison(n);
      std::memset(poison.data(), 0xFF, n * sizeof(float));
      skipped_kept = skipped_kept && bitwise_equal(got.data() + at, poison.data(), n);
    }
  }
  const ErrorStats e = compare(got_valid.data(), ref_valid.data(), got_valid.size());
  const std::string kernel = std::string("experts_prefill") + math_suffix(c.math) +
                             (c.gated ? "(gated)" : c.accumulate ? "(acc)" : "");
  ctx.results.record(kernel, case_text(c), e, c.math == MatmulMath::kTf32 ? kNmseTf32 : kNmse, skipped_kept, skipped_kept ? "skipped pairs untouched" : "skipped pair WRITTEN");
  if (c.accumulate) return;

  // Per expert: its pairs' x rows through matmul_prefill_gpu on its matrix (gated: both
  // matrices, then swiglu_gpu), bitwise against the grouped call.
  bool same_as_prefill = true;
  for (int64_t ex = 0; ex < c.num_experts; ++ex) {
    std::vector<int64_t> pairs;
    for (int64_t p = 0; p < c.num_pairs; ++p) {
      if (ids[static_cast<size_t>(p)] == ex) pairs.push_back(p);
    }
    if (pairs.empty()) continue;
    const int64_t n = static_cast<int64_t>(pairs.size());
    std::vector<float> xe(static_cast<size_t>(n * c.num_in));
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(xe.data() + i * c.num_in, x.data() + (pairs[static_cast<size_t>(i)] / c.pairs_per_x_row) * x_stride,
                  sizeof(float) * static_cast<size_t>(c.num_in));
    }
    DeviceBuffer<float> dxe(xe), ye(static_cast<size_t>(n * c.num_out)), ue(ye.size());
    const size_t expert_bytes = static_cast<size_t>(ex) * static_cast<size_t>(c.num_out) * row_bytes;
    CHECK_GPU(matmul_prefill_gpu(MatmulArgs{dw.get() + expert_bytes, c.type, c.num_in, c.num_out, row_bytes, dxe.get(), n, c.num_in,
                                            ye.get(), c.num_out},
                                 nullptr, c.math));
    if (c.gated) {
      CHECK_GPU(matmul_prefill_gpu(MatmulArgs{dwu.get() + expert_bytes, c.type, c.num_in, c.num_out, row_bytes, dxe.get(), n,
                                              c.num_in, ue.get(), c.num_out},
                                   nullptr, c.math));
      CHECK_GPU(swiglu_gpu(ye.get(), ue.get(), ye.get(), n * c.num_out, nullptr));
    }
    const std::vector<float> alone = ye.download();
    for (int64_t i = 0; i < n; ++i) {
      same_as_prefill = same_as_prefill && bitwise_equal(alone.data() + i * c.num_out,
                                                         got.data() + pairs[static_cast<size_t>(i)] * c.num_out,
                                                         static_cast<size_t>(c.num_out));
    }
  }
  ctx.results.record_exact(kernel + " bits", case_text(c), same_as_prefill,
                           same_as_prefill ? "== matmul_prefill_gpu per expert" : "differs from matmul_prefill_gpu");

  // Batch invariance: a few pairs alone (own call, one pair, one x row) vs in the big call.
  bool invariant = true;
  for (int64_t p : {int64_t{0}, c.num_pairs / 2, c.num_pairs - 1}) {
    if (!valid(p)) continue;
    DeviceBuffer<int32_t> one_id(std::vector<int32_t>{ids[static_cast<size_t>(p)]});
    DeviceBuffer<float> one(static_cast<size_t>(c.num_out));
    one.poison();
    run_kernel(c, dw.get(), c.gated ? dwu.get() : nullptr, dx.get() + (p / c.pairs_per_x_row) * x_stride, x_stride, one_id.get(), 1,
               1, one.get(), false);
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), got.data() + p * c.num_out, static_cast<size_t>(c.num_out));
  }
  // Gated: == the two plain products of this kernel through swiglu_gpu.
  bool gated_same = true;
  if (c.gated) {
    DeviceBuffer<float> g(num_y), u(num_y);
    g.poison();
    u.poison();
    run_kernel(c, dw.get(), nullptr, dx.get(), x_stride, dids.get(), c.num_pairs, c.pairs_per_x_row, g.get(), false);
    run_kernel(c, dwu.get(), nullptr, dx.get(), x_stride, dids.get(), c.num_pairs, c.pairs_per_x_row, u.get(), false);
    CHECK_GPU(swiglu_gpu(g.get(), u.get(), g.get(), static_cast<int64_t>(num_y), nullptr));
    const std::vector<float> sep = g.download();
    for (int64_t p = 0; p < c.num_pairs; ++p) {
      if (!valid(p)) continue;
      gated_same = gated_same && bitwise_equal(sep.data() + p * c.num_out, got.data() + p * c.num_out, static_cast<size_t>(c.num_out));
    }
  }
  ctx.results.record_exact(kernel + " invariance", case_text(c), invariant && gated_same,
                           !invariant ? "NOT batch-invariant" : !gated_same ? "gated != products + swiglu_gpu"
                                                                             : "batch-invariant");
}

// matmul_prefill_gpu with MatmulMath `math` (kTf32, kTensorExact) against matmul_ref; rows 0, 64
// and the last alone bit-identical to the batch.
void check_prefill_math(Context& ctx, MatmulMath math, DType type, int64_t num_in, int64_t num_out, int64_t num_rows) {
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out);
  const int64_t x_stride = num_in + 4;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * x_stride));
  std::vector<float> ref(static_cast<size_t>(num_rows * num_out));
  const size_t row_bytes = dtype_row_bytes(type, num_in);
  MatmulArgs a{w.data(), type, num_in, num_out, row_bytes, x.data(), num_rows, x_stride, ref.data(), num_out};
  matmul_ref(a, serial_for());
  DeviceBuffer<uint8_t> dw(w);
  DeviceBuffer<float> dx(x), dy(ref.size()), one(static_cast<size_t>(num_out));
  dy.poison();
  MatmulArgs g = a;
  g.w = dw.get(), g.x = dx.get(), g.y = dy.get();
  CHECK_GPU(matmul_prefill_gpu(g, nullptr, math));
  const std::vector<float> got = dy.download();
  bool invariant = true;
  for (int64_t r : {int64_t{0}, std::min<int64_t>(64, num_rows - 1), num_rows - 1}) {
    one.poison();
    MatmulArgs s = g;
    s.x = dx.get() + r * x_stride, s.num_rows = 1, s.y = one.get();
    CHECK_GPU(matmul_prefill_gpu(s, nullptr, math));
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), got.data() + r * num_out, static_cast<size_t>(num_out));
  }
  const std::string shape =
      std::string(dtype_name(type)) + " in=" + std::to_string(num_in) + " out=" + std::to_string(num_out) + " rows=" + std::to_string(num_rows);
  ctx.results.record(std::string("matmul_prefill") + math_suffix(math), shape, compare(got.data(), ref.data(), got.size()),
                     math == MatmulMath::kTf32 ? kNmseTf32 : kNmse, invariant, invariant ? "batch-invariant" : "NOT batch-invariant");
  if (math != MatmulMath::kTensorExact || (type == DType::Q4_0 && tensor_exact_available())) return;
  // Where the exact form falls back (other weight types, no bf16 mma): the f32 tile's bits.
  one.poison();
  DeviceBuffer<float> f32(ref.size());
  g.y = f32.get();
  CHECK_GPU(matmul_prefill_gpu(g, nullptr, MatmulMath::kF32));
  const bool same = bitwise_equal(f32.download().data(), got.data(), got.size());
  ctx.results.record_exact("matmul_prefill_exact fallback", shape, same, same ? "== f32 tile" : "differs from the f32 tile");
}

// Quantised weights 2 bytes past a 16-byte boundary (raw copies by plain 2-byte loads instead
// of cp.async): matmul_prefill_gpu and the expert kernel bit-identical to the aligned call; and
// plan_ready: a second call on the first call's workspace skips the plan, same bits. With
// `math` (the exact tile reads its raw bytes at the same in-stage offsets as the f32 tile).
void check_unaligned_and_plan(Context& ctx, DType type, int64_t num_in, MatmulMath math = MatmulMath::kF32) {
  const int64_t num_out = 72, num_experts = 6, num_pairs = 130, k = 2;
  const size_t row_bytes = dtype_row_bytes(type, num_in);
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out * num_experts);
  std::vector<uint8_t> shifted(w.size() + 16);
  std::memcpy(shifted.data() + 2, w.data(), w.size());
  const int64_t x_stride = num_in + 4, num_x_rows = num_pairs / k;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_x_rows * x_stride));
  const std::vector<int32_t> ids = skewed_ids(ctx.rng, num_pairs, num_experts, false);
  DeviceBuffer<uint8_t> dw(w), dws(shifted);
  DeviceBuffer<float> dx(x), y0(static_cast<size_t>(num_x_rows * num_out)), y1(y0.size());
  DeviceBuffer<int32_t> dids(ids);
  MatmulArgs a{dw.get(), type, num_in, num_out, row_bytes, dx.get(), num_x_rows, x_stride, y0.get(), num_out};
  CHECK_GPU(matmul_prefill_gpu(a, nullptr, math));
  a.w = dws.get() + 2, a.y = y1.get();
  CHECK_GPU(matmul_prefill_gpu(a, nullptr, math));
  bool same = bitwise_equal(y0.download().data(), y1.download().data(), y0.size());

  Case c{type, num_in, num_out, num_experts, num_pairs, k};
  c.math = math;
  DeviceBuffer<float> e0(static_cast<size_t>(num_pairs * num_out)), e1(e0.size()), e2(e0.size());
  run_kernel(c, dw.get(), nullptr, dx.get(), x_stride, dids.get(), num_pairs, k, e0.get(), false);
  run_kernel(c, dws.get() + 2, nullptr, dx.get(), x_stride, dids.get(), num_pairs, k, e1.get(), false);
  same = same && bitwise_equal(e0.download().data(), e1.download().data(), e0.size());
  DeviceBuffer<uint8_t> ws(matmul_experts_prefill_workspace_bytes(num_pairs, num_experts));
  MatmulExpertsPrefillArgs pa{
      MatmulExpertsArgs{MatmulArgs{dw.get(), type, num_in, num_out, row_bytes, dx.get(), 0, x_stride, e2.get(), num_out}, dids.get(),
                        num_pairs, k},
      num_experts, dw.get(), ws.get(), math};  // gated call: writes the plan
  CHECK_GPU(matmul_experts_prefill_gpu(pa, nullptr));
  e2.poison();
  pa.w_up = nullptr, pa.plan_ready = true;
  CHECK_GPU(matmul_experts_prefill_gpu(pa, nullptr));
  same = same && bitwise_equal(e0.download().data(), e2.download().data(), e0.size());
  ctx.results.record_exact(std::string("experts_prefill") + math_suffix(math) + " unaligned/plan",
                           std::string(dtype_name(type)) + " in=" + std::to_string(num_in), same,
                           same ? "== aligned call, plan reused" : "differs");
}

// Bad arguments are refused without a launch.
void check_preconditions(Context& ctx) {
  DeviceBuffer<uint8_t> ws(matmul_experts_prefill_workspace_bytes(8, 4));
  DeviceBuffer<float> x(64), y(64);
  DeviceBuffer<int32_t> ids(8);
  const size_t rb = dtype_row_bytes(DType::Q4_0, 32);
  DeviceBuffer<uint8_t> w(rb * 16);
  const MatmulExpertsPrefillArgs good{
      MatmulExpertsArgs{MatmulArgs{w.get(), DType::Q4_0, 32, 4, rb, x.get(), 0, 32, y.get(), 4}, ids.get(), 8, 2}, 4, nullptr,
      ws.get()};
  auto refused = [](MatmulExpertsPrefillArgs a) { return matmul_experts_prefill_gpu(a, nullptr) == gpuErrorInvalidValue; };
  bool ok = true;
  MatmulExpertsPrefillArgs a = good;
  a.workspace = nullptr, ok = ok && refused(a);
  a = good, a.num_experts = 0, ok = ok && refused(a);
  a = good, a.experts.expert_ids = nullptr, ok = ok && refused(a);
  a = good, a.experts.pairs_per_x_row = 0, ok = ok && refused(a);
  a = good, a.experts.base.num_in = 48, ok = ok && refused(a);  // not a multiple of 32
  a = good, a.experts.base.x = x.get() + 1, ok = ok && refused(a);
  a = good, a.w_up = w.get(), a.experts.base.accumulate = true, ok = ok && refused(a);
  a = good, a.experts.base.w_type = static_cast<DType>(6), ok = ok && refused(a);  // ggml's Q5_0: no kernel
  a = good, a.experts.num_pairs = 0, ok = ok && matmul_experts_prefill_gpu(a, nullptr) == gpuSuccess;
  ctx.results.record_exact("experts_prefill args", "bad arguments", ok, ok ? "refused" : "a bad argument was accepted");
}

}  // namespace

void run_matmul_experts_prefill_tests(Context& ctx) {
  check_preconditions(ctx);
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                         DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType t : types) {
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    const int64_t in = k_quant ? 768 : 224;  // 224: a short last 128-element window
    for (int64_t pairs : ctx.quick ? std::vector<int64_t>{1, 65} : std::vector<int64_t>{1, 7, 64, 65, 200}) {
      check_case(ctx, Case{t, in, 72, 6, pairs, 3});
    }
    check_case(ctx, Case{t, in, 72, 6, 65, 1, true});                  // accumulate, down form
    check_case(ctx, Case{t, in, 72, 6, 130, 2, false, true});          // gated, hot expert over 2+ tiles
    check_case(ctx, Case{t, in, 40, 5, 66, 3, false, false, true});    // ids out of range skipped
    if (!ctx.quick) {
      check_case(ctx, Case{t, k_quant ? 256 : 128, 72, 256, 4096, 8});               // 512 rows x top-8
      check_case(ctx, Case{t, k_quant ? 256 : 128, 72, 256, 4096, 8, false, true});  // gated
    }
    // Tensor-core forms (CUDA sm_80+; elsewhere the f32 form, which passes trivially): TF32, and
    // the exact bf16 products (Q4_0; other types fall back to f32).
    for (MatmulMath math : {MatmulMath::kTf32, MatmulMath::kTensorExact}) {
      check_case(ctx, Case{t, in, 72, 6, 65, 3, false, false, false, math});
      check_case(ctx, Case{t, in, 72, 6, 65, 1, true, false, false, math});
      check_case(ctx, Case{t, in, 72, 6, 130, 2, false, true, false, math});
      if (!ctx.quick) check_case(ctx, Case{t, k_quant ? 256 : 128, 72, 256, 4096, 8, false, true, false, math});
      for (int64_t rows : ctx.quick ? std::vector<int64_t>{1, 70} : std::vector<int64_t>{1, 65, 200}) {
        check_prefill_math(ctx, math, t, k_quant ? 2048 : in, 129, rows);
      }
    }
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16) check_unaligned_and_plan(ctx, t, in);
    if (t == DType::Q4_0) check_unaligned_and_plan(ctx, t, in, MatmulMath::kTensorExact);
  }
  // The 35B-A3B down shape (in 512, out 2048) at a few hundred pairs.
  check_case(ctx, Case{DType::Q4_0, 512, 2048, 256, ctx.quick ? 64 : 520, 1});
  check_case(ctx, Case{DType::Q4_0, 512, 2048, 256, ctx.quick ? 64 : 520, 1, false, false, false, MatmulMath::kTensorExact});
  // The exact tile on odd shapes: inputs 32 (one block), 96 and 4128 (short last windows),
  // outputs 1, 63 and 65 (partial weight tiles), rows past one and several 64-row tiles.
  for (int64_t in : {32, 96, 4128}) {
    for (int64_t out : {1, 63, 65}) check_prefill_math(ctx, MatmulMath::kTensorExact, DType::Q4_0, in, out, in == 96 ? 200 : 67);
  }
  check_case(ctx, Case{DType::Q4_0, 96, 65, 7, 200, 4, false, true, false, MatmulMath::kTensorExact});  // gated, odd outputs
}

// A few small cases of the exact tensor-core tile alone (`--only exact_tile`): quick enough for
// compute-sanitizer's racecheck, which the whole suite outlasts. Two windows (one short), the
// dense 32 x 128 tile over partial row and column tiles, expert tiles of 8 and 16 pairs, gated.
void run_exact_tile_tests(Context& ctx) {
  const MatmulMath exact = MatmulMath::kTensorExact;
  check_prefill_math(ctx, exact, DType::Q4_0, 224, 129, 40);
  check_case(ctx, Case{DType::Q4_0, 224, 72, 6, 7, 3, false, false, false, exact});      // 8-pair tiles
  check_case(ctx, Case{DType::Q4_0, 224, 72, 2, 40, 2, false, true, false, exact});     // 16-pair tiles, gated
}

}  // namespace deltaserve::kernels::gputest
