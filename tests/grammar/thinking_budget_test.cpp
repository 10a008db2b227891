// The constraint's reasoning budget: after N free-phase tokens only the close sequence is
// allowed (what the free text already ends with of it is not repeated), then the output is
// free again or under the grammar; a model that closes the reasoning itself never meets it.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/grammar/constraint.h"
#include "tests/grammar/grammar_test_util.h"

namespace deltaserve::runtime::grammar {
namespace {

using test::schema_grammar;

constexpr const char* kClose = "\n</think>\n\n";

// Every single byte, plus multi-byte pieces; id 0 is a special token (the end id here).
std::vector<std::string> pieces() {
  std::vector<std::string> p = {""};
  for (int b = 0; b < 256; ++b) p.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"name", "age", "</think>", "</th", "ink>", "\n\n", "\n</", "\"red\"", "red", ">\n\n"}) p.push_back(s);
  return p;
}

int32_t id_of(const std::vector<std::string>& p, const std::string& s) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == s) return static_cast<int32_t>(i);
  }
  ADD_FAILURE() << "no piece " << s;
  return -1;
}

// The pieces the mask allows, for readable expectations.
std::vector<std::string> allowed(const ConstraintState& st, const std::vector<std::string>& p) {
  std::vector<std::string> out;
  const auto m = st.mask();
  if (!m) return out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (m->has(static_cast<int64_t>(i))) out.push_back(p[i]);
  }
  return out;
}

std::shared_ptr<const Constraint> budget_only(const std::vector<std::string>& p) {
  return std::make_shared<Constraint>(nullptr, std::make_shared<Vocabulary>(p), std::vector<int32_t>{0}, "</think>",
                                       kClose);
}

TEST(ThinkingBudget, SpentBudgetForcesTheCloseThenTheOutputIsFree) {
  const auto p = pieces();
  ConstraintState st(budget_only(p), 3);
  std::vector<float> logits(p.size(), 0.5f);
  st.apply(logits);
  EXPECT_EQ(logits[0], 0.5f);  // without a grammar the output may end inside the reasoning
  for (const char* s : {"name", "age"}) st.accept(id_of(p, s));
  EXPECT_EQ(st.mask(), nullptr);
  st.accept(id_of(p, "red"));  // the third token: the budget is spent
  EXPECT_TRUE(st.closing());
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"\n", "\n</"}));
  st.apply(logits);
  EXPECT_TRUE(std::isinf(logits[0]));  // nor may it end before the close
  st.accept(id_of(p, "\n"));
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"<", "</think>", "</th"}));
  st.accept(id_of(p, "</think>"));
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"\n", "\n\n"}));
  st.accept(id_of(p, "\n\n"));
  EXPECT_TRUE(st.started());
  EXPECT_FALSE(st.closing());
  EXPECT_EQ(st.mask(), nullptr);
  EXPECT_TRUE(st.complete());
  std::vector<float> free(p.size(), 0.5f);
  st.apply(free);
  for (const float l : free) EXPECT_EQ(l, 0.5f);
}

TEST(ThinkingBudget, ABudgetReachedMidCloseKeepsWhatIsWritten) {
  const auto p = pieces();
  ConstraintState st(budget_only(p), 3);
  for (const char* s : {"name", "\n", "</th"}) st.accept(id_of(p, s));  // "\n</th" so far
  EXPECT_TRUE(st.closing());
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"i", "ink>"}));
  st.accept(id_of(p, "ink>"));
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"\n", "\n\n"}));
  // A copy (a draft's) advances on its own.
  ConstraintState draft = st;
  draft.accept(id_of(p, "\n\n"));
  EXPECT_TRUE(draft.started());
  EXPECT_TRUE(st.closing());
}

TEST(ThinkingBudget, AModelThatClosesEarlyIsLeftAlone) {
  const auto p = pieces();
  ConstraintState st(budget_only(p), 4);
  st.accept(id_of(p, "name"));
  st.accept(id_of(p, "</th"));
  st.accept(id_of(p, "ink>"));  // the marker, split, within the budget
  EXPECT_TRUE(st.started());
  for (int i = 0; i < 10; ++i) st.accept(id_of(p, "name"));
  EXPECT_FALSE(st.closing());
  EXPECT_EQ(st.mask(), nullptr);
}

TEST(ThinkingBudget, ZeroClosesAtOnceAndNoBudgetNeverCloses) {
  const auto p = pieces();
  ConstraintState zero(budget_only(p), 0);
  EXPECT_TRUE(zero.closing());
  EXPECT_EQ(allowed(zero, p), (std::vector<std::string>{"\n", "\n</"}));
  ConstraintState unbounded(budget_only(p));
  for (int i = 0; i < 100; ++i) unbounded.accept(id_of(p, "name"));
  EXPECT_FALSE(unbounded.closing());
  EXPECT_EQ(unbounded.mask(), nullptr);
}

TEST(ThinkingBudget, TheGrammarStartsAfterAForcedClose) {
  const auto p = pieces();
  auto c = std::make_shared<Constraint>(schema_grammar(R"({"enum":["red"]})"), std::make_shared<Vocabulary>(p),
                                        std::vector<int32_t>{0}, "</think>", kClose);
  ConstraintState st(c, 2);
  st.accept(id_of(p, "name"));
  st.accept(id_of(p, "age"));
  EXPECT_TRUE(st.closing());
  EXPECT_FALSE(st.mask()->has(0));  // no end while the close is forced
  st.accept(id_of(p, "\n</"));
  EXPECT_EQ(allowed(st, p), (std::vector<std::string>{"t"}));
  for (const char ch : std::string("think")) st.accept(id_of(p, std::string(1, ch)));
  st.accept(id_of(p, ">\n\n"));
  EXPECT_TRUE(st.started());
  EXPECT_FALSE(st.complete());
  EXPECT_TRUE(st.mask()->has(id_of(p, "\"red\"")));
  EXPECT_FALSE(st.mask()->has(id_of(p, "name")));
  EXPECT_FALSE(st.mask()->has(0));
  st.accept(id_of(p, "\"red\""));
  EXPECT_TRUE(st.complete());
  EXPECT_TRUE(st.mask()->has(0));
}

TEST(ThinkingBudget, NoCloseSequenceMeansNoBudget) {
  const auto p = pieces();
  // Without a marker the output is constrained from the start; a budget has nothing to bound.
  auto c = std::make_shared<Constraint>(schema_grammar(R"({"enum":["red"]})"), std::make_shared<Vocabulary>(p),
                                        std::vector<int32_t>{0}, "", kClose);
  EXPECT_TRUE(c->close().empty());
  ConstraintState st(c, 0);
  EXPECT_TRUE(st.started());
  EXPECT_FALSE(st.closing());
}

}  // namespace
}  // namespace deltaserve::runtime::grammar
