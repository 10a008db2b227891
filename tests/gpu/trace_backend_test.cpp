// GpuBackend's kernel trace (runtime/gpu/kernel_trace.h): with the trace on, every forward's
// per-class launches add up to launches_last_forward(), every class took device time, the
// outputs are bitwise those of a backend without the trace (graphs on or off alike), the
// decode, prefill and MTP ops fall into their classes (none into "other": a new DS_GPU_LAUNCH
// format needs its row in kernel_trace.cpp), and set_trace(false) restores the graph setting.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/gpu/kernel_trace.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/synthetic_model.h"

namespace deltaserve::runtime {
namespace {

using deltaserve::testing::block_range;
using deltaserve::testing::expect_bitwise;
using deltaserve::testing::make_step;
using deltaserve::testing::random_tokens;
using gpu::KernelClass;
using gpu::KernelClassTime;

constexpr int32_t kBlocksPerSeq = 16;  // 256 positions of 16 tokens
const CacheConfig kCache{3, 16, 3 * kBlocksPerSeq, 4, 256};

std::vector<int32_t> blocks(int32_t slot) { return block_range(slot * kBlocksPerSeq, kBlocksPerSeq); }

TEST(KernelClassTest, FormatsOfTheCallSites) {
  using gpu::kernel_class;
  EXPECT_EQ(kernel_class("matmul %s (%s): %lld rows", "blk.0.attn_output.weight"), KernelClass::kMatmulMatvec);
  EXPECT_EQ(kernel_class("matmul %s (%s): %lld rows", "output.weight"), KernelClass::kLmHead);
  EXPECT_EQ(kernel_class("matmul %s (%s): %lld rows", "token_embd.weight"), KernelClass::kLmHead);
  EXPECT_EQ(kernel_class("matmul_prefill %s (%s)", "output.weight"), KernelClass::kMatmulTiled);
  EXPECT_EQ(kernel_class("%s: %d segments (%s)", "moe router"), KernelClass::kMoeRouter);
  EXPECT_EQ(kernel_class("%s: %d segments (%s)", "moe gate*up"), KernelClass::kMoeExpertsMatvec);
  EXPECT_EQ(kernel_class("%s: %d segments (%s)", "moe down"), KernelClass::kMoeExpertsMatvec);
  EXPECT_EQ(kernel_class("%s: %d segments (%s)", "gate*up"), KernelClass::kMatmulMatvec);
  EXPECT_EQ(kernel_class("%s: %d segments (%s)", "blk.0.attn_qkv.weight"), KernelClass::kMatmulMatvec);
  EXPECT_EQ(kernel_class("gdn_step: %lld rows", nullptr), KernelClass::kGdnStep);
  EXPECT_EQ(kernel_class("gdn_prefill: %lld rows", nullptr), KernelClass::kGdnPrefill);
  EXPECT_EQ(kernel_class("paged_attention rows [%lld, %lld)", nullptr), KernelClass::kAttentionPaged);
  EXPECT_EQ(kernel_class("prefill_attention: %lld", nullptr), KernelClass::kAttentionPrefill);
  EXPECT_EQ(kernel_class("moe_route: %lld rows", nullptr), KernelClass::kMoeRouter);
  EXPECT_EQ(kernel_class("moe_router %s (%s): %lld rows", "blk.0.ffn_gate_inp.weight"), KernelClass::kMoeRouter);
  EXPECT_EQ(kernel_class("moe_combine %lld rows", nullptr), KernelClass::kMoeCombine);
  EXPECT_EQ(kernel_class("moe_down_combine %s + %s%s%s: %lld rows", "blk.0.ffn_down_exps.weight"), KernelClass::kMoeDownCombine);
  for (const char* f : {"rms_norm %s: %lld rows", "q_norm %lld rows", "k_norm %lld rows", "gated_rms_norm %lld groups"})
    EXPECT_EQ(kernel_class(f, "x"), KernelClass::kNorms) << f;
  for (const char* f : {"rope q %lld rows", "rope k %lld rows", "kv_append %lld rows",
                        "rope q/k + q/k norms + kv_append %lld rows, heads %lld/%lld, hd %lld, table stride %lld"})
    EXPECT_EQ(kernel_class(f, nullptr), KernelClass::kRopeKv) << f;
  for (const char* f : {"swiglu %lld x %lld", "swiglu %lld prefill rows", "expert swiglu %lld", "shared swiglu %lld"})
    EXPECT_EQ(kernel_class(f, nullptr), KernelClass::kElementwise) << f;
  EXPECT_EQ(kernel_class("embedding %lld rows", nullptr), KernelClass::kEmbedding);
  EXPECT_EQ(kernel_class("MTP embedding %lld rows", nullptr), KernelClass::kEmbedding);
  EXPECT_EQ(kernel_class("gather hidden rows %lld", nullptr), KernelClass::kGather);
  EXPECT_EQ(kernel_class("argmax %lld logit rows", nullptr), KernelClass::kArgmax);
  EXPECT_EQ(kernel_class("brand_new_op %lld", nullptr), KernelClass::kOther);
  std::set<std::string> names;
  for (int c = 0; c < gpu::kNumKernelClasses; ++c) names.insert(gpu::kernel_class_name(static_cast<KernelClass>(c)));
  EXPECT_EQ(static_cast<int>(names.size()), gpu::kNumKernelClasses);
}

class GpuTraceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    model_ = deltaserve::testing::make_synthetic_model(GetParam(), kernels::DType::Q4_0, 99);
    traced_ = std::make_unique<GpuBackend>(*model_, kCache);
    plain_ = std::make_unique<GpuBackend>(*model_, kCache);
  }
  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const { return random_tokens(n, model_->config.num_vocab, seed); }

  // The classes of one take, checked against the forward: launches add up, every class ran.
  std::set<std::string> check_take(const std::string& what) {
    const std::vector<KernelClassTime> classes = traced_->take_trace();
    int64_t launches = 0;
    std::set<std::string> names;
    for (const KernelClassTime& c : classes) {
      launches += c.num_launches;
      names.insert(c.name);
      EXPECT_GT(c.num_calls, 0) << what << ": " << c.name;
      EXPECT_GE(c.num_launches, c.num_calls) << what << ": " << c.name;
      EXPECT_GT(c.microseconds, 0.0) << what << ": " << c.name;
      EXPECT_NE(c.name, "other") << what << ": a DS_GPU_LAUNCH format kernel_trace.cpp does not class";
    }
    EXPECT_EQ(launches, traced_->launches_last_forward()) << what;
    return names;
  }
  // The plan on both backends: bitwise equal outputs and launch counts; returns the classes.
  std::set<std::string> both(const BatchPlan& plan, const std::string& what, ForwardOutput* out = nullptr) {
    ForwardOutput t, p;
    traced_->forward(plan, t);
    plain_->forward(plan, p);
    expect_bitwise(t.logits, p.logits, what + ": logits");
    expect_bitwise(t.hidden, p.hidden, what + ": hidden");
    EXPECT_EQ(t.argmax_ids, p.argmax_ids) << what;
    EXPECT_EQ(traced_->launches_last_forward(), plain_->launches_last_forward()) << what;
    if (out != nullptr) *out = t;
    return check_take(what);
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<GpuBackend> traced_, plain_;
};

TEST_P(GpuTraceTest, ClassesAddUpAndOutputsAreBitwise) {
  const bool moe = GetParam();
  const bool graphs_before = traced_->graphs_enabled();
  EXPECT_TRUE(traced_->take_trace().empty());  // off: nothing
  traced_->set_trace(true);
  EXPECT_TRUE(traced_->trace_enabled());
  EXPECT_FALSE(traced_->graphs_enabled());

  // Prefill: three prompts (one past the GDN kernel's 64-row chunk), every class of the path.
  const std::vector<int32_t> lengths{70, 20, 5};
  std::vector<int32_t> cached(3, 0);
  BatchPlan prefill;
  for (int32_t s = 0; s < 3; ++s) {
    const int32_t n = lengths[static_cast<size_t>(s)];
    prefill.sequences.push_back(make_step(s, 0, tokens(n, s), blocks(s), 1, 2));
  }
  ForwardOutput trunk;
  const std::set<std::string> prefill_classes = both(prefill, "prefill", &trunk);
  for (const char* c : {"embedding", "matmul (tiled prefill)", "attention (prefill)", "norms", "rope+kv", "lm head",
                        "gather rows", "argmax, draw"}) {
    EXPECT_TRUE(prefill_classes.count(c)) << "prefill: " << c;
  }
  for (int32_t s = 0; s < 3; ++s) cached[static_cast<size_t>(s)] = lengths[static_cast<size_t>(s)];

  // Decode steps and a verify step with rollback.
  for (int step = 0; step < 3; ++step) {
    BatchPlan d;
    for (int32_t s = 0; s < 3; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 100 + 3 * step + s), blocks(s), 1));
    const std::set<std::string> names = both(d, "decode " + std::to_string(step));
    for (const char* c : {"matmul (matvec)", "gdn step", "attention (paged)", "lm head"}) EXPECT_TRUE(names.count(c)) << c;
    EXPECT_EQ(names.count("matmul (tiled prefill)"), 0u);
    if (moe) {
      for (const char* c : {"moe router", "moe experts (matvec)"}) EXPECT_TRUE(names.count(c)) << c;
      // The combine: its own launch, or with the down products in one (the staged matvec's).
      EXPECT_TRUE(names.count("moe combine") + names.count("moe down + combine") == 1) << "one combine class";
    }
  }
  EXPECT_EQ(traced_->graph_captures(), 0);  // eager while tracing
  BatchPlan verify;
  for (int32_t s = 0; s < 3; ++s)
    verify.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)], tokens(3, 200 + s), blocks(s), 3, 3, true));
  both(verify, "verify");
  for (int32_t s = 0; s < 3; ++s) {
    traced_->rollback(s, 2);
    plain_->rollback(s, 2);
    cached[static_cast<size_t>(s)] += 2;
  }

  // The MTP head: its own forward, traced alike.
  const int64_t h = model_->config.num_embd;
  MtpPlan mtp;
  MtpSequenceStep m;
  m.tokens = {3, 4};
  m.hidden.assign(trunk.hidden.begin(), trunk.hidden.begin() + 2 * h);
  m.kv_blocks = blocks(0);
  m.num_logits = 2;
  mtp.sequences.push_back(m);
  ForwardOutput t, p;
  traced_->forward_mtp(mtp, t);
  plain_->forward_mtp(mtp, p);
  expect_bitwise(t.logits, p.logits, "MTP logits");
  EXPECT_TRUE(check_take("MTP").count("embedding"));

  // Off: graphs as before; a graph setting changed while tracing is kept for afterwards.
  traced_->set_trace(false);
  EXPECT_FALSE(traced_->trace_enabled());
  EXPECT_EQ(traced_->graphs_enabled(), graphs_before);
  EXPECT_TRUE(traced_->take_trace().empty());
  for (int step = 0; step < 2; ++step) {
    BatchPlan d;
    for (int32_t s = 0; s < 3; ++s)
      d.sequences.push_back(make_step(s, cached[static_cast<size_t>(s)]++, tokens(1, 300 + 3 * step + s), blocks(s), 1));
    ForwardOutput a, b;
    traced_->forward(d, a);
    plain_->forward(d, b);
    expect_bitwise(a.logits, b.logits, "after trace, step " + std::to_string(step));
  }
  if (graphs_before) {
    EXPECT_GT(traced_->graph_captures(), 0);
  }
  traced_->set_trace(true);
  traced_->set_graphs_enabled(!graphs_before);
  EXPECT_FALSE(traced_->graphs_enabled());
  traced_->set_trace(false);
  EXPECT_EQ(traced_->graphs_enabled(), !graphs_before);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuTraceTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return std::string(i.param ? "moe" : "dense"); });

}  // namespace
}  // namespace deltaserve::runtime
