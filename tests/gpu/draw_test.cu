// The device draw (kernels/sampling/draw_gpu.h) against draw_ref on fresh random rows: the ids
// must be equal, bit for bit of the rule, for every combination of temperature, top-k, top-p and
// min-p, on language-model-like rows (a normal tail and a few peaks), flat rows (most of the
// vocabulary in top-p's set), rows with ties, -inf and NaN, and a row with a non-finite top;
// each draw alone equals the same draw in a batch.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/sampling/draw_gpu.h"
#include "kernels/sampling/draw_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

enum class RowKind { kPeaked, kFlat, kTiesAndHoles };

std::vector<float> make_row(std::mt19937& rng, int64_t vocab, RowKind kind) {
  std::normal_distribution<float> tail(0.0f, kind == RowKind::kFlat ? 0.05f : 2.5f);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& x : row) x = tail(rng);
  if (kind != RowKind::kFlat)
    for (int i = 0; i < 6; ++i) row[static_cast<size_t>(pick(rng))] = 8.0f + static_cast<float>(i);
  if (kind == RowKind::kTiesAndHoles) {
    const float tie = row[static_cast<size_t>(pick(rng))];
    for (int i = 0; i < 200; ++i) row[static_cast<size_t>(pick(rng))] = tie;
    for (int i = 0; i < 100; ++i) row[static_cast<size_t>(pick(rng))] = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 10; ++i) row[static_cast<size_t>(pick(rng))] = std::numeric_limits<float>::quiet_NaN();
    for (int i = 0; i < 20; ++i) row[static_cast<size_t>(pick(rng))] = (i % 2 == 0) ? 0.0f : -0.0f;
  }
  return row;
}

std::string describe(int64_t vocab, const DrawParams& p, RowKind kind) {
  return "vocab=" + std::to_string(vocab) + " T=" + std::to_string(1.0f / p.inv_temperature) + " k=" + std::to_string(p.top_k) +
         " p=" + std::to_string(p.top_p) + " min_p=" + std::to_string(p.min_p) + " kind=" + std::to_string(static_cast<int>(kind));
}

// One launch of many draws over `rows` rows, then each draw alone.
void check_draws(Context& ctx, int64_t vocab, RowKind kind, const std::vector<DrawParams>& params) {
  const int64_t stride = vocab + 3, num = static_cast<int64_t>(params.size());
  std::vector<float> logits(static_cast<size_t>(num * stride), 0.0f);
  std::vector<int32_t> rows(static_cast<size_t>(num)), want(static_cast<size_t>(num));
  for (int64_t d = 0; d < num; ++d) {
    const std::vector<float> row = make_row(ctx.rng, vocab, kind);
    std::copy(row.begin(), row.end(), logits.begin() + d * stride);
    rows[static_cast<size_t>(d)] = static_cast<int32_t>(num - 1 - d);  // draws in another order than rows
  }
  std::vector<DrawParams> ordered = params;
  for (int64_t d = 0; d < num; ++d) {
    const int32_t r = rows[static_cast<size_t>(d)];
    want[static_cast<size_t>(r)] = draw_ref(logits.data() + r * stride, vocab, ordered[static_cast<size_t>(d)]);
  }
  DeviceBuffer<float> dl(logits);
  DeviceBuffer<int32_t> drows(rows), dids(static_cast<size_t>(num));
  DeviceBuffer<DrawParams> dparams(ordered);
  dids.poison();
  CHECK_GPU(draw_gpu(DrawGpuArgs{dl.get(), stride, vocab, drows.get(), dparams.get(), dids.get(), num}, nullptr));
  const std::vector<int32_t> got = dids.download();
  for (int64_t d = 0; d < num; ++d) {
    const int32_t r = rows[static_cast<size_t>(d)];
    const bool ok = got[static_cast<size_t>(r)] == want[static_cast<size_t>(r)];
    ctx.results.record_exact("draw_gpu", describe(vocab, ordered[static_cast<size_t>(d)], kind), ok,
                             ok ? "ids equal" : ("ids differ: " + std::to_string(got[static_cast<size_t>(r)]) + " vs " +
                                                 std::to_string(want[static_cast<size_t>(r)])).c_str());
  }
  // Batch invariance: draw 0 alone.
  DeviceBuffer<int32_t> one_row(std::vector<int32_t>{rows[0]});
  dids.poison();
  CHECK_GPU(draw_gpu(DrawGpuArgs{dl.get(), stride, vocab, one_row.get(), dparams.get(), dids.get(), 1}, nullptr));
  ctx.results.record_exact("draw_gpu alone", describe(vocab, ordered[0], kind),
                           dids.download()[static_cast<size_t>(rows[0])] == want[static_cast<size_t>(rows[0])], "ids equal");
}

}  // namespace

void run_draw_tests(Context& ctx) {
  std::uniform_int_distribution<uint32_t> word;
  auto params = [&](float t, int32_t k, float p, float min_p) {
    DrawParams d;
    d.inv_temperature = 1.0f / t;
    d.top_k = k;
    d.top_p = p;
    d.min_p = min_p;
    d.word = word(ctx.rng);
    return d;
  };
  const int64_t vocabs[] = {248320, 5632, 97};
  for (int64_t vocab : vocabs) {
    for (RowKind kind : {RowKind::kPeaked, RowKind::kFlat, RowKind::kTiesAndHoles}) {
      std::vector<DrawParams> grid;
      for (float t : {0.3f, 0.7f, 1.0f, 2.5f})
        for (int32_t k : {0, 1, 20, 3000})
          for (float p : {1.0f, 0.95f, 0.5f})
            for (float min_p : {0.0f, 0.05f}) grid.push_back(params(t, k, p, min_p));
      if (ctx.quick) grid.resize(8);
      check_draws(ctx, vocab, kind, grid);
    }
  }
  // The same row and params with every word: the walk's edges (point 0, the last token).
  for (uint32_t w : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) {
    DrawParams d = params(1.0f, 0, 1.0f, 0.0f);
    d.word = w;
    check_draws(ctx, 5000, RowKind::kPeaked, {d});
  }
  // A non-finite top keeps only the argmax.
  std::vector<float> row(1000, 0.5f);
  row[123] = std::numeric_limits<float>::infinity();
  DeviceBuffer<float> dl(row);
  DeviceBuffer<int32_t> drow(std::vector<int32_t>{0}), did(1);
  DeviceBuffer<DrawParams> dp(std::vector<DrawParams>{params(1.0f, 0, 0.9f, 0.0f)});
  did.poison();
  CHECK_GPU(draw_gpu(DrawGpuArgs{dl.get(), 1000, 1000, drow.get(), dp.get(), did.get(), 1}, nullptr));
  ctx.results.record_exact("draw_gpu", "infinite top", did.download()[0] == 123, "the argmax");
}

}  // namespace deltaserve::kernels::gputest
