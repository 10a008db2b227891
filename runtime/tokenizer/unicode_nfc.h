// Unicode Normalization Form C for the tokenizer's "NFC" normaliser (Qwen's tokenizer.json
// sets it). Tables come from tools/tokenizer_oracle/gen_nfc_tables.py. Pure functions,
// thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace deltaserve::runtime::nfc {

// True when `text` (valid UTF-8) certainly is NFC already: no character in it can change
// or interact with a neighbour. The fast path: almost all real text takes it.
bool is_quick_nfc(std::string_view text);

// NFC of `text`, which must be valid UTF-8 (the tokenizer normalises valid runs only).
std::string normalize(std::string_view text);

}  // namespace deltaserve::runtime::nfc
