#include "runtime/grammar/grammar.h"

#include <functional>

namespace deltaserve::runtime::grammar {

ByteSet ByteSet::of(std::string_view bytes) {
  ByteSet s;
  for (const char c : bytes) s.add(static_cast<uint8_t>(c));
  return s;
}

ByteSet ByteSet::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.add_range(lo, hi);
  return s;
}

uint32_t Grammar::add_rule(std::string name) {
  rules_.push_back({std::move(name), {}});
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::add_alternative(uint32_t rule, const Sequence& elements) {
  rules_.at(rule).alternatives.push_back(static_cast<uint32_t>(elements_.size()));
  for (const Element& e : elements) {
    if (e.kind == Element::kEnd) throw GrammarError("grammar: an alternative holds an end element");
    elements_.push_back(e);
  }
  elements_.push_back({Element::kEnd, 0});
}

Element Grammar::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i) {
    if (sets_[i] == set) return {Element::kBytes, static_cast<uint32_t>(i)};
  }
  sets_.push_back(set);
  return {Element::kBytes, static_cast<uint32_t>(sets_.size() - 1)};
}

void Grammar::append_literal(Sequence& seq, std::string_view text) {
  for (const char c : text) seq.push_back(bytes(ByteSet::of(std::string_view(&c, 1))));
}

void Grammar::finish() {
  if (finished_) throw GrammarError("grammar: finish() called twice");
  if (root_ >= rules_.size()) throw GrammarError("grammar: no root rule");
  for (const Rule& r : rules_) {
    if (r.alternatives.empty()) throw GrammarError("grammar: rule '" + r.name + "' has no alternatives");
  }
  const size_t n = elements_.size();
  first_.assign(n, ByteSet{});
  nullable_.assign(n, 0);
  rule_first_.assign(rules_.size(), ByteSet{});
  rule_nullable_.assign(rules_.size(), 0);
  // Fixpoint: positions are evaluated back to front so one pass settles a whole alternative;
  // passes repeat until no rule's first set or nullability grows (monotone, so it ends).
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t k = n; k-- > 0;) {
      const Element& e = elements_[k];
      ByteSet f;
      uint8_t nul = 0;
      if (e.kind == Element::kEnd) {
        nul = 1;
      } else if (e.kind == Element::kBytes) {
        f = sets_[e.index];
      } else {
        f = rule_first_[e.index];
        if (rule_nullable_[e.index]) {
          f.merge(first_[k + 1]);
          nul = nullable_[k + 1];
        }
      }
      if (!(f == first_[k]) || nul != nullable_[k]) {
        first_[k] = f;
        nullable_[k] = nul;
        changed = true;
      }
    }
    for (size_t r = 0; r < rules_.size(); ++r) {
      ByteSet f;
      uint8_t nul = 0;
      for (const uint32_t a : rules_[r].alternatives) {
        f.merge(first_[a]);
        nul |= nullable_[a];
      }
      if (!(f == rule_first_[r]) || nul != rule_nullable_[r]) {
        rule_first_[r] = f;
        rule_nullable_[r] = nul;
        changed = true;
      }
    }
  }
  check_left_recursion();
  finished_ = true;
}

// A rule reaching itself through calls that sit behind nullable elements only would make the
// matcher expand forever without consuming a byte.
void Grammar::check_left_recursion() const {
  std::vector<uint8_t> mark(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::function<void(uint32_t)> visit = [&](uint32_t r) {
    mark[r] = 1;
    for (const uint32_t a : rules_[r].alternatives) {
      for (uint32_t k = a; elements_[k].kind != Element::kEnd; ++k) {
        const Element& e = elements_[k];
        if (e.kind == Element::kBytes) break;
        if (mark[e.index] == 1) throw GrammarError("grammar: rule '" + rules_[e.index].name + "' is left-recursive");
        if (mark[e.index] == 0) visit(e.index);
        if (!rule_nullable_[e.index]) break;
      }
    }
    mark[r] = 2;
  };
  for (uint32_t r = 0; r < rules_.size(); ++r) {
    if (mark[r] == 0) visit(r);
  }
}

}  // namespace deltaserve::runtime::grammar
