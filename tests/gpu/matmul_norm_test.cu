// The matmul forms that carry a norm, against the launches they replace: matmul_norm_gpu (the
// norm epilogue), matmul_segments_gpu with the input norm and with the deferred norm (producer
// and readers); and the staged matvec's one and two tiles a block, bit for bit. Driven by
// run_matmul_tests (matmul_test.cu).
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/quant.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/matmul_checks.h"

namespace deltaserve::kernels::gputest {

// matmul_norm_gpu == matmul_gpu then rms_norm_gpu, bit for bit (y and the normed rows), twice
// on one counter array (the counters must come back to zero; the second launch accumulates
// again, so it also checks that no stale partial sums leak between launches).
// The staged matvec with one and with two 16-row tiles a block (StagedTiles::kOne / kTwo),
// bitwise: a gated segment and a plain accumulating one in one launch, with the input norm
// when `input_norm` (then x's rows are residual rows).
void check_staged_tiles(Context& ctx, int64_t num_in, int64_t out_g, int64_t out_p, int64_t num_rows, bool input_norm) {
  const DType t = DType::Q4_0;
  const size_t rb = dtype_row_bytes(t, num_in);
  const std::vector<uint8_t> wg = random_weights(ctx.rng, t, num_in, out_g), wu = random_weights(ctx.rng, t, num_in, out_g);
  const std::vector<uint8_t> wp = random_weights(ctx.rng, t, num_in, out_p);
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * out_p));
  const std::vector<float> nw = random_floats(ctx.rng, static_cast<size_t>(num_in));
  DeviceBuffer<uint8_t> dwg(wg), dwu(wu), dwp(wp);
  DeviceBuffer<float> dx(x), dnw(nw);
  std::vector<float> gated[2], plain[2];
  for (int form = 0; form < 2; ++form) {
    DeviceBuffer<float> g(static_cast<size_t>(num_rows * out_g)), p(y0);
    g.poison();
    MatmulSegment segs[2]{};
    segs[0].args = MatmulArgs{dwg.get(), t, num_in, out_g, rb, dx.get(), num_rows, num_in, g.get(), out_g};
    segs[0].w_up = dwu.get();
    segs[1].args = MatmulArgs{dwp.get(), t, num_in, out_p, rb, dx.get(), num_rows, num_in, p.get(), out_p, true};
    if (input_norm) {
      for (MatmulSegment& sg : segs) sg.input_norm_w = dnw.get(), sg.input_norm_eps = 1e-6f;
    }
    segs[0].args.staged_tiles = form == 0 ? StagedTiles::kOne : StagedTiles::kTwo;
    CHECK_GPU(matmul_segments_gpu(segs, 2, g_matvec, nullptr));
    gated[form] = g.download();
    plain[form] = p.download();
  }
  const bool same = bitwise_equal(gated[0].data(), gated[1].data(), gated[0].size()) &&
                    bitwise_equal(plain[0].data(), plain[1].data(), plain[0].size());
  ctx.results.record_exact("matmul_segments_gpu two tiles",
                           shape_text(t, num_in, out_g + out_p, num_rows) + (input_norm ? " +input norm" : ""), same,
                           same ? "two tiles a block == one, bitwise" : "two tiles a block != one");
}

void check_matmul_norm(Context& ctx, DType type, int64_t num_in, int64_t num_out, int64_t num_rows, bool accumulate) {
  const std::vector<uint8_t> w = random_weights(ctx.rng, type, num_in, num_out);
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_out));
  const std::vector<float> gamma = random_floats(ctx.rng, static_cast<size_t>(num_out));
  const size_t rb = dtype_row_bytes(type, num_in);
  const int64_t out_stride = num_out + 3;
  DeviceBuffer<uint8_t> dw(w);
  DeviceBuffer<float> dx(x), dg(gamma), fy(y0), ty(y0);
  DeviceBuffer<float> fo(static_cast<size_t>(num_rows * out_stride)), to(fo.size());
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(num_rows), 0u));
  const float eps = 1e-6f;
  bool same = true, zero = true;
  for (int round = 0; round < 2; ++round) {
    fo.poison();
    to.poison();
    const MatmulArgs fa{dw.get(), type, num_in, num_out, rb, dx.get(), num_rows, num_in, fy.get(), num_out, accumulate, g_staged_tiles};
    CHECK_GPU(matmul_norm_gpu(fa, MatmulNormEpilogue{dg.get(), eps, fo.get(), out_stride, counters.get()}, g_matvec, nullptr));
    const MatmulArgs ta{dw.get(), type, num_in, num_out, rb, dx.get(), num_rows, num_in, ty.get(), num_out, accumulate, g_staged_tiles};
    CHECK_GPU(matmul_gpu(ta, g_matvec, nullptr));
    CHECK_GPU(rms_norm_gpu(RmsNormArgs{ty.get(), num_out, dg.get(), to.get(), out_stride, num_rows, num_out, eps}, nullptr));
    const std::vector<float> a1 = fy.download(), b1 = ty.download(), a2 = fo.download(), b2 = to.download();
    same = same && bitwise_equal(a1.data(), b1.data(), a1.size());
    for (int64_t r = 0; r < num_rows; ++r) {
      same = same && bitwise_equal(a2.data() + r * out_stride, b2.data() + r * out_stride, static_cast<size_t>(num_out));
    }
    for (unsigned c : counters.download()) zero = zero && c == 0;
  }
  const std::vector<float> a2 = fo.download(), b2 = to.download();
  std::vector<float> a_rows, b_rows;  // the written columns (the padding holds poison)
  for (int64_t r = 0; r < num_rows; ++r) {
    a_rows.insert(a_rows.end(), a2.begin() + r * out_stride, a2.begin() + r * out_stride + num_out);
    b_rows.insert(b_rows.end(), b2.begin() + r * out_stride, b2.begin() + r * out_stride + num_out);
  }
  ctx.results.record("matmul_norm_gpu", shape_text(type, num_in, num_out, num_rows) + (accumulate ? " acc" : ""),
                     compare(a_rows.data(), b_rows.data(), a_rows.size()), kMatmulNmse, same && zero,
                     !same ? "differs from matmul_gpu + rms_norm_gpu" : (zero ? "== matmul_gpu + rms_norm_gpu" : "counters not reset"));
}

// matmul_segments_gpu with the input norm (kStaged) == rms_norm_gpu, then the same segments
// on its output, bit for bit: a plain accumulating and a gated segment over one residual
// matrix whose rows differ in scale by up to 2^4, rows across the groups of 1, 2, 4 and 8 and
// past them. Under the CUDA cores the launch is refused (gpuErrorInvalidValue, nothing run).
void check_input_norm(Context& ctx, int64_t num_in, int64_t num_rows) {
  const DType type = DType::Q4_0;
  const int64_t out_p = 40, out_g = 24;
  const size_t rb = dtype_row_bytes(type, num_in);
  const std::vector<uint8_t> wp = random_weights(ctx.rng, type, num_in, out_p);
  const std::vector<uint8_t> wg = random_weights(ctx.rng, type, num_in, out_g);
  const std::vector<uint8_t> wu = random_weights(ctx.rng, type, num_in, out_g);
  std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_rows * num_in));
  for (int64_t r = 0; r < num_rows; ++r) {
    const float scale = static_cast<float>(1 << (r % 5)) / 4.0f;
    for (int64_t i = 0; i < num_in; ++i) x[static_cast<size_t>(r * num_in + i)] *= scale;
  }
  const std::vector<float> gamma = random_floats(ctx.rng, static_cast<size_t>(num_in));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * out_p));
  const float eps = 1e-6f;
  DeviceBuffer<uint8_t> dwp(wp), dwg(wg), dwu(wu);
  DeviceBuffer<float> dx(x), dgamma(gamma), normed(x.size()), p1(y0), p2(y0);
  DeviceBuffer<float> g1(static_cast<size_t>(num_rows * out_g)), g2(g1.size());
  g1.poison();
  g2.poison();
  normed.poison();
  auto segments = [&](const float* in, float* py, float* gy, bool carry, MatmulSegment (&segs)[2]) {
    segs[0] = MatmulSegment{};
    segs[1] = MatmulSegment{};
    segs[0].args = MatmulArgs{dwp.get(), type, num_in, out_p, rb, in, num_rows, num_in, py, out_p, true};
    segs[0].args.staged_tiles = g_staged_tiles;
    segs[1].args = MatmulArgs{dwg.get(), type, num_in, out_g, rb, in, num_rows, num_in, gy, out_g};
    segs[1].w_up = dwu.get();
    for (MatmulSegment& sg : segs) {
      if (carry) sg.input_norm_w = dgamma.get(), sg.input_norm_eps = eps;
    }
  };
  MatmulSegment carried[2], plain[2];
  segments(dx.get(), p1.get(), g1.get(), true, carried);
  segments(normed.get(), p2.get(), g2.get(), false, plain);
  const bool supported = matmul_segments_input_norm_supported(carried, 2, g_matvec);
  if (supported) CHECK_GPU(matmul_segments_gpu(carried, 2, g_matvec, nullptr));
  CHECK_GPU(rms_norm_gpu(RmsNormArgs{dx.get(), num_in, dgamma.get(), normed.get(), num_in, num_rows, num_in, eps}, nullptr));
  CHECK_GPU(matmul_segments_gpu(plain, 2, g_matvec, nullptr));
  const std::vector<float> a1 = p1.download(), b1 = p2.download(), a2 = g1.download(), b2 = g2.download();
  const bool same = supported && bitwise_equal(a1.data(), b1.data(), a1.size()) && bitwise_equal(a2.data(), b2.data(), a2.size());

  // Refused off the staged matvec: nothing launched, the outputs untouched.
  const MatvecContext cuda_cores{};
  const bool refused = !matmul_segments_input_norm_supported(carried, 2, cuda_cores) &&
                       matmul_segments_gpu(carried, 2, cuda_cores, nullptr) == gpuErrorInvalidValue;
  (void)gpuGetLastError();
  const std::vector<float> after = g1.download();
  const bool untouched = bitwise_equal(after.data(), a2.data(), a2.size());
  ctx.results.record("matmul_segments_gpu(input norm)", shape_text(type, num_in, out_p, num_rows),
                     compare(a2.data(), b2.data(), a2.size()), kMatmulNmse, same && refused && untouched,
                     !supported ? "not supported" : !same ? "differs from rms_norm_gpu + matmul_segments_gpu"
                                                  : !(refused && untouched) ? "not refused off the staged matvec"
                                                                            : "== rms_norm_gpu + matmul_segments_gpu");
}

// The deferred norm (MatmulSegment::norm_partials / deferred_norm, kStaged). Producer: a
// plain accumulating product over residual rows y0 that also writes out = y * gamma and each
// 16-output tile's sum of y^2; y must be matmul_gpu's bits, out exactly y * gamma, the tile sums
// the fixed butterfly's bits. Consumer: a plain and a gated segment reading out with the
// squares; against rms_norm_gpu + the same segments on its output (other bits, 1e-8), each
// row alone == in its group, one tile a block == two (bitwise), and refused off the staged
// matvec. Residual rows differ in scale by up to 2^4; width h, num_rows rows.
namespace {
float butterfly16(const float* v) {
  float a[16];
  for (int i = 0; i < 16; ++i) a[i] = v[i];
  for (int mask = 8; mask > 0; mask >>= 1) {
    float b[16];
    for (int i = 0; i < 16; ++i) b[i] = a[i] + a[i ^ mask];
    for (int i = 0; i < 16; ++i) a[i] = b[i];
  }
  return a[0];
}
}  // namespace

void check_deferred_norm(Context& ctx, int64_t h, int64_t num_rows) {
  const DType type = DType::Q4_0;
  const int64_t k_in = 1024, out_p = 40, out_g = 24, out_stride = h + 4, sq_stride = (h + 15) / 16 + 3;
  const std::vector<uint8_t> wprod = random_weights(ctx.rng, type, k_in, h);
  const std::vector<uint8_t> wp = random_weights(ctx.rng, type, h, out_p), wg = random_weights(ctx.rng, type, h, out_g),
                             wu = random_weights(ctx.rng, type, h, out_g);
  const std::vector<float> xin = random_floats(ctx.rng, static_cast<size_t>(num_rows * k_in));
  std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(num_rows * h));
  for (int64_t r = 0; r < num_rows; ++r) {
    const float scale = static_cast<float>(1 << (r % 5)) / 4.0f;
    for (int64_t i = 0; i < h; ++i) y0[static_cast<size_t>(r * h + i)] *= scale;
  }
  const std::vector<float> gamma = random_floats(ctx.rng, static_cast<size_t>(h));
  const float eps = 1e-6f;
  DeviceBuffer<uint8_t> dwprod(wprod), dwp(wp), dwg(wg), dwu(wu);
  DeviceBuffer<float> dxin(xin), dgamma(gamma), dy(y0), ry(y0);
  DeviceBuffer<float> out(static_cast<size_t>(num_rows * out_stride)), squares(static_cast<size_t>(num_rows * sq_stride));
  out.poison();
  squares.poison();

  // Producer, against matmul_gpu and the host's products and butterflies.
  MatmulSegment prod{};
  prod.args = MatmulArgs{dwprod.get(), type, k_in, h, dtype_row_bytes(type, k_in), dxin.get(), num_rows, k_in, dy.get(), h, true};
  prod.norm_partials = MatmulSegment::NormPartials{dgamma.get(), out.get(), out_stride, squares.get(), sq_stride};
  const bool prod_supported = matmul_segments_deferred_norm_supported(&prod, 1, g_matvec);
  if (prod_supported) CHECK_GPU(matmul_segments_gpu(&prod, 1, g_matvec, nullptr));
  MatmulArgs plain_prod = prod.args;
  plain_prod.y = ry.get();
  CHECK_GPU(matmul_gpu(plain_prod, g_matvec, nullptr));
  const std::vector<float> y = dy.download(), yref = ry.download(), xw = out.download(), sq = squares.download();
  bool prod_ok = prod_supported && bitwise_equal(y.data(), yref.data(), y.size());
  for (int64_t r = 0; r < num_rows && prod_ok; ++r) {
    const float* yr = y.data() + r * h;
    for (int64_t i = 0; i < h; ++i) prod_ok = prod_ok && xw[static_cast<size_t>(r * out_stride + i)] == yr[i] * gamma[static_cast<size_t>(i)];
    for (int64_t t = 0; t < (h + 15) / 16; ++t) {
      float v[16] = {};
      for (int64_t i = 0; i < 16 && 16 * t + i < h; ++i) v[i] = yr[16 * t + i] * yr[16 * t + i];
      const float want = butterfly16(v), got = sq[static_cast<size_t>(r * sq_stride + t)];
      prod_ok = prod_ok && std::memcmp(&want, &got, sizeof(float)) == 0;
    }
  }
  ctx.results.record_exact("matmul_segments_gpu(deferred norm, producer)", shape_text(type, k_in, h, num_rows), prod_ok,
                           !prod_supported ? "not supported" : prod_ok ? "y == matmul_gpu, out == y * w, tile sums == butterflies"
                                                                        : "y, out or the tile sums differ");

  // Consumers: deferred from out, against rms_norm_gpu + the same segments.
  DeviceBuffer<float> normed(static_cast<size_t>(num_rows * h));
  normed.poison();
  CHECK_GPU(rms_norm_gpu(RmsNormArgs{dy.get(), h, dgamma.get(), normed.get(), h, num_rows, h, eps}, nullptr));
  auto consumers = [&](const float* x, int64_t x_stride, const float* sq_rows, int64_t rows, float* py, float* gy, MatmulSegment (&segs)[2]) {
    segs[0] = MatmulSegment{};
    segs[1] = MatmulSegment{};
    segs[0].args = MatmulArgs{dwp.get(), type, h, out_p, dtype_row_bytes(type, h), x, rows, x_stride, py, out_p};
    segs[1].args = MatmulArgs{dwg.get(), type, h, out_g, dtype_row_bytes(type, h), x, rows, x_stride, gy, out_g};
    segs[1].w_up = dwu.get();
    if (sq_rows != nullptr)
      for (MatmulSegment& sg : segs) sg.deferred_norm = MatmulSegment::DeferredNorm{sq_rows, sq_stride, eps};
  };
  DeviceBuffer<float> p1(static_cast<size_t>(num_rows * out_p)), g1(static_cast<size_t>(num_rows * out_g)), p2(p1.size()), g2(g1.size());
  p1.poison(), g1.poison(), p2.poison(), g2.poison();
  MatmulSegment deferred[2], plain[2];
  consumers(out.get(), out_stride, squares.get(), num_rows, p1.get(), g1.get(), deferred);
  consumers(normed.get(), h, nullptr, num_rows, p2.get(), g2.get(), plain);
  const bool supported = matmul_segments_deferred_norm_supported(deferred, 2, g_matvec);
  if (supported) CHECK_GPU(matmul_segments_gpu(deferred, 2, g_matvec, nullptr));
  CHECK_GPU(matmul_segments_gpu(plain, 2, g_matvec, nullptr));
  const std::vector<float> a_p = p1.download(), a_g = g1.download(), b_p = p2.download(), b_g = g2.download();
  std::vector<float> got(a_p), want(b_p);
  got.insert(got.end(), a_g.begin(), a_g.end());
  want.insert(want.end(), b_g.begin(), b_g.end());

  // Each row alone, and (1-2 rows) two tiles a block, bitwise the group's.
  bool invariant = true;
  DeviceBuffer<float> p3(static_cast<size_t>(out_p)), g3(static_cast<size_t>(out_g));
  for (int64_t r = 0; r < num_rows && supported; ++r) {
    for (int form = 0; form < 2; ++form) {
      p3.poison(), g3.poison();
      MatmulSegment one[2];
      consumers(out.get() + r * out_stride, out_stride, squares.get() + r * sq_stride, 1, p3.get(), g3.get(), one);
      one[0].args.staged_tiles = form == 1 ? StagedTiles::kTwo : StagedTiles::kOne;
      CHECK_GPU(matmul_segments_gpu(one, 2, g_matvec, nullptr));
      const std::vector<float> op = p3.download(), og = g3.download();
      invariant = invariant && bitwise_equal(op.data(), a_p.data() + r * out_p, static_cast<size_t>(out_p)) &&
                  bitwise_equal(og.data(), a_g.data() + r * out_g, static_cast<size_t>(out_g));
    }
  }
  // Refused off the staged matvec: nothing launched.
  const MatvecContext cuda_cores{};
  const bool refused = !matmul_segments_deferred_norm_supported(deferred, 2, cuda_cores) &&
                       !matmul_segments_deferred_norm_supported(&prod, 1, cuda_cores) &&
                       matmul_segments_gpu(deferred, 2, cuda_cores, nullptr) == gpuErrorInvalidValue;
  (void)gpuGetLastError();
  const bool untouched = bitwise_equal(p1.download().data(), a_p.data(), a_p.size());
  const bool ok = supported && invariant && refused && untouched;
  ctx.results.record("matmul_segments_gpu(deferred norm, readers)", shape_text(type, h, out_p + out_g, num_rows),
                     compare(got.data(), want.data(), got.size()), kMatmulNmse, ok,
                     !supported ? "not supported" : !invariant ? "NOT batch-invariant (or two tiles != one)"
                                                  : !(refused && untouched) ? "not refused off the staged matvec"
                                                                            : "batch-invariant, two tiles == one");
}

// The deferred norm's readers take rows of at most 16,384 inputs (each reader thread loads a
// bounded share of the tile sums): a wider launch is refused, nothing run.
void check_deferred_norm_bound(Context& ctx) {
  const DType type = DType::Q4_0;
  const int64_t wide = kDeferredNormMaxInputs + 256;
  DeviceBuffer<uint8_t> w(std::vector<uint8_t>(dtype_row_bytes(type, wide), 0));
  DeviceBuffer<float> x(static_cast<size_t>(wide)), y(16), squares(static_cast<size_t>(wide / 16));
  auto reader = [&](int64_t num_in) {
    MatmulSegment s{};
    s.args = MatmulArgs{w.get(), type, num_in, 1, dtype_row_bytes(type, num_in), x.get(), 1, num_in, y.get(), 1};
    s.deferred_norm = MatmulSegment::DeferredNorm{squares.get(), wide / 16, 1e-6f};
    return s;
  };
  const MatmulSegment at = reader(kDeferredNormMaxInputs), past = reader(wide);
  const bool ok = matmul_segments_deferred_norm_supported(&at, 1, g_matvec) &&
                  !matmul_segments_deferred_norm_supported(&past, 1, g_matvec) &&
                  matmul_segments_gpu(&past, 1, g_matvec, nullptr) == gpuErrorInvalidValue;
  (void)gpuGetLastError();
  ctx.results.record_exact("matmul_segments_gpu(deferred norm, width bound)", shape_text(type, wide, 1, 1), ok,
                           ok ? "16,384 inputs taken, 16,640 refused" : "the width bound does not hold");
}


}  // namespace deltaserve::kernels::gputest
