#include "runtime/grammar/json_number_bounds.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace deltaserve::runtime::grammar {
namespace {

Element digit_set(Grammar& g, char lo, char hi) {
  return g.bytes(ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// Digit strings of equal length between a and b (a <= b, same length), leading zeros allowed:
// the classic split into "a's prefix, then anything above" / "middle digits, then anything"
// / "b's prefix, then anything below".
uint32_t same_length_range(Grammar& g, const std::string& a, const std::string& b) {
  const uint32_t r = g.add_rule("digit_range");
  if (a.empty()) {
    g.add_alternative(r, {});
    return r;
  }
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const std::string zeros(rest_a.size(), '0'), nines(rest_a.size(), '9');
  auto any_rest = [&](Grammar::Sequence s) {
    for (size_t i = 0; i < rest_a.size(); ++i) s.push_back(digit_set(g, '0', '9'));
    return s;
  };
  if (a[0] == b[0]) {
    g.add_alternative(r, {digit_set(g, a[0], a[0]), Grammar::call(same_length_range(g, rest_a, rest_b))});
    return r;
  }
  // The first digit is a[0]: the rest from rest_a up; a whole run when rest_a is all zeros.
  char mid_lo = static_cast<char>(a[0] + 1), mid_hi = static_cast<char>(b[0] - 1);
  if (rest_a == zeros) {
    mid_lo = a[0];
  } else {
    g.add_alternative(r, {digit_set(g, a[0], a[0]), Grammar::call(same_length_range(g, rest_a, nines))});
  }
  if (rest_b == nines) {
    mid_hi = b[0];
  } else {
    g.add_alternative(r, {digit_set(g, b[0], b[0]), Grammar::call(same_length_range(g, zeros, rest_b))});
  }
  if (mid_lo <= mid_hi) g.add_alternative(r, any_rest({digit_set(g, mid_lo, mid_hi)}));
  return r;
}

int64_t pow10(size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= 10;
  return p;
}

// '.' and 1..15 digits, of which (nonzero) at least one is not 0, or (zero) all are 0.
uint32_t fraction(Grammar& g, bool nonzero) {
  const uint32_t r = g.add_rule(nonzero ? "nonzero_fraction" : "zero_fraction");
  // tail_k: k more digits at most (k >= 1), the constraint still to meet.
  uint32_t tail = UINT32_MAX;  // built from k = 1 up
  uint32_t free_tail = UINT32_MAX;
  for (int k = 1; k <= 15; ++k) {
    const uint32_t t = g.add_rule("fraction_digits");
    if (nonzero) {
      // free_k: up to k - 1 more digits of any value, after a nonzero one.
      const uint32_t f = g.add_rule("fraction_free");
      if (free_tail != UINT32_MAX) g.add_alternative(f, {digit_set(g, '0', '9'), Grammar::call(free_tail)});
      g.add_alternative(f, {});
      g.add_alternative(t, {digit_set(g, '1', '9'), Grammar::call(f)});
      if (tail != UINT32_MAX) g.add_alternative(t, {digit_set(g, '0', '0'), Grammar::call(tail)});
      free_tail = f;
    } else {
      g.add_alternative(t, {digit_set(g, '0', '0')});
      if (tail != UINT32_MAX) g.add_alternative(t, {digit_set(g, '0', '0'), Grammar::call(tail)});
    }
    tail = t;
  }
  Grammar::Sequence s = g.literal(".");
  s.push_back(Grammar::call(tail));
  g.add_alternative(r, s);
  return r;
}

// Some magnitude lies between the bounds (a rule must not be left without alternatives).
bool feasible(NumberBound lo, std::optional<NumberBound> hi) {
  return !hi || lo.value < hi->value || (lo.value == hi->value && !lo.exclusive && !hi->exclusive);
}

// Magnitudes m (no sign) with lo <= m <= hi as the flags say, 0 <= lo.value, feasible.
uint32_t magnitudes(Grammar& g, NumberBound lo, std::optional<NumberBound> hi) {
  const uint32_t r = g.add_rule("magnitude_range");
  const int64_t hi_value = hi ? hi->value : kMaxBoundMagnitude;
  const uint32_t any_fraction = g.add_rule("optional_fraction");
  g.add_alternative(any_fraction, {Grammar::call(fraction(g, true))});
  g.add_alternative(any_fraction, {Grammar::call(fraction(g, false))});
  g.add_alternative(any_fraction, {});
  // Integer parts strictly inside take any fraction (an unbounded top takes any fraction too).
  const int64_t inner_lo = lo.value + (lo.exclusive ? 1 : 0);
  const int64_t inner_hi = hi ? hi_value - 1 : hi_value;
  if (inner_lo <= inner_hi)
    g.add_alternative(r, {Grammar::call(unsigned_range(g, inner_lo, inner_hi)), Grammar::call(any_fraction)});
  if (lo.exclusive && lo.value < hi_value)
    g.add_alternative(r, {Grammar::call(unsigned_range(g, lo.value, lo.value)), Grammar::call(fraction(g, true))});
  if (hi && !hi->exclusive) {
    const uint32_t zero = g.add_rule("optional_zero_fraction");
    g.add_alternative(zero, {Grammar::call(fraction(g, false))});
    g.add_alternative(zero, {});
    g.add_alternative(r, {Grammar::call(unsigned_range(g, hi->value, hi->value)), Grammar::call(zero)});
  }
  return r;
}

}  // namespace

uint32_t fixed_width_range(Grammar& g, const std::string& a, const std::string& b) {
  return same_length_range(g, a, b);
}

uint32_t unsigned_range(Grammar& g, int64_t lo, int64_t hi) {
  const uint32_t r = g.add_rule("unsigned_range");
  const size_t len_lo = std::to_string(lo).size(), len_hi = std::to_string(hi).size();
  for (size_t len = len_lo; len <= len_hi; ++len) {
    const int64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
    const int64_t b = std::min(hi, pow10(len) - 1);
    if (a > b) continue;
    g.add_alternative(r, {Grammar::call(same_length_range(g, std::to_string(a), std::to_string(b)))});
  }
  return r;
}

std::optional<uint32_t> integer_in_range(Grammar& g, int64_t lo, int64_t hi) {
  if (lo > hi) return std::nullopt;
  const uint32_t r = g.add_rule("integer_range");
  if (lo < 0) {
    Grammar::Sequence s = g.literal("-");
    s.push_back(Grammar::call(unsigned_range(g, hi < 0 ? -hi : 1, -lo)));
    g.add_alternative(r, s);
  }
  if (hi >= 0) g.add_alternative(r, {Grammar::call(unsigned_range(g, std::max<int64_t>(lo, 0), hi))});
  return r;
}

std::optional<uint32_t> number_in_range(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  // v >= 0, written without a sign.
  const NumberBound pos_lo = lo && lo->value >= 0 ? *lo : NumberBound{0, false};
  const bool positive = (!hi || hi->value >= 0) && feasible(pos_lo, hi);
  // v < 0: "-" and the magnitude -v, which is > 0, >= -hi and <= -lo.
  const NumberBound neg_lo = hi && hi->value < 0 ? NumberBound{-hi->value, hi->exclusive} : NumberBound{0, true};
  const std::optional<NumberBound> neg_hi =
      lo ? std::optional<NumberBound>(NumberBound{-lo->value, lo->exclusive}) : std::nullopt;
  const bool negative = (!lo || lo->value < 0) && feasible(neg_lo, neg_hi);
  if (!positive && !negative) return std::nullopt;
  const uint32_t r = g.add_rule("number_range");
  if (positive) g.add_alternative(r, {Grammar::call(magnitudes(g, pos_lo, hi))});
  if (negative) {
    Grammar::Sequence s = g.literal("-");
    s.push_back(Grammar::call(magnitudes(g, neg_lo, neg_hi)));
    g.add_alternative(r, s);
  }
  return r;
}

uint32_t integer_multiple_of(Grammar& g, int64_t k) {
  constexpr int kMaxDigits = 16;
  // after[r]: the digits written so far (n of them) leave remainder r; rules are built from
  // n = 16 back to 1, and only where remainder 0 is still reachable (UINT32_MAX: dead).
  std::vector<uint32_t> after(static_cast<size_t>(k), UINT32_MAX), shorter(static_cast<size_t>(k));
  for (int n = kMaxDigits; n >= 1; --n) {
    for (int64_t r = 0; r < k; ++r) {
      // The live next remainders (at most 10) with the digits that lead to each.
      std::vector<std::pair<int64_t, ByteSet>> to;
      for (int d = 0; d <= 9 && n < kMaxDigits; ++d) {
        const int64_t next = (10 * r + d) % k;
        if (after[static_cast<size_t>(next)] == UINT32_MAX) continue;
        auto it = std::find_if(to.begin(), to.end(), [&](const auto& e) { return e.first == next; });
        if (it == to.end()) it = to.insert(to.end(), {next, ByteSet{}});
        it->second.add(static_cast<uint8_t>('0' + d));
      }
      if (r != 0 && to.empty()) {
        shorter[static_cast<size_t>(r)] = UINT32_MAX;
        continue;
      }
      const uint32_t rule = g.add_rule("multiple_digits");
      if (r == 0) g.add_alternative(rule, {});
      for (const auto& [next, digits] : to) {
        g.add_alternative(rule, {g.bytes(digits), Grammar::call(after[static_cast<size_t>(next)])});
      }
      shorter[static_cast<size_t>(r)] = rule;
    }
    std::swap(after, shorter);
  }
  const uint32_t positive = g.add_rule("positive_multiple");
  for (int d = 1; d <= 9; ++d) {
    const uint32_t rest = after[static_cast<size_t>(d % k)];
    if (rest != UINT32_MAX) g.add_alternative(positive, {digit_set(g, static_cast<char>('0' + d), static_cast<char>('0' + d)), Grammar::call(rest)});
  }
  const uint32_t r = g.add_rule("integer_multiple");
  g.add_alternative(r, g.literal("0"));
  g.add_alternative(r, {Grammar::call(positive)});
  g.add_alternative(r, {g.bytes(ByteSet::of("-")), Grammar::call(positive)});
  return r;
}

}  // namespace deltaserve::runtime::grammar
