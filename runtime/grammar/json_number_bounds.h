// Grammars for bounded numbers (JSON Schema minimum / maximum / exclusiveMinimum /
// exclusiveMaximum) built from digit-range rules, so every sampled number is in range.
//
// Integers: exact for any bounds within the integer primitive's 16 digits (an unbounded side
// stops there, as json_primitives.h's integer does). Numbers: bounds must be integral
// (5, 5.0, -3); a bounded number has an integer part in range and an optional fraction of
// up to 15 digits, and no exponent; at a bound itself the fraction is restricted (all zeros
// at an inclusive bound, not all zeros above an exclusive lower one, and so on).
//
// Single thread while building.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/grammar/grammar.h"

namespace deltaserve::runtime::grammar {

// The largest magnitude a bounded number's integer part may have (16 digits).
inline constexpr int64_t kMaxBoundMagnitude = 9'999'999'999'999'999;

// One end of a range; `exclusive`: the bound itself is left out.
struct NumberBound {
  int64_t value = 0;
  bool exclusive = false;
};

// Digit strings of the width of a and b (a <= b, equal widths, leading zeros kept) whose
// value lies between them: fixed_width_range("00", "23") is an hour.
uint32_t fixed_width_range(Grammar& g, const std::string& a, const std::string& b);
// Decimal numerals (no sign, no leading zeros) of the integers lo..hi, 0 <= lo <= hi.
uint32_t unsigned_range(Grammar& g, int64_t lo, int64_t hi);
// Integers in [lo, hi] (both inclusive, |bound| <= kMaxBoundMagnitude); an empty range is
// nullopt. "-0" is never produced.
std::optional<uint32_t> integer_in_range(Grammar& g, int64_t lo, int64_t hi);
// The largest multipleOf integer_multiple_of() takes (the grammar has a rule per digit count
// and remainder: 16 * k rules).
inline constexpr int64_t kMaxMultipleOf = 1000;

// Integers of up to 16 digits divisible by k (1 <= k <= kMaxMultipleOf): a walk over the
// remainder modulo k, digit by digit, that may end at remainder 0. "-0" is never produced.
uint32_t integer_multiple_of(Grammar& g, int64_t k);
// Numbers between the bounds (absent: up to 16 integer digits); an empty range is nullopt.
std::optional<uint32_t> number_in_range(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace deltaserve::runtime::grammar
