#include "runtime/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/tokenizer_error.h"

namespace deltaserve::runtime {
namespace {

constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";

// Per-thread match state, independent of the pattern: a match-data block for the overall
// match and a JIT stack big enough for long whitespace runs.
struct ThreadMatchState {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  ThreadMatchState() {
    if (context != nullptr && jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string RegexSplitter::to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        if (in_class) out.append(kSpaceClassBody);
        else out.append("[").append(kSpaceClassBody).append("]");
      } else if (e == 'S' && !in_class) {
        out.append("[^").append(kSpaceClassBody).append("]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

RegexSplitter::RegexSplitter(std::string_view pattern) {
  const std::string translated = to_pcre2(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw TokenizerError("pre-tokenizer regex does not compile at offset " +
                         std::to_string(error_offset) + ": " +
                         reinterpret_cast<const char*>(message) + " (pattern: " +
                         std::string(pattern) + ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& state = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, offset = 0;
  while (offset < text.size()) {
    // NO_UTF_CHECK: the caller guarantees valid UTF-8, and a check per call would be
    // quadratic over the text.
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                                    state.match_data, state.context)
                  : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // no JIT, or its stack ran out: interpret
      rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       state.match_data, state.context);
    }
    if (rc < 0) break;  // no further match (or a resource limit): the rest is one gap
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    size_t begin = ovector[0], end = ovector[1];
    if (begin > gap_start) pieces.push_back(text.substr(gap_start, begin - gap_start));
    if (end == begin) {
      // Empty match: step over one character so the loop advances.
      end = begin + 1;
      while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
      if (end > text.size()) end = text.size();
      gap_start = begin;  // the character joins the next gap
      offset = end;
      continue;
    }
    pieces.push_back(text.substr(begin, end - begin));
    gap_start = offset = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
}

}  // namespace deltaserve::runtime
