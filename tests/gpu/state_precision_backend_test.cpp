// CacheConfig::state_precision on the GPU backend (bf16 recurrent states, kernels/gdn/gdn_gpu.h):
// - greedy decoding with verify steps (drafts from the plain run, some corrupted, so steps
//   keep 1..4 rows and roll back) emits the tokens of plain one-row decoding, in bf16 as in
//   f32; where f32 gets the plain run's logits and rolled-back states bitwise, bf16 does too;
// - bf16 logits stay close to f32 logits over the same tokens (loose NMSE); the bf16 pools
//   take about half the state bytes; read_delta_state returns bf16 values;
// - the same speculative == plain check on a Q4_0 model with the tensor-core decode matvec
//   (CacheConfig::decode_matvec kTensor, and kStaged), bitwise, and its logits close to the fma
//   matvec's (and not its bits: the other kernels ran);
//   likewise with every Q4_0 decode product on the exact tile (GpuParityForms::tiled_decode_min_outputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::make_step;
using deltaserve::testing::nmse;
using deltaserve::testing::random_tokens;

constexpr int32_t kSeqs = 3, kBlocksPerSeq = 4, kDraftRows = 4, kNewTokens = 16;

// The forms every backend of this file is built with (the product's unless a test forces one).
GpuParityForms g_forms;

// Forces one field of g_forms for its scope.
template <class T>
class ScopedForm {
 public:
  ScopedForm(T GpuParityForms::*field, T value) : field_(field), old_(g_forms.*field) { g_forms.*field = value; }
  ~ScopedForm() { g_forms.*field_ = old_; }
  ScopedForm(const ScopedForm&) = delete;
  ScopedForm& operator=(const ScopedForm&) = delete;

 private:
  T GpuParityForms::*field_;
  T old_;
};

CacheConfig cache_config(StatePrecision precision, DecodeMatvec matvec = DecodeMatvec::kAuto) {
  CacheConfig c{kSeqs, 16, kSeqs * kBlocksPerSeq, kDraftRows, 0};
  c.state_precision = precision;
  c.decode_matvec = matvec;
  c.gpu_tuning.forms = g_forms;
  return c;
}

std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What a run saw per (slot, position processed): the logits row, and the delta states of every
// GDN layer once that position was in the cache.
struct Trace {
  std::vector<std::vector<int32_t>> tokens;                   // per slot: emitted tokens
  std::map<std::pair<int32_t, int32_t>, std::vector<float>> logits;
  std::map<std::pair<int32_t, int32_t>, std::vector<float>> states;
  int32_t num_partial = 0;  // verify steps that dropped rows (rollback below the step's rows)
  int64_t launches_per_decode_step = 0;  // plain runs: the last decode step's kernel launches
};

bool bitwise_as_plain(const Trace& spec, const Trace& plain);

class StatePrecisionTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q8_0, 57); }
  std::vector<int32_t> prompt(int32_t slot) const { return random_tokens(9 + 5 * slot, model_->config.num_vocab, 300 + slot); }

  std::vector<float> states(const GpuBackend& b, int32_t slot) const {
    std::vector<float> all;
    for (int g = 0; g < static_cast<int>(model_->config.num_gdn_layers()); ++g) {
      const std::vector<float> d = b.read_delta_state(g, slot);
      all.insert(all.end(), d.begin(), d.end());
    }
    return all;
  }

  // Every slot's prompt in one forward: cached[s] = its length, next[s] = its greedy token.
  void prefill_prompts(GpuBackend& b, std::vector<int32_t>& cached, std::vector<int32_t>& next, ForwardOutput& out) const {
    BatchPlan p;
    for (int32_t s = 0; s < kSeqs; ++s) p.sequences.push_back(make_step(s, 0, prompt(s), blocks(s), 1));
    b.forward(p, out);
    for (int32_t s = 0; s < kSeqs; ++s) {
      cached[s] = static_cast<int32_t>(prompt(s).size());
      next[s] = out.argmax_ids[static_cast<size_t>(out.logit_begin[s])];
    }
  }

  // Prompts, then kNewTokens greedy tokens per slot, one row per step.
  // Decode steps of the first num_seqs slots (after every slot's prompt).
  Trace plain(StatePrecision precision, int32_t num_seqs = kSeqs) const {
    GpuBackend b(*model_, cache_config(precision, matvec_));
    Trace t;
    t.tokens.resize(kSeqs);
    std::vector<int32_t> cached(kSeqs), next(kSeqs);
    ForwardOutput out;
    prefill_prompts(b, cached, next, out);
    for (int32_t step = 0; step < kNewTokens; ++step) {
      BatchPlan d;
      for (int32_t s = 0; s < num_seqs; ++s) d.sequences.push_back(make_step(s, cached[s], {next[s]}, blocks(s), 1));
      b.forward(d, out);
      t.launches_per_decode_step = b.launches_last_forward();
      for (int32_t s = 0; s < num_seqs; ++s) {
        t.tokens[s].push_back(next[s]);
        const float* row = out.sequence_logits(static_cast<size_t>(s));
        t.logits[{s, cached[s]}] = std::vector<float>(row, row + out.num_vocab);
        next[s] = out.argmax_ids[static_cast<size_t>(out.logit_begin[s])];
        ++cached[s];
        t.states[{s, cached[s]}] = states(b, s);
      }
    }
    return t;
  }

  // The same prompts, then verify steps of kDraftRows rows whose drafts are the plain run's
  // next tokens with one corrupted at a rotating index (none every 4th step): rows kept by
  // greedy acceptance, rollback, until every slot has kNewTokens tokens.
  Trace speculative(StatePrecision precision, const Trace& oracle) const {
    GpuBackend b(*model_, cache_config(precision, matvec_));
    Trace t;
    t.tokens.resize(kSeqs);
    std::vector<int32_t> cached(kSeqs), next(kSeqs);
    ForwardOutput out;
    prefill_prompts(b, cached, next, out);
    const int32_t vocab = static_cast<int32_t>(model_->config.num_vocab);
    for (int32_t step = 0; step < 4 * kNewTokens; ++step) {
      BatchPlan v;
      std::vector<int32_t> seqs;
      for (int32_t s = 0; s < kSeqs; ++s) {
        const size_t have = t.tokens[s].size();
        if (have >= static_cast<size_t>(kNewTokens)) continue;
        std::vector<int32_t> rows{next[s]};
        for (int32_t k = 1; k < kDraftRows; ++k) {
          const size_t at = have + static_cast<size_t>(k);
          int32_t draft = at < oracle.tokens[s].size() ? oracle.tokens[s][at] : 0;
          if (k == (step + s) % kDraftRows) draft = (draft + 1) % vocab;  // a rejected draft
          rows.push_back(draft);
        }
        v.sequences.push_back(make_step(s, cached[s], rows, blocks(s), kDraftRows, 0, true));
        seqs.push_back(s);
      }
      if (seqs.empty()) break;
      b.forward(v, out);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const int32_t s = seqs[i];
        const std::vector<int32_t>& rows = v.sequences[i].tokens;
        const auto id = [&](int32_t j) { return out.argmax_ids[static_cast<size_t>(out.logit_begin[i] + j)]; };
        int32_t kept = 1;
        while (kept < kDraftRows && rows[static_cast<size_t>(kept)] == id(kept - 1)) ++kept;
        for (int32_t j = 0; j < kept; ++j) {
          t.tokens[s].push_back(rows[static_cast<size_t>(j)]);
          const float* row = out.sequence_logits(i, j);
          t.logits[{s, cached[s] + j}] = std::vector<float>(row, row + out.num_vocab);
        }
        b.rollback(s, kept);
        t.num_partial += kept < kDraftRows;
        next[s] = id(kept - 1);
        cached[s] += kept;
        t.states[{s, cached[s]}] = states(b, s);
      }
    }
    for (auto& tokens : t.tokens) tokens.resize(std::min<size_t>(tokens.size(), kNewTokens));
    return t;
  }

  // See the Tensor/Staged matvec tests below.
  void matvec_speculation_exact(DecodeMatvec matvec) {
    model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q4_0, 58);
    const std::string name = decode_matvec_name(matvec);
    {
      GpuBackend probe(*model_, cache_config(StatePrecision::kF32, matvec));
      EXPECT_NE(probe.speed_settings().find("Q4_0 matvec " + name), std::string::npos) << probe.speed_settings();
    }
    matvec_ = matvec;
    const Trace p = plain(StatePrecision::kF32), s = speculative(StatePrecision::kF32, p);
    for (int32_t slot = 0; slot < kSeqs; ++slot) EXPECT_EQ(s.tokens[slot], p.tokens[slot]) << name << ", slot " << slot;
    EXPECT_GT(s.num_partial, 0) << name << ": no verify step rolled back";
    EXPECT_TRUE(bitwise_as_plain(s, p)) << name << " matvec: speculative logits/states not bitwise the plain ones";
    matvec_ = DecodeMatvec::kFma;
    const LogitsDiff d = logits_diff(p, plain(StatePrecision::kF32));
    EXPECT_GT(d.compared, 0);
    EXPECT_LE(d.worst_nmse, 1e-6) << name << " vs fma matvec logits";
    EXPECT_TRUE(d.any_different) << name << ": logits bitwise the fma matvec's (did its kernels run?)";
    std::printf("%s vs fma matvec: worst logits NMSE %.3g over %d positions\n", name.c_str(), d.worst_nmse, d.compared);
  }

  // Two plain runs' logits, compared while both fed the same tokens (a near tie may part them later).
  struct LogitsDiff {
    double worst_nmse = 0;
    int compared = 0;
    bool any_different = false;
  };
  LogitsDiff logits_diff(const Trace& a, const Trace& b) const {
    LogitsDiff d;
    for (int32_t slot = 0; slot < kSeqs; ++slot) {
      const int32_t start = static_cast<int32_t>(prompt(slot).size());
      for (int32_t i = 0; i < kNewTokens && a.tokens[slot][i] == b.tokens[slot][i]; ++i, ++d.compared) {
        const std::vector<float>&x = a.logits.at({slot, start + i}), &y = b.logits.at({slot, start + i});
        d.worst_nmse = std::max(d.worst_nmse, nmse(x, y));
        d.any_different = d.any_different || !same_bits(x, y);
      }
    }
    return d;
  }

  std::unique_ptr<LoadedModel> model_;
  DecodeMatvec matvec_ = DecodeMatvec::kAuto;  // kSeqs slots: auto is the staged matvec (fma without bf16 mma)
};

// Whether every logits row and state the speculative run saw is bitwise the plain run's.
bool bitwise_as_plain(const Trace& spec, const Trace& plain) {
  for (const auto* m : {&spec.logits, &spec.states}) {
    const auto& ref = m == &spec.logits ? plain.logits : plain.states;
    for (const auto& [key, v] : *m) {
      const auto it = ref.find(key);
      if (it != ref.end() && !same_bits(v, it->second)) return false;
    }
  }
  return true;
}

TEST_P(StatePrecisionTest, SpeculativeGreedyEqualsPlainGreedy) {
  bool bitwise[2] = {false, false};
  for (StatePrecision precision : {StatePrecision::kF32, StatePrecision::kBf16}) {
    const std::string what = state_precision_name(precision);
    const Trace p = plain(precision), s = speculative(precision, p);
    for (int32_t slot = 0; slot < kSeqs; ++slot) {
      EXPECT_EQ(s.tokens[slot], p.tokens[slot]) << what << ", slot " << slot;
    }
    EXPECT_GT(s.num_partial, 0) << what << ": no verify step rolled back";
    for (const auto& [key, v] : s.logits) {
      const auto it = p.logits.find(key);
      if (it == p.logits.end()) continue;
      EXPECT_LE(nmse(v, it->second), 1e-6) << what << ", slot " << key.first << " position " << key.second;
    }
    for (const auto& [key, v] : s.states) {
      const auto it = p.states.find(key);
      if (it == p.states.end()) continue;
      EXPECT_LE(nmse(v, it->second), 1e-6) << what << " states, slot " << key.first << " position " << key.second;
    }
    bitwise[precision == StatePrecision::kBf16] = bitwise_as_plain(s, p);
  }
  // The bf16 state keeps whatever exactness the f32 path has (verify rows round like steps).
  if (bitwise[0]) {
    EXPECT_TRUE(bitwise[1]) << "f32: speculative logits/states bitwise the plain ones; bf16: not";
  }
  std::printf("speculative == plain bitwise: f32 %s, bf16 %s\n", bitwise[0] ? "yes" : "no", bitwise[1] ? "yes" : "no");
}

TEST_P(StatePrecisionTest, Bf16LogitsCloseToF32AndHalfTheStateBytes) {
  GpuBackend f32(*model_, cache_config(StatePrecision::kF32)), bf16(*model_, cache_config(StatePrecision::kBf16));
  EXPECT_LT(static_cast<double>(bf16.state_bytes()), 0.6 * static_cast<double>(f32.state_bytes()));
  EXPECT_GT(static_cast<double>(bf16.state_bytes()), 0.5 * static_cast<double>(f32.state_bytes()));
  EXPECT_EQ(bf16.cache_config().state_precision, StatePrecision::kBf16);
  ForwardOutput a, b;
  BatchPlan p;
  for (int32_t s = 0; s < kSeqs; ++s) p.sequences.push_back(make_step(s, 0, prompt(s), blocks(s), 1));
  f32.forward(p, a);
  bf16.forward(p, b);
  EXPECT_LE(nmse(b.logits, a.logits), 1e-3) << "prefill";
  std::vector<int32_t> cached(kSeqs);
  for (int32_t s = 0; s < kSeqs; ++s) cached[s] = static_cast<int32_t>(prompt(s).size());
  double worst = 0;
  for (int32_t step = 0; step < kNewTokens; ++step) {  // the same tokens into both: bf16's greedy ones
    BatchPlan d;
    for (int32_t s = 0; s < kSeqs; ++s)
      d.sequences.push_back(make_step(s, cached[s]++, {b.argmax_ids[static_cast<size_t>(b.logit_begin[s])]}, blocks(s), 1));
    f32.forward(d, a);
    bf16.forward(d, b);
    worst = std::max(worst, nmse(b.logits, a.logits));
  }
  EXPECT_LE(worst, 1e-3) << "decode";
  std::printf("bf16 vs f32 state: worst decode logits NMSE %.3g\n", worst);
  for (int32_t s = 0; s < kSeqs; ++s) {
    for (float x : bf16.read_delta_state(0, s)) {
      uint32_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      ASSERT_EQ(bits & 0xffffu, 0u) << "slot " << s << ": not a bf16 value";
    }
  }
}

// A tensor-core decode matvec (kTensor, or kStaged: the dense products staged onto the tensor
// cores) keeps greedy speculation exact: verify rows give the bits of one-row steps (Q4_0
// weights, the type it serves), and its tokens follow the fma matvec's closely.
TEST_P(StatePrecisionTest, TensorMatvecSpeculativeGreedyEqualsPlainGreedy) { matvec_speculation_exact(DecodeMatvec::kTensor); }

TEST_P(StatePrecisionTest, StagedMatvecSpeculativeGreedyEqualsPlainGreedy) { matvec_speculation_exact(DecodeMatvec::kStaged); }


// Tensor mode with every Q4_0 decode product on the exact tile (the default line,
// gpu::kTiledDecodeMinOutputs, takes only LM-head-wide matrices there, wider than any of this
// model's): verify rows still give the bits of one-row steps, and the tile's logits stay close
// to the matvec's.
TEST_P(StatePrecisionTest, TiledDecodeProductsSpeculativeGreedyEqualsPlainGreedy) {
  model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q4_0, 58);
  matvec_ = DecodeMatvec::kTensor;
  const Trace m = plain(StatePrecision::kF32);  // every dense product on the tensor-core matvec
  const ScopedForm<int64_t> all_tiled(&GpuParityForms::tiled_decode_min_outputs, 1);
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kTensor));
    EXPECT_NE(probe.speed_settings().find("decode products of 1+ outputs tiled"), std::string::npos)
        << probe.speed_settings();
  }
  const Trace p = plain(StatePrecision::kF32), s = speculative(StatePrecision::kF32, p);
  for (int32_t slot = 0; slot < kSeqs; ++slot) EXPECT_EQ(s.tokens[slot], p.tokens[slot]) << "slot " << slot;
  EXPECT_GT(s.num_partial, 0) << "no verify step rolled back";
  EXPECT_TRUE(bitwise_as_plain(s, p)) << "tiled decode products: speculative logits/states not bitwise the plain ones";
  const LogitsDiff d = logits_diff(p, m);
  EXPECT_GT(d.compared, 0);
  EXPECT_TRUE(d.any_different) << "the tile's logits equal the matvec's bitwise: was the tile used?";
  EXPECT_LE(d.worst_nmse, 1e-6) << "tiled vs matvec decode products: logits";
  std::printf("tiled vs matvec decode products: worst logits NMSE %.3g over %d positions\n", d.worst_nmse, d.compared);
}

// Under the staged matvec the MoE layers' decode down products and combine run as one launch
// (moe_down_combine_gpu) for steps of 1-16 decode rows: the plain (3 rows) and speculative (3
// to 12 rows) runs' logits and states are bitwise those of the two launches it
// replaces (GpuParityForms::fuse_down_combine false), and the fused form has one launch fewer per
// MoE layer.
TEST_P(StatePrecisionTest, FusedDownCombineGivesTheTwoLaunchesBits) {
  if (!GetParam()) GTEST_SKIP() << "dense model: no MoE layer";
  model_ = deltaserve::testing::make_synthetic_model(true, kernels::DType::Q4_0, 60);
  matvec_ = DecodeMatvec::kStaged;
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    if (probe.speed_settings().find("Q4_0 matvec staged") == std::string::npos) GTEST_SKIP() << "no bf16 tensor cores";
    EXPECT_NE(probe.speed_settings().find("MoE down + combine fused at"), std::string::npos) << probe.speed_settings();
  }
  const Trace fused = plain(StatePrecision::kF32), fused_spec = speculative(StatePrecision::kF32, fused);
  const ScopedForm<bool> two_launches(&GpuParityForms::fuse_down_combine, false);
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    EXPECT_NE(probe.speed_settings().find("MoE down + combine apart"), std::string::npos) << probe.speed_settings();
  }
  const Trace apart = plain(StatePrecision::kF32), apart_spec = speculative(StatePrecision::kF32, apart);
  for (int32_t slot = 0; slot < kSeqs; ++slot) {
    EXPECT_EQ(fused.tokens[slot], apart.tokens[slot]) << "slot " << slot;
    EXPECT_EQ(fused_spec.tokens[slot], apart_spec.tokens[slot]) << "slot " << slot;
  }
  EXPECT_EQ(fused.logits.size(), apart.logits.size());
  EXPECT_TRUE(bitwise_as_plain(fused, apart)) << "fused down + combine: plain logits/states not bitwise the two launches'";
  EXPECT_TRUE(bitwise_as_plain(fused_spec, apart_spec)) << "fused down + combine: verify-step logits/states differ";
  EXPECT_LT(fused.launches_per_decode_step, apart.launches_per_decode_step) << "the fused launch did not replace two";
  std::printf("fused down + combine: %lld vs %lld launches per decode step\n",
              static_cast<long long>(fused.launches_per_decode_step), static_cast<long long>(apart.launches_per_decode_step));
}

// Under the staged matvec the products of decode steps of 1-2 rows carry their input norms
// (every block of the mixers' input projections and of a dense FFN's gate/up launch normalises
// its rows, rms_norm_gpu's bits): one and two sequences decoding give the logits and states of
// the norm launches (GpuParityForms::carry_input_norms false) bit for bit, with fewer launches per
// step; three (past gpu::kCarriedInputNormMaxRows) the same launches.
TEST_P(StatePrecisionTest, CarriedInputNormsGiveTheNormLaunchesBits) {
  model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q4_0, 61);
  matvec_ = DecodeMatvec::kStaged;
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    if (probe.speed_settings().find("Q4_0 matvec staged") == std::string::npos) GTEST_SKIP() << "no bf16 tensor cores";
    EXPECT_NE(probe.speed_settings().find("input norms in the products on"), std::string::npos) << probe.speed_settings();
  }
  ASSERT_EQ(gpu::kCarriedInputNormMaxRows, 2) << "the sequence counts below assume it";
  std::vector<Trace> carried, apart;
  for (int32_t seqs = 1; seqs <= kSeqs; ++seqs) carried.push_back(plain(StatePrecision::kF32, seqs));
  {
    const ScopedForm<bool> launches(&GpuParityForms::carry_input_norms, false);
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    EXPECT_NE(probe.speed_settings().find("input norms in the products off"), std::string::npos) << probe.speed_settings();
    for (int32_t seqs = 1; seqs <= kSeqs; ++seqs) apart.push_back(plain(StatePrecision::kF32, seqs));
  }
  for (int32_t seqs = 1; seqs <= kSeqs; ++seqs) {
    const Trace& c = carried[static_cast<size_t>(seqs - 1)];
    const Trace& a = apart[static_cast<size_t>(seqs - 1)];
    for (int32_t slot = 0; slot < seqs; ++slot) EXPECT_EQ(c.tokens[slot], a.tokens[slot]) << seqs << " sequences, slot " << slot;
    EXPECT_EQ(c.logits.size(), a.logits.size());
    EXPECT_TRUE(bitwise_as_plain(c, a)) << seqs << " sequences: logits/states not bitwise the norm launches'";
    if (seqs <= 2) {
      EXPECT_LT(c.launches_per_decode_step, a.launches_per_decode_step) << seqs << " sequences: no norm launch went away";
    } else {
      EXPECT_EQ(c.launches_per_decode_step, a.launches_per_decode_step) << seqs << " sequences: past the bound";
    }
    std::printf("carried input norms, %d sequences: %lld vs %lld launches per decode step\n", seqs,
                static_cast<long long>(c.launches_per_decode_step), static_cast<long long>(a.launches_per_decode_step));
  }
}

// Under the staged matvec a dense model's norms between its products are deferred into them
// (gpu::norm_deferred, every row count): greedy speculation stays exact (verify rows give the
// bits of one-row steps), the logits stay close to the norm launches' (GpuParityForms::defer_norms false;
// the deferred form has bits of its own), and every norm launch of a decode step but the first
// block's input norm goes (2L - 1 of them at 3 rows, past the carried norms' bound).
TEST_P(StatePrecisionTest, DeferredNormsKeepSpeculationExact) {
  if (GetParam()) GTEST_SKIP() << "MoE model: its norms ride in the router and the combine launches";
  model_ = deltaserve::testing::make_synthetic_model(false, kernels::DType::Q4_0, 62);
  matvec_ = DecodeMatvec::kStaged;
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    if (probe.speed_settings().find("Q4_0 matvec staged") == std::string::npos) GTEST_SKIP() << "no bf16 tensor cores";
    EXPECT_NE(probe.speed_settings().find("deferred norms on"), std::string::npos) << probe.speed_settings();
  }
  const Trace d = plain(StatePrecision::kF32), ds = speculative(StatePrecision::kF32, d);
  for (int32_t slot = 0; slot < kSeqs; ++slot) EXPECT_EQ(ds.tokens[slot], d.tokens[slot]) << "slot " << slot;
  EXPECT_GT(ds.num_partial, 0) << "no verify step rolled back";
  EXPECT_TRUE(bitwise_as_plain(ds, d)) << "deferred norms: speculative logits/states not bitwise the plain ones";
  const ScopedForm<bool> launches(&GpuParityForms::defer_norms, false);
  {
    GpuBackend probe(*model_, cache_config(StatePrecision::kF32, DecodeMatvec::kStaged));
    EXPECT_NE(probe.speed_settings().find("deferred norms off"), std::string::npos) << probe.speed_settings();
  }
  const Trace a = plain(StatePrecision::kF32);
  const LogitsDiff diff = logits_diff(a, d);
  EXPECT_GT(diff.compared, 0);
  EXPECT_TRUE(diff.any_different) << "deferred norms give the norm launches' bits: were they deferred?";
  EXPECT_LE(diff.worst_nmse, 1e-6) << "deferred norms vs norm launches: logits";
  EXPECT_EQ(a.launches_per_decode_step - d.launches_per_decode_step, 2 * model_->config.num_layers - 1);
  std::printf("deferred norms: %lld vs %lld launches per decode step, worst logits NMSE %.3g over %d positions\n",
              static_cast<long long>(d.launches_per_decode_step), static_cast<long long>(a.launches_per_decode_step),
              diff.worst_nmse, diff.compared);
}

// Auto takes the tensor cores (where the device has them): the tensor matvec for servers of
// kTensorMatvecMinSlots+ slots, the staged one below; fma without bf16 mma.
TEST(DecodeMatvecAuto, StagedBelowThirtyTwoSlotsTensorFrom) {
  const std::unique_ptr<LoadedModel> model = deltaserve::testing::make_synthetic_model(true, kernels::DType::Q4_0, 59);
  CacheConfig few{kTensorMatvecMinSlots - 1, 16, 4 * kTensorMatvecMinSlots, 1, 0},
      many{kTensorMatvecMinSlots, 16, 4 * kTensorMatvecMinSlots, 1, 0};
  const bool mma = kernels::tensor_matvec_available();
  EXPECT_NE(GpuBackend(*model, few).speed_settings().find(mma ? "Q4_0 matvec staged" : "Q4_0 matvec fma"), std::string::npos);
  EXPECT_NE(GpuBackend(*model, many).speed_settings().find(mma ? "Q4_0 matvec tensor" : "Q4_0 matvec fma"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Models, StatePrecisionTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return std::string(i.param ? "moe" : "dense"); });

}  // namespace
}  // namespace deltaserve::runtime
