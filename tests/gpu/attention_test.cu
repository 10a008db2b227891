// paged_attention_gpu against paged_attention_ref per sequence (decode and verify rows,
// GQA ratios 1-16, head_dim 64/128/256, contexts across tile and split boundaries), kv_append_gpu, and
// batch invariance (a row alone == the row in the batch, bitwise). The one-launch form (sync
// counters, the combine fused into the chunk kernel's last block) == the two-launch form,
// bitwise, run twice on the same counters (left zero), poisoned outputs and workspace, at every
// head split (each divisor of the group) and both V load orders (neither may change a bit); bad arguments
// refused with nothing written. prefill_attention_gpu in both forms (tensor cores, CUDA cores)
// against the same reference, long contexts included, each batch-invariant.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu.h"
#include "tests/gpu/gpu_test_util.h"

namespace deltaserve::kernels::gputest {
namespace {

struct AttnShape {
  int64_t nh, nkv, hd;
};

// The prefill references over the host's cores (the long cases take billions of multiply-adds;
// each (row, head) is computed alone, so the split changes no bit).
class ThreadsFor final : public ParallelFor {
 public:
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) threads.emplace_back([&fn, n, w, workers] { fn(n * w / workers, n * (w + 1) / workers); });
    for (std::thread& t : threads) t.join();
  }
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// "" when one == two bitwise, else the first differing element as row / head / element with both
// values (and how many elements differ). Outputs are [rows][nh * hd].
std::string first_out_difference(const std::vector<float>& one, const std::vector<float>& two, int64_t nh, int64_t hd) {
  for (size_t i = 0; i < one.size(); ++i) {
    if (bits_of(one[i]) == bits_of(two[i])) continue;
    size_t num_diff = 0;
    for (size_t j = i; j < one.size(); ++j) num_diff += bits_of(one[j]) != bits_of(two[j]);
    const int64_t e = static_cast<int64_t>(i);
    char text[240];
    std::snprintf(text, sizeof text,
                  "row %lld head %lld element %lld: one launch %.9g (0x%08x) vs two launches %.9g (0x%08x); %zu of %zu differ",
                  static_cast<long long>(e / (nh * hd)), static_cast<long long>(e / hd % nh), static_cast<long long>(e % hd),
                  one[i], bits_of(one[i]), two[i], bits_of(two[i]), num_diff, one.size());
    return text;
  }
  return "";
}

// Counters left non-zero, as "counter [row r, unit u] = v" for the first one, or "" (units:
// KV head x head split, `units` a row).
std::string nonzero_counter(const std::vector<uint32_t>& counters, int64_t units) {
  for (size_t i = 0; i < counters.size(); ++i) {
    if (counters[i] == 0) continue;
    return "sync counter [row " + std::to_string(static_cast<int64_t>(i) / units) + ", kv head x split " +
           std::to_string(static_cast<int64_t>(i) % units) + "] left at " + std::to_string(counters[i]) +
           " (graph replays would skip or repeat the combine)";
  }
  return "";
}

// The one-launch form of g (fresh poisoned output and workspace, so neither the two-launch
// run's outputs nor its partials can stand in for a missed write) at every head split and
// both V load orders, twice on the same counters, and the two-launch form at each: each run ==
// want bitwise, counters zero after each. "" or what went wrong.
std::string check_one_launch(const PagedAttentionGpuArgs& g, DeviceBuffer<float>& out, DeviceBuffer<uint32_t>& counters,
                             const std::vector<float>& want) {
  DeviceBuffer<float> ws(static_cast<size_t>(paged_attention_workspace_floats(g)));
  const int64_t group = g.num_heads / g.num_kv_heads;
  for (int64_t forms = 0; forms < 2 * group; ++forms) {
    const int64_t splits = forms / 2 + 1, value_loads = forms % 2 + 1;
    if (group % splits != 0) continue;
    const std::string at = "head splits " + std::to_string(splits) + ", value loads " + std::to_string(value_loads) + ", ";
    PagedAttentionGpuArgs g1 = g;
    g1.out = out.get();
    g1.workspace = ws.get();
    g1.head_splits = splits;
    g1.value_loads = value_loads;
    g1.sync_counters = nullptr;  // two launches, this split
    out.poison();
    ws.poison();
    CHECK_GPU(paged_attention_gpu(g1, nullptr));
    const std::string two = first_out_difference(out.download(), want, g.num_heads, g.head_dim);
    if (!two.empty()) return at + "two launches: " + two;
    g1.sync_counters = counters.get();
    if (paged_attention_launches(g1) != 1) return "paged_attention_launches != 1 with sync counters";
    for (int run = 1; run <= 2; ++run) {
      out.poison();
      ws.poison();
      CHECK_GPU(paged_attention_gpu(g1, nullptr));
      CHECK_GPU(gpuDeviceSynchronize());
      const std::string diff = first_out_difference(out.download(), want, g.num_heads, g.head_dim);
      if (!diff.empty()) return at + "run " + std::to_string(run) + ": " + diff;
      // Only this call's [num_rows][num_heads] counters (the buffer may hold sentinels past them).
      std::vector<uint32_t> used = counters.download();
      used.resize(static_cast<size_t>(g.num_rows * g.num_heads));
      const std::string counter = nonzero_counter(used, g.num_kv_heads * splits);
      if (!counter.empty()) return at + "run " + std::to_string(run) + ": " + counter;
    }
  }
  return "";
}

// seqs[s] = {context length after this step, rows this step}: rows sit at the last positions.
void check_attention(Context& ctx, const AttnShape& sh, const std::vector<std::pair<int64_t, int64_t>>& seqs) {
  const int64_t block_tokens = 16, num_seqs = static_cast<int64_t>(seqs.size());
  int64_t max_len = 0;
  for (const auto& [len, rows] : seqs) max_len = std::max(max_len, len);
  const int64_t blocks_per_seq = (max_len + block_tokens - 1) / block_tokens;
  const int64_t num_blocks = num_seqs * blocks_per_seq + 3;
  // Each sequence gets a random set of physical blocks.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), ctx.rng);
  std::vector<int32_t> tables(perm.begin(), perm.begin() + num_seqs * blocks_per_seq);

  const int64_t kv_row = sh.nkv * sh.hd;
  const std::vector<float> kc = random_floats(ctx.rng, static_cast<size_t>(num_blocks * block_tokens * kv_row));
  const std::vector<float> vc = random_floats(ctx.rng, kc.size());
  std::vector<int32_t> row_seq, positions;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t i = 0; i < seqs[static_cast<size_t>(s)].second; ++i) {
      row_seq.push_back(static_cast<int32_t>(s));
      positions.push_back(static_cast<int32_t>(seqs[static_cast<size_t>(s)].first - seqs[static_cast<size_t>(s)].second + i));
    }
  }
  const int64_t rows = static_cast<int64_t>(row_seq.size());
  const int64_t q_stride = 2 * sh.nh * sh.hd;  // q|gate per head, as the layer lays them out
  const std::vector<float> qg = random_floats(ctx.rng, static_cast<size_t>(rows * q_stride), 0.3f);
  const int64_t out_stride = sh.nh * sh.hd;
  std::vector<float> ref(static_cast<size_t>(rows * out_stride));
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
  for (int64_t r = 0; r < rows;) {  // one reference call per sequence's rows
    const int64_t s = row_seq[static_cast<size_t>(r)], n = seqs[static_cast<size_t>(s)].second;
    PagedAttentionArgs a{qg.data() + r * q_stride, qg.data() + r * q_stride + sh.hd, q_stride, 2 * sh.hd,
                         ref.data() + r * out_stride, out_stride, kc.data(), vc.data(),
                         tables.data() + s * blocks_per_seq, block_tokens, positions.data() + r, n, sh.nh, sh.nkv, sh.hd, scale};
    paged_attention_ref(a, serial_for());
    r += n;
  }

  DeviceBuffer<float> dq(qg), dk(kc), dv(vc), dout(ref.size());
  DeviceBuffer<int32_t> dtab(tables), dseq(row_seq), dpos(positions);
  dout.poison();
  PagedAttentionGpuArgs g{dq.get(), dq.get() + sh.hd, q_stride, 2 * sh.hd, dout.get(), out_stride, dk.get(), dv.get(),
                          dtab.get(), blocks_per_seq, dseq.get(), dpos.get(), block_tokens, rows, sh.nh, sh.nkv, sh.hd,
                          max_len, scale, nullptr};
  DeviceBuffer<float> ws(static_cast<size_t>(paged_attention_workspace_floats(g)));
  g.workspace = ws.get();
  CHECK_GPU(paged_attention_gpu(g, nullptr));  // two launches: chunks, then the combine kernel
  const std::vector<float> got = dout.download();
  std::string shape = "nh=" + std::to_string(sh.nh) + " nkv=" + std::to_string(sh.nkv) + " hd=" + std::to_string(sh.hd) + " ctx/T=";
  for (const auto& [len, n] : seqs) shape += std::to_string(len) + "/" + std::to_string(n) + ",";

  // One launch == two launches over the whole batch. Counters start zero (as the backend's
  // zero-filled workspace) and sit in a larger buffer poisoned past the call's rows: those
  // entries must stay untouched.
  const size_t num_counters = static_cast<size_t>(rows * sh.nh);
  std::vector<uint32_t> counters_init(num_counters + 8, 0xFFFFFFFFu);
  std::fill(counters_init.begin(), counters_init.begin() + static_cast<int64_t>(num_counters), 0u);
  DeviceBuffer<uint32_t> counters(counters_init);
  DeviceBuffer<float> fused_out(ref.size());
  std::string fused_diff = check_one_launch(g, fused_out, counters, got);
  const std::vector<uint32_t> counters_after = counters.download();
  if (fused_diff.empty() && !std::equal(counters_after.begin() + static_cast<int64_t>(num_counters), counters_after.end(),
                                        counters_init.begin() + static_cast<int64_t>(num_counters))) {
    fused_diff = "wrote sync counters past [num_rows][num_heads]";
  }

  // Each row alone (its own max_keys: a smaller grid), both forms == the row in the batch.
  bool invariant = true;
  std::string alone_diff;
  DeviceBuffer<float> one(static_cast<size_t>(out_stride));
  for (int64_t r = 0; r < rows; ++r) {
    one.poison();
    PagedAttentionGpuArgs g1 = g;
    g1.q = dq.get() + r * q_stride;
    g1.gate = g1.q + sh.hd;
    g1.out = one.get();
    g1.row_seq = dseq.get() + r;
    g1.positions = dpos.get() + r;
    g1.num_rows = 1;
    g1.max_keys = positions[static_cast<size_t>(r)] + 1;
    CHECK_GPU(paged_attention_gpu(g1, nullptr));
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), got.data() + r * out_stride, alone.size());
    if (alone_diff.empty()) {
      const std::vector<float> want(got.begin() + r * out_stride, got.begin() + (r + 1) * out_stride);
      const std::string diff = check_one_launch(g1, one, counters, want);
      if (!diff.empty()) alone_diff = "row " + std::to_string(r) + " alone (reported as row 0): " + diff;
    }
  }
  ctx.results.record("paged_attention_gpu", shape, compare(got.data(), ref.data(), got.size()), 1e-9, invariant,
                     invariant ? "batch-invariant" : "NOT batch-invariant");
  if (fused_diff.empty()) fused_diff = alone_diff;
  const std::string fused_what = fused_diff.empty() ? "== two launches (bitwise at every head split and V load order, twice, counters left zero, rows alone)"
                                                    : "one launch != two launches: " + fused_diff;
  ctx.results.record_exact("paged_attention_gpu 1-launch", shape, fused_diff.empty(), fused_what.c_str());

  // kv_append_gpu: write fresh K/V rows at the step's positions; compare the whole cache.
  const std::vector<float> knew = random_floats(ctx.rng, static_cast<size_t>(rows * kv_row));
  const std::vector<float> vnew = random_floats(ctx.rng, knew.size());
  std::vector<float> kref = kc, vref = vc;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = positions[static_cast<size_t>(r)];
    const int64_t blk = tables[static_cast<size_t>(row_seq[static_cast<size_t>(r)] * blocks_per_seq + p / block_tokens)];
    const size_t at = static_cast<size_t>((blk * block_tokens + p % block_tokens) * kv_row);
    std::copy(knew.begin() + r * kv_row, knew.begin() + (r + 1) * kv_row, kref.begin() + static_cast<int64_t>(at));
    std::copy(vnew.begin() + r * kv_row, vnew.begin() + (r + 1) * kv_row, vref.begin() + static_cast<int64_t>(at));
  }
  DeviceBuffer<float> dkn(knew), dvn(vnew);
  CHECK_GPU(kv_append_gpu({dkn.get(), dvn.get(), kv_row, dk.get(), dv.get(), dtab.get(), blocks_per_seq, dseq.get(), dpos.get(),
                           block_tokens, rows, sh.nkv, sh.hd},
                          nullptr));
  const bool same = dk.download() == kref && dv.download() == vref;
  ctx.results.record_exact("kv_append_gpu", shape, same, "bitwise");
}

// prefill_attention_gpu in the form `g` asks for against ref; each sequence's last row is also
// run alone (a one-row sequence at that position): bitwise equal to the row in the batch.
void check_prefill_form(Context& ctx, const PrefillAttentionGpuArgs& g, const std::vector<float>& ref, DeviceBuffer<float>& dout,
                        const std::vector<int32_t>& begin, const std::vector<int32_t>& positions, const std::string& shape) {
  const int64_t out_stride = g.out_stride;
  dout.poison();
  CHECK_GPU(prefill_attention_gpu(g, nullptr));
  const std::vector<float> got = dout.download();
  bool invariant = true;
  DeviceBuffer<float> one(static_cast<size_t>(out_stride));
  for (int64_t s = 0; s < g.num_seqs; ++s) {
    const int64_t r = begin[static_cast<size_t>(s) + 1] - 1;
    DeviceBuffer<int32_t> b1(std::vector<int32_t>{0, 1}), f1(std::vector<int32_t>{positions[static_cast<size_t>(r)]});
    one.poison();
    PrefillAttentionGpuArgs g1 = g;
    g1.q = g.q + r * g.q_stride;
    g1.gate = g.gate + r * g.q_stride;
    g1.out = one.get();
    g1.block_tables = g.block_tables + s * g.block_table_stride;
    g1.seq_row_begin = b1.get();
    g1.seq_first_position = f1.get();
    g1.num_seqs = 1;
    g1.max_rows_per_seq = 1;
    CHECK_GPU(prefill_attention_gpu(g1, nullptr));
    const std::vector<float> alone = one.download();
    invariant = invariant && bitwise_equal(alone.data(), got.data() + r * out_stride, alone.size());
  }
  const char* kernel = prefill_attention_uses_tensor_cores(g) ? "prefill_attention tensor" : "prefill_attention cores";
  ctx.results.record(kernel, shape, compare(got.data(), ref.data(), got.size()), 1e-9, invariant,
                     invariant ? "batch-invariant" : "NOT batch-invariant");
}

// prefill_attention_gpu against paged_attention_ref; seqs[s] = {first position, rows}: the
// default form (tensor cores where the device has them and the head dim is 128 or 256) and the
// CUDA-core form (tensor_cores = false), each also checked for batch invariance.
void check_prefill_attention(Context& ctx, const AttnShape& sh, const std::vector<std::pair<int64_t, int64_t>>& seqs) {
  const int64_t block_tokens = 16, num_seqs = static_cast<int64_t>(seqs.size());
  int64_t max_len = 0, max_rows = 0;
  std::vector<int32_t> begin{0}, first;
  for (const auto& [p0, n] : seqs) {
    max_len = std::max(max_len, p0 + n);
    max_rows = std::max(max_rows, n);
    begin.push_back(begin.back() + static_cast<int32_t>(n));
    first.push_back(static_cast<int32_t>(p0));
  }
  const int64_t blocks_per_seq = (max_len + block_tokens - 1) / block_tokens;
  const int64_t num_blocks = num_seqs * blocks_per_seq + 1;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), ctx.rng);
  const std::vector<int32_t> tables(perm.begin(), perm.begin() + num_seqs * blocks_per_seq);
  const int64_t kv_row = sh.nkv * sh.hd, rows = begin.back();
  const std::vector<float> kc = random_floats(ctx.rng, static_cast<size_t>(num_blocks * block_tokens * kv_row));
  const std::vector<float> vc = random_floats(ctx.rng, kc.size());
  const int64_t q_stride = 2 * sh.nh * sh.hd, out_stride = sh.nh * sh.hd;
  const std::vector<float> qg = random_floats(ctx.rng, static_cast<size_t>(rows * q_stride), 0.3f);
  std::vector<float> ref(static_cast<size_t>(rows * out_stride));
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
  std::vector<int32_t> positions;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t i = 0; i < seqs[static_cast<size_t>(s)].second; ++i) positions.push_back(first[static_cast<size_t>(s)] + static_cast<int32_t>(i));
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t r = begin[static_cast<size_t>(s)], n = seqs[static_cast<size_t>(s)].second;
    PagedAttentionArgs a{qg.data() + r * q_stride, qg.data() + r * q_stride + sh.hd, q_stride, 2 * sh.hd,
                         ref.data() + r * out_stride, out_stride, kc.data(), vc.data(),
                         tables.data() + s * blocks_per_seq, block_tokens, positions.data() + r, n, sh.nh, sh.nkv, sh.hd, scale};
    paged_attention_ref(a, ThreadsFor{});
  }
  DeviceBuffer<float> dq(qg), dk(kc), dv(vc), dout(ref.size());
  DeviceBuffer<int32_t> dtab(tables), dbegin(begin), dfirst(first);
  PrefillAttentionGpuArgs g{dq.get(), dq.get() + sh.hd, q_stride, 2 * sh.hd, dout.get(), out_stride, dk.get(), dv.get(),
                            dtab.get(), blocks_per_seq, dbegin.get(), dfirst.get(), num_seqs, max_rows, block_tokens,
                            sh.nh, sh.nkv, sh.hd, scale};
  std::string shape = "nh=" + std::to_string(sh.nh) + " nkv=" + std::to_string(sh.nkv) + " hd=" + std::to_string(sh.hd) + " p0/T=";
  for (const auto& [p0, n] : seqs) shape += std::to_string(p0) + "/" + std::to_string(n) + ",";
  for (const bool tensor_cores : {true, false}) {
    g.tensor_cores = tensor_cores;
    check_prefill_form(ctx, g, ref, dout, begin, positions, shape);
  }
}

// Every precondition refused with gpuErrorInvalidValue and nothing launched (output and counters
// untouched), in both forms; 0 rows: success.
void check_paged_bad_args(Context& ctx) {
  const int64_t nh = 4, nkv = 2, hd = 64, bt = 16, rows = 3, keys = 40;
  const int64_t q_stride = 2 * nh * hd, blocks = (keys + bt - 1) / bt;
  DeviceBuffer<float> q(random_floats(ctx.rng, static_cast<size_t>(rows * q_stride)));
  DeviceBuffer<float> kc(random_floats(ctx.rng, static_cast<size_t>(blocks * bt * nkv * hd)));
  DeviceBuffer<float> vc(random_floats(ctx.rng, kc.size())), out(static_cast<size_t>(rows * nh * hd));
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  DeviceBuffer<int32_t> dt(table), dseq(std::vector<int32_t>(static_cast<size_t>(rows), 0)),
      dpos(std::vector<int32_t>{static_cast<int32_t>(keys - 3), static_cast<int32_t>(keys - 2), static_cast<int32_t>(keys - 1)});
  const std::vector<uint32_t> sentinel(static_cast<size_t>(rows * nkv + 1), 7u);
  DeviceBuffer<uint32_t> counters(sentinel);
  PagedAttentionGpuArgs base{q.get(), q.get() + hd, q_stride, 2 * hd, out.get(), nh * hd, kc.get(), vc.get(), dt.get(), blocks,
                             dseq.get(), dpos.get(), bt, rows, nh, nkv, hd, keys, 0.125f, nullptr};
  DeviceBuffer<float> ws(static_cast<size_t>(paged_attention_workspace_floats(base)));
  base.workspace = ws.get();
  out.poison();
  using Edit = void (*)(PagedAttentionGpuArgs&);
  const std::pair<const char*, Edit> bad[] = {
      {"num_kv_heads 0", [](PagedAttentionGpuArgs& a) { a.num_kv_heads = 0; }},
      {"num_heads % num_kv_heads != 0", [](PagedAttentionGpuArgs& a) { a.num_heads = 5; }},
      {"group > 16", [](PagedAttentionGpuArgs& a) { a.num_heads = 34; }},
      {"head_dim 0", [](PagedAttentionGpuArgs& a) { a.head_dim = 0; }},
      {"head_dim 66", [](PagedAttentionGpuArgs& a) { a.head_dim = 66; }},
      {"head_dim 260", [](PagedAttentionGpuArgs& a) { a.head_dim = 260; }},
      {"block_tokens 0", [](PagedAttentionGpuArgs& a) { a.block_tokens = 0; }},
      {"max_keys 0", [](PagedAttentionGpuArgs& a) { a.max_keys = 0; }},
      {"num_rows < 0", [](PagedAttentionGpuArgs& a) { a.num_rows = -1; }},
      {"q misaligned", [](PagedAttentionGpuArgs& a) { a.q += 1; }},
      {"k_cache misaligned", [](PagedAttentionGpuArgs& a) { a.k_cache += 2; }},
      {"v_cache misaligned", [](PagedAttentionGpuArgs& a) { a.v_cache += 3; }},
      {"q_stride % 4", [](PagedAttentionGpuArgs& a) { a.q_stride += 2; }},
      {"q_head_stride % 4", [](PagedAttentionGpuArgs& a) { a.q_head_stride += 1; }},
      {"workspace null", [](PagedAttentionGpuArgs& a) { a.workspace = nullptr; }},
      {"head_splits 3 (group 2)", [](PagedAttentionGpuArgs& a) { a.head_splits = 3; }},
      {"head_splits -1", [](PagedAttentionGpuArgs& a) { a.head_splits = -1; }},
      {"value_loads 3", [](PagedAttentionGpuArgs& a) { a.value_loads = 3; }},
  };
  bool ok = true;
  for (const bool fused : {false, true}) {
    for (const auto& [what, edit] : bad) {
      PagedAttentionGpuArgs a = base;
      if (fused) a.sync_counters = counters.get();
      edit(a);
      const gpuError_t err = paged_attention_gpu(a, nullptr);
      if (err != gpuErrorInvalidValue) {
        std::printf("     paged_attention bad args (%s): %s returned %d, want gpuErrorInvalidValue\n",
                    fused ? "one launch" : "two launches", what, static_cast<int>(err));
        std::fflush(stdout);
        ok = false;
      }
    }
  }
  PagedAttentionGpuArgs misaligned = base;
  misaligned.sync_counters = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(counters.get()) + 2);
  if (paged_attention_gpu(misaligned, nullptr) != gpuErrorInvalidValue) {
    std::printf("     paged_attention bad args: sync_counters misaligned not refused\n");
    ok = false;
  }
  PagedAttentionGpuArgs none = base;
  none.num_rows = 0;
  none.sync_counters = counters.get();
  if (paged_attention_gpu(none, nullptr) != gpuSuccess) {
    std::printf("     paged_attention bad args: 0 rows not gpuSuccess\n");
    ok = false;
  }
  CHECK_GPU(gpuDeviceSynchronize());
  const std::vector<float> o = out.download();
  const bool untouched = counters.download() == sentinel && std::all_of(o.begin(), o.end(), [](float x) { return std::isnan(x); });
  if (!untouched) std::printf("     paged_attention bad args: a refused call wrote the output or the counters\n");
  ctx.results.record_exact("paged_attention_gpu 1-launch", "bad args", ok && untouched, "refused, nothing launched");
}

}  // namespace

void run_attention_tests(Context& ctx) {
  const std::vector<std::pair<int64_t, int64_t>> prefill{{0, 100}, {37, 5}, {190, 70}, {0, 1}};
  const AttnShape prefill_shapes[] = {{16, 2, 256}, {4, 2, 128}, {2, 2, 64}, {6, 2, 256}, {24, 4, 256}, {3, 1, 100}};
  for (const AttnShape& sh : prefill_shapes) check_prefill_attention(ctx, sh, prefill);
  if (!ctx.quick) check_prefill_attention(ctx, {16, 2, 256}, {{0, 512}, {1000, 130}});
  // Long contexts (a prefix-cache hit or a later chunk: many key tiles before the rows), several
  // sequences, row counts off the tile (64 virtual rows: 8 rows at G = 8, 10 at G = 6, 4 at G =
  // 16), at the tensor form's head dims.
  const std::vector<std::pair<int64_t, int64_t>> long_quick{{1000, 37}, {0, 9}, {333, 65}};
  const std::vector<std::pair<int64_t, int64_t>> long_full{{4000, 300}, {17, 45}, {2100, 131}, {0, 1}};
  const AttnShape long_shapes[] = {{16, 2, 256}, {16, 2, 128}, {24, 4, 256}, {16, 1, 128}, {4, 4, 256}};
  for (const AttnShape& sh : long_shapes) check_prefill_attention(ctx, sh, ctx.quick ? long_quick : long_full);
  const std::vector<std::pair<int64_t, int64_t>> mixed{{1, 1}, {7, 3}, {300, 4}, {513, 1}, {256, 2}};
  const std::vector<std::pair<int64_t, int64_t>> small{{1, 1}, {20, 2}, {257, 3}};
  const AttnShape shapes[] = {{2, 2, 64}, {4, 2, 128}, {6, 2, 256}, {3, 1, 128}, {16, 2, 256}, {24, 4, 256}};
  for (const AttnShape& sh : shapes) check_attention(ctx, sh, ctx.quick ? small : mixed);
  if (!ctx.quick) check_attention(ctx, {16, 2, 256}, {{4000, 4}, {1030, 1}});
  // Rows across a change of split (4096 keys: 64 one-tile chunks; 4097: 33 two-tile chunks)
  // and a four-tile split (9000 keys), so chunks hold several tiles (online softmax).
  if (!ctx.quick) check_attention(ctx, {16, 2, 256}, {{4097, 3}, {9000, 2}, {65, 1}});
  check_attention(ctx, {8, 1, 128}, {{4160, 2}, {3, 1}});
  // Groups past 8 (the 16-head variant; the fused combine's heads x chunks exceed the threads),
  // full 64-chunk splits, odd row counts.
  check_attention(ctx, {16, 1, 128}, {{700, 3}, {64, 1}, {65, 1}});
  check_attention(ctx, {12, 1, 64}, {{4096, 2}, {129, 1}});
  if (!ctx.quick) check_attention(ctx, {32, 2, 256}, {{300, 3}, {1, 1}, {2049, 1}});
  check_paged_bad_args(ctx);
}

}  // namespace deltaserve::kernels::gputest
