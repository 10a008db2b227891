// Tables behind UnicodeNfc (unicode_nfc.h), generated into unicode_nfc_data*.cpp by
// tools/tokenizer_oracle/gen_nfc_tables.py. Every array is sorted by its first field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltaserve::runtime::nfc_data {

struct CodeRange {
  uint32_t first;
  uint32_t last;  // inclusive
};
struct CombiningClass {
  uint32_t code_point;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t code_point;
  uint16_t offset;  // into kDecompositionPool
  uint8_t length;   // full canonical decomposition, already in canonical order
};
struct Composition {
  uint64_t pair;  // (first << 21) | second
  uint32_t composite;
};

extern const uint32_t kUnicodeVersionMajor;
// Code points that may change under NFC or change their neighbours: combining marks
// (ccc != 0), characters NFC replaces, and second halves of primary composites. Text
// without any of them is already NFC.
extern const uint32_t kFirstUnsafe;
extern const CodeRange kUnsafe[];
extern const size_t kNumUnsafe;
extern const CombiningClass kCombiningClass[];
extern const size_t kNumCombiningClass;
extern const Decomposition kDecomposition[];
extern const size_t kNumDecomposition;
extern const uint32_t kDecompositionPool[];
extern const Composition kComposition[];
extern const size_t kNumComposition;

}  // namespace deltaserve::runtime::nfc_data
