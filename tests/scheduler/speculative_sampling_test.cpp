// Speculative sampling on the embedded trained model's own distributions: at a fixed prefix,
// the next token drawn 50,000 times with speculation (a draft from the MTP head's q through
// the request's transforms, then accepted or resampled from the residual) and 50,000 times
// without (a plain draw from the trunk's p) must follow one distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/draft_verifier.h"
#include "runtime/model_weights.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/mtp_drafter.h"
#include "tests/runtime/chi_squared.h"

namespace deltaserve::scheduler {
namespace {

constexpr int kNumDraws = 50000;
constexpr uint64_t kFirstSeed = 0xD1CE0000;

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

// The trunk's logits for output position 1 and the head's logits of its first draft for it.
struct PrefixRows {
  std::vector<float> target, head;
  std::vector<int32_t> history;  // prompt + output token 0
};

PrefixRows rows_at_prefix(const runtime::LoadedModel& model, const std::vector<int32_t>& prompt,
                          const runtime::SamplingParams& params) {
  runtime::CpuBackend backend(model, runtime::CacheConfig{1, 16, 4, 2}, 2);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  const auto n = static_cast<int32_t>(prompt.size());
  runtime::ForwardOutput out;
  // The prompt, with the hidden rows the head catches up on; output 0 is its argmax.
  runtime::BatchPlan prefill;
  prefill.sequences.push_back({0, 0, prompt, blocks, 1, n, false});
  backend.forward(prefill, out);
  const int32_t first = argmax(out.row_logits(0), out.num_vocab);
  PrefixRows rows;
  rows.history = prompt;
  rows.history.push_back(first);

  runtime::MtpDrafter drafter(backend);
  runtime::SequencePlan seq;
  seq.id = 1;
  seq.tokens = std::span<const int32_t>(rows.history).first(prompt.size());
  seq.kv_blocks = blocks;
  seq.sample = seq.speculative = true;
  seq.sampling = &params;
  seq.history = std::span<const int32_t>(rows.history).first(prompt.size());
  seq.num_prompt_tokens = n;
  runtime::MtpDrafter::CatchUp c;
  c.seq = &seq;
  c.hidden = out.hidden;
  c.next_tokens.assign(rows.history.begin() + 1, rows.history.end());
  c.drafts_next = true;
  drafter.catch_up({c});

  // The decode step of output 0: the target row of output 1, and the head's draft for it.
  runtime::BatchPlan decode;
  decode.sequences.push_back({0, n, {first}, blocks, 1, 0, false});
  backend.forward(decode, out);
  rows.target.assign(out.row_logits(0), out.row_logits(0) + out.num_vocab);
  runtime::StepPlan plan;
  runtime::SequencePlan& next = plan.sequences.emplace_back(seq);
  next.num_cached_tokens = n;
  next.tokens = std::span<const int32_t>(rows.history).subspan(prompt.size());
  next.history = rows.history;
  next.output_index = 1;
  next.draft_depth = 1;
  drafter.draft(plan, [&](size_t, int32_t, std::span<const float> head_logits) {
    rows.head.assign(head_logits.begin(), head_logits.end());
    return 0;
  });
  return rows;
}

TEST(SpeculativeSampling, NextTokenOfTheEmbeddedModelKeepsItsDistribution) {
  const auto model = runtime::load_model("models/deltaserve-tiny-moe.gguf");
  const auto tokenizer = runtime::Tokenizer::from_gguf(*model->gguf);
  runtime::SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 12;
  const std::vector<int32_t> prompt = tokenizer->encode("It was a dark and stormy night;");
  const PrefixRows rows = rows_at_prefix(*model, prompt, params);
  ASSERT_EQ(rows.head.size(), rows.target.size());

  runtime::Sampler sampler(params, 0);
  sampler.set_prompt(prompt);
  sampler.accept(rows.history.back());
  const runtime::TokenDistribution p = sampler.distribution(sampler.processed_logits(rows.target));
  const runtime::TokenDistribution q = sampler.distribution(sampler.processed_logits(rows.head));
  double overlap = 0;  // sum min(p, q): the acceptance rate
  for (size_t i = 0; i < p.mass.size(); ++i)
    overlap += std::min(p.probability(static_cast<int32_t>(i)), q.probability(static_cast<int32_t>(i)));

  std::vector<int64_t> on(p.mass.size(), 0), off(p.mass.size(), 0);
  int64_t num_accepted = 0;
  for (int k = 0; k < kNumDraws; ++k) {
    const uint64_t seed = kFirstSeed + static_cast<uint64_t>(k);
    const int32_t draft = runtime::draw_token(q, runtime::sampler_word(seed, 1, runtime::DrawStream::Draft));
    const runtime::DraftDecision d = runtime::decide_draft(p, q, draft, seed, 1);
    ++on[static_cast<size_t>(d.id)];
    num_accepted += d.accepted;
    // Without speculation: other seeds, so the two samples are independent.
    ++off[static_cast<size_t>(runtime::draw_token(p, runtime::sampler_word(seed + kNumDraws, 1)))];
  }
  std::vector<double> expected;
  for (size_t i = 0; i < p.mass.size(); ++i) expected.push_back(p.probability(static_cast<int32_t>(i)));
  const runtime::testing::FitResult fit_on = runtime::testing::fit(on, expected);
  const runtime::testing::FitResult fit_off = runtime::testing::fit(off, expected);
  const runtime::testing::FitResult same = runtime::testing::homogeneity(on, off);
  std::printf("embedded model, top-k 12: acceptance %.3f (sum min(p, q) %.3f)\n",
              static_cast<double>(num_accepted) / kNumDraws, overlap);
  std::printf("  speculation on vs p: chi2 %.2f, dof %d, p-value %.4g\n", fit_on.chi2, fit_on.dof, fit_on.p_value);
  std::printf("  speculation off vs p: chi2 %.2f, dof %d, p-value %.4g\n", fit_off.chi2, fit_off.dof, fit_off.p_value);
  std::printf("  on vs off: chi2 %.2f, dof %d, p-value %.4g\n", same.chi2, same.dof, same.p_value);
  EXPECT_EQ(fit_on.num_impossible, 0);
  EXPECT_EQ(fit_on.dof, 11);
  EXPECT_GT(fit_on.p_value, 1e-3);
  EXPECT_GT(fit_off.p_value, 1e-3);
  EXPECT_GT(same.p_value, 1e-3);
  EXPECT_LT(num_accepted, kNumDraws) << "the head must disagree somewhere for the test to mean something";
}

}  // namespace
}  // namespace deltaserve::scheduler
