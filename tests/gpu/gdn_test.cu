// gdn_step_gpu against the CPU GDN chain (gdn_ref, gdn/gdn.h) per sequence: outputs, final states
// (in place, to another entry, or not written), per-row ring snapshots, batch invariance, the
// same bits in every state home (GdnStateHome). The
// fused gated norm (norm_w set) against gdn_step_gpu followed by gated_rms_norm_gpu: output,
// states and snapshots bitwise equal, counters left zero, batch-invariant. bf16 delta states:
// gdn_bf16_test.cu.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gdn/gdn.h"
#include "kernels/gdn/gdn_gpu.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr int64_t kMaxT = 4;

struct SeqPlan {
  int64_t rows;
  bool ring;
  int mode;  // 0: in place, 1: state_out = another entry, 2: state_out = -1
};

bool all_zero(const std::vector<int32_t>& v) {
  for (int32_t c : v) {
    if (c != 0) return false;
  }
  return true;
}

// First differing float as "what[i]: fused <bits> vs pair <bits>", or "" when equal.
std::string first_difference(const char* what, const std::vector<float>& fused, const std::vector<float>& pair) {
  for (size_t i = 0; i < fused.size(); ++i) {
    uint32_t f = 0, p = 0;
    std::memcpy(&f, &fused[i], 4);
    std::memcpy(&p, &pair[i], 4);
    if (f != p) {
      char text[160];
      std::snprintf(text, sizeof text, "%s[%zu]: fused %.9g (0x%08x) vs pair %.9g (0x%08x)", what, i, fused[i], f, pair[i], p);
      return text;
    }
  }
  return "";
}

// The fused gated norm: one launch with norm_w set == gdn_step_gpu then gated_rms_norm_gpu
// (in place over o, as the GPU GDN layer ran them), bitwise, from the same pools, with every
// output poisoned first, in every state home. Then each sequence alone (batch invariance of the fused output), and
// the fused output against the CPU chain's o through gated_rms_norm_ref (to f32 rounding).
void check_fused_norm(Context& ctx, const std::string& shape, const GdnStepArgs& base, const GdnShape& sh,
                      const std::vector<int32_t>& begin, const std::vector<float>& delta0, const std::vector<float>& conv0,
                      const std::vector<float>& ref_o, DeviceBuffer<float>& d_delta, DeviceBuffer<float>& d_conv,
                      DeviceBuffer<int32_t>& d_sync) {
  const int64_t rows = begin.back(), dv_all = sh.hv * sh.dv, num_seqs = base.num_seqs;
  const std::vector<float> z = random_floats(ctx.rng, static_cast<size_t>(rows * dv_all));
  const std::vector<float> w = random_floats(ctx.rng, static_cast<size_t>(sh.dv), 0.5f);
  DeviceBuffer<float> d_z(z), d_w(w), d_pair(static_cast<size_t>(rows * dv_all)), d_fused(d_pair.size());

  // The pair, as before the fusion.
  d_delta.upload(delta0);
  d_conv.upload(conv0);
  d_pair.poison();
  GdnStepArgs pair = base;
  pair.out = d_pair.get();
  CHECK_GPU(gdn_step_gpu(pair, nullptr));
  const GatedRmsNormArgs norm{d_pair.get(), d_z.get(), d_w.get(), d_pair.get(), rows * sh.hv, sh.dv, 1e-6f};
  CHECK_GPU(gated_rms_norm_gpu(norm, nullptr));
  const std::vector<float> pair_out = d_pair.download(), pair_delta = d_delta.download(), pair_conv = d_conv.download();

  GdnStepArgs fused = base;
  fused.out = d_fused.get();
  fused.norm_w = d_w.get();
  fused.z = d_z.get();
  fused.z_stride = dv_all;
  fused.norm_eps = 1e-6f;
  // Every state home, the auto choice last (its output is the one checked below).
  std::vector<float> out;
  bool counters_zero = true;
  std::string diff;
  for (const GdnStateHome home : {GdnStateHome::kRegisters, GdnStateHome::kStaged, GdnStateHome::kShared, GdnStateHome::kAuto}) {
    d_delta.upload(delta0);
    d_conv.upload(conv0);
    d_fused.poison();
    fused.state_home = home;
    CHECK_GPU(gdn_step_gpu(fused, nullptr));
    out = d_fused.download();
    counters_zero = counters_zero && all_zero(d_sync.download());
    const std::string name = home == GdnStateHome::kRegisters ? "registers: "
                             : home == GdnStateHome::kStaged  ? "staged: "
                             : home == GdnStateHome::kShared  ? "shared: "
                                                              : "";
    if (diff.empty()) diff = first_difference("out", out, pair_out);
    if (diff.empty()) diff = first_difference("delta pool", d_delta.download(), pair_delta);
    if (diff.empty()) diff = first_difference("conv pool", d_conv.download(), pair_conv);
    if (!diff.empty()) {
      diff = name + diff;
      break;
    }
  }
  fused.state_home = GdnStateHome::kAuto;

  // Each sequence alone from the same pools: the same output bits.
  for (int64_t s = 0; s < num_seqs && diff.empty(); ++s) {
    d_delta.upload(delta0);
    d_conv.upload(conv0);
    const int32_t r0 = begin[static_cast<size_t>(s)], t = begin[static_cast<size_t>(s) + 1] - r0;
    DeviceBuffer<float> one(static_cast<size_t>(t * dv_all));
    one.poison();
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, t});
    GdnStepArgs a1 = fused;
    a1.qkv += r0 * base.qkv_stride;
    a1.alpha += r0 * base.ab_stride;
    a1.beta_logit += r0 * base.ab_stride;
    a1.z += r0 * dv_all;
    a1.out = one.get();
    a1.seq_row_begin = b1.get();
    a1.num_seqs = 1;
    a1.state_in += s;
    a1.state_out += s;
    a1.ring_first += s;
    a1.sync_counters += s * sh.hk;
    CHECK_GPU(gdn_step_gpu(a1, nullptr));
    const std::vector<float> alone = one.download();
    if (!bitwise_equal(alone.data(), out.data() + r0 * dv_all, alone.size())) {
      diff = "sequence " + std::to_string(s) + " alone: output bits differ from the batched launch";
    }
  }
  if (diff.empty() && !all_zero(d_sync.download())) diff = "sync counters left non-zero (alone runs)";
  if (diff.empty() && !counters_zero) diff = "sync counters left non-zero";
  ctx.results.record_exact("gdn_step_gpu(fused norm)", shape, diff.empty(),
                           diff.empty() ? "== gdn_step + gated_rms_norm, bitwise" : diff.c_str());

  std::vector<float> ref = ref_o;
  gated_rms_norm_ref({ref.data(), z.data(), w.data(), ref.data(), rows * sh.hv, sh.dv, 1e-6f}, serial_for());
  ctx.results.record("gdn_step_gpu(fused, ref)", shape, compare(out.data(), ref.data(), out.size()), 1e-9);
}

void check_gdn(Context& ctx, const GdnShape& sh, const std::vector<SeqPlan>& plan) {
  const int64_t num_seqs = static_cast<int64_t>(plan.size());
  const int64_t dc = sh.dc(), dv_all = sh.hv * sh.dv;
  std::vector<int32_t> begin{0}, state_in, state_out, ring_first;
  const int64_t num_entries = num_seqs * (2 + kMaxT);  // main, alternate, ring entries per sequence
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqPlan& p = plan[static_cast<size_t>(s)];
    begin.push_back(begin.back() + static_cast<int32_t>(p.rows));
    state_in.push_back(static_cast<int32_t>(s));
    state_out.push_back(p.mode == 0 ? static_cast<int32_t>(s) : p.mode == 1 ? static_cast<int32_t>(num_seqs + s) : -1);
    ring_first.push_back(p.ring ? static_cast<int32_t>(2 * num_seqs + s * kMaxT) : -1);
  }
  const int64_t rows = begin.back();
  const std::vector<float> qkv = random_floats(ctx.rng, static_cast<size_t>(rows * dc));
  const std::vector<float> alpha = random_floats(ctx.rng, static_cast<size_t>(rows * sh.hv));
  const std::vector<float> b = random_floats(ctx.rng, alpha.size());
  const std::vector<float> conv_w = random_floats(ctx.rng, static_cast<size_t>(dc * kGdnConvKernel), 0.5f);
  std::vector<float> ssm_a = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  for (float& a : ssm_a) a = -std::exp(a);
  const std::vector<float> dt_bias = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  const size_t delta_entry = static_cast<size_t>(sh.hv * sh.dk * sh.dv), conv_entry = static_cast<size_t>(kGdnConvHistory * dc);
  const std::vector<float> delta0 = random_floats(ctx.rng, delta_entry * static_cast<size_t>(num_entries), 0.5f);
  const std::vector<float> conv0 = random_floats(ctx.rng, conv_entry * static_cast<size_t>(num_entries));

  const GdnRefInputs inputs{sh, qkv.data(), alpha.data(), b.data(), conv_w.data(), ssm_a.data(), dt_bias.data()};
  const GdnRefPools ref = gdn_ref(inputs, begin, state_in, state_out, ring_first, delta0, conv0);

  DeviceBuffer<float> d_qkv(qkv), d_alpha(alpha), d_b(b), d_w(conv_w), d_a(ssm_a), d_dt(dt_bias);
  DeviceBuffer<float> d_delta(delta0), d_conv(conv0), d_out(ref.out.size());
  DeviceBuffer<int32_t> d_begin(begin), d_in(state_in), d_outs(state_out), d_ring(ring_first);
  DeviceBuffer<int32_t> d_sync(std::vector<int32_t>(static_cast<size_t>(num_seqs * sh.hk), 0));
  d_out.poison();
  GdnStepArgs a{d_qkv.get(), dc, d_alpha.get(), d_b.get(), sh.hv, d_w.get(), d_a.get(), d_dt.get(), d_out.get(), dv_all,
                d_begin.get(), num_seqs, d_delta.get(), d_conv.get(), d_in.get(), d_outs.get(), d_ring.get(), d_sync.get(),
                sh.hk, sh.hv, sh.dk, sh.dv, kGdnConvKernel, 1e-6f};
  CHECK_GPU(gdn_step_gpu(a, nullptr));
  const std::vector<float> out = d_out.download(), delta = d_delta.download(), conv = d_conv.download();
  std::vector<int32_t> sync = d_sync.download();
  bool counters_zero = true;
  for (int32_t c : sync) counters_zero = counters_zero && c == 0;

  // Batch invariance: each sequence alone from the same initial pools, outputs bitwise equal.
  bool invariant = true;
  for (int64_t s = 0; s < num_seqs; ++s) {
    d_delta.upload(delta0);
    d_conv.upload(conv0);
    DeviceBuffer<float> one(static_cast<size_t>(plan[static_cast<size_t>(s)].rows * dv_all));
    one.poison();
    const int32_t r0 = begin[static_cast<size_t>(s)];
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, static_cast<int32_t>(plan[static_cast<size_t>(s)].rows)});
    GdnStepArgs a1 = a;
    a1.qkv = d_qkv.get() + r0 * dc;
    a1.alpha = d_alpha.get() + r0 * sh.hv;
    a1.beta_logit = d_b.get() + r0 * sh.hv;
    a1.out = one.get();
    a1.seq_row_begin = b1.get();
    a1.num_seqs = 1;
    a1.state_in = d_in.get() + s;
    a1.state_out = d_outs.get() + s;
    a1.ring_first = d_ring.get() + s;
    a1.sync_counters = d_sync.get() + s * sh.hk;
    CHECK_GPU(gdn_step_gpu(a1, nullptr));
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), out.data() + r0 * dv_all, alone.size());
  }

  std::string shape = "Hk=" + std::to_string(sh.hk) + " Hv=" + std::to_string(sh.hv) + " dk=" + std::to_string(sh.dk) +
                      " dv=" + std::to_string(sh.dv) + " T=";
  for (const SeqPlan& p : plan) shape += std::to_string(p.rows) + (p.ring ? "r" : "") + ",";

  // Every state home (registers, staged, shared memory) from the same initial pools: the auto
  // launch's bits (outputs, final states, ring snapshots, conv pools).
  std::string home_diff;
  for (const GdnStateHome home : {GdnStateHome::kRegisters, GdnStateHome::kStaged, GdnStateHome::kShared}) {
    if (!home_diff.empty()) break;
    d_delta.upload(delta0);
    d_conv.upload(conv0);
    d_out.poison();
    GdnStepArgs ah = a;
    ah.state_home = home;
    CHECK_GPU(gdn_step_gpu(ah, nullptr));
    const char* name = home == GdnStateHome::kRegisters ? "registers" : home == GdnStateHome::kStaged ? "staged" : "shared";
    std::string d = first_difference("out", d_out.download(), out);
    if (d.empty()) d = first_difference("delta pool", d_delta.download(), delta);
    if (d.empty()) d = first_difference("conv pool", d_conv.download(), conv);
    if (d.empty() && !all_zero(d_sync.download())) d = "sync counters left non-zero";
    if (!d.empty()) home_diff = std::string(name) + ": " + d;
  }
  ctx.results.record_exact("gdn_step_gpu(state homes)", shape, home_diff.empty(),
                           home_diff.empty() ? "registers == staged == shared memory, bitwise" : home_diff.c_str());
  ctx.results.record("gdn_step_gpu(out)", shape, compare(out.data(), ref.out.data(), out.size()), 1e-9, invariant && counters_zero,
                     invariant ? (counters_zero ? "batch-invariant" : "sync counters left non-zero") : "NOT batch-invariant");
  ctx.results.record("gdn_step_gpu(state)", shape, compare(delta.data(), ref.delta.data(), delta.size()), 1e-10);
  ctx.results.record("gdn_step_gpu(conv)", shape, compare(conv.data(), ref.conv.data(), conv.size()), 0.0);
  check_fused_norm(ctx, shape, a, sh, begin, delta0, conv0, ref.out, d_delta, d_conv, d_sync);
}

// The fused norm's preconditions: gpuErrorInvalidValue, nothing launched (the pointers are
// never dereferenced).
void check_fused_norm_preconditions(Context& ctx) {
  float dummy = 0.0f;
  int32_t counter = 0;
  GdnStepArgs a{};
  a.qkv = a.alpha = a.beta_logit = a.conv_w = a.ssm_a = a.dt_bias = &dummy;
  a.out = a.conv_states = &dummy;
  a.delta_states = &dummy;
  a.seq_row_begin = a.state_in = a.state_out = &counter;
  a.sync_counters = &counter;
  a.num_seqs = 1;
  a.num_k_heads = 1;
  a.num_v_heads = 2;
  a.head_dim_k = 128;
  a.head_dim_v = 128;
  a.conv_kernel = kGdnConvKernel;
  a.norm_w = &dummy;
  a.z = &dummy;
  struct Case {
    const char* what;
    GdnStepArgs args;
  };
  std::vector<Case> cases(3, Case{"", a});
  cases[0].what = "z null";
  cases[0].args.z = nullptr;
  cases[1].what = "dv 256";
  cases[1].args.head_dim_v = 256;
  cases[2].what = "Hv/Hk 8";
  cases[2].args.num_v_heads = 8;
  for (const Case& c : cases) {
    const gpuError_t err = gdn_step_gpu(c.args, nullptr);
    (void)gpuGetLastError();
    ctx.results.record_exact("gdn_step_gpu(fused pre)", c.what, err == gpuErrorInvalidValue,
                             err == gpuErrorInvalidValue ? "rejected" : "NOT rejected (expected gpuErrorInvalidValue)");
  }
}

}  // namespace

void run_gdn_tests(Context& ctx) {
  check_fused_norm_preconditions(ctx);
  const std::vector<SeqPlan> mixed{{1, false, 0}, {4, true, 0}, {2, true, 2}, {3, false, 1}, {1, false, 0}};
  const std::vector<SeqPlan> decode{{1, false, 0}, {1, false, 0}, {1, false, 1}};
  check_gdn(ctx, {2, 2, 64, 64}, mixed);
  check_gdn(ctx, {2, 4, 128, 128}, mixed);
  check_gdn(ctx, {2, 6, 64, 32}, decode);
  check_gdn(ctx, {1, 3, 128, 96}, mixed);
  check_gdn(ctx, {1, 7, 64, 64}, mixed);  // the fused norm's widest counter (7 value heads per key head)
  // More sequences than gdn.cu stages the state for (kStaged: launches of few sequences), so the
  // two load paths meet: each sequence alone (staged) must equal its row of this launch.
  std::vector<SeqPlan> many;
  for (size_t i = 0; i < 13; ++i) many.push_back(mixed[i % mixed.size()]);
  check_gdn(ctx, {2, 4, 128, 128}, many);
  if (!ctx.quick) {
    check_gdn(ctx, {16, 32, 128, 128}, mixed);
    check_gdn(ctx, {16, 32, 128, 128}, decode);
  }
  run_gdn_bf16_tests(ctx);  // gdn_bf16_test.cu: the same kernel with bf16 delta states
}

}  // namespace deltaserve::kernels::gputest
