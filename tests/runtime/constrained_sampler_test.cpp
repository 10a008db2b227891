// The sampler with a constraint (runtime/grammar): sampled output at temperature 1 always
// satisfies the schema; greedy output with drafts (some of them tokens the grammar refuses)
// is token for token the output without drafts; speculative sampling emits only allowed
// tokens; the device-argmax shortcut is never taken for a constrained request.
#include <gtest/gtest.h>

#include <random>

#include "runtime/draft_verifier.h"
#include "runtime/grammar/constraint_grammars.h"
#include "runtime/greedy.h"
#include "runtime/sampler.h"

namespace deltaserve::runtime {
namespace {

constexpr int32_t kEos = 0;

// Id 0 = EOS (no piece), 1..256 = the bytes, then multi-byte and structure-spanning pieces.
std::vector<std::string> pieces() {
  std::vector<std::string> p = {""};
  for (int b = 0; b < 256; ++b) p.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",\"", "\"}", "true", "false", "null", "12", "\xC3\xA9", "\xE6\x97", "\xA5",
                        "color", "\"red\"", "green", "size", "},{\"", "],\""})
    p.push_back(s);
  return p;
}

std::shared_ptr<const grammar::Constraint> make_constraint() {
  static const auto vocab = std::make_shared<grammar::Vocabulary>(pieces());
  const auto g = grammar::json_schema_grammar(grammar::SchemaJson::parse(R"({"type":"object","properties":{
      "color":{"enum":["red","green"]},"size":{"type":"integer"},"tags":{"type":"array","items":{"type":"boolean"}}},
      "required":["color","size","tags"],"additionalProperties":false})"));
  return std::make_shared<grammar::Constraint>(g, vocab, std::vector<int32_t>{kEos});
}

// Deterministic "model": logits as a function of the history (so rows of drafted positions
// equal the rows the same tokens get without drafts).
std::vector<float> logits_for(const std::vector<int32_t>& history, size_t num_vocab) {
  uint64_t h = 1469598103934665603ull;
  for (const int32_t t : history) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  std::mt19937_64 rng(h);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(num_vocab);
  for (float& x : row) x = normal(rng);
  return row;
}

void expect_valid(const std::vector<int32_t>& out) {
  const auto p = pieces();
  std::string text;
  for (const int32_t t : out) {
    if (t != kEos) text += p[static_cast<size_t>(t)];
  }
  const auto j = grammar::SchemaJson::parse(text);
  EXPECT_TRUE(j["color"] == "red" || j["color"] == "green") << text;
  EXPECT_TRUE(j["size"].is_number_integer()) << text;
  ASSERT_TRUE(j["tags"].is_array()) << text;
  for (const auto& b : j["tags"]) EXPECT_TRUE(b.is_boolean()) << text;
  EXPECT_EQ(j.size(), 3u) << text;
}

TEST(ConstrainedSampler, SampledOutputAlwaysValidates) {
  const size_t num_vocab = pieces().size() + 5;  // model rows wider than the tokenizer
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.constraint = make_constraint();
    Sampler s(params, seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 400 && (out.empty() || out.back() != kEos); ++i) {
      const int32_t id = s.sample(logits_for(out, num_vocab)).id;
      out.push_back(id);
      s.accept(id);
    }
    ASSERT_EQ(out.back(), kEos);
    expect_valid(out);
  }
}

TEST(ConstrainedSampler, NeverTheDeviceArgmaxShortcut) {
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_TRUE(only_argmax_needed(params));
  params.constraint = make_constraint();
  EXPECT_FALSE(only_argmax_needed(params));
}

// Greedy: drafts (random, often refused by the grammar, sometimes the right token) never
// change the output.
TEST(ConstrainedSampler, GreedyWithDraftsEqualsWithout) {
  const size_t num_vocab = pieces().size();
  SamplingParams params;
  params.temperature = 0.0f;
  params.constraint = make_constraint();
  Sampler plain(params, 1);
  std::vector<int32_t> expected;
  for (int i = 0; i < 300 && (expected.empty() || expected.back() != kEos); ++i) {
    const int32_t id = plain.sample(logits_for(expected, num_vocab)).id;
    expected.push_back(id);
    plain.accept(id);
  }
  ASSERT_EQ(expected.back(), kEos);
  expect_valid(expected);

  std::mt19937 rng(3);
  Sampler spec(params, 1);
  std::vector<int32_t> out;
  while (out.size() < expected.size()) {
    std::vector<int32_t> drafts;
    const size_t depth = rng() % 4;
    for (size_t j = 0; j < depth; ++j) {
      const size_t at = out.size() + j;
      // Half the time the right token, else any token (mostly ones the grammar refuses).
      drafts.push_back(rng() % 2 && at < expected.size() ? expected[at] : static_cast<int32_t>(rng() % num_vocab));
    }
    std::vector<float> rows;
    std::vector<int32_t> history = out;
    for (size_t r = 0; r <= drafts.size(); ++r) {
      const std::vector<float> row = logits_for(history, num_vocab);
      rows.insert(rows.end(), row.begin(), row.end());
      if (r < drafts.size()) history.push_back(drafts[r]);
    }
    for (const SampledToken& t : verify_drafts(spec, rows, static_cast<int64_t>(num_vocab), drafts, {})) out.push_back(t.id);
  }
  out.resize(std::min(out.size(), expected.size()));
  EXPECT_EQ(out, expected);
}

// Speculative sampling: drafts drawn through the draft sampler (which applies the mask too)
// from a different head distribution, accepted with min(1, p/q): only allowed tokens come out.
TEST(ConstrainedSampler, SpeculativeSamplingEmitsOnlyAllowedTokens) {
  const size_t num_vocab = pieces().size();
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.constraint = make_constraint();
    Sampler s(params, seed);
    std::vector<int32_t> out;
    for (int step = 0; step < 200 && (out.empty() || out.back() != kEos); ++step) {
      Sampler draft_sampler = s;
      std::vector<int32_t> drafts;
      std::vector<TokenDistribution> q;
      std::vector<int32_t> history = out;
      for (int j = 0; j < 3; ++j) {
        std::vector<float> head = logits_for(history, num_vocab);
        for (float& x : head) x = -x;  // a head that disagrees with the target
        const int32_t d = draw_draft(draft_sampler, head, draft_sampler.num_output_tokens(), q.emplace_back());
        drafts.push_back(d);
        draft_sampler.accept(d);
        history.push_back(d);
        if (d == kEos) break;
      }
      std::vector<float> rows;
      history = out;
      for (size_t r = 0; r <= drafts.size(); ++r) {
        const std::vector<float> row = logits_for(history, num_vocab);
        rows.insert(rows.end(), row.begin(), row.end());
        if (r < drafts.size()) history.push_back(drafts[r]);
      }
      for (const SampledToken& t : verify_drafts(s, rows, static_cast<int64_t>(num_vocab), drafts, q)) {
        out.push_back(t.id);
        if (t.id == kEos) break;
      }
    }
    ASSERT_EQ(out.back(), kEos);
    expect_valid(out);
  }
}

}  // namespace
}  // namespace deltaserve::runtime
