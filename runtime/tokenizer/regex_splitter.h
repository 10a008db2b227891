// The pre-tokenizer's regex split (Hugging Face "Split" with behavior "Isolated"): every
// match and every gap between matches becomes a piece. PCRE2 with UTF + UCP, JIT-compiled.
// Immutable after construction; split() is thread-safe (per-thread match state).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltaserve::runtime {

class RegexSplitter {
 public:
  // `pattern` is in the dialect of tokenizer.json (Oniguruma): see to_pcre2(). Throws
  // TokenizerError when PCRE2 rejects it.
  explicit RegexSplitter(std::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8, not checked again) to `pieces`; they are
  // views into `text` and cover it exactly, in order.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  bool jit() const { return jit_; }

  // Rewrites \s and \S (outside and inside classes) to Oniguruma's meaning, the Unicode
  // White_Space set [\t-\r\x{85}\p{Z}]. PCRE2's UCP \s also matches U+180E, which Hugging
  // Face's tokenizers (Oniguruma) does not. Everything else passes through unchanged.
  static std::string to_pcre2(std::string_view pattern);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace deltaserve::runtime
