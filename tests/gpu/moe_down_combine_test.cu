// moe_down_combine_gpu (the MoE layer's down products and combine in one launch, under the
// staged matvec) against the two launches it replaces: matmul_segments_gpu of the expert pairs'
// segment and the shared down segment (staged), then moe_combine_gpu. y and the norm
// epilogue's rows bitwise; twice on one counter array from the same inputs (the counters must
// come back to zero, the second run must give the same bits); every row alone == the row in
// the batch; y against the CPU reference (moe_down_combine_ref: matmul_ref's products, the
// weighted sum in double) within the staged products' bound. Shapes: the 35B-A3B's (512-input experts and
// shared expert, 2,048 outputs, top 8), 1,024-input rows (the wide K walk), several chunks,
// outputs not a multiple of the 16-row tile, one rank, no shared expert, wide rows (the
// multi-pass norm). Unsupported shapes and bad arguments refused with nothing written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_down_combine_gpu.h"
#include "kernels/parallel.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr double kStagedNmse = 1e-10;  // the staged products' exact-split bound against the host, with margin

struct DownCombineCase {
  int64_t rows, n, exp_in, sh_in, num_experts, k;  // sh_in 0: no shared expert
  bool accumulate, norm;
  int64_t out_pad = 0;

  std::string text() const {
    return "rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " in=" + std::to_string(exp_in) +
           (sh_in > 0 ? " sh_in=" + std::to_string(sh_in) : " no-shared") + " E=" + std::to_string(num_experts) +
           " k=" + std::to_string(k) + (accumulate ? " acc" : "") + (norm ? " +norm" : "") +
           (out_pad > 0 ? " pad=" + std::to_string(out_pad) : "");
  }
};

// Each row's routing: k distinct experts, positive weights summing to ~1 (as the router writes
// them); ids and weights in [row][rank] order.
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
Routing random_routing(std::mt19937& rng, const DownCombineCase& c) {
  Routing out;
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<int32_t> all(static_cast<size_t>(c.num_experts));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<float> w(static_cast<size_t>(c.k));
    float total = 0.0f;
    for (float& v : w) total += (v = 0.1f + static_cast<float>(rng() % 1000) / 1000.0f);
    for (int64_t j = 0; j < c.k; ++j) {
      out.ids.push_back(all[static_cast<size_t>(j)]);
      out.weights.push_back(w[static_cast<size_t>(j)] / total);
    }
  }
  return out;
}

std::vector<float> norm_weights(std::mt19937& rng, int64_t n) {
  std::vector<float> w = random_floats(rng, static_cast<size_t>(n), 0.2f);
  for (float& v : w) v += 1.0f;  // 1 + w, as GGUF stores it
  return w;
}

// The inputs of one case on the host and the device.
struct DownCombineData {
  DownCombineCase c;
  size_t exp_rb, sh_rb;
  std::vector<uint8_t> w_exp, w_sh;
  std::vector<float> g, sg, gate_logit, y0, norm_w;
  Routing routing;
  DeviceBuffer<uint8_t> dw_exp, dw_sh;
  DeviceBuffer<float> dg, dsg, dgate, drank_w, dnorm_w;
  DeviceBuffer<int32_t> dids;

  DownCombineData(Context& ctx, const DownCombineCase& cc)
      : c(cc), exp_rb(dtype_row_bytes(DType::Q4_0, cc.exp_in)), sh_rb(cc.sh_in > 0 ? dtype_row_bytes(DType::Q4_0, cc.sh_in) : 0),
        w_exp(random_weights(ctx.rng, DType::Q4_0, cc.exp_in, cc.n * cc.num_experts)),
        w_sh(cc.sh_in > 0 ? random_weights(ctx.rng, DType::Q4_0, cc.sh_in, cc.n) : std::vector<uint8_t>(16)),
        g(random_floats(ctx.rng, static_cast<size_t>(cc.rows * cc.k * cc.exp_in))),
        sg(random_floats(ctx.rng, static_cast<size_t>(cc.rows * std::max<int64_t>(cc.sh_in, 1)))),
        gate_logit(random_floats(ctx.rng, static_cast<size_t>(cc.rows), 2.0f)),
        y0(random_floats(ctx.rng, static_cast<size_t>(cc.rows * cc.n), 3.0f)), norm_w(norm_weights(ctx.rng, cc.n)),
        routing(random_routing(ctx.rng, cc)), dw_exp(w_exp), dw_sh(w_sh), dg(g), dsg(sg), dgate(gate_logit),
        drank_w(routing.weights), dnorm_w(norm_w), dids(routing.ids) {}

  // The fused launch's arguments for rows [first, first + count) (y, norm_out: those rows').
  MoeDownCombineArgs args(float* y, float* norm_out, unsigned* counters, int64_t first, int64_t count) const {
    MoeDownCombineArgs a{};
    a.down_exps = dw_exp.get();
    a.exp_row_bytes = exp_rb;
    a.expert_bytes = exp_rb * static_cast<size_t>(c.n);
    a.exp_in = c.exp_in;
    a.expert_ids = dids.get() + first * c.k;
    a.expert_weights = drank_w.get() + first * c.k;
    a.num_used = c.k;
    a.exp_g = dg.get() + first * c.k * c.exp_in;
    if (c.sh_in > 0) {
      a.down_shexp = dw_sh.get();
      a.sh_row_bytes = sh_rb;
      a.sh_in = c.sh_in;
      a.sh_g = dsg.get() + first * c.sh_in;
      a.shared_gate_logit = dgate.get() + first;
    }
    a.y = y;
    a.n = c.n;
    a.num_rows = count;
    a.accumulate = c.accumulate;
    if (c.norm) {
      a.norm_w = dnorm_w.get();
      a.norm_eps = 1e-6f;
      a.norm_out = norm_out;
      a.norm_out_stride = c.n + c.out_pad;
      a.norm_counters = counters;
    }
    return a;
  }

  // y as the CPU reference computes it (moe_down_combine_ref, kernels/moe/moe.h) from the
  // host copies of the inputs.
  std::vector<float> host_y() const {
    std::vector<float> y = y0;
    MoeDownCombineArgs a{};
    a.down_exps = w_exp.data();
    a.exp_row_bytes = exp_rb;
    a.expert_bytes = exp_rb * static_cast<size_t>(c.n);
    a.exp_in = c.exp_in;
    a.expert_ids = routing.ids.data();
    a.expert_weights = routing.weights.data();
    a.num_used = c.k;
    a.exp_g = g.data();
    if (c.sh_in > 0) {
      a.down_shexp = w_sh.data();
      a.sh_row_bytes = sh_rb;
      a.sh_in = c.sh_in;
      a.sh_g = sg.data();
      a.shared_gate_logit = gate_logit.data();
    }
    a.y = y.data();
    a.n = c.n;
    a.num_rows = c.rows;
    a.accumulate = c.accumulate;
    moe_down_combine_ref(a, serial_for());
    return y;
  }
};

// The two launches the fused one replaces, under the staged matvec: y and the normed rows.
void two_launches(const DownCombineData& d, float* y, float* norm_out, unsigned* counters) {
  const DownCombineCase& c = d.c;
  DeviceBuffer<float> exp_out(static_cast<size_t>(c.rows * c.k * c.n)), sh_out(static_cast<size_t>(c.rows * c.n));
  MatmulSegment segs[2]{};
  segs[0].args = MatmulArgs{d.dw_exp.get(), DType::Q4_0, c.exp_in, c.n, d.exp_rb, d.dg.get(), c.rows * c.k, c.exp_in, exp_out.get(), c.n};
  segs[0].expert_ids = d.dids.get();
  segs[0].pairs_per_x_row = 1;
  segs[1].args = MatmulArgs{d.dw_sh.get(), DType::Q4_0, c.sh_in, c.n, d.sh_rb, d.dsg.get(), c.rows, c.sh_in, sh_out.get(), c.n};
  CHECK_GPU(matmul_segments_gpu(segs, c.sh_in > 0 ? 2 : 1, MatvecContext{MatvecMath::kStaged}, nullptr));
  MoeCombineArgs a{exp_out.get(), d.drank_w.get(), c.sh_in > 0 ? sh_out.get() : nullptr, d.dgate.get(), y, c.rows, c.k, c.n};
  a.accumulate = c.accumulate;
  if (c.norm) {
    a.norm_w = d.dnorm_w.get();
    a.norm_eps = 1e-6f;
    a.norm_out = norm_out;
    a.norm_out_stride = c.n + c.out_pad;
    a.norm_counters = counters;
  }
  CHECK_GPU(moe_combine_gpu(a, nullptr));
  CHECK_GPU(gpuDeviceSynchronize());
}

bool all_zero(const std::vector<unsigned>& v) {
  return std::all_of(v.begin(), v.end(), [](unsigned x) { return x == 0; });
}

void check_down_combine(Context& ctx, const DownCombineCase& c) {
  DownCombineData d(ctx, c);
  const int64_t out_stride = c.n + c.out_pad;
  const size_t out_size = static_cast<size_t>(c.rows * out_stride);
  DeviceBuffer<float> y_two(d.y0), y_one(d.y0), y_rows(d.y0), out_two(out_size), out_one(out_size), out_rows(out_size);
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(c.rows), 0u));
  out_two.poison();
  out_one.poison();
  out_rows.poison();
  two_launches(d, y_two.get(), out_two.get(), counters.get());

  const MoeDownCombineArgs a = d.args(y_one.get(), out_one.get(), counters.get(), 0, c.rows);
  if (!moe_down_combine_supported(a)) {
    ctx.results.record_exact("moe_down_combine_gpu", c.text(), false, "not supported (expected supported)");
    return;
  }
  CHECK_GPU(moe_down_combine_gpu(a, nullptr));
  const std::vector<float> y1 = y_one.download(), o1 = out_one.download();
  const std::vector<unsigned> left1 = counters.download();
  // Again from the same y: the counters must have come back to zero for the norm to run again.
  y_one.upload(d.y0);
  out_one.poison();
  CHECK_GPU(moe_down_combine_gpu(a, nullptr));
  const std::vector<float> y2 = y_one.download(), o2 = out_one.download();
  const std::vector<unsigned> left2 = counters.download();
  // Row by row (each row alone in its launch).
  for (int64_t r = 0; r < c.rows; ++r) {
    CHECK_GPU(moe_down_combine_gpu(d.args(y_rows.get() + r * c.n, out_rows.get() + r * out_stride, counters.get() + r, r, 1), nullptr));
  }
  const std::vector<float> yr = y_rows.download(), orows = out_rows.download();
  const std::vector<float> yt = y_two.download(), ot = out_two.download();

  const bool y_same = bitwise_equal(y1.data(), yt.data(), yt.size()), out_same = bitwise_equal(o1.data(), ot.data(), ot.size());
  const bool again = bitwise_equal(y2.data(), y1.data(), y1.size()) && bitwise_equal(o2.data(), o1.data(), o1.size());
  const bool alone = bitwise_equal(yr.data(), y1.data(), y1.size()) && bitwise_equal(orows.data(), o1.data(), o1.size());
  const bool zero = all_zero(left1) && all_zero(left2) && all_zero(counters.download());
  std::string why = "== down segments + combine (bitwise), again, row by row";
  if (!y_same) why = "y differs from the two launches";
  else if (!out_same) why = "normed rows differ from the two launches";
  else if (!again) why = "second launch differs";
  else if (!alone) why = "a row alone differs from the batch";
  else if (!zero) why = "counters not reset";
  const std::vector<float> yh = d.host_y();
  ctx.results.record("moe_down_combine_gpu", c.text(), compare(y1.data(), yh.data(), yh.size()), kStagedNmse,
                     y_same && out_same && again && alone && zero, why.c_str());
}

// Unsupported shapes (the staged launch would not take them, or not with one K walk) and bad
// arguments: gpuErrorInvalidValue, y untouched.
void check_refusals(Context& ctx) {
  struct Bad {
    const char* what;
    DownCombineCase c;
    void (*edit)(MoeDownCombineArgs&);
  };
  const Bad bads[] = {
      {"experts' rows of 224 inputs", {1, 64, 224, 256, 4, 2, false, false}, [](MoeDownCombineArgs&) {}},
      {"shared 1,024 vs experts 512 inputs", {1, 64, 512, 1024, 4, 2, false, false}, [](MoeDownCombineArgs&) {}},
      {"33 ranks", {1, 64, 256, 256, 40, 33, false, false}, [](MoeDownCombineArgs&) {}},
      {"norm without counters", {1, 64, 256, 256, 4, 2, false, true}, [](MoeDownCombineArgs& a) { a.norm_counters = nullptr; }},
      {"norm_out without norm_w", {1, 64, 256, 256, 4, 2, false, true}, [](MoeDownCombineArgs& a) { a.norm_w = nullptr; }},
      {"shared without its gate logit", {1, 64, 256, 256, 4, 2, false, false}, [](MoeDownCombineArgs& a) { a.shared_gate_logit = nullptr; }},
      {"misaligned activations", {1, 64, 256, 256, 4, 2, false, false}, [](MoeDownCombineArgs& a) { a.exp_g += 1; }},
  };
  for (const Bad& b : bads) {
    DownCombineData d(ctx, b.c);
    DeviceBuffer<float> y(d.y0), out(static_cast<size_t>(b.c.n));
    DeviceBuffer<unsigned> counters(std::vector<unsigned>(1, 0u));
    MoeDownCombineArgs a = d.args(y.get(), out.get(), counters.get(), 0, 1);
    b.edit(a);
    const bool refused = moe_down_combine_gpu(a, nullptr) == gpuErrorInvalidValue;
    CHECK_GPU(gpuDeviceSynchronize());
    const std::vector<float> after = y.download();
    const bool untouched = bitwise_equal(after.data(), d.y0.data(), d.y0.size());
    ctx.results.record_exact("moe_down_combine_gpu (refuses)", b.what, refused && untouched,
                             refused ? (untouched ? "refused, nothing written" : "refused but y written") : "not refused");
  }
}

}  // namespace

void run_moe_down_combine_tests(Context& ctx) {
  // No bf16 tensor cores: the staged matvec, and so the fused launch, never runs.
  if (matvec_math_on_device(MatvecMath::kStaged) != MatvecMath::kStaged) return;
  // {rows, n, exp_in, sh_in, E, k, accumulate, norm, out_pad}
  std::vector<DownCombineCase> cases = {
      {1, 2048, 512, 512, 256, 8, true, true},    // the 35B-A3B's layer at one row
      {3, 2048, 512, 512, 64, 8, true, true, 8},  // several rows, padded norm rows
      {2, 100, 1024, 2048, 6, 3, false, true},    // the wide K walk, several chunks, a partial tile
      {5, 37, 256, 768, 5, 1, true, false},       // one rank, outputs under one tile
      {2, 300, 768, 0, 7, 4, true, true},         // no shared expert
      {1, 2304, 256, 256, 4, 2, true, true},      // wider than the one-pass norm
  };
  if (!ctx.quick) {
    cases.push_back({9, 2048, 512, 512, 256, 8, true, true});
    cases.push_back({4, 1000, 3072, 1024, 3, 2, false, false});
    cases.push_back({2, 64, 256, 256, 40, 32, true, true});  // 32 ranks
  }
  for (const DownCombineCase& c : cases) check_down_combine(ctx, c);
  check_refusals(ctx);
}

}  // namespace deltaserve::kernels::gputest
