// --bench: per-kernel times at the Qwen3.6-35B-A3B decode shapes (MODEL.md 1.3) at batch 1
// (and a few verify / many-sequence points), with achieved bandwidth over the bytes each
// launch must move. Each point: 10 batches of 20 back-to-back launches between two events;
// the median batch / 20 is reported (so inter-kernel gaps are included, as in a real step
// without graphs). Weight-sized inputs rotate over enough copies to exceed the 60 MB L2.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_gpu.h"
#include "kernels/dtype.h"
#include "kernels/gdn/gdn_gpu.h"
#include "kernels/matmul/matmul_experts_prefill_gpu.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/sampling/sampling_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr int kBatches = 10, kLaunches = 20;
constexpr size_t kRotateBytes = size_t{256} << 20;

// fn(i) enqueues launch i; returns microseconds per launch (median batch).
double time_us(const std::function<void(int)>& fn) {
  gpuEvent_t start, stop;
  CHECK_GPU(gpuEventCreate(&start));
  CHECK_GPU(gpuEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<double> times;
  int next = 0;
  for (int b = 0; b < kBatches; ++b) {
    CHECK_GPU(gpuEventRecord(start, nullptr));
    for (int i = 0; i < kLaunches; ++i) fn(next++);
    CHECK_GPU(gpuEventRecord(stop, nullptr));
    CHECK_GPU(gpuEventSynchronize(stop));
    float ms = 0.0f;
    CHECK_GPU(gpuEventElapsedTime(&ms, start, stop));
    times.push_back(1000.0 * ms / kLaunches);
  }
  CHECK_GPU(gpuGetLastError());
  CHECK_GPU(gpuEventDestroy(start));
  CHECK_GPU(gpuEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void report(const std::string& kernel, const std::string& shape, double us, double bytes) {
  std::printf("| %-22s | %-44s | %8.2f | %8.0f |\n", kernel.c_str(), shape.c_str(), us, bytes / (us * 1e3));
}

// The MoE router at 35B-A3B shapes (F32 256 x 2048 + the shared gate row, top 8): the fused
// moe_router_gpu against the two launches it replaces (router + shared gate segments, then
// moe_route_gpu), weights rotating past the L2.
void bench_moe_router(int64_t rows) {
  const int64_t h = 2048, e = 256, k = 8;
  const size_t w_bytes = static_cast<size_t>(e + 1) * h * sizeof(float);
  const int copies = static_cast<int>(kRotateBytes / w_bytes + 1);
  std::vector<DeviceBuffer<float>> ws;
  for (int c = 0; c < copies; ++c) {
    ws.emplace_back(static_cast<size_t>((e + 1) * h));
    CHECK_GPU(gpuMemset(ws.back().get(), 0, w_bytes));
  }
  DeviceBuffer<float> x(static_cast<size_t>(rows * h)), logits(static_cast<size_t>(rows * e)), sh(static_cast<size_t>(rows));
  DeviceBuffer<float> wts(static_cast<size_t>(rows * k));
  DeviceBuffer<int32_t> ids(static_cast<size_t>(rows * k)), counters(std::vector<int32_t>(static_cast<size_t>(rows), 0));
  CHECK_GPU(gpuMemset(x.get(), 0, x.size() * sizeof(float)));
  const std::string shape = "rows=" + std::to_string(rows) + " 257x2048 F32 k=8";
  const double fused = time_us([&](int i) {
    const float* w = ws[static_cast<size_t>(i % copies)].get();
    MoeRouterArgs a{x.get(), h, rows, h, w, static_cast<size_t>(h) * 4, w + e * h, e, k,
                    logits.get(), sh.get(), ids.get(), wts.get(), counters.get()};
    CHECK_GPU(moe_router_gpu(a, nullptr));
  });
  report("moe_router_gpu", shape, fused, static_cast<double>(w_bytes));
  const double unfused = time_us([&](int i) {
    const float* w = ws[static_cast<size_t>(i % copies)].get();
    MatmulSegment segs[2]{};
    segs[0].args = MatmulArgs{w, DType::F32, h, e, static_cast<size_t>(h) * 4, x.get(), rows, h, logits.get(), e};
    segs[1].args = MatmulArgs{w + e * h, DType::F32, h, 1, static_cast<size_t>(h) * 4, x.get(), rows, h, sh.get(), 1};
    CHECK_GPU(matmul_segments_gpu(segs, 2, MatvecContext{}, nullptr));
    CHECK_GPU(moe_route_gpu({logits.get(), rows, e, k, ids.get(), wts.get()}, nullptr));
  });
  report("segments + moe_route", shape, unfused, static_cast<double>(w_bytes));
}

// The MoE combine at 35B-A3B decode (top 8, shared expert, H 2048, the residual add) with the
// next layer's input norm as its epilogue, against combine then rms_norm_gpu.
void bench_moe_combine_norm(int64_t rows) {
  const int64_t n = 2048, k = 8;
  DeviceBuffer<float> eo(static_cast<size_t>(rows * k * n)), wt(static_cast<size_t>(rows * k)), sh(static_cast<size_t>(rows * n));
  DeviceBuffer<float> sg(static_cast<size_t>(rows)), y(static_cast<size_t>(rows * n)), nw(static_cast<size_t>(n)),
      out(static_cast<size_t>(rows * n));
  for (DeviceBuffer<float>* b : {&eo, &wt, &sh, &sg, &y, &nw}) CHECK_GPU(gpuMemset(b->get(), 0, b->size() * sizeof(float)));
  MoeCombineArgs a{eo.get(), wt.get(), sh.get(), sg.get(), y.get(), rows, k, n};
  a.accumulate = true;
  const std::string shape = "rows=" + std::to_string(rows) + " k=8 n=2048 +shared";
  const double bytes = 4.0 * (rows * k * n + 4 * rows * n + n);
  const double unfused = time_us([&](int) {
    CHECK_GPU(moe_combine_gpu(a, nullptr));
    CHECK_GPU(rms_norm_gpu({y.get(), n, nw.get(), out.get(), n, rows, n, 1e-6f}, nullptr));
  });
  report("combine + rms_norm", shape, unfused, bytes);
  MoeCombineArgs fused = a;
  fused.norm_w = nw.get();
  fused.norm_eps = 1e-6f;
  fused.norm_out = out.get();
  fused.norm_out_stride = n;
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(rows), 0u));
  fused.norm_counters = counters.get();
  const double us = time_us([&](int) { CHECK_GPU(moe_combine_gpu(fused, nullptr)); });
  report("moe_combine_gpu +norm", shape, us, bytes);
}

// Random bytes are fine for timing quantised weights except NaN scales; fill with a small
// pattern whose f16 scales are finite (0x3C00 = 1.0 around bytes 0x00/0x3C).
void fill_weights(DeviceBuffer<uint8_t>& w) { CHECK_GPU(gpuMemset(w.get(), 0x3C, w.size())); }

void bench_matmul(DType type, int64_t in, int64_t out, int64_t rows, const char* what, MatvecMath math = MatvecMath::kCudaCores) {
  const size_t bytes = dtype_row_bytes(type, in) * static_cast<size_t>(out);
  const int copies = static_cast<int>(std::max<size_t>(1, kRotateBytes / bytes + 1));
  std::vector<DeviceBuffer<uint8_t>> ws;
  for (int c = 0; c < copies; ++c) ws.emplace_back(bytes), fill_weights(ws.back());
  DeviceBuffer<float> x(static_cast<size_t>(rows * in)), y(static_cast<size_t>(rows * out));
  CHECK_GPU(gpuMemset(x.get(), 0, x.size() * sizeof(float)));
  const double us = time_us([&](int i) {
    MatmulArgs a{ws[static_cast<size_t>(i % copies)].get(), type, in, out, dtype_row_bytes(type, in), x.get(), rows, in, y.get(), out};
    CHECK_GPU(matmul_gpu(a, MatvecContext{math}, nullptr));
  });
  const char* label = math == MatvecMath::kTensorCores ? " (tensor cores)"
                      : math == MatvecMath::kStaged    ? " (staged)"
                                                        : "";
  report("matmul_gpu " + std::string(dtype_name(type)) + label, std::string(what) + " " + std::to_string(out) + "x" + std::to_string(in) +
                                                            " rows=" + std::to_string(rows),
         us, static_cast<double>(bytes) + 4.0 * rows * (in + out));
}

// "<kernel>_gpu ", "<kernel>_tf32 " or "<kernel>_exact " by the tile's math.
std::string math_label(MatmulMath math, const char* kernel) {
  return std::string(kernel) + (math == MatmulMath::kTf32 ? "_tf32 " : math == MatmulMath::kTensorExact ? "_exact " : "_gpu ");
}

// Prefill: rows x out x in multiply-adds; GB/s column shows TFLOP/s x 1000 here (2 flops each).
void bench_prefill(DType type, int64_t in, int64_t out, int64_t rows, const char* what, MatmulMath math = MatmulMath::kF32) {
  const size_t bytes = dtype_row_bytes(type, in) * static_cast<size_t>(out);
  DeviceBuffer<uint8_t> w(bytes);
  fill_weights(w);
  DeviceBuffer<float> x(static_cast<size_t>(rows * in)), y(static_cast<size_t>(rows * out));
  CHECK_GPU(gpuMemset(x.get(), 0, x.size() * sizeof(float)));
  const double us = time_us([&](int) {
    MatmulArgs a{w.get(), type, in, out, dtype_row_bytes(type, in), x.get(), rows, in, y.get(), out};
    CHECK_GPU(matmul_prefill_gpu(a, nullptr, math));
  });
  report(std::string(math_label(math, "matmul_prefill")) + std::string(dtype_name(type)),
         std::string(what) + " " + std::to_string(out) + "x" + std::to_string(in) + " rows=" + std::to_string(rows) + " (GFLOP/s)",
         us, 2.0 * static_cast<double>(rows) * static_cast<double>(out) * static_cast<double>(in));
}

void bench_experts(DType type, int64_t in, int64_t out, int64_t experts, int64_t k, const char* what) {
  const size_t row_bytes = dtype_row_bytes(type, in);
  DeviceBuffer<uint8_t> w(row_bytes * static_cast<size_t>(out * experts));
  fill_weights(w);
  DeviceBuffer<float> x(static_cast<size_t>(k * in)), y(static_cast<size_t>(k * out));
  CHECK_GPU(gpuMemset(x.get(), 0, x.size() * sizeof(float)));
  // A different set of k experts every launch (the weights of one set are ~2 MB at Q4_0).
  std::vector<int32_t> ids(static_cast<size_t>(k * 64));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % static_cast<size_t>(experts));
  DeviceBuffer<int32_t> dids(ids);
  const double us = time_us([&](int i) {
    MatmulExpertsArgs a{MatmulArgs{w.get(), type, in, out, row_bytes, x.get(), 0, in, y.get(), out}, dids.get() + (i % 64) * k, k,
                        std::string(what) == "down" ? 1 : k};
    CHECK_GPU(matmul_experts_gpu(a, MatvecContext{}, nullptr));
  });
  report("matmul_experts_gpu " + std::string(dtype_name(type)),
         std::string(what) + " k=" + std::to_string(k) + " x " + std::to_string(out) + "x" + std::to_string(in), us,
         static_cast<double>(row_bytes * static_cast<size_t>(out * k)));
}

// MoE prefill: 512 rows x top-8 = 4096 pairs over 256 experts (random routing, fixed seed),
// matmul_experts_prefill_gpu (grouped, tiled; plan included) vs matmul_experts_gpu (a matvec per
// pair) on the same pairs; gated = the fused gate*up form of both. GFLOP/s over the useful
// multiply-adds (2 x pairs x out x in, twice when gated).
void bench_experts_prefill(DType type, int64_t in, int64_t out, int64_t experts, int64_t rows, int64_t k, bool down, bool gated,
                           MatmulMath math = MatmulMath::kF32) {
  const size_t row_bytes = dtype_row_bytes(type, in);
  const size_t stack_bytes = row_bytes * static_cast<size_t>(out * experts);
  DeviceBuffer<uint8_t> w(stack_bytes), w_up(gated ? stack_bytes : 0);
  fill_weights(w);
  if (gated) fill_weights(w_up);
  const int64_t pairs = rows * k, per_x = down ? 1 : k;
  DeviceBuffer<float> x(static_cast<size_t>(pairs / per_x * in)), y(static_cast<size_t>(pairs * out));
  CHECK_GPU(gpuMemset(x.get(), 0, x.size() * sizeof(float)));
  std::mt19937 rng(7);
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  for (int64_t r = 0; r < rows; ++r) {  // k distinct experts per row
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = 0;
      bool dup = true;
      while (dup) {
        e = static_cast<int32_t>(rng() % static_cast<uint32_t>(experts));
        dup = std::find(ids.begin() + r * k, ids.begin() + r * k + j, e) != ids.begin() + r * k + j;
      }
      ids[static_cast<size_t>(r * k + j)] = e;
    }
  }
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<uint8_t> ws(matmul_experts_prefill_workspace_bytes(pairs, experts));
  const MatmulExpertsArgs ea{MatmulArgs{w.get(), type, in, out, row_bytes, x.get(), 0, in, y.get(), out}, dids.get(), pairs, per_x};
  const double us_grouped = time_us([&](int) {
    CHECK_GPU(
        matmul_experts_prefill_gpu(MatmulExpertsPrefillArgs{ea, experts, gated ? w_up.get() : nullptr, ws.get(), math}, nullptr));
  });
  const double flops = (gated ? 4.0 : 2.0) * static_cast<double>(pairs) * static_cast<double>(out) * static_cast<double>(in);
  const std::string shape = std::string(down ? "down " : gated ? "gate*up " : "gate ") + std::to_string(out) + "x" +
                            std::to_string(in) + " E=" + std::to_string(experts) + " pairs=" + std::to_string(pairs) + " (GFLOP/s)";
  report(std::string(math_label(math, "experts_prefill")) + std::string(dtype_name(type)), shape, us_grouped, flops);
  if (math != MatmulMath::kF32) return;
  const double us_matvec = time_us([&](int) {
    if (!gated) {
      CHECK_GPU(matmul_experts_gpu(ea, MatvecContext{}, nullptr));
      return;
    }
    MatmulSegment s{ea.base, w_up.get(), dids.get(), per_x};
    s.args.num_rows = pairs;
    CHECK_GPU(matmul_segments_gpu(&s, 1, MatvecContext{}, nullptr));
  });
  report(std::string(gated ? "segments(gated) " : "matmul_experts_gpu ") + std::string(dtype_name(type)), shape, us_matvec, flops);
}

void bench_gdn(int64_t num_seqs, int64_t rows_per_seq, bool ring, StateType state_type = StateType::kF32) {
  const int64_t hk = 16, hv = 32, d = 128, dc = 2 * hk * d + hv * d;
  const int64_t rows = num_seqs * rows_per_seq;
  const int64_t entries = num_seqs * (1 + (ring ? rows_per_seq : 0));
  const size_t delta_entry = static_cast<size_t>(hv * d * d);
  DeviceBuffer<float> qkv(static_cast<size_t>(rows * dc)), ab(static_cast<size_t>(rows * hv)), cw(static_cast<size_t>(dc * 4));
  DeviceBuffer<float> av(static_cast<size_t>(hv)), out(static_cast<size_t>(rows * hv * d));
  DeviceBuffer<float> delta(delta_entry * static_cast<size_t>(entries)), conv(static_cast<size_t>(3 * dc * entries));
  for (DeviceBuffer<float>* b : {&qkv, &ab, &cw, &av, &delta, &conv}) CHECK_GPU(gpuMemset(b->get(), 0, b->size() * sizeof(float)));
  std::vector<int32_t> begin, in, ring_first;
  for (int64_t s = 0; s <= num_seqs; ++s) begin.push_back(static_cast<int32_t>(s * rows_per_seq));
  for (int64_t s = 0; s < num_seqs; ++s) {
    in.push_back(static_cast<int32_t>(s));
    ring_first.push_back(ring ? static_cast<int32_t>(num_seqs + s * rows_per_seq) : -1);
  }
  DeviceBuffer<int32_t> dbegin(begin), din(in), dring(ring_first), sync(std::vector<int32_t>(static_cast<size_t>(num_seqs * hk), 0));
  GdnStepArgs a{qkv.get(), dc, ab.get(), ab.get(), hv, cw.get(), av.get(), av.get(), out.get(), hv * d, dbegin.get(), num_seqs,
                delta.get(), conv.get(), din.get(), din.get(), dring.get(), sync.get(), hk, hv, d, d, 4, 1e-6f};
  a.delta_type = state_type;  // a bf16 pool uses the first half of the buffer
  const double us = time_us([&](int) { CHECK_GPU(gdn_step_gpu(a, nullptr)); });
  const double state_bytes = static_cast<double>(state_type_bytes(state_type)) * static_cast<double>(delta_entry) * num_seqs;
  const double bytes = 2.0 * state_bytes + (ring ? state_bytes * rows_per_seq : 0.0) + 4.0 * rows * dc;
  report("gdn_step_gpu", "Hv=32 Hk=16 d=128 seqs=" + std::to_string(num_seqs) + " T=" + std::to_string(rows_per_seq) +
                             (ring ? " ring" : "") + (state_type == StateType::kBf16 ? " bf16" : ""),
         us, bytes);
}

// One sequence's prefill chunk through gdn_prefill_gpu (compare bench_gdn(1, rows, false): the
// token loop over the same rows), its chunk pass on the tensor cores and in f32 FMA. GB/s over
// the bytes it must move: qkv in, o out, state in + out.
void bench_gdn_prefill(int64_t rows, bool tensor_cores) {
  const int64_t hk = 16, hv = 32, d = 128, dc = 2 * hk * d + hv * d;
  const size_t delta_entry = static_cast<size_t>(hv * d * d);
  DeviceBuffer<float> qkv(static_cast<size_t>(rows * dc)), ab(static_cast<size_t>(rows * hv)), cw(static_cast<size_t>(dc * 4));
  DeviceBuffer<float> av(static_cast<size_t>(hv)), out(static_cast<size_t>(rows * hv * d));
  DeviceBuffer<float> delta(delta_entry), conv(static_cast<size_t>(3 * dc));
  for (DeviceBuffer<float>* b : {&qkv, &ab, &cw, &av, &delta, &conv}) CHECK_GPU(gpuMemset(b->get(), 0, b->size() * sizeof(float)));
  DeviceBuffer<int32_t> dbegin(std::vector<int32_t>{0, static_cast<int32_t>(rows)}), din(std::vector<int32_t>{0});
  GdnPrefillArgs a{qkv.get(), dc, ab.get(), ab.get(), hv, cw.get(), av.get(), av.get(), out.get(), hv * d, dbegin.get(), 1, rows,
                   delta.get(), conv.get(), din.get(), din.get(), nullptr, hk, hv, d, d, 4, 1e-6f};
  a.tensor_cores = tensor_cores;
  DeviceBuffer<float> ws(static_cast<size_t>(gdn_prefill_workspace_floats(a)));
  a.workspace = ws.get();
  const double us = time_us([&](int) { CHECK_GPU(gdn_prefill_gpu(a, nullptr)); });
  const double bytes = 2.0 * 4.0 * static_cast<double>(delta_entry) + 4.0 * static_cast<double>(rows) * (dc + hv * d);
  report(tensor_cores ? "gdn_prefill_gpu (tensor)" : "gdn_prefill_gpu (fma)", "Hv=32 Hk=16 d=128 seqs=1 T=" + std::to_string(rows), us, bytes);
}

// Paged attention at the 35B-A3B's shapes: `seqs` sequences at `context` keys, `rows` verify
// rows each (the last positions), every sequence's pages its own and the caches past the L2
// (several copies rotate when one is smaller). Forms: one launch (the backend's) at the
// automatic head split and at each forced split in `splits`, then the two-launch form.
void bench_attention(int64_t context, int64_t rows, int64_t seqs = 1, std::vector<int64_t> splits = {}) {
  const int64_t nh = 16, nkv = 2, hd = 256, bt = 16;
  const int64_t blocks = (context + bt - 1) / bt, total_rows = rows * seqs;
  const size_t cache_floats = static_cast<size_t>(seqs * blocks * bt * nkv * hd);
  const int copies = static_cast<int>(std::max<size_t>(1, kRotateBytes / (2 * cache_floats * sizeof(float)) + 1));
  DeviceBuffer<float> q(static_cast<size_t>(total_rows * 2 * nh * hd)), out(static_cast<size_t>(total_rows * nh * hd));
  std::vector<DeviceBuffer<float>> kc, vc;
  for (int c = 0; c < copies; ++c) {
    kc.emplace_back(cache_floats);
    vc.emplace_back(cache_floats);
    CHECK_GPU(gpuMemset(kc.back().get(), 0, cache_floats * sizeof(float)));
    CHECK_GPU(gpuMemset(vc.back().get(), 0, cache_floats * sizeof(float)));
  }
  CHECK_GPU(gpuMemset(q.get(), 0, q.size() * sizeof(float)));
  std::vector<int32_t> table(static_cast<size_t>(seqs * blocks)), seq, pos;
  for (int64_t i = 0; i < seqs * blocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t r = 0; r < rows; ++r) {
      seq.push_back(static_cast<int32_t>(s));
      pos.push_back(static_cast<int32_t>(context - rows + r));
    }
  }
  DeviceBuffer<int32_t> dt(table), ds(seq), dp(pos);
  PagedAttentionGpuArgs a{q.get(), q.get() + hd, 2 * nh * hd, 2 * hd, out.get(), nh * hd, kc[0].get(), vc[0].get(), dt.get(), blocks,
                          ds.get(), dp.get(), bt, total_rows, nh, nkv, hd, context, 0.0625f, nullptr};
  DeviceBuffer<float> ws(static_cast<size_t>(paged_attention_workspace_floats(a)));
  a.workspace = ws.get();
  // One launch first: the combine in each (row, KV head, split)'s last chunk block (the backend
  // runs the two-launch form below by default).
  DeviceBuffer<uint32_t> counters(std::vector<uint32_t>(static_cast<size_t>(total_rows * nh), 0u));
  a.sync_counters = counters.get();
  const std::string shape = "nh=16 nkv=2 hd=256 ctx=" + std::to_string(context) + " seqs=" + std::to_string(seqs) +
                            " rows=" + std::to_string(rows);
  const double bytes = 2.0 * 4.0 * static_cast<double>(context * nkv * hd) * static_cast<double>(seqs);
  const auto timed = [&](const PagedAttentionGpuArgs& args) {
    return time_us([&](int i) {
      PagedAttentionGpuArgs b = args;
      b.k_cache = kc[static_cast<size_t>(i % copies)].get();
      b.v_cache = vc[static_cast<size_t>(i % copies)].get();
      CHECK_GPU(paged_attention_gpu(b, nullptr));
    });
  };
  report("paged_attention_gpu", shape + " split " + std::to_string(paged_attention_head_splits(a)) + " (auto)", timed(a), bytes);
  for (const int64_t s : splits) {
    PagedAttentionGpuArgs b = a;
    b.head_splits = s;
    report("paged_attention_gpu", shape + " split " + std::to_string(s), timed(b), bytes);
  }
  const std::vector<uint32_t> left = counters.download();
  if (std::any_of(left.begin(), left.end(), [](uint32_t c) { return c != 0; })) {
    std::printf("paged_attention_gpu bench: sync counters left non-zero after the timed launches (BUG)\n");
  }
  a.sync_counters = nullptr;  // chunk kernel + combine kernel
  report("paged_attention_gpu 2-launch", shape + " split " + std::to_string(paged_attention_head_splits(a)) + " (auto)", timed(a), bytes);
  for (const int64_t s : splits) {
    for (const int64_t loads : {1, 2}) {
      PagedAttentionGpuArgs b = a;
      b.head_splits = s;
      b.value_loads = loads;
      report("paged_attention_gpu 2-launch", shape + " split " + std::to_string(s) + (loads == 2 ? " late V" : " V with K"), timed(b), bytes);
    }
  }
}

// One sequence's prefill chunk of `rows` rows after `before` cached positions, in the default
// form (tensor cores where the device has them) or the CUDA-core one.
void bench_prefill_attention(int64_t before, int64_t rows, bool tensor_cores = true) {
  const int64_t nh = 16, nkv = 2, hd = 256, bt = 16, context = before + rows;
  const int64_t blocks = (context + bt - 1) / bt;
  DeviceBuffer<float> q(static_cast<size_t>(rows * 2 * nh * hd)), out(static_cast<size_t>(rows * nh * hd));
  DeviceBuffer<float> kc(static_cast<size_t>(blocks * bt * nkv * hd)), vc(kc.size());
  for (DeviceBuffer<float>* b : {&q, &kc, &vc}) CHECK_GPU(gpuMemset(b->get(), 0, b->size() * sizeof(float)));
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  DeviceBuffer<int32_t> dt(table), db(std::vector<int32_t>{0, static_cast<int32_t>(rows)}),
      df(std::vector<int32_t>{static_cast<int32_t>(before)});
  PrefillAttentionGpuArgs a{q.get(), q.get() + hd, 2 * nh * hd, 2 * hd, out.get(), nh * hd, kc.get(), vc.get(), dt.get(), blocks,
                            db.get(), df.get(), 1, rows, bt, nh, nkv, hd, 0.0625f};
  a.tensor_cores = tensor_cores;
  const double us = time_us([&](int) { CHECK_GPU(prefill_attention_gpu(a, nullptr)); });
  // GFLOP/s: QK and PV multiply-adds over the causal triangle.
  const double pairs = static_cast<double>(rows) * static_cast<double>(before) + 0.5 * static_cast<double>(rows) * (rows + 1);
  report(prefill_attention_uses_tensor_cores(a) ? "prefill_attention_gpu (tensor)" : "prefill_attention_gpu (cores)", "nh=16 nkv=2 hd=256 cached=" + std::to_string(before) + " rows=" + std::to_string(rows) + " (GFLOP/s)",
         us, 4.0 * pairs * nh * hd);
}

}  // namespace

// The decode attention points: one stream to 64 (the 35B-A3B's ten attention layers at 1,025
// keys, a bench decode step at --context 1024), verify rows, long contexts; forced head splits
// beside the automatic one; then the prefill attention chunks (the last 512-token chunk of a
// 32k-token prompt in both forms).
void run_attention_benchmarks(Context&) {
  std::printf("| kernel | shape | us/launch | GB/s |\n|---|---|---|---|\n");
  bench_attention(1025, 1, 1, {1, 2, 4, 8});
  bench_attention(1025, 1, 2, {1, 2, 4});
  bench_attention(1025, 1, 4, {1, 2});
  bench_attention(1025, 1, 16, {1, 2});
  bench_attention(1025, 1, 64, {1, 2});
  bench_attention(1025, 4, 1, {1, 2});
  bench_attention(8192, 1, 1, {1, 8});
  bench_attention(8192, 4, 1, {1, 2});
  bench_attention(32768, 1, 1, {1, 8});
  bench_prefill_attention(0, 512);
  bench_prefill_attention(0, 2048);
  bench_prefill_attention(32256, 512);
  bench_prefill_attention(32256, 512, false);
}

// The tiled prefill products side by side: f32, TF32 and the exact bf16 tensor-core form (Q4_0),
// dense at 512 and 2048 rows, the 35B-A3B's experts at 512 tokens x top 8.
void run_prefill_math_benchmarks() {
  for (MatmulMath m : {MatmulMath::kF32, MatmulMath::kTf32, MatmulMath::kTensorExact}) {
    bench_prefill(DType::Q4_0, 2048, 8192, 512, "qkv", m);
    bench_prefill(DType::Q4_0, 4096, 2048, 512, "out", m);
    bench_prefill(DType::Q4_0, 2048, 8192, 2048, "qkv", m);
    bench_experts_prefill(DType::Q4_0, 2048, 512, 256, 512, 8, false, true, m);
    bench_experts_prefill(DType::Q4_0, 512, 2048, 256, 512, 8, true, false, m);
  }
}

void run_matvec_benchmarks(Context&) {
  std::printf("| kernel | shape | us/launch | GB/s |\n|---|---|---|---|\n");
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::BF16}) {
    bench_matmul(t, 2048, 8192, 1, "qkv");
    bench_matmul(t, 2048, 8192, 4, "qkv");
    bench_matmul(t, 4096, 2048, 1, "out");
  }
  bench_matmul(DType::Q4_K, 2048, 8192, 1, "qkv");
  bench_matmul(DType::Q5_K, 2048, 8192, 1, "qkv");
  bench_matmul(DType::Q6_K, 2048, 8192, 1, "qkv");
  bench_matmul(DType::F32, 2048, 256, 1, "router");
  // The matvec's K split is chosen from the shape: the shapes on either side of the rule.
  bench_matmul(DType::Q4_0, 2048, 4096, 1, "z");
  bench_matmul(DType::Q4_0, 2048, 512, 1, "shared gate");
  bench_matmul(DType::Q4_0, 512, 2048, 1, "shared down");
  bench_matmul(DType::Q4_0, 4096, 2048, 64, "out");
  bench_matmul(DType::Q4_0, 2048, 8192, 64, "qkv");
  bench_matmul(DType::Q4_0, 5120, 17408, 1, "27b gate");
  bench_matmul(DType::Q4_0, 17408, 5120, 1, "27b down");
  bench_matmul(DType::Q4_0, 5120, 10240, 1, "27b qkv");
  bench_matmul(DType::Q4_0, 6144, 5120, 1, "27b out");
  bench_matmul(DType::Q4_0, 2048, 248320, 1, "lm_head");
  bench_matmul(DType::Q8_0, 2048, 248320, 1, "lm_head");
  bench_matmul(DType::Q4_0, 2048, 8192, 2, "qkv");
  bench_matmul(DType::Q4_0, 2048, 8192, 8, "qkv");
  bench_experts(DType::Q4_0, 2048, 512, 256, 8, "gate");
  bench_experts(DType::Q4_0, 512, 2048, 256, 8, "down");
  bench_experts(DType::Q8_0, 2048, 512, 256, 8, "gate");
  // Q4_0 on the CUDA cores, on the tensor cores and staged onto them, side by side
  // (matmul_gpu.h, MatvecMath).
  if (matvec_math_on_device(MatvecMath::kTensorCores) == MatvecMath::kTensorCores) {
    struct Shape {
      int64_t in, out;
      const char* what;
    };
    const Shape shapes[] = {{2048, 8192, "qkv"},       {4096, 2048, "out"},        {2048, 512, "shared gate"},
                            {512, 2048, "shared down"}, {2048, 248320, "lm_head"}, {5120, 17408, "27b gate"},
                            {17408, 5120, "27b down"},  {6144, 5120, "27b out"}};
    for (const Shape& sh : shapes) {
      for (int64_t rows : {1, 2, 4, 8, 16, 32, 64}) {
        if (sh.out > 100000 && rows != 1 && rows != 64) continue;
        for (MatvecMath m : {MatvecMath::kCudaCores, MatvecMath::kTensorCores, MatvecMath::kStaged}) {
          bench_matmul(DType::Q4_0, sh.in, sh.out, rows, sh.what, m);
        }
      }
    }
  }
}

// The staged matvec alone on the 27B's one- and two-row shapes (its decode step's matrices,
// gate and up as one plain matrix of the gated launch's tiles) and the LM heads: a quick
// side-by-side of the staged kernel's switches.
void run_staged_matvec_benchmarks(Context&) {
  std::printf("| kernel | shape | us/launch | GB/s |\n|---|---|---|---|\n");
  if (matvec_math_on_device(MatvecMath::kStaged) != MatvecMath::kStaged) {
    std::printf("(no staged matvec on this device)\n");
    return;
  }
  struct Shape {
    int64_t in, out;
    const char* what;
  };
  const Shape shapes[] = {{5120, 34816, "27b gate+up"}, {17408, 5120, "27b down"}, {5120, 10240, "27b qkv"}, {5120, 6144, "27b z"},
                          {6144, 5120, "27b out"},      {5120, 12288, "27b q+gate"}, {5120, 248320, "27b lm_head"},
                          {2048, 8192, "qkv"},          {4096, 2048, "out"}};
  // DELTASERVE_BENCH_SHAPE=name: that shape alone, one row (a profiler's target).
  const char* only = std::getenv("DELTASERVE_BENCH_SHAPE");
  for (const Shape& sh : shapes) {
    if (only != nullptr && *only != '\0') {
      if (std::strcmp(only, sh.what) == 0) bench_matmul(DType::Q4_0, sh.in, sh.out, 1, sh.what, MatvecMath::kStaged);
      continue;
    }
    for (int64_t rows : {1, 2}) bench_matmul(DType::Q4_0, sh.in, sh.out, rows, sh.what, MatvecMath::kStaged);
  }
}

void run_benchmarks(Context& ctx) {
  run_matvec_benchmarks(ctx);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::BF16}) bench_prefill(t, 2048, 8192, 512, "qkv");
  bench_prefill(DType::Q4_0, 2048, 8192, 2048, "qkv");
  bench_experts_prefill(DType::Q4_0, 2048, 512, 256, 512, 8, false, false);
  bench_experts_prefill(DType::Q4_0, 2048, 512, 256, 512, 8, false, true);
  bench_experts_prefill(DType::Q4_0, 512, 2048, 256, 512, 8, true, false);
  bench_experts_prefill(DType::Q4_0, 2048, 512, 256, 512, 8, false, false, MatmulMath::kTf32);
  bench_experts_prefill(DType::Q4_0, 2048, 512, 256, 512, 8, false, true, MatmulMath::kTf32);
  bench_experts_prefill(DType::Q4_0, 512, 2048, 256, 512, 8, true, false, MatmulMath::kTf32);
  bench_prefill(DType::Q4_0, 2048, 8192, 512, "qkv", MatmulMath::kTf32);
  bench_prefill(DType::BF16, 2048, 8192, 512, "qkv", MatmulMath::kTf32);
  run_prefill_math_benchmarks();
  bench_gdn(1, 1, false);
  bench_gdn(1, 4, true);
  bench_gdn(64, 1, false);
  bench_gdn(1, 4, true, StateType::kBf16);
  bench_gdn(64, 1, false, StateType::kBf16);
  for (int64_t rows : {512, 2048}) {
    bench_gdn(1, rows, false);
    bench_gdn_prefill(rows, true);
    bench_gdn_prefill(rows, false);
  }
  run_attention_benchmarks(ctx);
  {
    DeviceBuffer<float> x(2048), w(2048);
    const double us = time_us([&](int) { CHECK_GPU(rms_norm_gpu({x.get(), 2048, w.get(), x.get(), 2048, 1, 2048, 1e-6f}, nullptr)); });
    report("rms_norm_gpu", "rows=1 n=2048", us, 3.0 * 4 * 2048);
  }
  {
    DeviceBuffer<float> logits(256);
    DeviceBuffer<int32_t> ids(8);
    DeviceBuffer<float> wts(8);
    CHECK_GPU(gpuMemset(logits.get(), 0, 256 * sizeof(float)));
    const double us = time_us([&](int) { CHECK_GPU(moe_route_gpu({logits.get(), 1, 256, 8, ids.get(), wts.get()}, nullptr)); });
    report("moe_route_gpu", "rows=1 E=256 k=8", us, 4.0 * 256);
  }
  for (int64_t rows : {1, 4}) bench_moe_router(rows);
  for (int64_t rows : {1, 64}) bench_moe_combine_norm(rows);
  {
    DeviceBuffer<float> logits(248320);
    DeviceBuffer<int32_t> ids(1);
    CHECK_GPU(gpuMemset(logits.get(), 0, 248320 * sizeof(float)));
    const double us = time_us([&](int) { CHECK_GPU(argmax_gpu(logits.get(), 248320, 1, 248320, ids.get(), nullptr)); });
    report("argmax_gpu", "rows=1 vocab=248320", us, 4.0 * 248320);
    DeviceBuffer<uint32_t> ws(std::vector<uint32_t>(static_cast<size_t>(argmax_workspace_words(1, 248320)), 0u));
    const double us_split = time_us([&](int) {
      CHECK_GPU(argmax_gpu(ArgmaxGpuArgs{logits.get(), 248320, 1, 248320, ids.get(), ws.get()}, nullptr));
    });
    report("argmax_gpu (split)", "rows=1 vocab=248320", us_split, 4.0 * 248320);
  }
}

}  // namespace deltaserve::kernels::gputest
