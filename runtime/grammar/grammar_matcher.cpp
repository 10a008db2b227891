#include "runtime/grammar/grammar_matcher.h"

#include <algorithm>

namespace deltaserve::runtime::grammar {
namespace {

// Appends `stack` to out unless an equal stack is there already.
void emit(const std::vector<uint32_t>& stack, MatcherState& out) {
  const auto& d = out.data;
  size_t i = 0, num_stacks = 0;
  while (i < d.size()) {
    const uint32_t depth = d[i];
    if (depth == stack.size() && std::equal(stack.begin(), stack.end(), d.begin() + static_cast<ptrdiff_t>(i) + 1))
      return;
    i += 1 + depth;
    ++num_stacks;
  }
  if (num_stacks >= kMaxStacks) return;
  out.data.push_back(static_cast<uint32_t>(stack.size()));
  out.data.insert(out.data.end(), stack.begin(), stack.end());
}

// Consumes byte b on one stack (expanding calls as needed); every resulting stack goes to
// out. `stack` is scratch: it is changed. A call with a single candidate alternative goes on
// in place; only a real fork copies the stack.
void step(const Grammar& g, std::vector<uint32_t>& stack, uint8_t b, MatcherState& out) {
  while (!stack.empty()) {
    const uint32_t p = stack.back();
    const Element& e = g.element(p);
    if (e.kind == Element::kEnd) {
      stack.pop_back();
      continue;
    }
    if (e.kind == Element::kBytes) {
      if (g.byte_set(e.index).has(b)) {
        stack.back() = p + 1;
        emit(stack, out);
      }
      return;
    }
    // A call: the caller resumes at p + 1; a call in last position is a tail call.
    if (g.element(p + 1).kind == Element::kEnd) {
      stack.pop_back();
    } else {
      stack.back() = p + 1;
    }
    bool skip = false;  // some alternative matches nothing: b may belong to what follows
    uint32_t first_candidate = 0;
    int num_candidates = 0;
    for (const uint32_t a : g.alternatives(e.index)) {
      if (g.first(a).has(b)) {
        if (num_candidates++ == 0) first_candidate = a;
      }
      skip = skip || g.nullable(a);
    }
    if (stack.size() >= kMaxStackDepth) num_candidates = 0;
    if (num_candidates == 1 && !skip) {
      stack.push_back(first_candidate);
      continue;
    }
    for (const uint32_t a : g.alternatives(e.index)) {
      if (num_candidates == 0) break;
      if (!g.first(a).has(b)) continue;
      std::vector<uint32_t> inner = stack;
      inner.push_back(a);
      step(g, inner, b, out);
    }
    if (!skip) return;
  }
}

template <typename F>
void for_each_stack(const MatcherState& s, F&& f) {
  size_t i = 0;
  while (i < s.data.size()) {
    const uint32_t depth = s.data[i];
    f(s.data.data() + i + 1, depth);
    i += 1 + depth;
  }
}

}  // namespace

MatcherState initial_state(const Grammar& g) {
  MatcherState s;
  for (const uint32_t a : g.alternatives(g.root())) emit({a}, s);
  return s;
}

bool advance(const Grammar& g, const MatcherState& in, uint8_t b, MatcherState& out) {
  out.data.clear();
  for_each_stack(in, [&](const uint32_t* frames, uint32_t depth) {
    // Cheap reject: the top sequence cannot start with b and cannot be skipped.
    const uint32_t top = frames[depth - 1];
    if (!g.first(top).has(b) && !g.nullable(top)) return;
    thread_local std::vector<uint32_t> scratch;
    scratch.assign(frames, frames + depth);
    step(g, scratch, b, out);
  });
  return !out.dead();
}

bool advance_bytes(const Grammar& g, MatcherState& state, std::string_view bytes) {
  MatcherState next;
  for (const char c : bytes) {
    if (!advance(g, state, static_cast<uint8_t>(c), next)) {
      state.data.clear();
      return false;
    }
    std::swap(state, next);
  }
  return !state.dead();
}

bool accepting(const Grammar& g, const MatcherState& state) {
  bool any = false;
  for_each_stack(state, [&](const uint32_t* frames, uint32_t depth) {
    bool all = true;
    for (uint32_t k = 0; k < depth && all; ++k) all = g.nullable(frames[k]);
    any = any || all;
  });
  return any;
}

bool can_continue(const Grammar& g, const MatcherState& state) {
  bool any = false;
  for_each_stack(state, [&](const uint32_t* frames, uint32_t depth) {
    // Some frame from the top down offers a byte before everything below it must end.
    for (uint32_t k = depth; k-- > 0;) {
      if (!g.first(frames[k]).empty()) {
        any = true;
        return;
      }
      if (!g.nullable(frames[k])) return;
    }
  });
  return any;
}

}  // namespace deltaserve::runtime::grammar
