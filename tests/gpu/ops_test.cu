// Norms, RoPE, SwiGLU, residual add, embedding, MoE routing, argmax and greedy verification
// against their CPU references; the MoE combine's fused residual add against combine + add.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/quant.h"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_gpu.h"
#include "kernels/sampling/sampling_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> items) {
  std::string s;
  for (const auto& [name, value] : items) s += std::string(s.empty() ? "" : " ") + name + "=" + std::to_string(value);
  return s;
}

void check_rms_norm(Context& ctx, int64_t rows, int64_t n, bool in_place) {
  const int64_t stride = n + 3;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(rows * stride), 2.0f);
  const std::vector<float> w = random_floats(ctx.rng, static_cast<size_t>(n));
  std::vector<float> ref(static_cast<size_t>(rows * stride), 0.0f);
  rms_norm_ref({x.data(), stride, w.data(), ref.data(), stride, rows, n, 1e-6f}, serial_for());
  DeviceBuffer<float> dx(x), dw(w), dy(ref.size());
  dy.poison();
  float* out = in_place ? dx.get() : dy.get();
  CHECK_GPU(rms_norm_gpu({dx.get(), stride, dw.get(), out, stride, rows, n, 1e-6f}, nullptr));
  std::vector<float> got = in_place ? dx.download() : dy.download();
  for (int64_t r = 0; r < rows; ++r) {  // compare the n used columns only
    for (int64_t i = n; i < stride; ++i) got[static_cast<size_t>(r * stride + i)] = ref[static_cast<size_t>(r * stride + i)];
  }
  ctx.results.record("rms_norm_gpu", dims({{"rows", rows}, {"n", n}, {"in_place", in_place}}),
                     compare(got.data(), ref.data(), got.size()), 1e-12);
}

void check_gated_rms_norm(Context& ctx, int64_t groups, int64_t n) {
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(groups * n));
  const std::vector<float> z = random_floats(ctx.rng, x.size(), 2.0f);
  const std::vector<float> w = random_floats(ctx.rng, static_cast<size_t>(n));
  std::vector<float> ref(x.size());
  gated_rms_norm_ref({x.data(), z.data(), w.data(), ref.data(), groups, n, 1e-6f}, serial_for());
  DeviceBuffer<float> dx(x), dz(z), dw(w), dy(x.size());
  dy.poison();
  CHECK_GPU(gated_rms_norm_gpu({dx.get(), dz.get(), dw.get(), dy.get(), groups, n, 1e-6f}, nullptr));
  const std::vector<float> got = dy.download();
  ctx.results.record("gated_rms_norm_gpu", dims({{"groups", groups}, {"n", n}}), compare(got.data(), ref.data(), got.size()),
                     1e-12);
}

void check_rope(Context& ctx, int64_t rows, int64_t heads, int64_t head_dim, int64_t rope_dims, int32_t max_pos) {
  const int64_t head_stride = 2 * head_dim;  // q|gate interleaved, as the attention layer holds it
  const int64_t row_stride = heads * head_stride;
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(rows * row_stride));
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int32_t& p : pos) p = static_cast<int32_t>(ctx.rng() % static_cast<uint32_t>(max_pos + 1));
  std::vector<float> ref = x;
  rope_neox_ref({ref.data(), row_stride, head_stride, pos.data(), rows, heads, rope_dims, 1e7f});
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int32_t> dpos(pos);
  CHECK_GPU(rope_neox_gpu({dx.get(), row_stride, head_stride, dpos.get(), rows, heads, rope_dims, 1e7f}, nullptr));
  const std::vector<float> got = dx.download();
  ctx.results.record("rope_neox_gpu", dims({{"rows", rows}, {"heads", heads}, {"hd", head_dim}, {"R", rope_dims}, {"max_pos", max_pos}}),
                     compare(got.data(), ref.data(), got.size()), 1e-10);
}

void check_elementwise(Context& ctx, int64_t n) {
  const std::vector<float> a = random_floats(ctx.rng, static_cast<size_t>(n), 3.0f);
  const std::vector<float> b = random_floats(ctx.rng, static_cast<size_t>(n));
  std::vector<float> ref(a.size()), sum(a.size());
  swiglu_ref(a.data(), b.data(), ref.data(), n);
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  DeviceBuffer<float> da(a), db(b), dy(a.size());
  dy.poison();
  CHECK_GPU(swiglu_gpu(da.get(), db.get(), dy.get(), n, nullptr));
  std::vector<float> got = dy.download();
  ctx.results.record("swiglu_gpu", dims({{"n", n}}), compare(got.data(), ref.data(), got.size()), 1e-12);
  dy.poison();
  CHECK_GPU(add_gpu(da.get(), db.get(), dy.get(), n, nullptr));
  got = dy.download();
  ctx.results.record_exact("add_gpu", dims({{"n", n}}), bitwise_equal(got.data(), sum.data(), got.size()), "bitwise");
}

void check_embedding(Context& ctx, DType type, int64_t num_embd, int64_t vocab, int64_t tokens) {
  const size_t row_bytes = dtype_row_bytes(type, num_embd);
  std::vector<uint8_t> table(row_bytes * static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) {
    const std::vector<float> row = random_floats(ctx.rng, static_cast<size_t>(num_embd));
    quantize_row(type, row.data(), table.data() + static_cast<size_t>(v) * row_bytes, num_embd);
  }
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t& id : ids) id = static_cast<int32_t>(ctx.rng() % static_cast<uint32_t>(vocab));
  std::vector<float> ref(static_cast<size_t>(tokens * num_embd));
  embedding_lookup_ref(table.data(), type, num_embd, ids.data(), tokens, ref.data());
  DeviceBuffer<uint8_t> dt(table);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dy(ref.size());
  dy.poison();
  CHECK_GPU(embedding_lookup_gpu(dt.get(), type, num_embd, dids.get(), tokens, dy.get(), nullptr));
  const std::vector<float> got = dy.download();
  ctx.results.record_exact("embedding_lookup_gpu", std::string(dtype_name(type)) + " " + dims({{"embd", num_embd}, {"tokens", tokens}}),
                           bitwise_equal(got.data(), ref.data(), got.size()), "bitwise");
}

// ties: logits rounded to whole numbers, so many experts share a probability and the lower
// id must win every tie, as in moe_route_ref.
void check_moe_route(Context& ctx, int64_t rows, int64_t experts, int64_t k, bool ties = false) {
  std::vector<float> logits = random_floats(ctx.rng, static_cast<size_t>(rows * experts), 2.0f);
  if (ties) {
    for (float& v : logits) v = std::round(v);
  }
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  std::vector<float> weights(ids.size());
  moe_route_ref({logits.data(), rows, experts, k, ids.data(), weights.data()});
  DeviceBuffer<float> dl(logits), dw(weights.size());
  DeviceBuffer<int32_t> dids(ids.size());
  dw.poison();
  dids.poison();
  CHECK_GPU(moe_route_gpu({dl.get(), rows, experts, k, dids.get(), dw.get()}, nullptr));
  const std::vector<int32_t> got_ids = dids.download();
  const std::vector<float> got_w = dw.download();
  const bool same_ids = got_ids == ids;
  ctx.results.record("moe_route_gpu", dims({{"rows", rows}, {"E", experts}, {"k", k}}) + (ties ? " ties" : ""),
                     compare(got_w.data(), weights.data(), got_w.size()), 1e-12, same_ids, same_ids ? "ids equal" : "ids differ");
}

void check_argmax(Context& ctx, int64_t rows, int64_t vocab) {
  const int64_t stride = vocab + 5;
  std::vector<float> logits = random_floats(ctx.rng, static_cast<size_t>(rows * stride), 3.0f);
  std::vector<int32_t> ref(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * stride;
    if (r % 2 == 1 && vocab > 2) {  // a planted tie: the lower id must win
      const float top = *std::max_element(row, row + vocab) + 1.0f;
      row[vocab - 1] = top;
      row[vocab / 2] = top;
    }
    ref[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  DeviceBuffer<float> dl(logits);
  DeviceBuffer<int32_t> dids(ref.size());
  dids.poison();
  CHECK_GPU(argmax_gpu(dl.get(), stride, rows, vocab, dids.get(), nullptr));
  ctx.results.record_exact("argmax_gpu", dims({{"rows", rows}, {"vocab", vocab}}), dids.download() == ref, "ids equal");

  // Split form: twice on one workspace (the counters must come back to zero), then each row
  // alone (batch invariance).
  DeviceBuffer<uint32_t> ws(std::vector<uint32_t>(static_cast<size_t>(argmax_workspace_words(rows, vocab)), 0u));
  bool same = true;
  for (int rep = 0; rep < 2; ++rep) {
    dids.poison();
    CHECK_GPU(argmax_gpu(ArgmaxGpuArgs{dl.get(), stride, rows, vocab, dids.get(), ws.get()}, nullptr));
    same = same && dids.download() == ref;
  }
  const std::vector<uint32_t> counters = ws.download();
  same = same && std::all_of(counters.begin(), counters.begin() + rows, [](uint32_t c) { return c == 0; });
  for (int64_t r = 0; r < rows; ++r) {
    DeviceBuffer<int32_t> one(1);
    one.poison();
    CHECK_GPU(argmax_gpu(ArgmaxGpuArgs{dl.get() + r * stride, stride, 1, vocab, one.get(), ws.get()}, nullptr));
    same = same && one.download()[0] == ref[static_cast<size_t>(r)];
  }
  ctx.results.record_exact("argmax_gpu (split)", dims({{"rows", rows}, {"vocab", vocab}}), same,
                           "ids equal, counters reset, rows alone equal");

  // A workspace sized for `rows` (workspace_rows) serving launches of growing row counts: the
  // counters stay where they are, so a launch after a smaller one still sees zero counters.
  DeviceBuffer<uint32_t> cap_ws(std::vector<uint32_t>(static_cast<size_t>(argmax_workspace_words(rows, vocab)), 0u));
  bool growing = true;
  for (int64_t n = 1; n <= rows; n = n < rows ? std::min(rows, 2 * n + 1) : rows + 1) {
    dids.poison();
    CHECK_GPU(argmax_gpu(ArgmaxGpuArgs{dl.get(), stride, n, vocab, dids.get(), cap_ws.get(), rows}, nullptr));
    const std::vector<int32_t> got = dids.download();
    growing = growing && std::equal(got.begin(), got.begin() + n, ref.begin());
  }
  ctx.results.record_exact("argmax_gpu (split, growing rows)", dims({{"rows", rows}, {"vocab", vocab}}), growing,
                           "ids equal for 1.. rows on one workspace");
}

void check_greedy_verify(Context& ctx, int64_t num_seqs) {
  std::vector<int32_t> begin{0};
  for (int64_t s = 0; s < num_seqs; ++s) begin.push_back(begin.back() + 1 + static_cast<int32_t>(ctx.rng() % 5));
  const size_t rows = static_cast<size_t>(begin.back());
  std::vector<int32_t> tokens(rows), target(rows), ref(static_cast<size_t>(num_seqs));
  for (size_t i = 0; i < rows; ++i) tokens[i] = static_cast<int32_t>(ctx.rng() % 4), target[i] = static_cast<int32_t>(ctx.rng() % 4);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t b = begin[static_cast<size_t>(s)], e = begin[static_cast<size_t>(s) + 1];
    int32_t n = 1;
    while (b + n < e && target[static_cast<size_t>(b + n - 1)] == tokens[static_cast<size_t>(b + n)]) ++n;
    ref[static_cast<size_t>(s)] = n;
  }
  DeviceBuffer<int32_t> dt(tokens), dg(target), db(begin), dn(ref.size());
  dn.poison();
  CHECK_GPU(greedy_verify_gpu(dt.get(), dg.get(), db.get(), num_seqs, dn.get(), nullptr));
  ctx.results.record_exact("greedy_verify_gpu", dims({{"seqs", num_seqs}}), dn.download() == ref, "counts equal");
}

// moe_combine_gpu with accumulate (the residual add fused) == plain combine, then add_gpu.
void check_combine_accumulate(Context& ctx, int64_t rows, int64_t k, int64_t n) {
  const std::vector<float> eo = random_floats(ctx.rng, static_cast<size_t>(rows * k * n));
  const std::vector<float> wt = random_floats(ctx.rng, static_cast<size_t>(rows * k));
  const std::vector<float> sh = random_floats(ctx.rng, static_cast<size_t>(rows * n));
  const std::vector<float> sg = random_floats(ctx.rng, static_cast<size_t>(rows));
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(rows * n));
  DeviceBuffer<float> deo(eo), dwt(wt), dsh(sh), dsg(sg), fused(x), plain(static_cast<size_t>(rows * n)), base(x);
  plain.poison();
  MoeCombineArgs a{deo.get(), dwt.get(), dsh.get(), dsg.get(), plain.get(), rows, k, n};
  CHECK_GPU(moe_combine_gpu(a, nullptr));
  CHECK_GPU(add_gpu(base.get(), plain.get(), base.get(), rows * n, nullptr));
  a.y = fused.get();
  a.accumulate = true;
  CHECK_GPU(moe_combine_gpu(a, nullptr));
  const std::vector<float> got = fused.download(), want = base.download();
  const bool same = bitwise_equal(got.data(), want.data(), got.size());
  ctx.results.record("moe_combine_gpu(accumulate)", dims({{"rows", rows}, {"k", k}, {"n", n}}),
                     compare(got.data(), want.data(), got.size()), 1e-12, same, same ? "== combine + add" : "differs");
}

}  // namespace

void run_ops_tests(Context& ctx) {
  for (int64_t rows : {1, 3, 8}) {
    // 2048 and below: rows held 8 per thread; 5120 (the 27B's width): 32; 9000: the batched walk.
    for (int64_t n : {64, 100, 256, 2048, 5120, 9000}) check_rms_norm(ctx, rows, n, rows == 3);
  }
  for (int64_t groups : {1, 7, 32}) {
    for (int64_t n : {64, 96, 128}) check_gated_rms_norm(ctx, groups, n);
  }
  check_rope(ctx, 1, 16, 256, 64, 10);
  check_rope(ctx, 5, 3, 128, 32, 4096);
  check_rope(ctx, 4, 2, 256, 64, 40000);
  for (int64_t n : {1, 999, 4096}) check_elementwise(ctx, n);
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                         DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType t : types) {
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    check_embedding(ctx, t, k_quant ? 512 : 96, 50, 7);
  }
  check_moe_route(ctx, 1, 256, 8);
  check_moe_route(ctx, 5, 256, 8);
  check_moe_route(ctx, 8, 60, 4);
  check_moe_route(ctx, 3, 7, 1);
  check_moe_route(ctx, 2, 96, 32);   // k at its limit: every lane's pick
  check_moe_route(ctx, 3, 300, 8);   // past the register form (256 experts): shared memory
  check_moe_route(ctx, 4, 256, 8, true);
  check_moe_route(ctx, 2, 300, 8, true);
  check_argmax(ctx, 1, 248320);
  check_argmax(ctx, 4, 1000);
  check_argmax(ctx, 3, 37);
  check_argmax(ctx, 5, 8192 * 3 + 3);  // segment edges, a partial float4 at the end
  check_greedy_verify(ctx, 1);
  check_greedy_verify(ctx, 37);
  check_combine_accumulate(ctx, 1, 8, 2048);
  check_combine_accumulate(ctx, 5, 3, 100);
  check_combine_accumulate(ctx, 2, 10, 100);  // more ranks than the unrolled form: the rolled loop
}

}  // namespace deltaserve::kernels::gputest
