// gdn_prefill_gpu against the CPU GDN chain (gdn_ref, gdn/gdn.h, token by token) per sequence:
// outputs and final states of sequences of 0..1000 rows (chunk edges 63/64/65) in one launch,
// state entries in place / to another entry / not written, fast and slow decay, a prefill
// split over two calls, batch invariance (a sequence alone, bitwise outputs and state),
// poisoned outputs and workspace. bf16 delta states (delta_type kBf16): against the f32 run
// from the same (bf16-representable) initial states, and a prefill cut on a 64-row chunk edge
// into two calls == one call, bitwise (f32 and bf16). Resumed mid-chunk (first_position not a
// multiple of 64): against the recurrence, and the chunks follow absolute positions (a further
// cut on a multiple of 64 changes no bit). Every check runs with the chunk pass on the tensor
// cores (the default) and in f32 FMA.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gdn/gdn.h"
#include "kernels/gdn/gdn_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

// One problem: every sequence's inputs and the initial pools (entry s: sequence s's state;
// entry num_seqs + s: its alternate output entry).
struct Problem {
  GdnShape sh;
  std::vector<int32_t> begin{0}, state_in, state_out;
  std::vector<float> qkv, alpha, b, conv_w, ssm_a, dt_bias, delta0, conv0;
  size_t delta_entry = 0, conv_entry = 0;
  int64_t rows() const { return begin.back(); }
  GdnRefInputs inputs() const {
    return {sh, qkv.data(), alpha.data(), b.data(), conv_w.data(), ssm_a.data(), dt_bias.data()};
  }
};

Problem make_problem(Context& ctx, const GdnShape& sh, const std::vector<int64_t>& lengths, float decay_scale) {
  Problem p;
  p.sh = sh;
  const int64_t num_seqs = static_cast<int64_t>(lengths.size()), dc = sh.dc();
  for (int64_t s = 0; s < num_seqs; ++s) {
    p.begin.push_back(p.begin.back() + static_cast<int32_t>(lengths[static_cast<size_t>(s)]));
    p.state_in.push_back(static_cast<int32_t>(s));
    const int mode = static_cast<int>(s % 3);  // in place, another entry, not written
    p.state_out.push_back(mode == 0 ? static_cast<int32_t>(s) : mode == 1 ? static_cast<int32_t>(num_seqs + s) : -1);
  }
  const int64_t rows = p.rows();
  p.qkv = random_floats(ctx.rng, static_cast<size_t>(rows * dc));
  p.alpha = random_floats(ctx.rng, static_cast<size_t>(rows * sh.hv));
  p.b = random_floats(ctx.rng, p.alpha.size());
  p.conv_w = random_floats(ctx.rng, static_cast<size_t>(dc * kGdnConvKernel), 0.5f);
  p.ssm_a = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  for (float& a : p.ssm_a) a = -std::exp(a) * decay_scale;
  p.dt_bias = random_floats(ctx.rng, static_cast<size_t>(sh.hv), 0.5f);
  p.delta_entry = static_cast<size_t>(sh.hv * sh.dk * sh.dv);
  p.conv_entry = static_cast<size_t>(kGdnConvHistory * dc);
  p.delta0 = random_floats(ctx.rng, p.delta_entry * static_cast<size_t>(2 * num_seqs), 0.5f);
  p.conv0 = random_floats(ctx.rng, p.conv_entry * static_cast<size_t>(2 * num_seqs));
  return p;
}

// The chunk pass's form for the checks of the current pass (run_gdn_prefill_tests runs both).
bool tensor_form = true;

struct Device {
  DeviceBuffer<float> qkv, alpha, b, w, a, dt, delta, conv, out;
  DeviceBuffer<int32_t> begin, in, outs;
  explicit Device(const Problem& p)
      : qkv(p.qkv), alpha(p.alpha), b(p.b), w(p.conv_w), a(p.ssm_a), dt(p.dt_bias), delta(p.delta0), conv(p.conv0),
        out(static_cast<size_t>(p.rows() * p.sh.hv * p.sh.dv)), begin(p.begin), in(p.state_in), outs(p.state_out) {}
};

// Rows [row0, row0 + rows) of the problem as sequences [seq0, seq0 + seqs) (row0 = their first row).
// delta: the delta pool (null: d.delta, f32), of element type `type`.
// first_position: [seqs] on the device, or null (every sequence starts at position 0).
gpuError_t run_prefill(const Problem& p, Device& d, const int32_t* begin, int64_t seq0, int64_t seqs, int64_t row0,
                       int64_t rows, float* out, void* delta = nullptr, StateType type = StateType::kF32,
                       const int32_t* first_position = nullptr) {
  const GdnShape& sh = p.sh;
  const int64_t dc = sh.dc();
  GdnPrefillArgs a{d.qkv.get() + row0 * dc, dc, d.alpha.get() + row0 * sh.hv, d.b.get() + row0 * sh.hv, sh.hv, d.w.get(),
                   d.a.get(), d.dt.get(), out, sh.hv * sh.dv, begin, seqs, rows, d.delta.get(), d.conv.get(),
                   d.in.get() + seq0, d.outs.get() + seq0, nullptr, sh.hk, sh.hv, sh.dk, sh.dv, kGdnConvKernel, 1e-6f};
  if (delta != nullptr) a.delta_states = delta;
  a.delta_type = type;
  a.tensor_cores = tensor_form;
  a.first_position = first_position;
  DeviceBuffer<float> ws(static_cast<size_t>(gdn_prefill_workspace_floats(a)));
  ws.poison();
  a.workspace = ws.get();
  const gpuError_t err = gdn_prefill_gpu(a, nullptr);
  CHECK_GPU(gpuDeviceSynchronize());
  return err;
}

std::string shape_text(const GdnShape& sh, const std::vector<int64_t>& lengths, float decay_scale) {
  std::string s = "Hk=" + std::to_string(sh.hk) + " Hv=" + std::to_string(sh.hv) + " dk=" + std::to_string(sh.dk) +
                  " dv=" + std::to_string(sh.dv) + (tensor_form ? " tensor" : " fma") + (decay_scale < 1.0f ? " slow" : "") + " T=";
  for (int64_t t : lengths) s += std::to_string(t) + ",";
  return s;
}

void check_prefill(Context& ctx, const GdnShape& sh, const std::vector<int64_t>& lengths, float decay_scale) {
  const Problem p = make_problem(ctx, sh, lengths, decay_scale);
  const int64_t num_seqs = static_cast<int64_t>(lengths.size()), dv_all = sh.hv * sh.dv;
  const GdnRefPools ref = gdn_ref(p.inputs(), p.begin, p.state_in, p.state_out, {}, p.delta0, p.conv0);

  Device d(p);
  d.out.poison();
  const bool launched = run_prefill(p, d, d.begin.get(), 0, num_seqs, 0, p.rows(), d.out.get()) == gpuSuccess;
  const std::vector<float> out = d.out.download(), delta = d.delta.download(), conv = d.conv.download();

  // Batch invariance: each sequence alone from the initial pools; outputs and state bitwise.
  bool invariant = true;
  for (int64_t s = 0; s < num_seqs && launched; ++s) {
    const int64_t r0 = p.begin[static_cast<size_t>(s)], t = lengths[static_cast<size_t>(s)];
    d.delta.upload(p.delta0);
    d.conv.upload(p.conv0);
    DeviceBuffer<float> one(static_cast<size_t>(t * dv_all));
    one.poison();
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, static_cast<int32_t>(t)});
    invariant = invariant && run_prefill(p, d, b1.get(), s, 1, r0, t, one.get()) == gpuSuccess;
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), out.data() + r0 * dv_all, alone.size());
    const int32_t e = p.state_out[static_cast<size_t>(s)];
    if (e >= 0) {
      const std::vector<float> state = d.delta.download();
      const size_t at = p.delta_entry * static_cast<size_t>(e);
      invariant = invariant && bitwise_equal(state.data() + at, delta.data() + at, p.delta_entry);
    }
  }
  const std::string shape = shape_text(sh, lengths, decay_scale);
  ctx.results.record("gdn_prefill_gpu(out)", shape, compare(out.data(), ref.out.data(), out.size()), 1e-8,
                     launched && invariant, !launched ? "launch refused" : invariant ? "batch-invariant" : "NOT batch-invariant");
  ctx.results.record("gdn_prefill_gpu(state)", shape, compare(delta.data(), ref.delta.data(), delta.size()), 1e-8, launched);
  ctx.results.record("gdn_prefill_gpu(conv)", shape, compare(conv.data(), ref.conv.data(), conv.size()), 0.0, launched);
}

// One sequence prefilled in two calls (rows [0, split) then the rest, state in place) against
// the token recurrence over all rows.
void check_split(Context& ctx, const GdnShape& sh, int64_t rows, int64_t split) {
  Problem p = make_problem(ctx, sh, {rows}, 1.0f);
  const int64_t dv_all = sh.hv * sh.dv;
  std::vector<float> ref_delta = p.delta0, ref_conv = p.conv0, ref_out(static_cast<size_t>(rows * dv_all));
  gdn_rows_ref(p.inputs(), 0, rows, ref_conv.data(), ref_delta.data(), ref_out.data());
  Device d(p);
  d.out.poison();
  DeviceBuffer<int32_t> first(std::vector<int32_t>{0, static_cast<int32_t>(split)});
  DeviceBuffer<int32_t> second(std::vector<int32_t>{0, static_cast<int32_t>(rows - split)});
  bool launched = run_prefill(p, d, first.get(), 0, 1, 0, split, d.out.get()) == gpuSuccess;
  launched = launched && run_prefill(p, d, second.get(), 0, 1, split, rows - split, d.out.get() + split * dv_all) == gpuSuccess;
  const std::vector<float> out = d.out.download(), delta = d.delta.download(), conv = d.conv.download();
  const std::string shape = shape_text(sh, {split, rows - split}, 1.0f) + " (2 calls)";
  ctx.results.record("gdn_prefill_gpu(out)", shape, compare(out.data(), ref_out.data(), out.size()), 1e-8, launched);
  ctx.results.record("gdn_prefill_gpu(state)", shape, compare(delta.data(), ref_delta.data(), delta.size()), 1e-8, launched);
  ctx.results.record("gdn_prefill_gpu(conv)", shape, compare(conv.data(), ref_conv.data(), conv.size()), 0.0, launched);
}

// bf16 pools against f32 pools from the same initial states (rounded to bf16 first): the bf16
// run rounds its state after every 64-row chunk, so outputs and final states differ by a few
// bf16 roundings (NMSE ~1e-6 each; tolerance 5e-5). Batch-invariant like the f32 kernel.
void check_bf16_vs_f32(Context& ctx, const GdnShape& sh, const std::vector<int64_t>& lengths, float decay_scale) {
  Problem p = make_problem(ctx, sh, lengths, decay_scale);
  p.delta0 = from_bf16(to_bf16(p.delta0));
  const int64_t num_seqs = static_cast<int64_t>(lengths.size()), rows = p.rows(), dv_all = sh.hv * sh.dv;
  Device d32(p), d16(p);
  d32.out.poison();
  d16.out.poison();
  DeviceBuffer<uint16_t> pool16(to_bf16(p.delta0));
  bool launched = run_prefill(p, d32, d32.begin.get(), 0, num_seqs, 0, rows, d32.out.get()) == gpuSuccess;
  launched = launched && run_prefill(p, d16, d16.begin.get(), 0, num_seqs, 0, rows, d16.out.get(), pool16.get(),
                                     StateType::kBf16) == gpuSuccess;
  const std::vector<float> out32 = d32.out.download(), delta32 = d32.delta.download();
  const std::vector<float> out16 = d16.out.download(), delta16 = from_bf16(pool16.download());
  const std::vector<float> conv32 = d32.conv.download(), conv16 = d16.conv.download();

  bool invariant = true;  // each sequence alone: outputs and state bits
  const std::vector<uint16_t> bits16 = pool16.download();
  for (int64_t s = 0; s < num_seqs && launched; ++s) {
    const int64_t r0 = p.begin[static_cast<size_t>(s)], t = lengths[static_cast<size_t>(s)];
    pool16.upload(to_bf16(p.delta0));
    d16.conv.upload(p.conv0);
    DeviceBuffer<float> one(static_cast<size_t>(t * dv_all));
    one.poison();
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, static_cast<int32_t>(t)});
    invariant = invariant && run_prefill(p, d16, b1.get(), s, 1, r0, t, one.get(), pool16.get(), StateType::kBf16) == gpuSuccess;
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), out16.data() + r0 * dv_all, alone.size());
    const int32_t e = p.state_out[static_cast<size_t>(s)];
    if (e < 0) continue;
    const std::vector<uint16_t> state = pool16.download();
    const size_t at = p.delta_entry * static_cast<size_t>(e);
    invariant = invariant && std::memcmp(state.data() + at, bits16.data() + at, p.delta_entry * sizeof(uint16_t)) == 0;
  }
  const std::string shape = shape_text(sh, lengths, decay_scale);
  ctx.results.record("gdn_prefill_gpu(bf16 out)", shape, compare(out16.data(), out32.data(), out16.size()), 5e-5,
                     launched && invariant, !launched ? "launch refused" : invariant ? "batch-invariant" : "NOT batch-invariant");
  ctx.results.record("gdn_prefill_gpu(bf16 state)", shape, compare(delta16.data(), delta32.data(), delta16.size()), 5e-5,
                     launched);
  ctx.results.record("gdn_prefill_gpu(bf16 conv)", shape, compare(conv16.data(), conv32.data(), conv16.size()), 0.0, launched);
}

// One sequence in one call, then in two calls cut at `split` (a multiple of 64, state in
// place): outputs and final delta state bitwise equal, in f32 and in bf16 (whose chunk-end
// rounding is where the call boundary rounds).
void check_chunk_edge_split(Context& ctx, const GdnShape& sh, int64_t rows, int64_t split, StateType type) {
  Problem p = make_problem(ctx, sh, {rows}, 1.0f);
  p.delta0 = from_bf16(to_bf16(p.delta0));
  const bool bf16 = type == StateType::kBf16;
  const int64_t dv_all = sh.hv * sh.dv;
  std::vector<float> outs[2];
  std::vector<uint16_t> states[2];
  bool launched = true;
  for (int calls = 1; calls <= 2; ++calls) {
    Device d(p);
    d.out.poison();
    DeviceBuffer<uint16_t> pool16(to_bf16(p.delta0));
    void* pool = bf16 ? static_cast<void*>(pool16.get()) : static_cast<void*>(d.delta.get());
    const int64_t first = calls == 1 ? rows : split;
    DeviceBuffer<int32_t> b0(std::vector<int32_t>{0, static_cast<int32_t>(first)});
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, static_cast<int32_t>(rows - first)});
    launched = launched && run_prefill(p, d, b0.get(), 0, 1, 0, first, d.out.get(), pool, type) == gpuSuccess;
    if (calls == 2)
      launched = launched && run_prefill(p, d, b1.get(), 0, 1, first, rows - first, d.out.get() + first * dv_all, pool,
                                         type) == gpuSuccess;
    outs[calls - 1] = d.out.download();
    if (bf16) {
      states[calls - 1] = pool16.download();
    } else {
      const std::vector<float> f = d.delta.download();
      states[calls - 1].resize(f.size() * 2);
      std::memcpy(states[calls - 1].data(), f.data(), f.size() * sizeof(float));
    }
  }
  const bool same = launched && bitwise_equal(outs[0].data(), outs[1].data(), outs[0].size()) && states[0] == states[1];
  const std::string shape = shape_text(sh, {split, rows - split}, 1.0f) + (bf16 ? " bf16" : " f32");
  ctx.results.record_exact("gdn_prefill_gpu(edge split)", shape, same,
                           !launched ? "launch refused" : same ? "== one call, bitwise" : "differs from one call");
}

// One sequence resumed at row `resume` (not a multiple of 64, as after a prefix-cache hit):
// rows [0, resume) in one call from position 0, the rest in one call from position `resume`,
// against the token recurrence over all rows; then the rest again as two calls cut at `cut` (a
// multiple of 64 past `resume`): outputs and final state bitwise equal to the single call,
// since both cut their chunks at the same absolute positions.
void check_resume(Context& ctx, const GdnShape& sh, int64_t rows, int64_t resume, int64_t cut) {
  Problem p = make_problem(ctx, sh, {rows}, 1.0f);
  const int64_t dv_all = sh.hv * sh.dv;
  std::vector<float> ref_delta = p.delta0, ref_conv = p.conv0, ref_out(static_cast<size_t>(rows * dv_all));
  gdn_rows_ref(p.inputs(), 0, rows, ref_conv.data(), ref_delta.data(), ref_out.data());
  std::vector<float> outs[2], states[2];
  bool launched = true;
  for (int pass = 0; pass < 2; ++pass) {
    Device d(p);
    d.out.poison();
    const int64_t ends[] = {resume, pass == 0 ? rows : cut, rows};
    int64_t row = 0;
    for (int64_t end : ends) {
      if (end <= row) continue;
      DeviceBuffer<int32_t> b(std::vector<int32_t>{0, static_cast<int32_t>(end - row)});
      DeviceBuffer<int32_t> first(std::vector<int32_t>{static_cast<int32_t>(row)});
      launched = launched && run_prefill(p, d, b.get(), 0, 1, row, end - row, d.out.get() + row * dv_all, nullptr,
                                         StateType::kF32, first.get()) == gpuSuccess;
      row = end;
    }
    outs[pass] = d.out.download();
    states[pass] = d.delta.download();
  }
  const std::string shape = shape_text(sh, {resume, rows - resume}, 1.0f) + " (resumed)";
  ctx.results.record("gdn_prefill_gpu(out)", shape, compare(outs[0].data(), ref_out.data(), outs[0].size()), 1e-8, launched);
  ctx.results.record("gdn_prefill_gpu(state)", shape, compare(states[0].data(), ref_delta.data(), states[0].size()), 1e-8,
                     launched);
  const bool same = launched && bitwise_equal(outs[0].data(), outs[1].data(), outs[0].size()) &&
                    bitwise_equal(states[0].data(), states[1].data(), states[0].size());
  ctx.results.record_exact("gdn_prefill_gpu(absolute chunks)", shape + " cut " + std::to_string(cut), same,
                           !launched ? "launch refused" : same ? "== uncut, bitwise" : "differs from the uncut call");
}

void run_gdn_prefill_pass(Context& ctx) {
  const GdnShape big{16, 32, 128, 128};  // Qwen3.6-35B-A3B
  check_prefill(ctx, {2, 4, 64, 64}, {1, 63, 64, 65, 200, 0, 7}, 1.0f);
  check_prefill(ctx, {1, 3, 128, 96}, {129, 2, 64}, 1.0f);
  check_prefill(ctx, {2, 6, 64, 32}, {300, 5}, 0.02f);
  check_split(ctx, {2, 4, 128, 128}, 200, 70);
  check_bf16_vs_f32(ctx, {2, 4, 64, 64}, {1, 63, 64, 65, 200, 0, 7}, 1.0f);
  check_bf16_vs_f32(ctx, {1, 3, 128, 96}, {129, 2, 64}, 1.0f);
  check_bf16_vs_f32(ctx, {2, 6, 64, 32}, {300, 5}, 0.02f);
  for (StateType type : {StateType::kF32, StateType::kBf16}) check_chunk_edge_split(ctx, {2, 4, 128, 128}, 200, 128, type);
  check_resume(ctx, {2, 4, 64, 64}, 300, 100, 192);
  check_resume(ctx, {2, 4, 128, 128}, 200, 63, 128);
  if (ctx.quick) {
    check_prefill(ctx, big, {1, 65}, 1.0f);
    return;
  }
  check_prefill(ctx, big, {1, 63, 64, 65, 200, 1000}, 1.0f);
  check_prefill(ctx, big, {700, 3}, 0.02f);
  check_split(ctx, big, 1000, 512);
  check_bf16_vs_f32(ctx, big, {1, 65, 200}, 1.0f);
  check_chunk_edge_split(ctx, big, 1000, 512, StateType::kBf16);
  check_resume(ctx, big, 1000, 100, 512);
}

}  // namespace

void run_gdn_prefill_tests(Context& ctx) {
  for (bool tensor : {true, false}) {
    tensor_form = tensor;
    run_gdn_prefill_pass(ctx);
  }
}

}  // namespace deltaserve::kernels::gputest
