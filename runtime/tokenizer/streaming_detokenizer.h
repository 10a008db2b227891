// Incremental detokenisation for one output stream: feed token ids as they are generated,
// get back only text that ends on a UTF-8 character boundary (tokens often split a
// multibyte character; the held bytes wait for the next token).
//
// Guarantees: every returned string is valid UTF-8, and the concatenation of all feed()
// results plus flush() equals tokenizer.decode(all ids, skip_special). Ill-formed byte
// sequences become U+FFFD (one per maximal ill-formed subpart, as decode() does) as soon as
// they are known to be ill-formed; an incomplete character still held at flush() becomes one
// U+FFFD. Special tokens are hidden (skip_special) or shown as their text.
//
// Owner: one per request, used from one thread at a time (the session's strand). The
// tokenizer must outlive it. Never blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace deltaserve::runtime {

class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Text completed by this token (possibly empty).
  std::string feed(int32_t id);
  std::string feed(std::span<const int32_t> ids);
  // End of stream: releases what is held (as U+FFFD); the detokenizer is then empty.
  std::string flush();

  // Bytes of an incomplete character held back (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  void append_piece(std::string_view piece, std::string& out);

  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // a well-formed but incomplete UTF-8 prefix, at most 3 bytes
};

}  // namespace deltaserve::runtime
