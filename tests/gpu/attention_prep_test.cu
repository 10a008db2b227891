// attention_prep_gpu (one launch) against the five launches it replaces (rms_norm_gpu q/k,
// rope_neox_gpu q/k, kv_append_gpu), BITWISE: q|gate rows, K rows and both whole caches, over
// GQA ratios, head_dim 64/96/128/256, full and partial rotary dims, odd row counts, decode
// and prefill-like row sets, positions up to 300000. Caches start poisoned (all bytes 0xFF),
// so a slot nobody wrote stays NaN in both and a slot only one wrote shows. Also: a row run
// alone == the same row in the batch, and bad arguments are refused without a launch.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/attention/attention_gpu.h"
#include "kernels/attention/attention_prep_gpu.h"
#include "kernels/norm/norm_gpu.h"
#include "kernels/rope/rope_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

constexpr int64_t kBlockTokens = 16;
constexpr float kEps = 1e-6f, kBase = 1e7f;

struct PrepShape {
  int64_t nh, nkv, hd, rope_dims;
  int64_t kv_pad;  // floats of padding after each K/V row (kv_stride = nkv * hd + kv_pad)
};

// One step's rows and everything they read; host copies, uploaded per run.
struct PrepCase {
  PrepShape sh;
  int64_t rows = 0, q_stride = 0, kv_stride = 0, table_stride = 0, num_blocks = 0;
  std::vector<int32_t> positions, row_seq, tables;
  std::vector<float> qg, k, v, q_norm, k_norm;
};

// seqs[s] = {first position, rows}: a sequence's rows sit at consecutive positions. Each
// logical page in use gets its own physical page (shuffled); pages never read hold -1.
PrepCase make_case(Context& ctx, const PrepShape& sh, const std::vector<std::pair<int64_t, int64_t>>& seqs) {
  PrepCase c;
  c.sh = sh;
  int64_t max_end = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [p0, n] = seqs[s];
    for (int64_t i = 0; i < n; ++i) {
      c.positions.push_back(static_cast<int32_t>(p0 + i));
      c.row_seq.push_back(static_cast<int32_t>(s));
    }
    max_end = std::max(max_end, p0 + n);
  }
  c.rows = static_cast<int64_t>(c.positions.size());
  c.table_stride = (max_end + kBlockTokens - 1) / kBlockTokens;
  c.tables.assign(static_cast<size_t>(static_cast<int64_t>(seqs.size()) * c.table_stride), -1);
  std::vector<size_t> used;
  for (int64_t r = 0; r < c.rows; ++r) {
    const size_t e = static_cast<size_t>(c.row_seq[static_cast<size_t>(r)] * c.table_stride +
                                         c.positions[static_cast<size_t>(r)] / kBlockTokens);
    if (std::find(used.begin(), used.end(), e) == used.end()) used.push_back(e);
  }
  c.num_blocks = static_cast<int64_t>(used.size()) + 2;  // two pages nobody uses
  std::vector<int32_t> perm(static_cast<size_t>(c.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), ctx.rng);
  for (size_t i = 0; i < used.size(); ++i) c.tables[used[i]] = perm[i];

  c.q_stride = 2 * sh.nh * sh.hd;
  c.kv_stride = sh.nkv * sh.hd + sh.kv_pad;
  c.qg = random_floats(ctx.rng, static_cast<size_t>(c.rows * c.q_stride), 2.0f);
  c.k = random_floats(ctx.rng, static_cast<size_t>(c.rows * c.kv_stride), 2.0f);
  c.v = random_floats(ctx.rng, c.k.size());
  c.q_norm = random_floats(ctx.rng, static_cast<size_t>(sh.hd), 0.2f);
  c.k_norm = random_floats(ctx.rng, static_cast<size_t>(sh.hd), 0.2f);
  for (float& w : c.q_norm) w += 1.0f;
  for (float& w : c.k_norm) w += 1.0f;
  return c;
}

// Device buffers of one run (inputs fresh from the case, caches poisoned).
struct PrepRun {
  DeviceBuffer<float> qg, k, v, q_norm, k_norm, k_cache, v_cache;
  DeviceBuffer<int32_t> positions, row_seq, tables;
  AttentionPrepGpuArgs args{};

  explicit PrepRun(const PrepCase& c)
      : qg(c.qg), k(c.k), v(c.v), q_norm(c.q_norm), k_norm(c.k_norm),
        k_cache(static_cast<size_t>(c.num_blocks * kBlockTokens * c.sh.nkv * c.sh.hd)), v_cache(k_cache.size()),
        positions(c.positions), row_seq(c.row_seq), tables(c.tables) {
    k_cache.poison();
    v_cache.poison();
    args = {qg.get(), c.q_stride, 2 * c.sh.hd, k.get(), v.get(), c.kv_stride, q_norm.get(), k_norm.get(), k_cache.get(),
            v_cache.get(), tables.get(), c.table_stride, row_seq.get(), positions.get(), kBlockTokens, c.rows, c.sh.nh,
            c.sh.nkv, c.sh.hd, c.sh.rope_dims, kBase, kEps};
  }

  // gpu_attention_layer.cpp's sequence before the fusion, launch for launch.
  void unfused() {
    const AttentionPrepGpuArgs& a = args;
    const int64_t n = a.num_rows, hd = a.head_dim;
    CHECK_GPU(rms_norm_gpu({a.q, a.q_head_stride, a.q_norm, a.q, a.q_head_stride, n * a.num_heads, hd, a.eps}, nullptr));
    // K rows may be padded: one norm launch per row then (each block is one head either way).
    if (a.kv_stride == a.num_kv_heads * hd) {
      CHECK_GPU(rms_norm_gpu({a.k, hd, a.k_norm, a.k, hd, n * a.num_kv_heads, hd, a.eps}, nullptr));
    } else {
      for (int64_t r = 0; r < n; ++r) {
        float* kr = a.k + r * a.kv_stride;
        CHECK_GPU(rms_norm_gpu({kr, hd, a.k_norm, kr, hd, a.num_kv_heads, hd, a.eps}, nullptr));
      }
    }
    CHECK_GPU(rope_neox_gpu({a.q, a.q_stride, a.q_head_stride, a.positions, n, a.num_heads, a.rope_dims, a.rope_base}, nullptr));
    CHECK_GPU(rope_neox_gpu({a.k, a.kv_stride, hd, a.positions, n, a.num_kv_heads, a.rope_dims, a.rope_base}, nullptr));
    CHECK_GPU(kv_append_gpu({a.k, a.v, a.kv_stride, a.k_cache, a.v_cache, a.block_tables, a.block_table_stride, a.row_seq,
                             a.positions, a.block_tokens, n, a.num_kv_heads, hd},
                            nullptr));
  }
  void fused() { CHECK_GPU(attention_prep_gpu(args, nullptr)); }
};

std::string shape_of(const PrepCase& c) {
  return "rows=" + std::to_string(c.rows) + " heads=" + std::to_string(c.sh.nh) + "/" + std::to_string(c.sh.nkv) +
         " hd=" + std::to_string(c.sh.hd) + " R=" + std::to_string(c.sh.rope_dims) +
         " kv_pad=" + std::to_string(c.sh.kv_pad) + " max_pos=" +
         std::to_string(*std::max_element(c.positions.begin(), c.positions.end()));
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Bitwise; on a mismatch prints the first differing element (index decoded by `where`).
template <class Where>
bool same_bits(const std::string& shape, const char* buffer, const std::vector<float>& fused,
               const std::vector<float>& unfused, Where where) {
  for (size_t i = 0; i < fused.size(); ++i) {
    if (bits_of(fused[i]) == bits_of(unfused[i])) continue;
    size_t num_diff = 0;
    for (size_t j = i; j < fused.size(); ++j) num_diff += bits_of(fused[j]) != bits_of(unfused[j]);
    std::printf("     attention_prep %s: %s differs at %s: fused %.9g (0x%08x), unfused %.9g (0x%08x); %zu of %zu elements differ\n",
                shape.c_str(), buffer, where(static_cast<int64_t>(i)).c_str(), fused[i], bits_of(fused[i]), unfused[i],
                bits_of(unfused[i]), num_diff, fused.size());
    return false;
  }
  return true;
}

// Appended cache slots must be finite (written), all others still poison (NaN).
bool slots_written(const PrepCase& c, const std::vector<float>& cache) {
  const int64_t width = c.sh.nkv * c.sh.hd;
  std::vector<char> expect(static_cast<size_t>(c.num_blocks * kBlockTokens), 0);
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t p = c.positions[static_cast<size_t>(r)];
    const int32_t blk = c.tables[static_cast<size_t>(c.row_seq[static_cast<size_t>(r)] * c.table_stride + p / kBlockTokens)];
    expect[static_cast<size_t>(blk * kBlockTokens + p % kBlockTokens)] = 1;
  }
  for (size_t slot = 0; slot < expect.size(); ++slot) {
    for (int64_t i = 0; i < width; ++i) {
      if (std::isfinite(cache[slot * static_cast<size_t>(width) + static_cast<size_t>(i)]) != (expect[slot] != 0)) {
        std::printf("     attention_prep %s: cache slot %zu element %lld is %s\n", shape_of(c).c_str(), slot,
                    static_cast<long long>(i), expect[slot] ? "not written" : "written but no row appends there");
        return false;
      }
    }
  }
  return true;
}

void check_prep(Context& ctx, const PrepShape& sh, const std::vector<std::pair<int64_t, int64_t>>& seqs) {
  const PrepCase c = make_case(ctx, sh, seqs);
  const std::string shape = shape_of(c);
  PrepRun a(c), b(c);
  b.unfused();
  a.fused();
  CHECK_GPU(gpuDeviceSynchronize());
  const int64_t hd = sh.hd, kv_row = sh.nkv * hd;
  auto q_at = [&](int64_t i) {
    const int64_t r = i / c.q_stride, h = i % c.q_stride / (2 * hd), d = i % (2 * hd);
    return "row " + std::to_string(r) + " head " + std::to_string(h) + (d < hd ? " q dim " : " gate dim ") +
           std::to_string(d % hd) + " (pos " + std::to_string(c.positions[static_cast<size_t>(r)]) + ")";
  };
  auto k_at = [&](int64_t i) {
    const int64_t r = i / c.kv_stride, d = i % c.kv_stride;
    return "row " + std::to_string(r) + (d < kv_row ? " kv head " + std::to_string(d / hd) + " dim " + std::to_string(d % hd)
                                                    : " padding " + std::to_string(d - kv_row));
  };
  auto cache_at = [&](int64_t i) {
    return "page " + std::to_string(i / (kBlockTokens * kv_row)) + " slot " + std::to_string(i / kv_row % kBlockTokens) +
           " kv head " + std::to_string(i % kv_row / hd) + " dim " + std::to_string(i % hd);
  };
  const std::vector<float> kc = a.k_cache.download();
  bool ok = same_bits(shape, "q|gate", a.qg.download(), b.qg.download(), q_at);
  ok = same_bits(shape, "k", a.k.download(), b.k.download(), k_at) && ok;
  ok = same_bits(shape, "k_cache", kc, b.k_cache.download(), cache_at) && ok;
  ok = same_bits(shape, "v_cache", a.v_cache.download(), b.v_cache.download(), cache_at) && ok;
  ok = slots_written(c, kc) && ok;

  // The last row alone (same inputs, same cache page) == that row in the batch.
  PrepRun one(c);
  const int64_t last = c.rows - 1;
  one.args.q += last * c.q_stride;
  one.args.k += last * c.kv_stride;
  one.args.v += last * c.kv_stride;
  one.args.positions += last;
  one.args.row_seq += last;
  one.args.num_rows = 1;
  one.fused();
  const std::vector<float> q_one = one.qg.download(), q_all = a.qg.download();
  const bool invariant =
      std::memcmp(q_one.data() + last * c.q_stride, q_all.data() + last * c.q_stride, c.q_stride * sizeof(float)) == 0 &&
      std::memcmp(one.k.download().data() + last * c.kv_stride, a.k.download().data() + last * c.kv_stride,
                  c.kv_stride * sizeof(float)) == 0;
  if (!invariant) std::printf("     attention_prep %s: the last row alone differs from the batch\n", shape.c_str());
  ctx.results.record_exact("attention_prep_gpu", shape, ok && invariant,
                           ok && invariant ? "bitwise == 5 launches, batch-invariant" : "see above");
}

// Every precondition refused with gpuErrorInvalidValue and nothing written; 0 rows: success.
void check_bad_args(Context& ctx) {
  const PrepCase c = make_case(ctx, {4, 2, 64, 16, 0}, {{5, 3}});
  PrepRun run(c);
  using Edit = void (*)(AttentionPrepGpuArgs&);
  const std::pair<const char*, Edit> bad[] = {
      {"num_rows < 0", [](AttentionPrepGpuArgs& a) { a.num_rows = -1; }},
      {"num_heads < 0", [](AttentionPrepGpuArgs& a) { a.num_heads = -1; }},
      {"num_kv_heads 0", [](AttentionPrepGpuArgs& a) { a.num_kv_heads = 0; }},
      {"heads > 65535", [](AttentionPrepGpuArgs& a) { a.num_heads = 65535; }},
      {"head_dim 0", [](AttentionPrepGpuArgs& a) { a.head_dim = 0; }},
      {"head_dim 512", [](AttentionPrepGpuArgs& a) { a.head_dim = 512; }},
      {"rope_dims odd", [](AttentionPrepGpuArgs& a) { a.rope_dims = 15; }},
      {"rope_dims 0", [](AttentionPrepGpuArgs& a) { a.rope_dims = 0; }},
      {"rope_dims > head_dim", [](AttentionPrepGpuArgs& a) { a.rope_dims = 66; }},
      {"block_tokens 0", [](AttentionPrepGpuArgs& a) { a.block_tokens = 0; }},
      {"q null", [](AttentionPrepGpuArgs& a) { a.q = nullptr; }},
      {"k_cache null", [](AttentionPrepGpuArgs& a) { a.k_cache = nullptr; }},
      {"positions null", [](AttentionPrepGpuArgs& a) { a.positions = nullptr; }},
  };
  bool ok = true;
  for (const auto& [what, edit] : bad) {
    AttentionPrepGpuArgs a = run.args;
    edit(a);
    const gpuError_t err = attention_prep_gpu(a, nullptr);
    if (err != gpuErrorInvalidValue) {
      std::printf("     attention_prep bad args: %s returned %d, want gpuErrorInvalidValue\n", what, static_cast<int>(err));
      ok = false;
    }
  }
  AttentionPrepGpuArgs none = run.args;
  none.num_rows = 0;
  if (attention_prep_gpu(none, nullptr) != gpuSuccess) {
    std::printf("     attention_prep bad args: 0 rows not gpuSuccess\n");
    ok = false;
  }
  CHECK_GPU(gpuDeviceSynchronize());
  const std::vector<float> kc = run.k_cache.download();
  const bool untouched = run.qg.download() == c.qg && run.k.download() == c.k &&
                         std::all_of(kc.begin(), kc.end(), [](float x) { return std::isnan(x); });
  if (!untouched) std::printf("     attention_prep bad args: a refused call wrote memory\n");
  ctx.results.record_exact("attention_prep_gpu", "bad args", ok && untouched, "refused, nothing launched");
}

}  // namespace

void run_attention_prep_tests(Context& ctx) {
  check_bad_args(ctx);
  // The models' shapes: hd 256, R 64 (35B: 16/2 heads; 27B: 24/4), decode and mixed steps.
  check_prep(ctx, {16, 2, 256, 64, 0}, {{0, 1}});
  check_prep(ctx, {16, 2, 256, 64, 0}, {{7, 1}, {300000, 1}, {4097, 1}});
  check_prep(ctx, {24, 4, 256, 64, 0}, {{40, 3}, {1000, 1}, {0, 33}});
  check_prep(ctx, {16, 2, 256, 256, 0}, {{123, 5}});
  // head_dim 64/96/128, GQA 1..8, partial and full rotary, padded K/V rows.
  for (const PrepShape& sh : std::vector<PrepShape>{{8, 8, 128, 32, 0}, {8, 1, 128, 128, 4}, {4, 2, 64, 16, 0},
                                                    {3, 1, 64, 64, 0}, {6, 3, 96, 32, 0}, {2, 2, 96, 2, 8}}) {
    check_prep(ctx, sh, {{3, 1}, {17, 2}});
    if (!ctx.quick) check_prep(ctx, sh, {{0, 37}, {65000, 5}, {9, 1}});
  }
  if (!ctx.quick) check_prep(ctx, {32, 4, 128, 64, 0}, {{0, 129}, {500, 7}});
}

}  // namespace deltaserve::kernels::gputest
