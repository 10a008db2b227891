// NFC = canonical decomposition, canonical ordering, canonical composition (UAX #15), with
// Hangul handled arithmetically (Unicode 3.12) and everything else from generated tables.
#include "runtime/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/tokenizer/unicode_nfc_data.h"
#include "runtime/tokenizer/utf8.h"

namespace deltaserve::runtime::nfc {
namespace {

using namespace nfc_data;

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool is_unsafe(uint32_t cp) {
  if (cp < kFirstUnsafe) return false;
  const CodeRange* end = kUnsafe + kNumUnsafe;
  const CodeRange* it = std::upper_bound(kUnsafe, end, cp,
                                         [](uint32_t v, const CodeRange& r) { return v < r.first; });
  return it != kUnsafe && cp <= (it - 1)->last;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClass* end = kCombiningClass + kNumCombiningClass;
  const CombiningClass* it = std::lower_bound(
      kCombiningClass, end, cp, [](const CombiningClass& c, uint32_t v) { return c.code_point < v; });
  return it != end && it->code_point == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecomposition + kNumDecomposition;
  const Decomposition* it = std::lower_bound(
      kDecomposition, end, cp, [](const Decomposition& d, uint32_t v) { return d.code_point < v; });
  if (it != end && it->code_point == cp) {
    out.insert(out.end(), kDecompositionPool + it->offset,
               kDecompositionPool + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

// Primary composite of (a, b), or 0 when there is none.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  const Composition* end = kComposition + kNumComposition;
  const Composition* it = std::lower_bound(
      kComposition, end, key, [](const Composition& c, uint64_t v) { return c.pair < v; });
  return it != end && it->pair == key ? it->composite : 0;
}

// Stable sort of each run of non-starters by combining class (canonical ordering).
void reorder(std::vector<uint32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (combining_class(cps[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](uint32_t x, uint32_t y) {
      return combining_class(x) < combining_class(y);
    });
    i = j;
  }
}

// Canonical composition in place (the Unicode sample algorithm).
void recompose(std::vector<uint32_t>& cps) {
  if (cps.empty()) return;
  size_t starter = 0, out = 1;
  int last_class = combining_class(cps[0]) == 0 ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const int cls = combining_class(cp);
    const uint32_t composite = compose(cps[starter], cp);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) starter = out;
    last_class = cls;
    cps[out++] = cp;
  }
  cps.resize(out);
}

}  // namespace

bool is_quick_nfc(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    // Bytes below 0xCC start characters below U+0300, all of them safe.
    if (static_cast<uint8_t>(text[i]) < 0xCC) {
      ++i;
      continue;
    }
    const utf8::Step st = utf8::next(text, i);
    if (st.kind != utf8::StepKind::Valid) return false;
    if (is_unsafe(st.code_point)) return false;
    i += st.length;
  }
  return true;
}

std::string normalize(std::string_view text) {
  if (is_quick_nfc(text)) return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Step st = utf8::next(text, i);
    // Ill-formed input is outside the contract; keep it as U+FFFD rather than misread it.
    decompose(st.kind == utf8::StepKind::Valid ? st.code_point : 0xFFFD, cps);
    i += st.length;
  }
  reorder(cps);
  recompose(cps);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) utf8::append(out, cp);
  return out;
}

}  // namespace deltaserve::runtime::nfc
