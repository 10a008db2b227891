// RegexNode -> byte NFA (Thompson) -> byte DFA (subset construction) -> one grammar rule per
// live DFA state. Characters become their UTF-8 byte sequences, split so each sequence is a
// run of byte ranges (the usual UTF-8 range split), so every DFA path is well-formed UTF-8.
#include <algorithm>
#include <array>
#include <map>

#include "runtime/grammar/json_regex.h"

namespace deltaserve::runtime::grammar {
namespace {

struct ByteRange {
  uint8_t lo, hi;
};

std::vector<uint8_t> encode_utf8(uint32_t cp) {
  if (cp < 0x80) return {static_cast<uint8_t>(cp)};
  if (cp < 0x800) return {static_cast<uint8_t>(0xC0 | (cp >> 6)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  if (cp < 0x10000)
    return {static_cast<uint8_t>(0xE0 | (cp >> 12)), static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
            static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  return {static_cast<uint8_t>(0xF0 | (cp >> 18)), static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)),
          static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
}

// The code points lo..hi (no surrogates) as sequences of byte ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  for (const uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  }
  const size_t n = encode_utf8(lo).size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, out);
      utf8_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, out);
      utf8_sequences(hi & ~m, hi, out);
      return;
    }
  }
  const std::vector<uint8_t> a = encode_utf8(lo), b = encode_utf8(hi);
  std::vector<ByteRange> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({a[k], b[k]});
  out.push_back(std::move(seq));
}

class Nfa {
 public:
  struct Edge {
    ByteRange bytes;
    uint32_t to;
  };
  struct State {
    std::vector<uint32_t> eps;
    std::vector<Edge> edges;
  };

  uint32_t add_state() {
    if (states_.size() >= kMaxRegexNfaStates)
      throw RegexError("the pattern needs more than " + std::to_string(kMaxRegexNfaStates) + " automaton states");
    states_.emplace_back();
    return static_cast<uint32_t>(states_.size() - 1);
  }
  // Adds `node` starting at state `from`; returns its end state.
  uint32_t add(const RegexNode& node, uint32_t from) {
    switch (node.kind) {
      case RegexNode::kChars: {
        const uint32_t end = add_state();
        std::vector<std::vector<ByteRange>> seqs;
        for (const auto& [lo, hi] : node.ranges) utf8_sequences(lo, hi, seqs);
        for (const auto& seq : seqs) {
          uint32_t cur = from;
          for (size_t k = 0; k < seq.size(); ++k) {
            const uint32_t next = k + 1 == seq.size() ? end : add_state();
            states_[cur].edges.push_back({seq[k], next});
            cur = next;
          }
        }
        return end;
      }
      case RegexNode::kConcat: {
        uint32_t cur = from;
        for (const RegexNode& c : node.children) cur = add(c, cur);
        return cur;
      }
      case RegexNode::kAlternation: {
        const uint32_t end = add_state();
        for (const RegexNode& c : node.children) {
          const uint32_t s = add_state();
          states_[from].eps.push_back(s);
          const uint32_t e = add(c, s);
          states_[e].eps.push_back(end);
        }
        return end;
      }
      case RegexNode::kRepeat: {
        const RegexNode& inner = node.children[0];
        uint32_t cur = from;
        for (int i = 0; i < node.min; ++i) cur = add(inner, cur);
        if (node.max == -1) {
          const uint32_t loop = add_state();
          states_[cur].eps.push_back(loop);
          const uint32_t e = add(inner, loop);
          states_[e].eps.push_back(loop);
          return loop;
        }
        if (node.max == node.min) return cur;
        const uint32_t end = add_state();
        for (int i = node.min; i < node.max; ++i) {
          states_[cur].eps.push_back(end);
          cur = add(inner, cur);
        }
        states_[cur].eps.push_back(end);
        return end;
      }
    }
    return from;
  }
  // The states reachable from `set` by epsilon moves, sorted.
  std::vector<uint32_t> closure(std::vector<uint32_t> set) {
    seen_.resize(states_.size(), 0);
    ++stamp_;  // seen_[s] == stamp_: visited in this closure
    std::vector<uint32_t> stack = set;
    set.clear();
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      if (seen_[s] == stamp_) continue;
      seen_[s] = stamp_;
      spend(1);
      set.push_back(s);
      for (const uint32_t t : states_[s].eps) stack.push_back(t);
    }
    std::sort(set.begin(), set.end());
    return set;
  }
  const State& state(uint32_t s) const { return states_[s]; }
  // Counts work against kMaxRegexWork.
  void spend(size_t steps) {
    work_ += steps;
    if (work_ > kMaxRegexWork) throw RegexError("the pattern is too complex to compile (its automaton grows too large)");
  }

 private:
  std::vector<State> states_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  size_t work_ = 0;
};

// How a byte of the decoded string is written inside a JSON string ("" = as itself).
std::string json_escape(uint8_t b) {
  switch (b) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  if (b >= 0x20) return "";
  const char* hex = "0123456789abcdef";
  return std::string("\\u00") + hex[b >> 4] + hex[b & 15];
}

// Replaces the DFA by its product with a count of code points (a character starts at each
// byte that is not a UTF-8 continuation byte): pairs (state, count), the count refused
// beyond max_length (-1: none) and, without a max, stopping at min_length. Only pairs
// reachable from (0, 0) are made.
void count_code_points(std::vector<std::array<int, 256>>& dfa, std::vector<uint8_t>& accepting, int min_length,
                       int max_length) {
  const int cap = max_length >= 0 ? max_length : min_length;
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> pairs;
  auto id_of = [&](int d, int count) {
    const auto [it, fresh] = ids.emplace(std::make_pair(d, count), static_cast<int>(pairs.size()));
    if (fresh) {
      if (pairs.size() >= kMaxRegexLengthStates)
        throw RegexError("the pattern with minLength/maxLength needs more than " + std::to_string(kMaxRegexLengthStates) +
                         " automaton states");
      pairs.emplace_back(d, count);
    }
    return it->second;
  };
  id_of(0, 0);
  std::vector<std::array<int, 256>> product;
  std::vector<uint8_t> product_accepting;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [d, count] = pairs[i];
    std::array<int, 256> row;
    for (int b = 0; b < 256; ++b) {
      row[b] = -1;
      if (dfa[d][b] < 0) continue;
      const int next = count + ((b & 0xC0) != 0x80 ? 1 : 0);
      if (max_length >= 0 && next > max_length) continue;
      row[b] = id_of(dfa[d][b], std::min(next, cap));
    }
    product.push_back(row);
    product_accepting.push_back(accepting[d] && count >= min_length);
  }
  dfa = std::move(product);
  accepting = std::move(product_accepting);
}

}  // namespace

uint32_t regex_rule(Grammar& g, const RegexNode& regex, bool raw, int min_length, int max_length) {
  Nfa nfa;
  const uint32_t start = nfa.add_state();
  const uint32_t accept = nfa.add(regex, start);
  // Subset construction; dfa[i][b] = next state or -1.
  std::map<std::vector<uint32_t>, int> ids;
  std::vector<std::vector<uint32_t>> sets;
  std::vector<std::array<int, 256>> dfa;
  auto id_of = [&](std::vector<uint32_t> set) {
    const auto [it, fresh] = ids.emplace(std::move(set), static_cast<int>(sets.size()));
    if (fresh) {
      if (sets.size() >= kMaxRegexDfaStates)
        throw RegexError("the pattern needs more than " + std::to_string(kMaxRegexDfaStates) + " automaton states");
      sets.push_back(it->first);
    }
    return it->second;
  };
  id_of(nfa.closure({start}));
  for (size_t d = 0; d < sets.size(); ++d) {
    std::array<std::vector<uint32_t>, 256> moves;
    for (const uint32_t s : sets[d]) {
      for (const Nfa::Edge& e : nfa.state(s).edges) {
        nfa.spend(1u + e.bytes.hi - e.bytes.lo);
        for (int b = e.bytes.lo; b <= e.bytes.hi; ++b) moves[b].push_back(e.to);
      }
    }
    std::array<int, 256> row;
    std::map<std::vector<uint32_t>, int> memo;  // bytes with the same moves share a closure
    for (int b = 0; b < 256; ++b) {
      row[b] = -1;
      if (moves[b].empty() || (raw && b == '<')) continue;
      std::sort(moves[b].begin(), moves[b].end());
      moves[b].erase(std::unique(moves[b].begin(), moves[b].end()), moves[b].end());
      const auto it = memo.find(moves[b]);
      row[b] = it != memo.end() ? it->second : (memo[moves[b]] = id_of(nfa.closure(moves[b])));
    }
    dfa.push_back(row);
  }
  std::vector<uint8_t> accepting(sets.size(), 0);
  for (size_t d = 0; d < sets.size(); ++d) accepting[d] = std::binary_search(sets[d].begin(), sets[d].end(), accept);
  if (min_length > 0 || max_length >= 0) count_code_points(dfa, accepting, min_length, max_length);
  // Live states: those that can still reach an accepting one.
  const size_t n = dfa.size();
  std::vector<uint8_t> live(accepting);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t d = 0; d < n; ++d) {
      if (live[d]) continue;
      for (int b = 0; b < 256 && !live[d]; ++b) live[d] = dfa[d][b] >= 0 && live[dfa[d][b]];
      changed = changed || live[d];
    }
  }
  if (!live[0])
    throw RegexError(raw ? "the pattern matches no text without '<' (the XML call format cannot carry '<')"
                         : min_length > 0 || max_length >= 0 ? "the pattern matches no string within minLength/maxLength"
                                                             : "the pattern matches no string");
  std::vector<uint32_t> rules(n, UINT32_MAX);
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) rules[d] = g.add_rule("pattern_state");
  }
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    if (accepting[d]) g.add_alternative(rules[d], {});
    std::map<int, ByteSet> plain;  // target -> bytes written as themselves
    for (int b = 0; b < 256; ++b) {
      const int t = dfa[d][b];
      if (t < 0 || !live[t]) continue;
      const std::string esc = raw ? "" : json_escape(static_cast<uint8_t>(b));
      if (esc.empty()) {
        plain[t].add(static_cast<uint8_t>(b));
      } else {
        Grammar::Sequence s = g.literal(esc);
        s.push_back(Grammar::call(rules[t]));
        g.add_alternative(rules[d], s);
      }
    }
    for (const auto& [t, set] : plain) g.add_alternative(rules[d], {g.bytes(set), Grammar::call(rules[t])});
  }
  return rules[0];
}

}  // namespace deltaserve::runtime::grammar
