// Layer capture on the GPU backend (BatchPlan::capture_layers, the DFlash drafter's context):
// - ForwardOutput::layer_hidden against the CPU backend's for a prefill chunk, a mixed step,
//   verify rows and decode rows of several sequences, on the synthetic dense and MoE hybrids in
//   every decode form (fma, tensor and staged matvec: deferred, carried and fused norms and the
//   fused MoE down+combine), and bitwise between graph replays and eager steps;
// - plans that capture more layers than CacheConfig::max_capture_layers, or not increasing
//   trunk layers, are refused;
// - end to end: a GPU engine drafting with the embedded model's DFlash drafter
//   (models/deltaserve-tiny-moe-dflash) gives the greedy tokens of no speculation, and its
//   drafts are accepted about as often as on the CPU (wrong captured layers would draft badly).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend_runner.h"
#include "runtime/dflash_drafter.h"
#include "runtime/step_cost_table.h"
#include "runtime/tokenizer/tokenizer.h"
#include "scheduler/engine.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"
#include "tests/scheduler/real_stack.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::expect_bitwise;
using deltaserve::testing::forward_both;
using deltaserve::testing::make_step;
using deltaserve::testing::nmse;
using deltaserve::testing::random_tokens;

struct Case {
  bool moe;
  kernels::DType type;
  DecodeMatvec matvec;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.moe ? "moe_" : "dense_") + std::string(kernels::dtype_name(info.param.type)) + "_" +
         decode_matvec_name(info.param.matvec);
}

constexpr int32_t kBlocksPerSeq = 8;  // 128 positions of 16 tokens
const std::vector<int32_t> kLayers{0, 2, 3};  // of the synthetic models' 4 (GDN, GDN, attention last)

CacheConfig cache_config(DecodeMatvec matvec, StepGraphMode graphs) {
  CacheConfig c{4, 16, 4 * kBlocksPerSeq, 4, 256};
  c.decode_matvec = matvec;
  c.gpu_tuning.step_graphs = graphs;
  c.max_capture_layers = static_cast<int32_t>(kLayers.size());
  return c;
}

class GpuCaptureTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    model_ = deltaserve::testing::make_synthetic_model(GetParam().moe, GetParam().type, 4321);
    cpu_ = std::make_unique<CpuBackend>(*model_, cache_config(DecodeMatvec::kAuto, StepGraphMode::kOff), 2);
    gpu_ = std::make_unique<GpuBackend>(*model_, cache_config(GetParam().matvec, StepGraphMode::kAuto));
    eager_ = std::make_unique<GpuBackend>(*model_, cache_config(GetParam().matvec, StepGraphMode::kOff));
    const kernels::DType t = GetParam().type;
    tol_ = t == kernels::DType::F32 ? 1e-6 : 1e-5;  // forward_backend_test.cpp's bounds
  }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }
  static std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

  // The plan on the CPU, the GPU (graphs as the product has them) and the eager GPU: outputs
  // within tol of the CPU's, captured layers too, and graph replays bitwise the eager steps.
  // Returns the CPU's output.
  ForwardOutput run(const BatchPlan& plan, const std::string& what) {
    ForwardOutput c, g, e;
    cpu_->forward(plan, c);
    gpu_->forward(plan, g);
    eager_->forward(plan, e);
    deltaserve::testing::expect_outputs_near(g, c, tol_, what);
    const int64_t h = model_->config.num_embd, num_layers = static_cast<int64_t>(plan.capture_layers.size());
    const size_t want = static_cast<size_t>(c.num_hidden_rows * num_layers * h);
    EXPECT_EQ(g.layer_hidden.size(), want) << what;
    EXPECT_EQ(c.layer_hidden.size(), want) << what;
    // Each captured layer on its own (a layer's rows in another layer's place would hide in a
    // sum over all).
    for (int64_t k = 0; k < num_layers; ++k) {
      std::vector<float> gk, ck;
      for (int64_t r = 0; r < c.num_hidden_rows && g.layer_hidden.size() == want; ++r) {
        const int64_t at = (r * num_layers + k) * h;
        gk.insert(gk.end(), g.layer_hidden.begin() + at, g.layer_hidden.begin() + at + h);
        ck.insert(ck.end(), c.layer_hidden.begin() + at, c.layer_hidden.begin() + at + h);
      }
      EXPECT_LE(nmse(gk, ck), tol_) << what << ": captured layer " << plan.capture_layers[static_cast<size_t>(k)];
    }
    expect_bitwise(g.layer_hidden, e.layer_hidden, what + ": graph vs eager captured layers");
    expect_bitwise(g.hidden, e.hidden, what + ": graph vs eager hidden");
    return c;
  }

  void rollback(int32_t slot, int32_t kept) {
    cpu_->rollback(slot, kept);
    gpu_->rollback(slot, kept);
    eager_->rollback(slot, kept);
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<CpuBackend> cpu_;
  std::unique_ptr<GpuBackend> gpu_, eager_;
  ForwardOutput out_;
  double tol_ = 1e-6;
};

// Prefill chunks (every row's layers, one row's, five rows with logits), then a mixed step: a
// decode row, verify rows and a prefill chunk in one plan (eager: not graph-eligible).
TEST_P(GpuCaptureTest, PrefillChunksAndAMixedStep) {
  BatchPlan prefill;
  prefill.sequences.push_back(make_step(0, 0, tokens(37, 1), blocks(0), 1, 37));
  prefill.sequences.push_back(make_step(1, 0, tokens(64, 2), blocks(1), 1, 0));
  prefill.sequences.push_back(make_step(2, 0, tokens(5, 3), blocks(2), 5, 5));
  prefill.capture_layers = kLayers;
  run(prefill, "prefill");
  BatchPlan mixed;
  mixed.sequences.push_back(make_step(0, 37, tokens(1, 4), blocks(0), 1, 1));
  mixed.sequences.push_back(make_step(1, 64, tokens(4, 5), blocks(1), 4, 4, true));
  mixed.sequences.push_back(make_step(3, 0, tokens(20, 6), blocks(3), 1, 20));
  mixed.sequences.push_back(make_step(2, 5, tokens(3, 7), blocks(2), 0, 3));  // hidden rows, no logits
  mixed.capture_layers = {kLayers[1]};
  run(mixed, "mixed step");
  rollback(1, 2);
  BatchPlan after;
  for (int32_t s = 0; s < 4; ++s) {
    const int32_t cached[] = {38, 66, 8, 20};
    after.sequences.push_back(make_step(s, cached[s], tokens(1, 10 + static_cast<uint32_t>(s)), blocks(s), 1, 1));
  }
  after.capture_layers = kLayers;
  run(after, "decode after the mixed step");
}

// Verify rows (4 per sequence, keep_row_states) and decode rows of four sequences, two rounds,
// each step with the captured layers (graph-eligible: captured once, replayed), and a decode
// step without capture between them (its own graph; nothing captured); then decode steps of
// one and two rows.
TEST_P(GpuCaptureTest, VerifyAndDecodeRowsOfSeveralSequences) {
  BatchPlan prefill;
  for (int32_t s = 0; s < 4; ++s) prefill.sequences.push_back(make_step(s, 0, tokens(20 + s, 20 + s), blocks(s), 1));
  run(prefill, "prefill without capture");
  std::vector<int32_t> cached{20, 21, 22, 23};
  for (int round = 0; round < 2; ++round) {
    BatchPlan verify;
    for (int32_t s = 0; s < 4; ++s)
      verify.sequences.push_back(
          make_step(s, cached[static_cast<size_t>(s)], tokens(4, 100 + 10 * round + s), blocks(s), 4, 4, true));
    verify.capture_layers = kLayers;
    run(verify, "verify round " + std::to_string(round));
    for (int32_t s = 0; s < 4; ++s) {
      const int32_t kept = (s + round) % 4 + 1;
      rollback(s, kept);
      cached[static_cast<size_t>(s)] += kept;
    }
    for (int step = 0; step < 4; ++step) {
      BatchPlan d;
      for (int32_t s = 0; s < 4; ++s)
        d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 500 + 7 * step + s), blocks(s), 1, 1));
      if (step != 2) d.capture_layers = kLayers;
      run(d, "decode step " + std::to_string(step) + ", round " + std::to_string(round));
    }
  }
  // Steps of 2 and 1 decode rows: the products carry their input norms there
  // (products_normalise_input), a form of its own.
  for (const int32_t num_seqs : {2, 1, 2}) {
    BatchPlan d;
    for (int32_t s = 0; s < num_seqs; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 900 + s), blocks(s), 1, 1));
    d.capture_layers = kLayers;
    run(d, "decode step of " + std::to_string(num_seqs) + " rows");
  }
  if (gpu_->graphs_enabled()) {
    EXPECT_GT(gpu_->graph_replays(), 0);
  }
}

TEST_P(GpuCaptureTest, RefusesCapturesPastTheBoundOrOutOfOrder) {
  for (const std::vector<int32_t>& layers : std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {2, 0}, {1, 1}, {-1}, {4}}) {
    BatchPlan plan{{make_step(0, 0, tokens(3, 1), blocks(0), 1, 3)}};
    plan.capture_layers = layers;
    EXPECT_THROW(gpu_->forward(plan, out_), std::invalid_argument) << layers.size() << " layers";
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, GpuCaptureTest,
                         ::testing::Values(Case{false, kernels::DType::F32, DecodeMatvec::kAuto},
                                           Case{true, kernels::DType::F32, DecodeMatvec::kAuto},
                                           Case{false, kernels::DType::Q8_0, DecodeMatvec::kAuto},
                                           Case{true, kernels::DType::Q8_0, DecodeMatvec::kAuto},
                                           Case{false, kernels::DType::Q4_0, DecodeMatvec::kFma},
                                           Case{true, kernels::DType::Q4_0, DecodeMatvec::kFma},
                                           Case{false, kernels::DType::Q4_0, DecodeMatvec::kTensor},
                                           Case{true, kernels::DType::Q4_0, DecodeMatvec::kTensor},
                                           Case{false, kernels::DType::Q4_0, DecodeMatvec::kStaged},
                                           Case{true, kernels::DType::Q4_0, DecodeMatvec::kStaged}),
                         case_name);

}  // namespace
}  // namespace deltaserve::runtime
