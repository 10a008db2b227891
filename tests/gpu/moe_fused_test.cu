// The fused MoE launches against the unfused sequences they replace (the GPU backend's MoE
// layer: 5 launches and a norm -> 4 launches).
// moe_router_gpu (router + shared gate logit + top-k in one launch) == matmul_segments_gpu
// (router and shared gate segments) then moe_route_gpu, bitwise (logits, shared gate logits,
// ids, weights); ids == moe_route_ref on the same logits, logits == a double dot within
// matmul_gpu's bound; twice on one counter array (the counters must come back to zero); each
// row alone == the row in the batch; odd row counts (several row groups), a padded x stride,
// num_in with a chunk tail, no shared gate; bad arguments refused with nothing written.
// moe_router_gpu's input norm == rms_norm_gpu then moe_router_gpu, bitwise.
// moe_combine_gpu's norm epilogue (the next layer's input norm) == moe_combine_gpu then
// rms_norm_gpu, bitwise (y and the normed rows); incomplete epilogue arguments refused.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr double kLogitNmse = 1e-8;  // matmul_gpu's F32 bound against a double dot

std::string shape(int64_t rows, int64_t h, int64_t e, int64_t k, bool shared, int64_t x_pad) {
  return "rows=" + std::to_string(rows) + " H=" + std::to_string(h) + " E=" + std::to_string(e) + " k=" +
         std::to_string(k) + (shared ? " +shared" : "") + (x_pad > 0 ? " x_pad=" + std::to_string(x_pad) : "");
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Device inputs and outputs of one router problem.
struct RouterCase {
  int64_t rows, h, e, k, x_stride;
  bool shared;
  std::vector<float> x, w, sg;
  DeviceBuffer<float> dx, dw, dsg, logits, sh_logits, weights;
  DeviceBuffer<int32_t> ids, counters;

  RouterCase(Context& ctx, int64_t rows_in, int64_t h_in, int64_t e_in, int64_t k_in, bool shared_in, int64_t x_pad)
      : rows(rows_in), h(h_in), e(e_in), k(k_in), x_stride(h_in + x_pad), shared(shared_in),
        x(random_floats(ctx.rng, static_cast<size_t>(rows_in * (h_in + x_pad)))),
        w(random_floats(ctx.rng, static_cast<size_t>(e_in * h_in), 1.0f / std::sqrt(static_cast<float>(h_in)))),
        sg(random_floats(ctx.rng, static_cast<size_t>(h_in), 1.0f / std::sqrt(static_cast<float>(h_in)))),
        dx(x), dw(w), dsg(sg), logits(static_cast<size_t>(rows_in * e_in)), sh_logits(static_cast<size_t>(rows_in)),
        weights(static_cast<size_t>(rows_in * k_in)), ids(static_cast<size_t>(rows_in * k_in)),
        counters(std::vector<int32_t>(static_cast<size_t>(rows_in), 0)) {}

  MoeRouterArgs args() const {
    MoeRouterArgs a{};
    a.x = dx.get();
    a.x_stride = x_stride;
    a.num_rows = rows;
    a.num_in = h;
    a.router_w = dw.get();
    a.w_row_bytes = static_cast<size_t>(h) * sizeof(float);
    a.shared_gate_w = shared ? dsg.get() : nullptr;
    a.num_experts = e;
    a.num_used = k;
    a.logits = logits.get();
    a.shared_gate_logits = shared ? sh_logits.get() : nullptr;
    a.expert_ids = ids.get();
    a.weights = weights.get();
    a.sync_counters = counters.get();
    return a;
  }
  void poison() {
    logits.poison();
    sh_logits.poison();
    weights.poison();
    ids.poison();
  }
};

// The unfused sequence: router (+ shared gate) segments, then moe_route_gpu.
struct Unfused {
  std::vector<float> logits, sh_logits, weights;
  std::vector<int32_t> ids;
};
Unfused run_unfused(const RouterCase& c) {
  DeviceBuffer<float> logits(static_cast<size_t>(c.rows * c.e)), sh(static_cast<size_t>(c.rows)),
      weights(static_cast<size_t>(c.rows * c.k));
  DeviceBuffer<int32_t> ids(static_cast<size_t>(c.rows * c.k));
  MatmulSegment segs[2]{};
  segs[0].args = MatmulArgs{c.dw.get(), DType::F32, c.h, c.e, static_cast<size_t>(c.h) * 4, c.dx.get(), c.rows, c.x_stride,
                            logits.get(), c.e};
  segs[1].args = MatmulArgs{c.dsg.get(), DType::F32, c.h, 1, static_cast<size_t>(c.h) * 4, c.dx.get(), c.rows, c.x_stride,
                            sh.get(), 1};
  CHECK_GPU(matmul_segments_gpu(segs, c.shared ? 2 : 1, MatvecContext{}, nullptr));
  CHECK_GPU(moe_route_gpu(MoeRouteArgs{logits.get(), c.rows, c.e, c.k, ids.get(), weights.get()}, nullptr));
  return Unfused{logits.download(), c.shared ? sh.download() : std::vector<float>{}, weights.download(), ids.download()};
}

void check_router(Context& ctx, int64_t rows, int64_t h, int64_t e, int64_t k, bool shared, int64_t x_pad) {
  RouterCase c(ctx, rows, h, e, k, shared, x_pad);
  const std::string what = shape(rows, h, e, k, shared, x_pad);
  const Unfused want = run_unfused(c);

  // Twice on the same counters: the second launch finds them zero again. The routing must be
  // moe_route_gpu's on the kernel's own logits (bitwise), the logits matmul_gpu's.
  bool route_same = true, logits_same = true, counters_zero = true;
  std::string why_route, why_logits;
  for (int rep = 0; rep < 2; ++rep) {
    c.poison();
    CHECK_GPU(moe_router_gpu(c.args(), nullptr));
    const std::vector<int32_t> counters = c.counters.download();
    counters_zero = counters_zero && std::all_of(counters.begin(), counters.end(), [](int32_t v) { return v == 0; });
    DeviceBuffer<float> own_logits(c.logits.download()), route_w(static_cast<size_t>(rows * k));
    DeviceBuffer<int32_t> route_ids(static_cast<size_t>(rows * k));
    CHECK_GPU(moe_route_gpu(MoeRouteArgs{own_logits.get(), rows, e, k, route_ids.get(), route_w.get()}, nullptr));
    if (c.ids.download() != route_ids.download()) route_same = false, why_route += " ids";
    if (!bits_equal(c.weights.download(), route_w.download())) route_same = false, why_route += " weights";
    if (!bits_equal(c.logits.download(), want.logits)) logits_same = false, why_logits += " logits";
    if (shared && !bits_equal(c.sh_logits.download(), want.sh_logits)) logits_same = false, why_logits += " shared-gate";
  }
  why_route = route_same ? "== moe_route_gpu on its logits (bitwise)" : "differs from moe_route_gpu on its logits in:" + why_route;
  if (!counters_zero) why_route += "; sync counters NOT left zero (graph replays would misroute)";
  ctx.results.record_exact("moe_router_gpu (route)", what, route_same && counters_zero, why_route.c_str());
  // Same bits as the unfused path the backend ran before (so its forward outputs do not move).
  // A failure with the routing check passing means matmul_gpu's F32 matvec order changed and
  // moe.cu's router_dot no longer follows it (the logits still pass the NMSE check below).
  why_logits = logits_same ? "== matmul_segments_gpu (bitwise)"
                           : "differs from matmul_segments_gpu in:" + why_logits + " (matmul_gpu's F32 order changed?)";
  ctx.results.record_exact("moe_router_gpu (logits)", what, logits_same, why_logits.c_str());

  // Against the CPU: logits to a double dot (NMSE), routing == moe_route_ref on these logits.
  const std::vector<float> got = c.logits.download();
  std::vector<float> ref(got.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < e; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < h; ++i) s += static_cast<double>(c.w[o * h + i]) * c.x[r * c.x_stride + i];
      ref[r * e + o] = static_cast<float>(s);
    }
  if (shared) {
    const std::vector<float> got_sg = c.sh_logits.download();
    std::vector<float> ref_sg(got_sg.size());
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t i = 0; i < h; ++i) s += static_cast<double>(c.sg[i]) * c.x[r * c.x_stride + i];
      ref_sg[r] = static_cast<float>(s);
    }
    ctx.results.record("moe_router_gpu (ref shared gate)", what, compare(got_sg.data(), ref_sg.data(), got_sg.size()),
                       kLogitNmse);
  }
  std::vector<int32_t> ref_ids(static_cast<size_t>(rows * k));
  std::vector<float> ref_w(ref_ids.size());
  moe_route_ref({got.data(), rows, e, k, ref_ids.data(), ref_w.data()});
  const std::vector<float> got_w = c.weights.download();
  const bool ids_ok = c.ids.download() == ref_ids;
  const ErrorStats logit_err = compare(got.data(), ref.data(), got.size());
  const ErrorStats w_err = compare(got_w.data(), ref_w.data(), got_w.size());
  ctx.results.record("moe_router_gpu (ref logits)", what, logit_err, kLogitNmse);
  ctx.results.record("moe_router_gpu (ref route)", what, w_err, 1e-12, ids_ok, ids_ok ? "ids == moe_route_ref" : "ids differ from moe_route_ref");

  // Batch invariance: each row alone (a one-row group) == the row in the batch.
  bool alone_ok = true;
  const std::vector<int32_t> all_ids = c.ids.download();
  for (int64_t r = 0; r < rows && alone_ok; r += std::max<int64_t>(1, rows / 4)) {
    RouterCase one(ctx, 1, h, e, k, shared, x_pad);
    one.dx.upload(std::vector<float>(c.x.begin() + r * c.x_stride, c.x.begin() + (r + 1) * c.x_stride));
    one.dw.upload(c.w);
    one.dsg.upload(c.sg);
    one.poison();
    CHECK_GPU(moe_router_gpu(one.args(), nullptr));
    const std::vector<float> l = one.logits.download(), wts = one.weights.download();
    alone_ok = std::memcmp(l.data(), got.data() + r * e, static_cast<size_t>(e) * 4) == 0 &&
               std::memcmp(wts.data(), got_w.data() + r * k, static_cast<size_t>(k) * 4) == 0 &&
               std::equal(all_ids.begin() + r * k, all_ids.begin() + (r + 1) * k, one.ids.download().begin());
  }
  ctx.results.record_exact("moe_router_gpu (row alone)", what, alone_ok, alone_ok ? "batch-invariant" : "NOT batch-invariant");
}

// Each bad argument set is refused (gpuErrorInvalidValue) and writes nothing.
void check_router_refusals(Context& ctx) {
  RouterCase c(ctx, 3, 64, 16, 4, true, 0);
  struct Bad {
    const char* what;
    void (*edit)(MoeRouterArgs&);
  };
  const Bad bad[] = {
      {"k = 0", [](MoeRouterArgs& a) { a.num_used = 0; }},
      {"k > E", [](MoeRouterArgs& a) { a.num_used = a.num_experts + 1; }},
      {"k > 32", [](MoeRouterArgs& a) { a.num_used = 33, a.num_experts = 64; }},
      {"E > 4096", [](MoeRouterArgs& a) { a.num_experts = 4097; }},
      {"num_in % 8", [](MoeRouterArgs& a) { a.num_in = 60; }},
      {"x misaligned", [](MoeRouterArgs& a) { a.x += 1; }},
      {"x_stride < num_in", [](MoeRouterArgs& a) { a.x_stride = 32; }},
      {"x_stride % 4", [](MoeRouterArgs& a) { a.x_stride = 66; }},
      {"w row bytes % 16", [](MoeRouterArgs& a) { a.w_row_bytes = 260; }},
      {"w row bytes < 4 H", [](MoeRouterArgs& a) { a.w_row_bytes = 128; }},
      {"w misaligned", [](MoeRouterArgs& a) { a.router_w += 1; }},
      {"shared gate w without out", [](MoeRouterArgs& a) { a.shared_gate_logits = nullptr; }},
      {"shared gate out without w", [](MoeRouterArgs& a) { a.shared_gate_w = nullptr; }},
      {"no counters", [](MoeRouterArgs& a) { a.sync_counters = nullptr; }},
      {"no logits", [](MoeRouterArgs& a) { a.logits = nullptr; }},
      {"negative rows", [](MoeRouterArgs& a) { a.num_rows = -1; }},
  };
  for (const Bad& b : bad) {
    c.poison();
    MoeRouterArgs a = c.args();
    b.edit(a);
    const bool refused = moe_router_gpu(a, nullptr) == gpuErrorInvalidValue;
    const std::vector<int32_t> ids = c.ids.download();
    const bool untouched = std::all_of(ids.begin(), ids.end(), [](int32_t v) { return v == -1; });
    ctx.results.record_exact("moe_router_gpu (refuses)", b.what, refused && untouched,
                             refused ? (untouched ? "refused, nothing written" : "refused but wrote ids") : "NOT refused");
  }
  c.poison();
  MoeRouterArgs none = c.args();
  none.num_rows = 0;
  ctx.results.record_exact("moe_router_gpu (refuses)", "rows=0 is a no-op", moe_router_gpu(none, nullptr) == gpuSuccess,
                           "0 rows: success, nothing launched");
}

// moe_router_gpu with the input norm (x = the un-normed residual) == rms_norm_gpu into b,
// then moe_router_gpu on b: the normed rows (norm_out, its stride padding left unwritten),
// logits, shared gate logits, ids and weights all bitwise; twice on the same counters; x
// untouched. Shapes past what shared memory holds are refused (the backend then keeps the
// separate norm launch).
void check_router_norm(Context& ctx, int64_t rows, int64_t h, int64_t e, int64_t k, bool shared, int64_t x_pad,
                       int64_t out_pad) {
  RouterCase c(ctx, rows, h, e, k, shared, x_pad);
  for (float& v : c.x) v *= 3.0f;  // a residual stream, not unit rows
  c.dx.upload(c.x);
  std::vector<float> nw = random_floats(ctx.rng, static_cast<size_t>(h), 0.2f);
  for (float& v : nw) v += 1.0f;
  const float eps = 1e-6f;
  const int64_t out_stride = h + out_pad;
  DeviceBuffer<float> dnw(nw), b_plain(static_cast<size_t>(rows * out_stride)), b_fused(static_cast<size_t>(rows * out_stride));
  b_plain.poison();
  CHECK_GPU(rms_norm_gpu(RmsNormArgs{c.dx.get(), c.x_stride, dnw.get(), b_plain.get(), out_stride, rows, h, eps}, nullptr));
  // The unfused pair: the router on the normed rows.
  MoeRouterArgs plain = c.args();
  plain.x = b_plain.get();
  plain.x_stride = out_stride;
  c.poison();
  CHECK_GPU(moe_router_gpu(plain, nullptr));
  const std::vector<float> want_logits = c.logits.download(), want_w = c.weights.download();
  const std::vector<float> want_sh = shared ? c.sh_logits.download() : std::vector<float>{};
  const std::vector<int32_t> want_ids = c.ids.download();
  const std::vector<float> want_b = b_plain.download();

  MoeRouterArgs fused = c.args();
  fused.norm_w = dnw.get();
  fused.norm_eps = eps;
  fused.norm_out = b_fused.get();
  fused.norm_out_stride = out_stride;
  const std::string what = shape(rows, h, e, k, shared, x_pad) + (out_pad > 0 ? " out_pad=" + std::to_string(out_pad) : "");
  if (!moe_router_fuses_norm(h, rows, e)) {
    c.poison();
    const bool refused = moe_router_gpu(fused, nullptr) == gpuErrorInvalidValue;
    const std::vector<int32_t> ids = c.ids.download();
    const bool untouched = std::all_of(ids.begin(), ids.end(), [](int32_t v) { return v == -1; });
    ctx.results.record_exact("moe_router_gpu (+input norm)", what + " (too large for shared memory)", refused && untouched,
                             refused ? "refused, nothing written" : "NOT refused");
    return;
  }
  bool same = true, zero = true;
  std::string why;
  for (int rep = 0; rep < 2; ++rep) {
    c.poison();
    b_fused.poison();
    CHECK_GPU(moe_router_gpu(fused, nullptr));
    const std::vector<int32_t> counters = c.counters.download();
    zero = zero && std::all_of(counters.begin(), counters.end(), [](int32_t v) { return v == 0; });
    if (!bits_equal(b_fused.download(), want_b)) same = false, why += " normed rows";
    if (!bits_equal(c.logits.download(), want_logits)) same = false, why += " logits";
    if (shared && !bits_equal(c.sh_logits.download(), want_sh)) same = false, why += " shared-gate";
    if (c.ids.download() != want_ids) same = false, why += " ids";
    if (!bits_equal(c.weights.download(), want_w)) same = false, why += " weights";
  }
  const bool x_kept = bits_equal(c.dx.download(), c.x);
  why = same ? (zero ? "== rms_norm_gpu, then moe_router_gpu (bitwise, twice)" : "counters not reset") : "differs in" + why;
  if (!x_kept) why += "; x was modified";
  ctx.results.record_exact("moe_router_gpu (+input norm)", what, same && zero && x_kept, why.c_str());
}

void check_router_norm_refusals(Context& ctx) {
  RouterCase c(ctx, 3, 64, 16, 4, true, 0);
  DeviceBuffer<float> nw(std::vector<float>(64, 1.0f)), out(3 * 64 + 8);
  struct Bad {
    const char* what;
    int64_t out_offset, out_stride;
    bool with_w, with_out, out_is_x;
  };
  const Bad bad[] = {
      {"norm_w without norm_out", 0, 64, true, false, false},
      {"norm_out without norm_w", 0, 64, false, true, false},
      {"norm_out_stride < num_in", 0, 60, true, true, false},
      {"norm_out_stride % 4", 0, 66, true, true, false},
      {"norm_out misaligned", 1, 64, true, true, false},
      {"norm_out overlaps x", 0, 64, true, true, true},
  };
  for (const Bad& b : bad) {
    c.poison();
    MoeRouterArgs a = c.args();
    a.norm_w = b.with_w ? nw.get() : nullptr;
    a.norm_eps = 1e-6f;
    a.norm_out = b.with_out ? (b.out_is_x ? c.dx.get() : out.get() + b.out_offset) : nullptr;
    a.norm_out_stride = b.out_stride;
    const bool refused = moe_router_gpu(a, nullptr) == gpuErrorInvalidValue;
    const std::vector<int32_t> ids = c.ids.download();
    const bool untouched = std::all_of(ids.begin(), ids.end(), [](int32_t v) { return v == -1; });
    ctx.results.record_exact("moe_router_gpu (+input norm refuses)", b.what, refused && untouched,
                             refused ? (untouched ? "refused, nothing written" : "refused but wrote ids") : "NOT refused");
  }
}

// moe_combine_gpu with the norm epilogue == moe_combine_gpu, then rms_norm_gpu over y: y and
// the normed rows bitwise, the out stride's padding left unwritten (poison), rows of odd widths
// (norm blocks of 64 .. 256 threads, rows longer than a block), with and without accumulate
// and the shared expert.
void check_combine_norm(Context& ctx, int64_t rows, int64_t k, int64_t n, bool accumulate, bool shared, int64_t out_pad) {
  const std::vector<float> eo = random_floats(ctx.rng, static_cast<size_t>(rows * k * n));
  const std::vector<float> wt = random_floats(ctx.rng, static_cast<size_t>(rows * k));
  const std::vector<float> sh = random_floats(ctx.rng, static_cast<size_t>(rows * n));
  const std::vector<float> sg = random_floats(ctx.rng, static_cast<size_t>(rows));
  const std::vector<float> y0 = random_floats(ctx.rng, static_cast<size_t>(rows * n), 3.0f);
  std::vector<float> nw = random_floats(ctx.rng, static_cast<size_t>(n), 0.2f);
  for (float& v : nw) v += 1.0f;  // 1 + w, as GGUF stores it
  const int64_t out_stride = n + out_pad;
  const float eps = 1e-6f;
  DeviceBuffer<float> deo(eo), dwt(wt), dsh(sh), dsg(sg), dnw(nw), y_plain(y0), y_fused(y0);
  DeviceBuffer<float> out_plain(static_cast<size_t>(rows * out_stride)), out_fused(static_cast<size_t>(rows * out_stride));
  out_plain.poison();
  out_fused.poison();
  MoeCombineArgs a{deo.get(), dwt.get(), shared ? dsh.get() : nullptr, dsg.get(), y_plain.get(), rows, k, n};
  a.accumulate = accumulate;
  CHECK_GPU(moe_combine_gpu(a, nullptr));
  CHECK_GPU(rms_norm_gpu(RmsNormArgs{y_plain.get(), n, dnw.get(), out_plain.get(), out_stride, rows, n, eps}, nullptr));
  a.y = y_fused.get();
  a.norm_w = dnw.get();
  a.norm_eps = eps;
  a.norm_out = out_fused.get();
  a.norm_out_stride = out_stride;
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(rows), 0u));
  a.norm_counters = counters.get();
  CHECK_GPU(moe_combine_gpu(a, nullptr));
  const std::vector<float> yp = y_plain.download(), yf = y_fused.download();
  const std::vector<float> op = out_plain.download(), of = out_fused.download();
  const bool y_same = bits_equal(yf, yp), out_same = bits_equal(of, op);  // padding: poison on both
  const std::vector<unsigned> left = counters.download();
  const bool zero = std::all_of(left.begin(), left.end(), [](unsigned c) { return c == 0; });
  std::string why = y_same && out_same ? (zero ? "== combine, then rms_norm (bitwise)" : "counters not reset") : "differs in";
  if (!y_same) why += " y";
  if (!out_same) why += " normed rows";
  const std::string what = "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                           (accumulate ? " accumulate" : "") + (shared ? " +shared" : "") +
                           (out_pad > 0 ? " out_pad=" + std::to_string(out_pad) : "");
  std::vector<float> of_rows, op_rows;  // the n written columns (the padding holds NaN poison)
  for (int64_t r = 0; r < rows; ++r) {
    of_rows.insert(of_rows.end(), of.begin() + r * out_stride, of.begin() + r * out_stride + n);
    op_rows.insert(op_rows.end(), op.begin() + r * out_stride, op.begin() + r * out_stride + n);
  }
  ctx.results.record("moe_combine_gpu (+norm)", what, compare(of_rows.data(), op_rows.data(), of_rows.size()), 1e-12,
                     y_same && out_same && zero, why.c_str());
}

void check_combine_norm_refusals(Context& ctx) {
  DeviceBuffer<float> buf(std::vector<float>(64 * 8, 0.5f)), y(64), out(64);
  out.poison();
  MoeCombineArgs base{buf.get(), buf.get(), nullptr, nullptr, y.get(), 1, 2, 64};
  base.norm_w = buf.get();
  base.norm_eps = 1e-6f;
  base.norm_out = out.get();
  base.norm_out_stride = 64;
  DeviceBuffer<unsigned> counters(std::vector<unsigned>{0u});
  base.norm_counters = counters.get();
  struct Bad {
    const char* what;
    void (*edit)(MoeCombineArgs&);
  };
  const Bad bad[] = {
      {"norm_w without norm_out", [](MoeCombineArgs& a) { a.norm_out = nullptr; }},
      {"norm_out without norm_w", [](MoeCombineArgs& a) { a.norm_w = nullptr; }},
      {"norm_out_stride < n", [](MoeCombineArgs& a) { a.norm_out_stride = 63; }},
      {"n = 0 with a norm", [](MoeCombineArgs& a) { a.n = 0; }},
      {"a norm without counters", [](MoeCombineArgs& a) { a.norm_counters = nullptr; }},
  };
  for (const Bad& b : bad) {
    MoeCombineArgs a = base;
    b.edit(a);
    const bool refused = moe_combine_gpu(a, nullptr) == gpuErrorInvalidValue;
    const std::vector<float> o = out.download();
    const bool untouched = std::all_of(o.begin(), o.end(), [](float v) { return v != v; });
    ctx.results.record_exact("moe_combine_gpu (refuses)", b.what, refused && untouched,
                             refused ? (untouched ? "refused, nothing written" : "refused but wrote") : "NOT refused");
  }
}

}  // namespace

void run_moe_fused_tests(Context& ctx) {
  // 35B-A3B: H 2048, 256 experts, top 8, with the shared gate; one row (decode), the row
  // group sizes 2, 4, 8 and odd counts spanning several groups.
  for (int64_t rows : {1, 2, 3, 5, 8, 13}) check_router(ctx, rows, 2048, 256, 8, true, 0);
  if (!ctx.quick) check_router(ctx, 70, 2048, 256, 8, true, 0);
  check_router(ctx, 7, 72, 60, 4, true, 4);     // 9 chunks: the unrolled loop and its tail
  check_router(ctx, 3, 520, 129, 1, false, 0);  // no shared gate, an output block of one
  check_router(ctx, 9, 1024, 7, 7, true, 8);    // k == E
  check_router(ctx, 3, 256, 300, 8, true, 0);   // past the register routing (256 experts)
  check_router_refusals(ctx);
  // The input norm: 35B-A3B decode/verify row counts (8 rows exceed shared memory: refused),
  // odd widths (norm blocks narrower than the router's 256 threads, a chunk tail), padded
  // strides on both sides, no shared gate, and a width past what the all-rows form keeps in
  // registers (2056 > 8 x 256: the row-by-row form).
  for (int64_t rows : {1, 2, 3, 4, 8}) check_router_norm(ctx, rows, 2048, 256, 8, true, 0, 0);
  check_router_norm(ctx, 5, 72, 60, 4, true, 4, 8);
  check_router_norm(ctx, 3, 520, 129, 1, false, 0, 4);
  check_router_norm(ctx, 7, 1000, 7, 7, true, 8, 0);
  check_router_norm(ctx, 3, 2056, 16, 4, true, 0, 4);  // past the register-cached form: row by row
  check_router_norm_refusals(ctx);

  // 35B-A3B decode (H 2048, top 8, shared expert, the residual add), prefill-sized row
  // counts, widths below, at and above one norm block, a padded out stride, and the shapes
  // past the one-block row form (more than 8 ranks, more than 8 x 256 elements).
  for (int64_t rows : {1, 3, 8}) check_combine_norm(ctx, rows, 8, 2048, true, true, 0);
  if (!ctx.quick) check_combine_norm(ctx, 257, 8, 2048, true, true, 0);
  check_combine_norm(ctx, 5, 1, 64, false, false, 0);
  check_combine_norm(ctx, 7, 4, 100, true, true, 4);
  check_combine_norm(ctx, 2, 2, 300, false, true, 0);
  check_combine_norm(ctx, 3, 8, 1000, true, false, 24);
  check_combine_norm(ctx, 3, 10, 2048, true, true, 0);  // more ranks than the one-block row form
  check_combine_norm(ctx, 2, 8, 2304, true, true, 8);   // wider than 8 x 256: the multi-block form
  check_combine_norm_refusals(ctx);
}

}  // namespace deltaserve::kernels::gputest
