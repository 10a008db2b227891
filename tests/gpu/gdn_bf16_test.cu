// gdn_step_gpu with bf16 delta states (GdnStepArgs::delta_type kBf16):
// - against the CPU GDN chain (gdn_ref, gdn/gdn.h) started from the bf16-decoded state and
//   rounding its state to bf16 after every row (kernels/quant.h's BF16 encoder: nearest even):
//   outputs, final states (in place, to another entry, not written) and ring snapshots;
// - a verify step of R rows (ring snapshots) == the same rows run as R one-row steps from the
//   stored state, BITWISE: outputs, every snapshot (delta and conv) and the final state, so
//   greedy output with speculation on equals off;
// - a delta_type outside the enum: gpuErrorInvalidValue.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gdn/gdn.h"
#include "kernels/gdn/gdn_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr int64_t kMaxT = 4;

struct SeqPlan {
  int64_t rows;
  bool ring;
  int mode;  // 0: in place, 1: state_out = another entry, 2: state_out = -1
};

// One launch's inputs. Entries: s = sequence s's state, num_seqs + s = its alternate output
// entry, 2 num_seqs + s kMaxT + t = its ring entry for row t.
struct Problem {
  GdnShape sh;
  std::vector<SeqPlan> plan;
  std::vector<int32_t> begin{0}, state_in, state_out, ring_first;
  std::vector<float> qkv, alpha, b, conv_w, ssm_a, dt_bias, conv0;
  std::vector<uint16_t> delta0;  // the bf16 pool
  size_t delta_entry = 0, conv_entry = 0;
  int64_t num_seqs() const { return static_cast<int64_t>(plan.size()); }
  int64_t rows() const { return begin.back(); }
  GdnRefInputs inputs() const {
    return {sh, qkv.data(), alpha.data(), b.data(), conv_w.data(), ssm_a.data(), dt_bias.data()};
  }
};

Problem make_problem(Context& ctx, const GdnShape& sh, const std::vector<SeqPlan>& plan) {
  Problem p;
  p.sh = sh;
  p.plan = plan;
  const int64_t n = p.num_seqs(), dc = sh.dc();
  for (int64_t s = 0; s < n; ++s) {
    const SeqPlan& q = plan[static_cast<size_t>(s)];
    p.begin.push_back(p.begin.back() + static_cast<int32_t>(q.rows));
    p.state_in.push_back(static_cast<int32_t>(s));
    p.state_out.push_back(q.mode == 0 ? static_cast<int32_t>(s) : q.mode == 1 ? static_cast<int32_t>(n + s) : -1);
    p.ring_first.push_back(q.ring ? static_cast<int32_t>(2 * n + s * kMaxT) : -1);
  }
  const int64_t rows = p.rows(), entries = n * (2 + kMaxT);
  p.qkv = random_floats(ctx.rng, static_cast<size_t>(rows * dc));
  p.alpha = random_floats(ctx.rng, static_cast<size_t>(rows * sh.hv));
  p.b = random_floats(ctx.rng, p.alpha.size());
  p.conv_w = random_floats(ctx.rng, static_cast<size_t>(dc * kGdnConvKernel), 0.5f);
  p.ssm_a = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  for (float& a : p.ssm_a) a = -std::exp(a);
  p.dt_bias = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  p.delta_entry = static_cast<size_t>(sh.hv * sh.dk * sh.dv);
  p.conv_entry = static_cast<size_t>(kGdnConvHistory * dc);
  p.delta0 = to_bf16(random_floats(ctx.rng, p.delta_entry * static_cast<size_t>(entries), 0.5f));
  p.conv0 = random_floats(ctx.rng, p.conv_entry * static_cast<size_t>(entries));
  return p;
}

struct Device {
  DeviceBuffer<float> qkv, alpha, b, w, a, dt, conv, out;
  DeviceBuffer<uint16_t> delta;
  DeviceBuffer<int32_t> begin, in, outs, ring, sync;
  explicit Device(const Problem& p)
      : qkv(p.qkv), alpha(p.alpha), b(p.b), w(p.conv_w), a(p.ssm_a), dt(p.dt_bias), conv(p.conv0),
        out(static_cast<size_t>(p.rows() * p.sh.hv * p.sh.dv)), delta(p.delta0), begin(p.begin), in(p.state_in),
        outs(p.state_out), ring(p.ring_first),
        sync(std::vector<int32_t>(static_cast<size_t>(p.num_seqs() * p.sh.hk), 0)) {}
  GdnStepArgs args(const Problem& p) const {
    const GdnShape& sh = p.sh;
    GdnStepArgs g{qkv.get(), sh.dc(), alpha.get(), b.get(), sh.hv, w.get(), a.get(), dt.get(), out.get(), sh.hv * sh.dv,
                  begin.get(), p.num_seqs(), delta.get(), conv.get(), in.get(), outs.get(), ring.get(), sync.get(),
                  sh.hk, sh.hv, sh.dk, sh.dv, kGdnConvKernel, 1e-6f};
    g.delta_type = StateType::kBf16;
    return g;
  }
};

std::string shape_text(const GdnShape& sh, const std::vector<SeqPlan>& plan) {
  std::string s = "Hk=" + std::to_string(sh.hk) + " Hv=" + std::to_string(sh.hv) + " dk=" + std::to_string(sh.dk) +
                  " dv=" + std::to_string(sh.dv) + " T=";
  for (const SeqPlan& q : plan) s += std::to_string(q.rows) + (q.ring ? "r" : "") + ",";
  return s;
}

// Outputs to the f32 chain's tolerance: they read the unrounded state of their row, so they
// differ from the reference only where an f32 rounding difference flips a bf16 rounding of
// the state (rare, one bf16 ulp: NMSE far below 1e-7). States: one bf16 rounding's scale.
void check_against_reference(Context& ctx, const GdnShape& sh, const std::vector<SeqPlan>& plan) {
  const Problem p = make_problem(ctx, sh, plan);
  const GdnRefPools ref = gdn_ref(p.inputs(), p.begin, p.state_in, p.state_out, p.ring_first,
                                  from_bf16(p.delta0), p.conv0, GdnRefDeltaState::kBf16AfterEachRow);
  Device d(p);
  d.out.poison();
  CHECK_GPU(gdn_step_gpu(d.args(p), nullptr));
  const std::vector<float> out = d.out.download(), delta = from_bf16(d.delta.download()), conv = d.conv.download();
  bool counters_zero = true;
  for (int32_t c : d.sync.download()) counters_zero = counters_zero && c == 0;
  const std::string shape = shape_text(sh, plan);
  ctx.results.record("gdn_step_gpu(bf16 out)", shape, compare(out.data(), ref.out.data(), out.size()), 1e-7, counters_zero,
                     counters_zero ? "" : "sync counters left non-zero");
  ctx.results.record("gdn_step_gpu(bf16 state)", shape, compare(delta.data(), ref.delta.data(), delta.size()), 1e-5);
  ctx.results.record("gdn_step_gpu(bf16 conv)", shape, compare(conv.data(), ref.conv.data(), conv.size()), 0.0);
}

bool same_bits(const uint16_t* a, const uint16_t* b, size_t n) { return std::memcmp(a, b, n * sizeof(uint16_t)) == 0; }

// Every sequence verifies its rows in one batched launch (ring snapshots, final state to its
// alternate entry); then from the same initial pools each sequence runs its rows one launch
// per row, in place, with no ring. Row t's output, snapshot t (delta and conv) and the final
// state must equal the one-row steps' bits.
void check_verify_equals_steps(Context& ctx, const GdnShape& sh, const std::vector<int64_t>& lengths,
                               GdnStateHome home = GdnStateHome::kAuto) {
  std::vector<SeqPlan> plan;
  for (int64_t t : lengths) plan.push_back({t, true, 1});
  const Problem p = make_problem(ctx, sh, plan);
  const int64_t dv_all = sh.hv * sh.dv, n = p.num_seqs();
  const size_t de = p.delta_entry, ce = p.conv_entry;
  Device d(p);
  d.out.poison();
  GdnStepArgs verify = d.args(p);
  verify.state_home = home;
  CHECK_GPU(gdn_step_gpu(verify, nullptr));
  const std::vector<float> verify_out = d.out.download(), verify_conv = d.conv.download();
  const std::vector<uint16_t> verify_delta = d.delta.download();

  d.delta.upload(p.delta0);
  d.conv.upload(p.conv0);
  DeviceBuffer<float> step_out(verify_out.size());
  step_out.poison();
  DeviceBuffer<int32_t> one_row(std::vector<int32_t>{0, 1});
  std::string diff;
  for (int64_t s = 0; s < n && diff.empty(); ++s) {
    const int64_t r0 = p.begin[static_cast<size_t>(s)];
    GdnStepArgs a = d.args(p);
    a.seq_row_begin = one_row.get();
    a.num_seqs = 1;
    a.state_in = a.state_out = d.in.get() + s;  // entry s, in place
    a.ring_first = nullptr;
    for (int64_t t = 0; t < lengths[static_cast<size_t>(s)] && diff.empty(); ++t) {
      a.qkv = d.qkv.get() + (r0 + t) * sh.dc();
      a.alpha = d.alpha.get() + (r0 + t) * sh.hv;
      a.beta_logit = d.b.get() + (r0 + t) * sh.hv;
      a.out = step_out.get() + (r0 + t) * dv_all;
      CHECK_GPU(gdn_step_gpu(a, nullptr));
      const std::vector<uint16_t> delta = d.delta.download();
      const std::vector<float> conv = d.conv.download();
      const size_t ring = static_cast<size_t>(p.ring_first[static_cast<size_t>(s)] + t);
      const std::string at = "sequence " + std::to_string(s) + " row " + std::to_string(t) + ": ";
      if (!same_bits(verify_delta.data() + ring * de, delta.data() + static_cast<size_t>(s) * de, de))
        diff = at + "delta snapshot differs from the one-row step's state";
      else if (!bitwise_equal(verify_conv.data() + ring * ce, conv.data() + static_cast<size_t>(s) * ce, ce))
        diff = at + "conv snapshot differs from the one-row step's state";
    }
  }
  if (diff.empty()) {
    const std::vector<uint16_t> delta = d.delta.download();
    const std::vector<float> out = step_out.download();
    for (int64_t s = 0; s < n && diff.empty(); ++s) {
      if (!same_bits(verify_delta.data() + static_cast<size_t>(n + s) * de, delta.data() + static_cast<size_t>(s) * de, de))
        diff = "sequence " + std::to_string(s) + ": final state differs from the one-row steps'";
    }
    if (diff.empty() && !bitwise_equal(out.data(), verify_out.data(), out.size())) diff = "outputs differ";
  }
  const char* home_name = home == GdnStateHome::kRegisters ? " (registers)"
                          : home == GdnStateHome::kStaged  ? " (staged)"
                          : home == GdnStateHome::kShared  ? " (shared)"
                                                           : "";
  ctx.results.record_exact("gdn_step_gpu(bf16 verify)", shape_text(sh, plan) + home_name, diff.empty(),
                           diff.empty() ? "== one-row steps, bitwise (out, snapshots, final state)" : diff.c_str());
}

void check_bad_type(Context& ctx) {
  float dummy = 0.0f;
  int32_t counter = 0;
  GdnStepArgs a{};
  a.qkv = a.alpha = a.beta_logit = a.conv_w = a.ssm_a = a.dt_bias = &dummy;
  a.out = a.conv_states = &dummy;
  a.delta_states = &dummy;
  a.seq_row_begin = a.state_in = a.state_out = a.sync_counters = &counter;
  a.num_seqs = 1;
  a.num_k_heads = 1;
  a.num_v_heads = 1;
  a.head_dim_k = a.head_dim_v = 64;
  a.conv_kernel = kGdnConvKernel;
  a.delta_type = static_cast<StateType>(7);
  const gpuError_t err = gdn_step_gpu(a, nullptr);
  (void)gpuGetLastError();
  ctx.results.record_exact("gdn_step_gpu(bf16 pre)", "delta_type 7", err == gpuErrorInvalidValue,
                           err == gpuErrorInvalidValue ? "rejected" : "NOT rejected (expected gpuErrorInvalidValue)");
  a.delta_type = StateType::kBf16;
  a.state_home = static_cast<GdnStateHome>(9);
  const gpuError_t home_err = gdn_step_gpu(a, nullptr);
  (void)gpuGetLastError();
  ctx.results.record_exact("gdn_step_gpu(pre)", "state_home 9", home_err == gpuErrorInvalidValue,
                           home_err == gpuErrorInvalidValue ? "rejected" : "NOT rejected (expected gpuErrorInvalidValue)");
}

}  // namespace

void run_gdn_bf16_tests(Context& ctx) {
  check_bad_type(ctx);
  const std::vector<SeqPlan> mixed{{1, false, 0}, {4, true, 0}, {2, true, 2}, {3, false, 1}, {1, false, 0}};
  check_against_reference(ctx, {2, 2, 64, 64}, mixed);
  check_against_reference(ctx, {2, 4, 128, 128}, mixed);
  check_against_reference(ctx, {1, 3, 128, 96}, mixed);
  check_verify_equals_steps(ctx, {2, 2, 64, 64}, {4, 1, 3});
  check_verify_equals_steps(ctx, {2, 4, 128, 128}, {4, 2, 1, 4});
  check_verify_equals_steps(ctx, {1, 3, 128, 96}, {3, 4});
  // Each state home's verify launch against the (auto) one-row steps: bf16's rounding after
  // every row holds wherever the state lives.
  for (const GdnStateHome home : {GdnStateHome::kRegisters, GdnStateHome::kStaged, GdnStateHome::kShared}) {
    check_verify_equals_steps(ctx, {2, 4, 128, 128}, {4, 2, 1, 4}, home);
    check_verify_equals_steps(ctx, {1, 3, 128, 96}, {3, 4}, home);
  }
  if (!ctx.quick) {
    check_against_reference(ctx, {16, 32, 128, 128}, mixed);
    check_verify_equals_steps(ctx, {16, 32, 128, 128}, {4, 3});
  }
}

}  // namespace deltaserve::kernels::gputest
