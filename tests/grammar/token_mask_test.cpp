// Token-level behaviour: tokens spanning JSON structure, multi-byte characters split across
// tokens, the vocabulary walk against a token-by-token check, the constraint's phases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/grammar/constraint.h"
#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::first_refused;
using test::schema_grammar;

// A byte-level BPE-like vocabulary: every single byte, plus pieces spanning structure and
// multi-byte characters. Id 0 is a special token (no piece).
std::vector<std::string> small_pieces() {
  std::vector<std::string> p = {""};
  for (int b = 0; b < 256; ++b) p.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\":\"", "\",\"", "\"}", "},{\"", "name", "age", "\":[", "],\"", "true", "false",
                        "null", "12", "345", ".5", "e-", "\xC3", "\xA9", "\xC3\xA9", "\xE6\x97", "\xA5\"", "\xE6\x97\xA5",
                        "red", "\"red\"", "</think>", "</th", "ink>", "\n\n", "<tool_call>", "\n<function=", "get_weather",
                        ">\n", "<parameter=", "\n</parameter>\n", "</function>", "\n</tool_call>", "Paris"})
    p.push_back(s);
  return p;
}

int32_t id_of(const std::vector<std::string>& pieces, const std::string& s) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i] == s) return static_cast<int32_t>(i);
  }
  ADD_FAILURE() << "no piece " << s;
  return -1;
}

TEST(TokenLevel, TokensSpanningStructure) {
  const auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
      "required":["name","age"],"additionalProperties":false})");
  EXPECT_EQ(first_refused(*g, {"{\"", "name", "\":\"", "B", "ob", "\",\"", "age", "\":", "12", "345", "}"}), -1);
  EXPECT_EQ(first_refused(*g, {"{\"", "name", "\":\"", "x", "\",\"", "age", "\":", "12", ".5"}), 8);  // integer
  EXPECT_EQ(first_refused(*g, {"{\"", "age"}), 1);  // name comes first
  EXPECT_EQ(first_refused(*g, {"{\"", "name", "\":\"", "x", "\"}"}), 4);  // age is required
}

TEST(TokenLevel, MultiByteCharactersSplitAcrossTokens) {
  const auto g = schema_grammar(R"({"type":"string"})");
  EXPECT_EQ(first_refused(*g, {"\"", "\xC3", "\xA9", "\xE6\x97", "\xA5\"" }), -1);
  EXPECT_EQ(first_refused(*g, {"\"", "\xA9"}), 1);       // a continuation byte cannot start a character
  EXPECT_EQ(first_refused(*g, {"\"", "\xC3", "\""}), 2);  // nor can a character stop half way
  EXPECT_EQ(first_refused(*g, {"\"", "\xE6\x97", "\xC3"}), 2);
}

TEST(TokenLevel, MaskMatchesTokenByTokenCheck) {
  const auto pieces = small_pieces();
  const Vocabulary vocab(pieces);
  const auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string"},
      "tags":{"type":"array","items":{"enum":["red","blue"]}},"n":{"type":"number"}},
      "required":["name","tags","n"],"additionalProperties":false})");
  const std::string text = "{\"name\":\"\xC3\xA9t\xE6\x97\xA5\\n\",\"tags\":[\"red\", \"blue\"],\"n\":-12.5e-3}";
  MatcherState state = initial_state(*g);
  for (size_t k = 0; k <= text.size(); ++k) {
    const TokenMask mask = vocab.allowed(*g, state);
    for (int32_t id = 0; id < vocab.num_tokens(); ++id) {
      MatcherState s = state;
      const bool expect = !pieces[static_cast<size_t>(id)].empty() && advance_bytes(*g, s, pieces[static_cast<size_t>(id)]);
      ASSERT_EQ(mask.has(id), expect) << "after " << k << " bytes, token " << id;
    }
    if (k < text.size()) {
      ASSERT_TRUE(advance_bytes(*g, state, text.substr(k, 1))) << k;
    }
  }
  EXPECT_TRUE(accepting(*g, state));
}

TEST(TokenLevel, RandomTokensUnderTheMaskAlwaysGiveValidJson) {
  const auto pieces = small_pieces();
  auto vocab = std::make_shared<Vocabulary>(pieces);
  const auto g = schema_grammar(R"({"type":"object","properties":{"ok":{"type":"boolean"},
      "color":{"enum":["red","green"]},"v":{"anyOf":[{"type":"integer"},{"type":"null"}]}},
      "required":["ok","color","v"],"additionalProperties":false})");
  const int32_t eos = 0;
  auto c = std::make_shared<Constraint>(g, vocab, std::vector<int32_t>{eos});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    ConstraintState st(c);
    std::string out;
    for (int step = 0; step < 200; ++step) {
      const auto mask = st.mask();
      ASSERT_TRUE(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->num_tokens(); ++id) {
        if (mask->has(id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t id = allowed[rng() % allowed.size()];
      if (id == eos) break;
      out += pieces[static_cast<size_t>(id)];
      st.accept(id);
    }
    EXPECT_TRUE(st.complete()) << out;
    const auto parsed = SchemaJson::parse(out);
    EXPECT_TRUE(parsed["ok"].is_boolean()) << out;
    EXPECT_TRUE(parsed["color"] == "red" || parsed["color"] == "green") << out;
    EXPECT_TRUE(parsed["v"].is_null() || parsed["v"].is_number_integer()) << out;
  }
  EXPECT_GT(c->num_masks_cached(), c->num_masks_computed());  // states recur: the cache serves most
}

TEST(Constraint, EndIdsOnlyOnceComplete) {
  const auto pieces = small_pieces();
  auto vocab = std::make_shared<Vocabulary>(pieces);
  auto c = std::make_shared<Constraint>(schema_grammar(R"({"type":"boolean"})"), vocab, std::vector<int32_t>{0});
  ConstraintState st(c);
  EXPECT_FALSE(st.mask()->has(0));
  EXPECT_TRUE(st.mask()->has(id_of(pieces, "true")));
  EXPECT_FALSE(st.mask()->has(id_of(pieces, "null")));
  st.accept(id_of(pieces, "true"));
  EXPECT_TRUE(st.complete());
  EXPECT_EQ(st.mask()->count(), 1);
  EXPECT_TRUE(st.mask()->has(0));
  std::vector<float> logits(pieces.size() + 3, 1.0f);  // the model's rows may be wider than the vocabulary
  st.apply(logits);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(std::isinf(logits[i]), i != 0) << i;
}

TEST(Constraint, FreeUntilTheReasoningEndsThenConstrained) {
  const auto pieces = small_pieces();
  auto vocab = std::make_shared<Vocabulary>(pieces);
  auto c = std::make_shared<Constraint>(schema_grammar(R"({"enum":["red"]})"), vocab, std::vector<int32_t>{0},
                                        "</think>");
  ConstraintState st(c);
  EXPECT_EQ(st.mask(), nullptr);
  std::vector<float> logits(pieces.size(), 0.5f);
  st.apply(logits);
  // Free, except that the output may not end inside the reasoning: an end there would leave
  // no constrained part at all (empty content for a schema, no call for a forced call).
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(logits[i], i == 0 ? -INFINITY : 0.5f) << i;
  for (const char* p : {"name", "{\"", "\xC3", "</th"}) st.accept(id_of(pieces, p));  // anything goes while thinking
  EXPECT_FALSE(st.started());
  st.accept(id_of(pieces, "ink>"));  // the marker split over two tokens
  EXPECT_TRUE(st.started());
  EXPECT_TRUE(st.mask()->has(id_of(pieces, "\n\n")));
  EXPECT_TRUE(st.mask()->has(id_of(pieces, "\"red\"")));
  EXPECT_FALSE(st.mask()->has(id_of(pieces, "name")));
  st.accept(id_of(pieces, "\n\n"));
  st.accept(id_of(pieces, "\"red\""));
  EXPECT_TRUE(st.complete());
  // The marker as one token, and bytes after it in the same token already count.
  ConstraintState whole(c);
  whole.accept(id_of(pieces, "</think>"));
  EXPECT_TRUE(whole.started());
  whole.accept(id_of(pieces, "\""));
  EXPECT_FALSE(whole.mask()->has(id_of(pieces, "\"red\"")));
  EXPECT_TRUE(whole.mask()->has(id_of(pieces, "red")));
}

TEST(Constraint, AForcedForbiddenTokenLeavesOnlyTheEnd) {
  const auto pieces = small_pieces();
  auto vocab = std::make_shared<Vocabulary>(pieces);
  auto c = std::make_shared<Constraint>(schema_grammar(R"({"type":"null"})"), vocab, std::vector<int32_t>{0});
  ConstraintState st(c);
  st.accept(id_of(pieces, "true"));
  EXPECT_TRUE(st.failed());
  EXPECT_EQ(st.mask()->count(), 1);
  EXPECT_TRUE(st.mask()->has(0));
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
