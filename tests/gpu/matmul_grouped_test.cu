// Expert-grouped decode pairs: moe_group_pairs_gpu's groups (every pair once, in a group of
// its expert, groups filled from the front, the count sum_e ceil(pairs_e / R)), and
// matmul_segments_gpu with expert-grouped segments bitwise equal to matmul_experts_gpu per
// pair (gated gate/up with the shared expert's rows in the same launch, and the down
// projection with one input row per pair), over skewed and uniform routings, 2 and 4 rows
// per group, and a second launch on the same group buffers.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/matmul/matmul_gpu.h"
#include "kernels/moe/moe_gpu.h"
#include "kernels/quant.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

// Every launch on the CUDA cores (the default math): expert-grouped launches run there under
// every math, and the per-pair launches they are held to must too.
const MatvecContext kCudaCores{};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Checks the groups on the host; returns "" or what is wrong.
std::string check_groups(const std::vector<int32_t>& ids, int64_t num_experts, int rows, const std::vector<int32_t>& expert,
                         const std::vector<int32_t>& pairs, int32_t count) {
  std::vector<int64_t> per_expert(static_cast<size_t>(num_experts), 0);
  for (int32_t e : ids) ++per_expert[static_cast<size_t>(e)];
  int64_t want = 0;
  for (int64_t c : per_expert) want += (c + rows - 1) / rows;
  if (count != want) return "count " + std::to_string(count) + ", want " + std::to_string(want);
  std::vector<int> seen(ids.size(), 0);
  for (int32_t g = 0; g < count; ++g) {
    bool ended = false;
    for (int r = 0; r < rows; ++r) {
      const int32_t p = pairs[static_cast<size_t>(g * rows + r)];
      if (p < 0) {
        if (r == 0) return "empty group " + std::to_string(g);
        ended = true;
        continue;
      }
      if (ended) return "group " + std::to_string(g) + " not filled from the front";
      if (p >= static_cast<int32_t>(ids.size())) return "pair out of range";
      if (ids[static_cast<size_t>(p)] != expert[static_cast<size_t>(g)]) return "pair in another expert's group";
      ++seen[static_cast<size_t>(p)];
    }
  }
  for (int s : seen) {
    if (s != 1) return "a pair placed " + std::to_string(s) + " times";
  }
  return "";
}

// routing: 0 uniform over num_experts, 1 skewed (most pairs on a few experts, some absent).
void check_grouped(Context& ctx, DType type, int64_t num_in, int64_t num_tokens, int64_t k, int64_t num_experts, int rows,
                   int routing) {
  // out_g is also the down projection's input: a whole number of the type's blocks.
  const int64_t out_g = type == DType::Q4_K || type == DType::Q5_K ? 256 : 64, out_s = 29, num_pairs = num_tokens * k;
  const size_t rb = dtype_row_bytes(type, num_in), rb_down = dtype_row_bytes(type, out_g);
  std::vector<int32_t> ids(static_cast<size_t>(num_pairs));
  for (int32_t& id : ids) {
    const uint32_t span = routing == 1 ? static_cast<uint32_t>(std::min<int64_t>(num_experts, 3)) : static_cast<uint32_t>(num_experts);
    id = static_cast<int32_t>(ctx.rng() % span);
    if (routing == 1 && ctx.rng() % 5 == 0) id = static_cast<int32_t>(num_experts - 1);  // a lone tail expert
  }
  const std::vector<uint8_t> wg = random_weights(ctx.rng, type, num_in, out_g * num_experts);
  const std::vector<uint8_t> wu = random_weights(ctx.rng, type, num_in, out_g * num_experts);
  const std::vector<uint8_t> wd = random_weights(ctx.rng, type, out_g, num_in * num_experts);  // down: out_g -> num_in
  const std::vector<uint8_t> ws = random_weights(ctx.rng, type, num_in, out_s);
  const std::vector<float> x = random_floats(ctx.rng, static_cast<size_t>(num_tokens * num_in));
  DeviceBuffer<uint8_t> dwg(wg), dwu(wu), dwd(wd), dws(ws);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<int32_t> dids(ids);
  const int64_t bound = moe_pair_groups_bound(num_pairs, num_experts, rows);
  DeviceBuffer<int32_t> g_expert(static_cast<size_t>(std::max<int64_t>(bound, 1))),
      g_pairs(static_cast<size_t>(std::max<int64_t>(bound, 1) * rows)), g_count(1);
  const std::string what = std::string(dtype_name(type)) + " in=" + std::to_string(num_in) + " pairs=" +
                           std::to_string(num_pairs) + " E=" + std::to_string(num_experts) + " R=" + std::to_string(rows) +
                           (routing == 1 ? " skewed" : " uniform");

  // Per pair (the reference path): gate, up, swiglu; down from the gated rows; the shared rows.
  DeviceBuffer<float> tg(static_cast<size_t>(num_pairs * out_g)), tu(tg.size()), td(static_cast<size_t>(num_pairs * num_in)),
      ts(static_cast<size_t>(num_tokens * out_s));
  CHECK_GPU(matmul_experts_gpu(MatmulExpertsArgs{MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx.get(), 0, num_in, tg.get(), out_g},
                                                 dids.get(), num_pairs, k}, kCudaCores, nullptr));
  CHECK_GPU(matmul_experts_gpu(MatmulExpertsArgs{MatmulArgs{dwu.get(), type, num_in, out_g, rb, dx.get(), 0, num_in, tu.get(), out_g},
                                                 dids.get(), num_pairs, k}, kCudaCores, nullptr));
  CHECK_GPU(swiglu_gpu(tg.get(), tu.get(), tg.get(), num_pairs * out_g, nullptr));
  CHECK_GPU(matmul_experts_gpu(MatmulExpertsArgs{MatmulArgs{dwd.get(), type, out_g, num_in, rb_down, tg.get(), 0, out_g, td.get(), num_in},
                                                 dids.get(), num_pairs, 1}, kCudaCores, nullptr));
  CHECK_GPU(matmul_gpu(MatmulArgs{dws.get(), type, num_in, out_s, rb, dx.get(), num_tokens, num_in, ts.get(), out_s}, kCudaCores, nullptr));
  const std::vector<float> want_g = tg.download(), want_d = td.download(), want_s = ts.download();

  bool groups_ok = true, same = true;
  std::string why;
  for (int rep = 0; rep < 2; ++rep) {  // twice on the same group buffers (stale groups must not leak)
    g_expert.poison();
    g_pairs.poison();
    CHECK_GPU(moe_group_pairs_gpu(MoeGroupPairsArgs{dids.get(), num_pairs, num_experts, rows, g_expert.get(), g_pairs.get(),
                                                    g_count.get()}, nullptr));
    const int32_t count = g_count.download()[0];
    const std::string bad = count < 0 || count > bound ? "count past the bound"
                                                       : check_groups(ids, num_experts, rows, g_expert.download(), g_pairs.download(), count);
    if (!bad.empty()) groups_ok = false, why += " groups: " + bad;
    const ExpertPairGroups groups{g_expert.get(), g_pairs.get(), g_count.get(), bound, rows};
    DeviceBuffer<float> yg(want_g.size()), yd(want_d.size()), ys(want_s.size());
    yg.poison();
    yd.poison();
    ys.poison();
    MatmulSegment up[2]{};
    up[0].args = MatmulArgs{dwg.get(), type, num_in, out_g, rb, dx.get(), num_pairs, num_in, yg.get(), out_g};
    up[0].w_up = dwu.get();
    up[0].expert_ids = dids.get();
    up[0].pairs_per_x_row = k;
    up[0].groups = groups;
    up[1].args = MatmulArgs{dws.get(), type, num_in, out_s, rb, dx.get(), num_tokens, num_in, ys.get(), out_s};
    CHECK_GPU(matmul_segments_gpu(up, 2, kCudaCores, nullptr));
    MatmulSegment down{};
    down.args = MatmulArgs{dwd.get(), type, out_g, num_in, rb_down, yg.get(), num_pairs, out_g, yd.get(), num_in};
    down.expert_ids = dids.get();
    down.groups = groups;
    CHECK_GPU(matmul_segments_gpu(&down, 1, kCudaCores, nullptr));
    if (!same_bits(yg.download(), want_g)) same = false, why += " gate*up";
    if (!same_bits(yd.download(), want_d)) same = false, why += " down";
    if (!same_bits(ys.download(), want_s)) same = false, why += " shared rows";
  }
  ctx.results.record_exact("matmul_segments_gpu(grouped experts)", what, groups_ok && same,
                           groups_ok && same ? "groups complete; == matmul_experts_gpu per pair (bitwise, twice)"
                                             : ("differs:" + why).c_str());
}

// Bad grouped segments are refused: rows per group other than 2 or 4, groups without
// pointers, two grouped segments with different R, a per-pair expert segment beside one.
void check_grouped_refusals(Context& ctx) {
  const DType type = DType::Q4_0;
  const int64_t num_in = 64, out = 8;
  const size_t rb = dtype_row_bytes(type, num_in);
  DeviceBuffer<uint8_t> dw(random_weights(ctx.rng, type, num_in, out * 2));
  DeviceBuffer<float> dx(random_floats(ctx.rng, static_cast<size_t>(num_in * 2))), dy(static_cast<size_t>(out * 4));
  DeviceBuffer<int32_t> ids(std::vector<int32_t>{0, 1, 1, 0}), ge(4), gp(16), gc(1);
  auto seg = [&](int rows) {
    MatmulSegment s{};
    s.args = MatmulArgs{dw.get(), type, num_in, out, rb, dx.get(), 4, num_in, dy.get(), out};
    s.expert_ids = ids.get();
    s.pairs_per_x_row = 2;
    s.groups = ExpertPairGroups{ge.get(), gp.get(), gc.get(), 4, rows};
    return s;
  };
  struct Case {
    const char* what;
    std::vector<MatmulSegment> segs;
  };
  MatmulSegment no_pairs = seg(2);
  no_pairs.groups.pairs = nullptr;
  MatmulSegment per_pair = seg(2);
  per_pair.groups = ExpertPairGroups{};
  const Case cases[] = {
      {"rows per group 3", {seg(3)}},
      {"rows per group 8", {seg(8)}},
      {"groups without pairs", {no_pairs}},
      {"two grouped segments, R 2 and 4", {seg(2), seg(4)}},
      {"a per-pair expert segment beside a grouped one", {seg(2), per_pair}},
  };
  for (const Case& c : cases) {
    const bool refused = matmul_segments_gpu(c.segs.data(), static_cast<int>(c.segs.size()), kCudaCores, nullptr) == gpuErrorInvalidValue;
    ctx.results.record_exact("matmul_segments_gpu(grouped refuses)", c.what, refused, refused ? "refused" : "NOT refused");
  }
  const bool bad_rows = moe_group_pairs_gpu(MoeGroupPairsArgs{ids.get(), 4, 2, 3, ge.get(), gp.get(), gc.get()}, nullptr) ==
                        gpuErrorInvalidValue;
  ctx.results.record_exact("moe_group_pairs_gpu (refuses)", "rows per group 3", bad_rows, bad_rows ? "refused" : "NOT refused");
}

}  // namespace

void run_matmul_grouped_tests(Context& ctx) {
  // 35B-A3B: H 2048, 256 experts, top 8, 64 streams (512 pairs, ~2 per expert) and 64 x 4
  // verify rows (2048 pairs); small odd shapes with skewed routing (absent experts, lone
  // pairs, one expert holding most pairs).
  check_grouped(ctx, DType::Q4_0, 2048, 64, 8, 256, 2, 0);
  if (!ctx.quick) check_grouped(ctx, DType::Q4_0, 2048, 256, 8, 256, 4, 0);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F32, DType::Q4_K, DType::Q5_K}) {
    const int64_t in = t == DType::Q4_K || t == DType::Q5_K ? 256 : 96;
    for (int rows : {2, 4}) {
      check_grouped(ctx, t, in, 13, 3, 7, rows, 1);
      check_grouped(ctx, t, in, 9, 2, 5, rows, 0);
    }
  }
  check_grouped(ctx, DType::Q4_0, 224, 1, 1, 4, 2, 0);  // one pair: one group of one
  check_grouped_refusals(ctx);
}

}  // namespace deltaserve::kernels::gputest
