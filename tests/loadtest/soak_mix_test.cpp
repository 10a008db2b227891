// The soak mix builds a plan for every kind with what the server must answer; the invalid
// bodies really are invalid, the oversize ones really are over the limit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loadtest/soak_mix.h"

namespace deltaserve::loadtest {
namespace {

struct Fixture {
  LoadOptions options;
  ServerFacts facts;
  Fixture() {
    options.server_max_body_bytes = 4096;
    options.output_tokens = 12;
    facts.model = "m";
    facts.context_tokens = 256;
    facts.num_state_slots = 4;
    facts.sample_token_ids = {10, 11, 12};
  }
};

TEST(SoakMix, EveryKindHasAPlanWithAnExpectation) {
  Fixture f;
  PromptSource prompts(f.options, "m");
  SoakMix mix(f.options, prompts, f.facts);
  std::mt19937_64 rng(1);
  for (int k = 0; k < kNumRequestKinds; ++k) {
    for (int i = 0; i < 20; ++i) {
      const RequestPlan plan = mix.make(static_cast<RequestKind>(k), i, rng);
      EXPECT_TRUE(!plan.raw.empty() || !plan.path.empty()) << request_kind_name(plan.kind);
      if (plan.expect == Expect::Status) {
        EXPECT_FALSE(plan.expected_statuses.empty());
      }
    }
  }
}

TEST(SoakMix, InvalidBodiesDoNotParseAndOversizeOnesAreOver) {
  Fixture f;
  PromptSource prompts(f.options, "m");
  SoakMix mix(f.options, prompts, f.facts);
  std::mt19937_64 rng(2);
  for (int i = 0; i < 200; ++i) {
    const RequestPlan bad = mix.make(i % 2 ? RequestKind::InvalidJson : RequestKind::InvalidUtf8, i, rng);
    EXPECT_TRUE(nlohmann::json::parse(bad.body, nullptr, false).is_discarded() ||
                !nlohmann::json::parse(bad.body, nullptr, false).is_object())
        << bad.variant;
    const RequestPlan big = mix.make(RequestKind::OversizeBody, i, rng);
    const bool declared_over =
        big.raw.find("Content-Length: " + std::to_string(f.options.server_max_body_bytes + 1)) != std::string::npos;
    EXPECT_TRUE(declared_over || static_cast<int64_t>(big.raw.size()) > f.options.server_max_body_bytes)
        << big.variant;
  }
}

TEST(SoakMix, CancelsAreScheduledAndWeightsParse) {
  Fixture f;
  f.options.mix = "chat_stream=0,cancel_mid_stream=5";
  PromptSource prompts(f.options, "m");
  SoakMix mix(f.options, prompts, f.facts);
  EXPECT_EQ(mix.describe().find("chat_stream="), std::string::npos);
  std::mt19937_64 rng(3);
  const RequestPlan cut = mix.make(RequestKind::CancelMidStream, 1, rng);
  EXPECT_EQ(cut.expect, Expect::ClientCancel);
  EXPECT_GE(cut.cancel_after_chunks, 1);
  f.options.mix = "burst=1";
  EXPECT_THROW(SoakMix(f.options, prompts, f.facts), std::invalid_argument);
  f.options.mix = "nonsense=1";
  EXPECT_THROW(SoakMix(f.options, prompts, f.facts), std::invalid_argument);
}

TEST(PromptSource, BodiesAskForUsageInEveryChunk) {
  Fixture f;
  PromptSource prompts(f.options, "m");
  std::mt19937_64 rng(4);
  const RequestPlan plan = prompts.normal_plan(0, rng, true);
  const auto body = nlohmann::json::parse(plan.body);
  EXPECT_TRUE(body["stream_options"]["include_usage"].get<bool>());
  EXPECT_TRUE(body["stream_options"]["continuous_usage_stats"].get<bool>());
  EXPECT_EQ(body["max_tokens"], 12);
}

}  // namespace
}  // namespace deltaserve::loadtest
